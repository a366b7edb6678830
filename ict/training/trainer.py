"""The training run: the one place that wires every part together.

Each step: rollouts -> rewards -> advantages -> updates -> diagnostics and one JSON line of
metrics (`ict.training.train_step`, read top to bottom), written by `ict.runs.reporting`; warnings
on entropy collapse or explosion; checkpoints.

The run (`train`): run directory -> data, reward, model, optimizer -> resume -> evaluation
before -> the step loop (log, checkpoint, stop on a signal or a divergence) -> evaluation after.

Ctrl-C (or SIGTERM) lets the current step finish, checkpoints it and stops with
`KeyboardInterrupt`, so `--resume` loses nothing; a second Ctrl-C aborts at once. One process at a
time writes a run directory (`ict.runs.directory.exclusive_run_dir`).

Randomness is drawn from generators seeded by (seed, step), so a run resumed from a checkpoint
repeats exactly what the uninterrupted run would have done (CPU, fixed seed).
"""

from __future__ import annotations

import contextlib
import shlex
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import torch

from ict.answers.rewards import Reward, build_reward
from ict.core.errors import TrainingDiverged, UsageError, write_failure, write_remedy
from ict.core.loss import PolicyLossConfig
from ict.core.profiling import StepProfiler
from ict.core.seeding import step_seed
from ict.core.selector_registry import SelectorFailed
from ict.core.stats import needs_reference_logits
from ict.data.benchmarks import expand_benchmark_names
from ict.data.training_data import (
    Problem,
    PromptSampler,
    TrainingData,
    is_dataset_file,
    load_training_data,
    questions_digest,
)
from ict.models.loading import (
    LoraOptions,
    compute_context,
    disable_dropout,
    linear_lm_head,
    load_model_and_tokenizer,
    require_chat_template,
    resolve_autocast,
    resolve_device,
)
from ict.models.rollout import Prompt, SamplingSettings, check_prompts_fit, generate_completions
from ict.models.vllm_backend import VLLM_DEVICES, check_vllm_sampling, vllm_installed
from ict.runs.checkpoint import (
    CHECKPOINT_PREFIX,
    checkpoint_dir,
    latest_checkpoint,
    load_checkpoint,
    remove_leftovers,
    save_checkpoint,
)
from ict.runs.directory import create_run_dir, discarded_if_unused, exclusive_run_dir
from ict.runs.reporting import (
    AFTER_WARMUP,
    ENVIRONMENT_FILE,
    MetricsLogger,
    append_environment,
    drop_eval,
    print_summary,
    progress_bar,
    read_eval,
    step_line,
    write_eval,
)
from ict.runs.stop import StopRequest
from ict.training.config import TrainConfig
from ict.training.config_loading import save_config
from ict.training.step import (
    Method,
    ReferencePolicy,
    statistics_source,
)
from ict.training.step_metrics import (
    check_entropy,
    profile_heading,
)
from ict.training.train_step import loss_config_of, method_of, sampling_settings, train_step

# ---------------------------------------------------------------------------------------------
# Evaluation

@torch.no_grad()
def evaluate_accuracy(model: Any, tokenizer: Any, problems: list[Problem], reward: Reward,
                      config: TrainConfig, temperature: float | None = None) -> dict[str, float]:
    """Accuracy (task reward >= 1) and mean reward of one completion per held-out problem
    (greedy when the evaluation temperature is 0); ``correct``: each problem's verdict, in order;
    ``temperature``: the one it sampled at (a resume may change ``eval_temperature``)."""
    if not problems:
        return {}
    temperature = config.eval_temperature if temperature is None else temperature
    device = next(model.parameters()).device
    with compute_context(device, resolve_autocast(config.autocast, device)):
        rollout = generate_completions(
            model, tokenizer, [problem.prompt for problem in problems],
            SamplingSettings(temperature, config.max_new_tokens, config.top_p), num_samples=1,
            batch_size=config.generation_batch_size, seed=step_seed(config.seed, -1, 0),
            system_prompt=config.system_prompt, shared_prefill=config.generation_shared_prefill)
    totals, task = reward.score(rollout.flat_completions(), problems)
    correct = [value >= 1.0 for value in task]
    return {"accuracy": sum(correct) / len(correct),
            "reward_mean": sum(totals) / len(totals), "num_problems": len(problems),
            "example_completion": rollout.completions[0][0], "correct": correct,
            "temperature": temperature}


# ---------------------------------------------------------------------------------------------
# The run

@dataclass
class TrainResult:
    run_dir: Path
    metrics: list[dict[str, Any]]
    eval_before: dict[str, Any]
    eval_after: dict[str, Any]
    checkpoint: Path | None
    stop_requested: bool = False
    """A Ctrl-C or SIGTERM came in the last step: the run finished as asked (its checkpoint, the
    evaluation after training); a caller with more to do (`ict compare`) stops now."""


def default_run_dir(config: TrainConfig) -> Path:
    return Path("runs") / f"{config.method}-{datetime.now().strftime('%Y%m%d-%H%M%S')}"


def build_optimizer(model: Any, config: TrainConfig) -> torch.optim.Optimizer:
    parameters = [parameter for parameter in model.parameters() if parameter.requires_grad]
    return torch.optim.AdamW(parameters, lr=config.learning_rate,
                             betas=(config.adam_beta1, config.adam_beta2), eps=config.adam_eps,
                             weight_decay=config.weight_decay, foreach=False)


def weights_dtype(config: TrainConfig) -> str:
    """The dtype option of the trained weights: `auto` is fp32 on every device (mixed precision
    on a GPU comes from `autocast`, as in TRL and verl: fp32 weights, bf16 compute)."""
    return "fp32" if config.dtype == "auto" else config.dtype


def uses_vllm(config: TrainConfig, device: torch.device) -> bool:
    """Whether the rollouts on ``device`` run on vLLM: `rollout_backend` vllm, or auto with vLLM
    installed and running on the device type (`VLLM_DEVICES`)."""
    wanted = config.rollout_backend
    return wanted == "vllm" or (wanted == "auto" and device.type in VLLM_DEVICES and vllm_installed())


def _make_backend(config: TrainConfig, model: Any, tokenizer: Any, prompts: Sequence[Prompt]) -> Any:
    """The vLLM backend when asked (`auto`: whenever vLLM is installed, on a GPU or a CPU; see
    docs/benchmarks.md, "Rollouts: vLLM against Hugging Face"), else None (HF `generate`).

    On a CUDA device vLLM gets `vllm_gpu_memory_utilization` of the GPU; on a CPU a KV cache of
    `vllm_cpu_kvcache_gib` GiB and eager execution. It generates in the dtype the trainer
    computes in (autocast's, else the weights': fp32 on CPU by default), and holds the longest of
    ``prompts`` (every one it generates for) beside max_new_tokens (`vllm_engine_length`)."""
    from ict.models.loading import dtype_name, model_source

    device = next(model.parameters()).device
    if not uses_vllm(config, device):
        return None
    if device.type not in VLLM_DEVICES:
        raise UsageError(f"rollout_backend=vllm runs on a CUDA device or the CPU, not {device.type}; "
                         "use --rollout-backend hf")
    from ict.models.vllm_backend import VLLMBackend, vllm_engine_length

    path = str(model_source(config.model))  # where the policy loaded from (`~` expanded)
    compute_dtype = resolve_autocast(config.autocast, device)
    dtype = (str(compute_dtype).removeprefix("torch.") if compute_dtype
             else dtype_name(weights_dtype(config), device))
    backend = VLLMBackend(path, dtype=dtype,
                          gpu_memory_utilization=config.vllm_gpu_memory_utilization,
                          max_model_len=vllm_engine_length(tokenizer, prompts, config.system_prompt,
                                                           config.max_new_tokens, 4096, model.config),
                          seed=config.seed, device=device.type,
                          cpu_kvcache_gib=config.vllm_cpu_kvcache_gib)
    backend.sync_weights(model)
    return backend


@dataclass
class _Run:
    """What a run wires together: the configuration, the data and reward, the model and its
    optimizer, the method, and where it writes (built by `_set_up`)."""

    config: TrainConfig
    console: Any
    run_dir: Path
    data: TrainingData
    reward: Reward
    sampler: PromptSampler
    model: Any
    tokenizer: Any
    optimizer: torch.optim.Optimizer
    method: Method
    loss_config: PolicyLossConfig
    reference: ReferencePolicy | None
    start_step: int = 0
    trainer_state: dict[str, Any] = field(default_factory=lambda: {
        "initial_entropy": None, "warned": [], "consecutive_skips": 0})
    backend: Any = None
    logger: MetricsLogger | None = None
    last_checkpoint: Path | None = None
    continue_with: str = ""  # how to go on after a stop or a divergence (`train`'s argument)
    stop_requested: bool = False  # a stop request the step loop saw (`TrainResult.stop_requested`)


def train(config: TrainConfig, console: Any = None,
          on_step: Callable[[dict[str, Any]], None] | None = None,
          continue_with: str | None = None) -> TrainResult:
    """Run `config.num_steps` training steps; return the metrics and where everything went.
    `continue_with`: what the stop and divergence messages tell the user to do next (default
    "rerun with --resume --run-dir DIR", DIR absolute; `ict compare` names itself)."""
    from rich.console import Console

    config.resolve()
    if uses_vllm(config, resolve_device(config.device)):  # vLLM's limits before the model loads
        check_vllm_sampling(sampling_settings(config))
    console = console or Console(stderr=True, soft_wrap=True)
    run_dir = Path(config.run_dir).expanduser() if config.run_dir else default_run_dir(config)
    config.run_dir = str(run_dir)
    # a start that fails (a missing model, bad data) leaves no run directory holding a lock file alone
    with discarded_if_unused(run_dir):
        with exclusive_run_dir(create_run_dir(run_dir)):  # one process writes a run directory at a time
            return _train_in(config, console, _prepare_run_dir(config, run_dir), on_step, continue_with)


def _train_in(config: TrainConfig, console: Any, run_dir: Path,
              on_step: Callable[[dict[str, Any]], None] | None,
              continue_with: str | None) -> TrainResult:
    """`train` once this process holds `run_dir`."""
    run = _set_up(config, console, run_dir)
    # the directory's absolute path, quoted for a shell: the hint works from any working directory
    run.continue_with = continue_with or f"rerun with --resume --run-dir {shlex.quote(str(run.run_dir.absolute()))}"
    _resume(run)
    save_config(config, run.run_dir / "config.yaml")
    append_environment(run.run_dir, run.start_step + 1)
    run.logger = MetricsLogger(run.run_dir, config.tensorboard, resume_step=run.start_step)
    run.backend = _make_backend(config, run.model, run.tokenizer,
                                [problem.prompt for problem in [*run.data.train, *run.data.eval]])
    console.print(f"run directory: {run.run_dir}  |  method {config.method} ({run.method.selector} "
                  f"{run.method.options})  |  data: {run.data.description}  |  reward: "
                  f"{'+'.join(run.reward.names)}  |  device {next(run.model.parameters()).device}  |  "
                  f"rollouts: {'vLLM' if run.backend is not None else 'Hugging Face generate'}", markup=False)
    warmup_note = full_token_warmup_note(config)
    if warmup_note:
        console.print(warmup_note)
    eval_before = _evaluate_before(run)
    _evaluate_resumed_warmup_end(run)
    all_metrics = _run_steps(run, on_step)
    eval_after: dict[str, Any] = {}
    if run.data.eval:
        eval_after = evaluate_accuracy(run.model, run.tokenizer, run.data.eval, run.reward, config)
        with _writing(run, run.run_dir / "eval.json"):
            write_eval(run.run_dir, "after", eval_after)
    after_warmup = read_eval(run.run_dir).get(AFTER_WARMUP) if eval_after else None
    print_summary(console, run.run_dir, eval_before, eval_after, run.last_checkpoint,
                  after_warmup=after_warmup, phase=selection_phase(config))
    return TrainResult(run.run_dir, all_metrics, eval_before, eval_after, run.last_checkpoint,
                       run.stop_requested)


def selection_phase(config: TrainConfig) -> tuple[str, int, int] | None:
    """(method, first, last step) of the steps where the method's own selection runs after a
    full-token warm-up; None when there is no warm-up (or it covers every step)."""
    warmup, steps = config.full_token_warmup_steps or 0, config.num_steps
    if warmup <= 0 or warmup >= steps or config.selector_name == "all":
        return None
    return config.method, warmup + 1, steps


def full_token_warmup_note(config: TrainConfig) -> str:
    """What the full-token warm-up does to this run, in one line ('' when there is none)."""
    warmup, steps = config.full_token_warmup_steps or 0, config.num_steps
    if warmup <= 0 or config.selector_name == "all":
        return ""
    if warmup >= steps:
        return (f"note: full_token_warmup_steps={warmup} >= num_steps={steps}: every step updates "
                f"all response tokens (GRPO) and {config.method}'s selection never runs; set "
                "full_token_warmup_steps lower (or num_steps higher) to see it")
    return (f"full-token warm-up: steps 1-{warmup} of {steps} update every response token, "
            f"{config.method}'s selection from step {warmup + 1}")


def _prepare_run_dir(config: TrainConfig, run_dir: Path) -> Path:
    """Refuse a run directory holding a run unless resuming; a fresh run clears the evaluations
    and environment records an earlier attempt left."""
    if not config.resume:
        if latest_checkpoint(run_dir) is not None:
            raise UsageError(f"{run_dir} already holds checkpoints of a run: pass --resume to "
                             "continue it, or choose another --run-dir")
        (run_dir / "eval.json").unlink(missing_ok=True)
        (run_dir / ENVIRONMENT_FILE).unlink(missing_ok=True)
    return run_dir


def _set_up(config: TrainConfig, console: Any, run_dir: Path) -> _Run:
    """Seed, load the data and reward, then the model, reference policy and optimizer."""
    from transformers import set_seed

    set_seed(config.seed)  # torch, and Python's and numpy's (a checkpoint saves all three; a plugin may draw)
    if config.num_threads:
        torch.set_num_threads(config.num_threads)
    data = load_training_data(
        config.dataset, dataset_config=config.dataset_config, dataset_subset=config.dataset_subset,
        dataset_split=config.dataset_split, dataset_size=config.dataset_size,
        question_field=config.question_field, answer_field=config.answer_field,
        choices_field=config.choices_field, prompt_suffix=config.prompt_suffix,
        eval_size=config.eval_size, seed=config.seed, skip_bad_rows=config.skip_bad_rows,
        held_out_sets=expand_benchmark_names(config.held_out_sets) if config.held_out_sets else (),
        held_out_rule=config.held_out_rule)
    reward = build_reward(config.reward, data.train[0].kind, config.answer_extraction,
                          config.format_reward, config.verify_timeout)
    sampler = PromptSampler(data.train, config.prompts_per_step, config.seed)
    method = method_of(config)
    model, tokenizer = _load_policy(config, method)
    check_prompts_fit(tokenizer, [problem.prompt for problem in [*data.train, *data.eval]], config.system_prompt,
                      config.max_new_tokens, model.config)  # before step 1, not at the step that draws one
    needs_reference = config.kl_coef > 0 or needs_reference_logits(method.js_references)
    reference = ReferencePolicy(model, config.shared_prompt_forward) if needs_reference else None
    run = _Run(config, console, run_dir, data, reward, sampler, model, tokenizer,
               build_optimizer(model, config), method, loss_config_of(config), reference)
    run.trainer_state["questions"] = questions_digest([*data.train, *data.eval])  # a resume checks them (`_resume`)
    return run


def _load_policy(config: TrainConfig, method: Method) -> tuple[Any, Any]:
    """The trained model (in train mode) and its tokenizer; ``config.statistics_from`` resolved
    for ``method`` on the model's device."""
    lora = LoraOptions(rank=config.lora_rank, alpha=config.lora_alpha, dropout=config.lora_dropout)
    # the optimizer updates weights of `dtype` (auto: fp32); `autocast` sets the compute dtype
    model, tokenizer = load_model_and_tokenizer(config.model, dtype=weights_dtype(config),
                                                device=config.device, lora=lora,
                                                gradient_checkpointing=config.gradient_checkpointing)
    require_chat_template(tokenizer, config.model)
    if config.statistics_from == "hidden":
        linear_lm_head(model)  # refuse a soft-capped or scaled head before any work
    # auto resolved once the model is placed, so config.yaml records what the run computes from
    config.statistics_from = statistics_source(config.statistics_from, model, next(model.parameters()).device,
                                               method.js_references)
    if config.freeze_embeddings:
        model.get_input_embeddings().weight.requires_grad_(False)
    if config.disable_dropout:
        disable_dropout(model)
    model.train()
    return model, tokenizer


def _resume(run: _Run) -> None:
    """With `config.resume`, load the latest complete checkpoint (weights, optimizer, state)."""
    if not run.config.resume:
        return
    remove_leftovers(run.run_dir)  # what a kill mid-save or mid-delete left
    checkpoint = latest_checkpoint(run.run_dir)
    if checkpoint is None:
        from rich.markup import escape

        run.console.print(f"[yellow]no complete checkpoint in {escape(str(run.run_dir))}; starting fresh[/]")
        return
    questions = run.trainer_state.get("questions")
    run.trainer_state = load_checkpoint(checkpoint, run.model, run.optimizer)
    run.start_step = int(run.trainer_state["step"])
    if questions is not None and run.trainer_state.setdefault("questions", questions) != questions:
        raise UsageError(_other_questions(run))  # absent from older checkpoints; refused before any write
    if run.start_step > run.config.num_steps:  # its steps cannot be undone: refused before any write
        raise UsageError(f"{run.run_dir} has trained {run.start_step} steps ({checkpoint}), more than "
                         f"num_steps {run.config.num_steps}: give --num-steps {run.start_step} or more, "
                         "or start another --run-dir")
    run.last_checkpoint = checkpoint  # a run resumed at its end saves none: its result names this one
    run.console.print(f"resumed from {checkpoint} (step {run.start_step})", markup=False)


def _other_questions(run: _Run) -> str:
    """The one-line refusal of a resume whose data gives other questions (`questions_digest`) than
    the checkpoint's run trained on, by the data's source: a reasoning-gym task, a file, a hub id."""
    dataset, run_dir = run.config.dataset, run.run_dir
    if run.data.train[0].kind == "reasoning_gym":
        return (f"reasoning-gym task {dataset} generated other questions in this process than the run in {run_dir} "
                "trained on (its generation varies between processes, some tasks with PYTHONHASHSEED): a resume "
                "would train on other data; start another --run-dir (set PYTHONHASHSEED=0 for runs of such a task)")
    if is_dataset_file(dataset):
        return (f"dataset file {dataset} holds other questions than the run in {run_dir} trained on (changed since "
                "it started): a resume would train on other data; restore the file, or start another --run-dir")
    return (f"hub dataset {dataset} now gives other questions than the run in {run_dir} trained on (a new "
            "revision): a resume would train on other data; start another --run-dir")


def _evaluate_before(run: _Run) -> dict[str, Any]:
    """Held-out accuracy before the first step (on resume: the one eval.json holds, if any). A run
    resumed with steps left (extended with ``--resume --num-steps``) drops the "after" evaluation of
    its earlier end: eval.json then holds what the uninterrupted run's holds at that step."""
    if not run.data.eval:
        return {}
    if run.start_step != 0:
        if run.start_step < run.config.num_steps:
            with _writing(run, run.run_dir / "eval.json"):
                drop_eval(run.run_dir, "after")
        return read_eval(run.run_dir).get("before", {})
    evaluation = evaluate_accuracy(run.model, run.tokenizer, run.data.eval, run.reward, run.config)
    run.console.print(f"eval before training: accuracy {evaluation['accuracy']:.3f} on "
                      f"{len(run.data.eval)} held-out problems")
    with _writing(run, run.run_dir / "eval.json"):
        write_eval(run.run_dir, "before", evaluation)
    return evaluation


def _evaluate_resumed_warmup_end(run: _Run) -> None:
    """A run resumed at the last step of its full-token warm-up without that step's evaluation in
    eval.json (a run whose `num_steps` ended there, extended with ``--resume --num-steps``: it had
    no selection phase then) evaluates the resumed weights as the warm-up's end, as an
    uninterrupted run does after that step."""
    phase = selection_phase(run.config)
    if (not run.data.eval or phase is None or run.start_step != phase[1] - 1
            or AFTER_WARMUP in read_eval(run.run_dir)):
        return
    _record_warmup_end(run, run.start_step,
                       evaluate_accuracy(run.model, run.tokenizer, run.data.eval, run.reward, run.config))


def _record_warmup_end(run: _Run, step: int, evaluation: dict[str, Any]) -> None:
    """The held-out evaluation at the full-token warm-up's last step ``step``: in eval.json and on
    the console."""
    with _writing(run, run.run_dir / "eval.json"):
        write_eval(run.run_dir, AFTER_WARMUP, evaluation)
    run.console.print(f"eval after the full-token warm-up (step {step}): accuracy {evaluation['accuracy']:.3f} "
                      f"on {len(run.data.eval)} held-out problems")


def _run_steps(run: _Run, on_step: Callable[[dict[str, Any]], None] | None) -> list[dict[str, Any]]:
    """The step loop: a step, its record (log, console, progress), then a checkpoint when due;
    stops on a signal or after too many non-finite updates (checkpointed first)."""
    config, console = run.config, run.console
    all_metrics: list[dict[str, Any]] = []
    progress = progress_bar(console, config.num_steps, config.progress, run.start_step)
    profiler = StepProfiler(config.profile, next(run.model.parameters()).device)
    stop = StopRequest(console)
    try:
        for step in range(run.start_step, config.num_steps):
            try:
                with profiler.phase("step"):
                    metrics = train_step(step, config, run.model, run.tokenizer, run.optimizer,
                                         run.sampler, run.reward, run.method, run.loss_config,
                                         run.reference, run.backend, run.trainer_state, profiler)
            except SelectorFailed as error:  # the step is neither logged nor checkpointed: resumable
                raise UsageError(f"step {step + 1}: {error}; nothing of the step was saved: fix the plugin "
                                 f"and {run.continue_with}") from error
            _record_step(run, metrics, all_metrics, progress, on_step)
            try:
                _checkpoint_or_stop(run, step, stop, profiler)
            except (KeyboardInterrupt, TrainingDiverged):  # stopped after a finished step
                _write_profile(run, profiler, all_metrics)
                raise
    finally:
        stop.restore()
        run.stop_requested = stop.requested  # read once restored: a later signal is the caller's
        if progress is not None:
            progress.stop()
        assert run.logger is not None
        run.logger.close()
        profiler.close()
    _write_profile(run, profiler, all_metrics)
    return all_metrics


@contextlib.contextmanager
def _writing(run: _Run, path: Path) -> Iterator[None]:
    """Write the run's file (or checkpoint) ``path`` inside the body: a write the file system
    refuses (a full disk, a quota: `write_failure`) is one line naming it and how to go on. The
    run stays resumable: a checkpoint is written aside and renamed whole, eval.json replaced
    whole, and a resume cuts metrics.jsonl back to its checkpoint (a torn line with it)."""
    try:
        yield
    except Exception as error:
        reason = write_failure(error)
        if reason is None:
            raise
        raise UsageError(f"cannot write {path} ({reason}); {write_remedy(error)}, then {run.continue_with} "
                         "(from its last complete checkpoint, if any)") from error


def _write_profile(run: _Run, profiler: StepProfiler, all_metrics: list[dict[str, Any]]) -> None:
    """With ``--profile``: the phases' mean time and peak memory over the steps run (a run stopped
    by a signal or a divergence: the steps it finished) to ``RUN_DIR/profile.md`` and the console."""
    if not run.config.profile:
        return
    heading, table = profile_heading(all_metrics, run.config), profiler.table(max(1, len(all_metrics)))
    (run.run_dir / "profile.md").write_text(f"{heading}\n\n{table}\n")
    run.console.print(f"{heading}; also in {run.run_dir / 'profile.md'}:\n" + table, markup=False)


def _record_step(run: _Run, metrics: dict[str, Any], all_metrics: list[dict[str, Any]],
                 progress: Any, on_step: Callable[[dict[str, Any]], None] | None) -> None:
    """Entropy warnings, the periodic evaluation, the metrics line, the console and progress."""
    config = run.config
    run.trainer_state = check_entropy(metrics, run.trainer_state, config, run.console)
    phase = selection_phase(config)
    periodic = bool(config.eval_every) and metrics["step"] % config.eval_every == 0
    # the end of the full-token warm-up: what the method's own phase starts from
    warmup_end = phase is not None and metrics["step"] == phase[1] - 1
    if run.data.eval and (periodic or warmup_end):  # one evaluation serves both
        evaluation = evaluate_accuracy(run.model, run.tokenizer, run.data.eval, run.reward, config)
        if periodic:  # with its temperature: a resume may change eval_temperature mid-curve
            metrics["eval_accuracy"] = evaluation["accuracy"]
            metrics["eval_temperature"] = evaluation["temperature"]
        if warmup_end:
            _record_warmup_end(run, metrics["step"], evaluation)
    assert run.logger is not None
    with _writing(run, run.logger.path):
        run.logger.log(metrics)
    all_metrics.append(metrics)
    if on_step is not None:
        on_step(metrics)
    run.console.print(step_line(metrics, config.num_steps))  # above the live bar
    if progress is not None:
        progress.update(progress.task_ids[0], advance=1, reward=f"{metrics['reward_mean']:.3f}",
                        entropy=f"{metrics['entropy']:.3f}")


def _checkpoint_or_stop(run: _Run, step: int, stop: StopRequest, profiler: StepProfiler) -> None:
    """Checkpoint after the last step, every `save_every`, on a stop request or a divergence;
    then raise `TrainingDiverged` or `KeyboardInterrupt` when the run must stop early."""
    config, state = run.config, run.trainer_state

    def checkpoint() -> None:
        with profiler.phase("checkpoint"), _writing(
                run, checkpoint_dir(run.run_dir) / f"{CHECKPOINT_PREFIX}{step + 1:08d}"):
            assert run.logger is not None
            run.logger.sync()  # the metrics lines the checkpoint covers are durable first
            run.last_checkpoint = save_checkpoint(run.run_dir, step + 1, run.model, run.optimizer,
                                                  state, run.tokenizer, keep=config.keep_checkpoints)

    done = step + 1 == config.num_steps
    diverged = state["consecutive_skips"] >= config.max_consecutive_skips
    saved = bool(done or stop.requested or diverged
                 or (config.save_every and (step + 1) % config.save_every == 0))
    if saved:
        checkpoint()
    if diverged and not done:
        raise TrainingDiverged(
            f"{state['consecutive_skips']} consecutive updates had a non-finite loss or gradient "
            f"(weights untouched since the last good one, checkpointed in {run.last_checkpoint}); "
            f"to retry from there with the same options, {run.continue_with}; a lower learning_rate "
            "or other data needs a new run (a resumed run keeps its options)")
    if stop.requested and done and run.data.eval:  # a scheduler's SIGKILL may follow its SIGTERM
        run.console.print(f"stop requested in the last step: {run.last_checkpoint} holds it; the evaluation "
                          f"after training follows (if it is killed, {run.continue_with} to finish it)",
                          markup=False)
    if stop.requested and not done:
        if not saved:  # the signal came after the decision above (between any two bytecodes)
            checkpoint()
        run.console.print(f"stopped after step {step + 1}: {run.last_checkpoint}; to continue, "
                          f"{run.continue_with}", markup=False)
        raise KeyboardInterrupt
