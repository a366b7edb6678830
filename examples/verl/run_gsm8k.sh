#!/usr/bin/env bash
# ICT and its baselines in verl 0.9 (FSDP actor + vLLM rollouts): Qwen2.5 on GSM8K, one node.
#
#   METHOD=ict bash examples/verl/run_gsm8k.sh [more hydra overrides]
#
# METHOD: grpo | entropy | stapo | ict | random | kl_cov | clip_cov (all run through the same
# policy loss "ict" of ict.integrations.verl, so only the token selection differs).
# Data: verl's examples/data_preprocess/gsm8k.py --local_save_dir "$DATA" (train/test.parquet).
# Needs a verl 0.9 environment with this repository installed (docs/scaling.md, section verl).
# DRY_RUN=1 prints the command line (one argument per line) instead of running it.
# A bad ICT setting is refused in one line ("ict: ...", exit 2) before verl starts.
set -euo pipefail

METHOD=${METHOD:-ict}
MODEL=${MODEL:-Qwen/Qwen2.5-1.5B-Instruct}
DATA=${DATA:-$HOME/data/gsm8k}
N_GPUS=${N_GPUS:-8}
ROLLOUT_N=${ROLLOUT_N:-8}         # completions per prompt (G)
TRAIN_BATCH=${TRAIN_BATCH:-64}    # prompts per step
MINI_BATCH=${MINI_BATCH:-16}      # prompts per optimizer update
MICRO=${MICRO:-$ROLLOUT_N}        # sequences per GPU per forward (a multiple of ROLLOUT_N: whole groups)
EPOCHS=${EPOCHS:-3}

# Each method with the registry's defaults (ict.core.selectors; `ict train --help` lists them):
# ict is the paper's recipe (top 10% of each response by JS to the group mean, Sparse-GRPO loss,
# a 10-step full-token warm-up by the actor's training step); ICT_SELECTOR overrides the spec,
# e.g. ICT_SELECTOR='ict:preset=batch' for the batch-ranked recipe.
case "$METHOD" in
  grpo)     SELECTOR="all" ;;
  entropy|stapo|ict|random|kl_cov|clip_cov) SELECTOR="$METHOD" ;;
  *) echo "METHOD must be one of grpo entropy stapo ict random kl_cov clip_cov, got '$METHOD'" >&2; exit 2 ;;
esac
SELECTOR=${ICT_SELECTOR:-$SELECTOR}

# Whole groups on every GPU and in every micro-batch (group_mean compares the completions of a
# prompt position by position). verl's default (v1) trainer balances single sequences across GPUs;
# the VERL_USE_EXTERNAL_MODULES override below loads ict.integrations.verl in verl's trainer too,
# which then balances whole prompts instead (with trainer.use_v1=False, trainer.balance_batch=False
# does it). The selection always ranks the whole mini-batch, as `ict train` does: with several
# micro-batches per GPU the integration adds one no-grad scoring forward.
for name in N_GPUS ROLLOUT_N TRAIN_BATCH MINI_BATCH MICRO EPOCHS; do  # bash's arithmetic reads 0 or a word
  [[ ${!name} =~ ^[1-9][0-9]*$ ]] || { echo "$name must be a positive integer, got '${!name}'" >&2; exit 2; }
done
SHARE=$(( MINI_BATCH * ROLLOUT_N / N_GPUS ))
if (( TRAIN_BATCH % N_GPUS || MINI_BATCH % N_GPUS || TRAIN_BATCH % MINI_BATCH || MICRO % ROLLOUT_N || SHARE % MICRO )); then
  echo "need TRAIN_BATCH and MINI_BATCH multiples of N_GPUS ($N_GPUS), TRAIN_BATCH of MINI_BATCH, MICRO of ROLLOUT_N and MINI_BATCH*ROLLOUT_N/N_GPUS ($SHARE) of MICRO ($MICRO)" >&2
  exit 2
fi

ARGS=(
  algorithm.adv_estimator=grpo
  algorithm.use_kl_in_reward=False
  data.train_files="$DATA/train.parquet"
  data.val_files="$DATA/test.parquet"
  data.train_batch_size="$TRAIN_BATCH"
  data.max_prompt_length=512
  data.max_response_length=1024
  data.filter_overlong_prompts=True
  data.truncation=error
  actor_rollout_ref.model.path="$MODEL"
  actor_rollout_ref.model.use_remove_padding=True
  actor_rollout_ref.model.use_fused_kernels=False
  actor_rollout_ref.model.enable_gradient_checkpointing=True
  actor_rollout_ref.actor.optim.lr=1e-6
  actor_rollout_ref.actor.ppo_mini_batch_size="$MINI_BATCH"
  actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu="$MICRO"
  actor_rollout_ref.actor.use_dynamic_bsz=False
  actor_rollout_ref.actor.shuffle=False
  actor_rollout_ref.actor.ppo_epochs=1
  actor_rollout_ref.actor.clip_ratio_low=0.2
  actor_rollout_ref.actor.clip_ratio_high=0.28
  actor_rollout_ref.actor.loss_agg_mode=token-mean
  actor_rollout_ref.actor.use_kl_loss=False
  actor_rollout_ref.actor.entropy_coeff=0
  actor_rollout_ref.actor.fsdp_config.param_offload=False
  actor_rollout_ref.actor.fsdp_config.optimizer_offload=False
  actor_rollout_ref.actor.policy_loss._target_=ict.integrations.verl.ICTPolicyLossConfig
  actor_rollout_ref.actor.policy_loss.loss_mode=ict
  "+actor_rollout_ref.actor.policy_loss.ict_selector='$SELECTOR'"
  actor_rollout_ref.rollout.name=vllm
  actor_rollout_ref.rollout.n="$ROLLOUT_N"
  actor_rollout_ref.rollout.temperature=1.0
  actor_rollout_ref.rollout.tensor_model_parallel_size=1
  actor_rollout_ref.rollout.gpu_memory_utilization=0.5
  actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=16
  actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=16
  +ray_kwargs.ray_init.runtime_env.env_vars.VERL_USE_EXTERNAL_MODULES=ict.integrations.verl
  trainer.balance_batch=False
  trainer.critic_warmup=0
  trainer.logger='["console"]'
  trainer.project_name=ict_verl_gsm8k
  trainer.experiment_name="$METHOD"
  trainer.n_gpus_per_node="$N_GPUS"
  trainer.nnodes=1
  trainer.save_freq=-1
  trainer.test_freq=10
  trainer.total_epochs="$EPOCHS"
)

if [[ -n "${DRY_RUN:-}" ]]; then
  printf '%s\n' "${ARGS[@]}" "$@"
  exit 0
fi
# ict's launch check (verl's own config and validate_config, as main_ppo runs them): a bad ICT
# setting is one line "ict: ..." and exit 2 here, not hydra's override banner and traceback
python3 -m ict.integrations.verl_check "${ARGS[@]}" "$@" || exit $?
exec python3 -m verl.trainer.main_ppo "${ARGS[@]}" "$@"
