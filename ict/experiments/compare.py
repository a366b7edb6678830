"""`ict compare`: train several methods over several seeds under identical conditions, evaluate
each final model with pass@k, and write the report (`ict.analysis.compare.write_report`).

Layout: ``DIR/runs/<method-label>/seed<k>/`` (`ict.analysis.compare.run_dir`) is an ordinary
`ict train` run directory plus ``eval/`` (the `ict eval` outputs of its final checkpoint) and,
with ``eval_steps``, ``evals/step-<N>/`` (those of its checkpoint at step N); step 0, the untrained
model, is evaluated once for the comparison in ``DIR/base-model/``. Same
seed => same training prompts in the same order and the same rollout seeds (`ict.training.trainer`
derives both from ``seed``); every run is evaluated on the same problems with the same sampling
seed. A run whose ``eval/results.json`` exists is reused; a run with an older checkpoint resumes;
one evaluated at another step than ``num_steps``, or trained past it, is refused before any run
trains, and so is one whose config.yaml trained another seed than its directory's (a copy), and an
evaluation made with other --eval-* settings is refused when it would be reused;
one graded under other answer-grading rules, or with another verify_timeout, is re-graded (nothing
is generated again).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ict.analysis.compare import (
    BASE_MODEL_DIR,
    BASELINES,
    BOOTSTRAP_RESAMPLES,
    COMMANDS_FILE,
    graded_under,
    is_baseline,
    planned_steps,
    run_dir,
    step_eval_dir,
    write_report,
)
from ict.answers.grading import ANSWER_EXTRACTIONS, GRADING_RULES_VERSION
from ict.answers.verify import MATH_EXTRACTIONS
from ict.core.errors import UsageError, check_path_given
from ict.core.options import (
    check_choices,
    number_option_names,
    option,
    option_fields,
    text_option_names,
)
from ict.core.seeding import RUN_SEED_LIMIT
from ict.core.stats import MIN_TEMPERATURE
from ict.data.benchmarks import expand_benchmark_names
from ict.data.training_data import is_reasoning_gym_task
from ict.evaluation.evaluate import EvalConfig
from ict.experiments.methods import MethodSpec, method_overrides, parse_methods
from ict.models.rollout import check_sampling_temperature
from ict.runs.samples import compared_setting
from ict.training.config import TrainConfig

# what a run stopped (Ctrl-C, SIGTERM) or diverged inside a comparison tells the user to do next
COMPARE_CONTINUE = "rerun the same ict compare command (it resumes each run from its last checkpoint)"


@dataclass
class CompareConfig:
    """Every option of `ict compare` (the CLI options are generated from these fields). Its
    ``--config`` YAML holds the training options of every run (as `ict train --config`) and may
    also set these options (`compare_options` splits the two)."""

    methods: str = option("grpo,entropy,stapo,ict,random:preset=paper",
                          "comma-separated methods; options as method:key=value,key=value (e.g. "
                          "ict:reference=prev,ratio=0.2 or ict:preset=batch); random:preset=paper is "
                          "the control with ict's recipe (a random 10% of each response), so it "
                          "differs from ict only in the score")
    seeds: tuple[int, ...] = option((0, 1, 2), "comma-separated training seeds (distinct)")
    output_dir: Path | None = option(None, "comparison directory (required)")
    config_file: str | None = option(None, "YAML of training options for every run (ict train's "
                                     "keys), which may also set any ict compare option")
    eval_benchmarks: str = option(
        "rg:chain_sum:min_terms=2:max_terms=2:min_digits=1:max_digits=1:size=200",
        "benchmarks for the final models (ict eval names, rg:<task>...)")
    eval_data_dir: str | None = option(None, "directory of benchmark files; None = the hub")
    eval_n: int = option(EvalConfig.num_samples, "samples per evaluation problem")
    eval_ks: tuple[int, ...] | None = option(None, "comma-separated k of pass@k (each <= "
                                             "--eval-n); None = those of ict eval's default "
                                             f"{EvalConfig.ks} that are <= --eval-n")
    eval_steps: tuple[int, ...] = option((), "also evaluate the checkpoints of these training "
                                         "steps (kept by save_every / keep_checkpoints: 0) into "
                                         "RUN/evals/step-N/, for learning curves; 0 = the "
                                         "untrained model, once, in DIR/base-model/")
    eval_temperature: float = option(EvalConfig.temperature, "evaluation sampling temperature; 0 = "
                                     f"greedy, else >= {MIN_TEMPERATURE:g}")
    eval_max_new_tokens: int = option(64, "evaluation completion length limit in tokens")
    eval_math_extraction: str = option(EvalConfig.math_extraction, "math answer extraction",
                                       MATH_EXTRACTIONS)
    eval_answer_extraction: str = option(
        TrainConfig.answer_extraction, "reasoning-gym answers: last_number = the bare question as prompt and the "
        "last number as answer (ict train's default); tag = \\boxed{} or <answer> tags with the "
        "\\boxed{} instruction", ANSWER_EXTRACTIONS)
    eval_limit: int | None = option(None, "first N problems of each benchmark; None = all")
    report_only: bool = option(False, "rebuild the report from the run directories; train nothing")
    train_only: bool = option(False, "train every run to its final checkpoint; evaluate nothing "
                              "and write no report (a later run without it evaluates them)")
    eval_only: bool = option(False, "evaluate the runs already trained to their final step "
                             "(train nothing; safe next to a --train-only process), then the "
                             "report")
    bootstrap_resamples: int = option(BOOTSTRAP_RESAMPLES, "bootstrap resamples of each paired interval")
    baselines: tuple[str, ...] = option(BASELINES, "comma-separated method names or run labels "
                                        "every other run is compared with (e.g. "
                                        "ict-reference=group_mean-ratio=0.1 for an ablation)")
    overrides: dict[str, str] = field(default_factory=dict)
    """training ``key=value`` overrides for every run (the command line's positional items)"""
    command: str = ""
    """the command line, appended to ``DIR/commands.txt`` (empty: not recorded)"""

    @property
    def ks(self) -> tuple[int, ...]:
        """`eval_ks`, or ict eval's default ks that fit in `eval_n` samples."""
        if self.eval_ks is not None:
            return self.eval_ks
        return tuple(k for k in EvalConfig.ks if k <= self.eval_n)

    @property
    def method_specs(self) -> list[MethodSpec]:
        """`methods` parsed (`parse_methods`)."""
        return parse_methods(self.methods)

    def validate(self) -> CompareConfig:
        """One-line UsageError for a bad option or combination."""
        if self.output_dir is None:
            raise UsageError("--output-dir is required")
        check_path_given("--output-dir", self.output_dir, "give the comparison's directory")
        check_path_given("--eval-data-dir", self.eval_data_dir, "give a directory, or leave it out for the hub")
        self.output_dir = Path(self.output_dir).expanduser()  # ~ from a config file or --output-dir=~/...
        if not self.seeds:  # as ict eval's --seeds '' (it said "needs distinct integers, got ()")
            raise UsageError("--seeds needs at least one seed (e.g. --seeds 0,1,2)")
        if len(set(self.seeds)) != len(self.seeds):
            raise UsageError(f"--seeds needs distinct integers, got {self.seeds}")
        if not all(0 <= seed < RUN_SEED_LIMIT for seed in self.seeds):
            raise UsageError(f"--seeds must lie in [0, 2^32) (training seeds), got {self.seeds}")
        if sum((self.report_only, self.train_only, self.eval_only)) > 1:
            raise UsageError("give at most one of --report-only, --train-only and --eval-only")
        if self.eval_n < 1 or self.eval_max_new_tokens < 1 or self.bootstrap_resamples < 1:
            raise UsageError("--eval-n, --eval-max-new-tokens and --bootstrap-resamples must be "
                             ">= 1")
        if self.eval_ks is not None and not self.eval_ks:  # as ict eval's --k ''
            raise UsageError("--eval-ks needs at least one value (e.g. --eval-ks 1,4)")
        if self.eval_ks is not None and (len(set(self.eval_ks)) != len(self.eval_ks) or any(
                k < 1 or k > self.eval_n for k in self.eval_ks)):
            raise UsageError(f"--eval-ks needs distinct k in 1..--eval-n ({self.eval_n}), got "
                             f"{self.eval_ks}")
        if any(step < 0 for step in self.eval_steps) or len(set(self.eval_steps)) != len(
                self.eval_steps):
            raise UsageError(f"--eval-steps needs distinct steps >= 0, got {self.eval_steps}")
        if self.output_dir.exists() and not self.output_dir.is_dir():
            raise UsageError(f"--output-dir {self.output_dir} is a file, not a directory")
        if self.eval_limit is not None and self.eval_limit < 1:
            raise UsageError(f"--eval-limit must be >= 1, got {self.eval_limit}")
        if self.eval_temperature < 0:
            raise UsageError(f"--eval-temperature must be >= 0, got {self.eval_temperature}")
        check_sampling_temperature("--eval-temperature", self.eval_temperature)  # before anything trains
        # everything that fails before anything trains: the methods, the benchmarks' names, and
        # baselines given by hand (the defaults may be absent: the report says so)
        specs = self.method_specs
        if not self.baselines or not all(self.baselines):
            raise UsageError(f"--baselines needs method names or run labels, got {','.join(self.baselines)!r}")
        if not (self.train_only or self.report_only):
            expand_benchmark_names(self.eval_benchmarks)
        if tuple(self.baselines) != BASELINES:
            runs = self.output_dir / "runs"
            methods = {**_recorded_methods(runs), **{spec.label: spec.name for spec in specs}}
            labels = set(methods)
            unknown = [name for name in self.baselines
                       if not any(is_baseline(label, [name], methods[label]) for label in labels)]
            if unknown:
                raise UsageError(f"--baselines {unknown[0]!r} is none of the runs of --methods "
                                 f"({', '.join(sorted(labels))}) nor of {runs}")
        check_choices(self)
        return self


def _recorded_methods(runs: Path) -> dict[str, str | None]:
    """Run label -> its method, of each label directory under ``runs``: any of its seeds'
    config.yaml's (`run_method`; a plugin's, not loaded yet), None where none records one."""
    from ict.analysis.comparison_runs import run_method

    if not runs.is_dir():
        return {}
    return {path.name: next((method for seed in sorted(path.glob("seed*")) if (method := run_method(seed))), None)
            for path in runs.iterdir() if path.is_dir()}


def compare_options(values: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """A ``--config`` YAML's mapping split into (ict compare options, training options); a key
    that names a field of both (``eval_temperature``: the evaluations' sampling temperature, in
    training and after it) goes to both, as it does with ``ict train --config``."""
    names = {item.name for item in option_fields(CompareConfig)}
    shared = names & {item.name for item in option_fields(TrainConfig)}
    ours = {key: value for key, value in values.items() if key.replace("-", "_") in names}
    return ours, {key: value for key, value in values.items()
                  if key not in ours or key.replace("-", "_") in shared}


def compare_text_options() -> frozenset[str]:
    """The text options of a comparison's ``--config`` YAML: its own and the training options'."""
    return text_option_names(CompareConfig, TrainConfig)


def compare_number_options() -> frozenset[str]:
    """The number options of a comparison's ``--config`` YAML: its own and the training options'."""
    return number_option_names(CompareConfig, TrainConfig)


def _final_checkpoint(directory: Path, num_steps: int) -> Path | None:
    from ict.runs.checkpoint import latest_checkpoint

    checkpoint = latest_checkpoint(directory)
    if checkpoint is not None and checkpoint.name == f"step-{num_steps:08d}":
        return checkpoint
    return None


def _after_evaluation_missing(directory: Path) -> bool:
    """Did the run evaluate its held-out problems before training (eval.json's "before") but not
    after it? A comparison stopped in that evaluation left the final checkpoint, which a rerun took
    for a finished run, so eval.json never got the "after" of an uninterrupted run."""
    from ict.runs.reporting import read_eval

    evaluations = read_eval(directory)
    return "before" in evaluations and "after" not in evaluations


def _training_config(config: CompareConfig, training_options: dict[str, Any], spec: MethodSpec,
                     seed: int) -> TrainConfig:
    """The `TrainConfig` of one (method, seed) run. A new run of a reasoning-gym training task
    leaves the questions of the comparison's reasoning-gym evaluation sets out (``held_out_sets``):
    a small task asks each of its questions many times, so they would be trained on. A run with a
    checkpoint resumes (``resume``): its config.yaml decides, and an option given otherwise is
    `build_config`'s one-line error, so it continues on the problems it started on. A run
    evaluated whose checkpoints were deleted since is checked the same way (it is reused as it
    is), and its config.yaml's ``num_steps`` must be ``num_steps``."""
    from ict.analysis.comparison_runs import check_run_seed
    from ict.runs.checkpoint import checkpoint_step, latest_checkpoint
    from ict.training.config_loading import build_config, parse_value

    assert config.output_dir is not None
    directory = run_dir(config.output_dir, spec.label, seed)
    check_run_seed(directory, seed)  # before build_config's "--resume ... drop the option"
    latest = latest_checkpoint(directory)
    # evaluated, its checkpoints deleted since (to free the disk): reused as it was trained
    evaluated_only = latest is None and (directory / "eval" / "results.json").is_file() and (
        directory / "config.yaml").is_file()
    resuming = latest is not None or evaluated_only
    plugin = config.overrides.get("plugin", training_options.get("plugin"))  # a selector's options
    overrides = {**config.overrides, **method_overrides(spec, None if plugin is None else parse_value("plugin", plugin)),
                 "seed": str(seed), "run_dir": str(directory), "progress": "false", **({"resume": "true"} if resuming else {})}
    try:
        train_config = build_config(None, training_options, overrides)
    except UsageError as error:
        raise _shared_selector_error(config, training_options, overrides, spec, error) from None
    _check_run_own_options(config, training_options, overrides)
    evaluated = [name for name in expand_benchmark_names(config.eval_benchmarks) if name.startswith("rg:")]
    if not resuming and evaluated and is_reasoning_gym_task(train_config.dataset):
        given = expand_benchmark_names(train_config.held_out_sets) if train_config.held_out_sets else []
        merged = list(dict.fromkeys([*given, *evaluated]))
        if merged != given:
            train_config = build_config(None, training_options, {**overrides, "held_out_sets": ",".join(merged)})
    if latest is not None:
        _check_trained_steps(directory, checkpoint_step(latest) or 0, train_config.num_steps)
    elif evaluated_only:
        trained = planned_steps(directory / "config.yaml")
        if trained is not None and trained != train_config.num_steps:
            raise UsageError(f"{directory} was trained to step {trained} (its config.yaml) and evaluated "
                             f"there (eval/), with no checkpoint left, but num_steps is "
                             f"{train_config.num_steps}: give num_steps={trained}, or another --output-dir")
    return train_config


# The training options ict compare gives each run itself, and the option they come from.
RUN_OWN_OPTIONS = {"method": "--methods", "seed": "--seeds", "run_dir": "--output-dir"}


def _check_run_own_options(config: CompareConfig, training_options: dict[str, Any],
                           overrides: dict[str, str]) -> None:
    """One-line UsageError for a training option that ict compare gives each run itself
    (`RUN_OWN_OPTIONS`; ``overrides`` holds the run's) and that ``--config`` or a trailing
    ``key=value`` sets to another value: it was replaced, silently. One the run's agrees with
    passes (``method: ict`` in a file, ``--methods ict``), and so does ``run_dir: null`` (unset)."""
    from ict.training.config import METHOD_ALIASES
    from ict.training.config_loading import parse_value

    def meaning(name: str, value: Any) -> Any:
        value = parse_value(name, value)
        return METHOD_ALIASES.get(value, value) if name == "method" else value

    for source, options in ((f"--config {config.config_file}", training_options),
                            ("the command line", config.overrides)):
        for key, value in options.items():
            name = key.replace("-", "_")
            if name in RUN_OWN_OPTIONS and meaning(name, value) not in (None, meaning(name, overrides[name])):
                raise UsageError(f"{source} sets {name} {value!r} for every run, but ict compare gives "
                                 f"each run its own from {RUN_OWN_OPTIONS[name]} (this one: "
                                 f"{overrides[name]}): remove it")


def _shared_selector_error(config: CompareConfig, training_options: dict[str, Any],
                           overrides: dict[str, str], spec: MethodSpec, error: UsageError) -> UsageError:
    """``error`` (a run's config refused), or, when selector options that ``--config`` or a
    trailing ``key=value`` gives every run (``selector:``, ``ratio``, ``preset``; e.g. those of
    configs/offline-default.yaml, ICT's) are what this method refuses, a UsageError naming them
    and where to put a method's own options (``--methods method:key=value``)."""
    from ict.training.config_loading import SELECTOR_KEYS, build_config

    def shared(key: str) -> bool:
        name = key.replace("-", "_")
        return name in SELECTOR_KEYS or name.startswith("selector.")

    in_file = [key for key in training_options if shared(key)]
    given = [key for key in config.overrides if shared(key)]
    if not in_file and not given:
        return error
    try:  # the same run without them: is it theirs?
        build_config(None, {key: value for key, value in training_options.items() if key not in in_file},
                     {key: value for key, value in overrides.items() if key not in given})
    except UsageError:
        return error
    sources = ([f"--config {config.config_file} sets {', '.join(in_file)}"] if in_file else []) + (
        [f"the command line sets {', '.join(key + '=' + config.overrides[key] for key in given)}"] if given else [])
    return UsageError(f"{' and '.join(sources)} for every run, which method {spec.name} refuses ({error}): "
                      "remove it and give each method its own options in --methods (e.g. "
                      "ict:ratio=0.1 or ict:preset=paper)")


def _check_trained_steps(directory: Path, trained: int, num_steps: int) -> None:
    """Refuse (one line, before any run trains) a run that cannot end at ``num_steps`` like its
    peers: one trained past it, or one whose final evaluation (``eval/``) is of an earlier step
    (a comparison rerun with a larger ``num_steps``: it was reused as it was, beside runs trained
    to the new length, and the report pooled both)."""
    if trained > num_steps:
        raise UsageError(f"{directory} has trained {trained} steps, more than num_steps {num_steps}: "
                         f"give num_steps={trained} or more, or another --output-dir")
    if trained < num_steps and (directory / "eval" / "results.json").is_file():
        raise UsageError(f"{directory} was trained to step {trained} and evaluated there (eval/), but "
                         f"num_steps is {num_steps}: give num_steps={trained}, or move its eval/ aside "
                         "to train it on and evaluate it again")


def _check_vllm_evaluation(config: CompareConfig, runs: list[tuple[MethodSpec, int, TrainConfig]]) -> None:
    """One-line UsageError, before anything trains, for an ``--eval-temperature`` vLLM does not
    sample at (`check_vllm_sampling`) where a run's evaluations use vLLM (`resolved_backend` on its
    device; a LoRA run's checkpoints are evaluated with hf, its untrained model not). It was refused
    at the first evaluation, after a run had trained, naming an hf backend ict compare has no
    option for."""
    from ict.evaluation.generator import eval_sampling, resolved_backend
    from ict.models.loading import resolve_device
    from ict.models.vllm_backend import (
        VLLM_MAX_TEMPERATURE,
        VLLM_MIN_TEMPERATURE,
        check_vllm_sampling,
    )

    assert config.output_dir is not None
    for _, _, train_config in runs:
        if train_config.lora_rank and 0 not in config.eval_steps:
            continue
        eval_config = _eval_config(config, train_config, train_config.model, config.output_dir)
        if resolved_backend(eval_config, resolve_device(train_config.device)) != "vllm":
            continue
        try:
            check_vllm_sampling(eval_sampling(eval_config))
        except UsageError:
            raise UsageError(f"--eval-temperature {config.eval_temperature:g}: ict compare evaluates with vLLM "
                             f"here (installed), which samples at temperatures in [{VLLM_MIN_TEMPERATURE:g}, "
                             f"{VLLM_MAX_TEMPERATURE:g}]: give one there, or 0 (greedy)") from None


def run_comparison(config: CompareConfig, log: Any = print) -> Path:
    """Train and evaluate every (method, seed) not finished yet, then write the report.
    ``train_only``: train, evaluate nothing, no report; ``eval_only``: evaluate the runs trained
    to their final step (train nothing), then write the report; ``report_only``: the report.
    With ``eval_steps``, the checkpoints of those steps (and, for 0, the untrained model) are
    evaluated too, with the same settings; an evaluation already written is reused."""
    from ict.runs.checkpoint import append_line
    from ict.training.config_loading import load_config_file

    config = config.validate()
    assert config.output_dir is not None
    # every run's training options built (and so checked) before the first run trains
    training_options = (compare_options(load_config_file(  # a plugin's selector options read as built-ins'
        config.config_file, config.overrides.get("plugin"), compare_text_options(), compare_number_options()))[1]
                        if config.config_file is not None and not config.report_only else {})
    runs = [] if config.report_only else [
        (spec, seed, _training_config(config, training_options, spec, seed))
        for spec in config.method_specs for seed in config.seeds]
    longest = max((train_config.num_steps for _, _, train_config in runs), default=0)
    past = [step for step in config.eval_steps if runs and step > longest]
    if past:  # was "no checkpoint of step N ...; not evaluated", once every run had trained
        raise UsageError(f"--eval-steps {','.join(map(str, past))}: past num_steps ({longest}) of every run, "
                         "so no checkpoint of it will exist: give steps up to num_steps")
    if not (config.report_only or config.train_only):  # every reused evaluation's settings too
        _check_vllm_evaluation(config, runs)
        reused = []
        for spec, seed, train_config in runs:
            directory = run_dir(config.output_dir, spec.label, seed)
            for output_dir in [config.output_dir / BASE_MODEL_DIR, directory / "eval",
                               *sorted(directory.glob("evals/step-*"))]:
                if (output_dir / "results.json").is_file():
                    _check_eval_settings(output_dir, _eval_config(config, train_config, "", output_dir))
                    reused.append(output_dir)
        _check_reused_questions(config, reused)
        _check_eval_context(config, runs)
    if (config.report_only or config.eval_only) and not (config.output_dir / "runs").is_dir():
        # nothing to evaluate or report: refused before a mistyped directory is created
        raise UsageError(f"no runs under {config.output_dir / 'runs'}; train them first (ict "
                         "compare without --report-only and --eval-only)")
    config.output_dir.mkdir(parents=True, exist_ok=True)
    if not config.report_only:
        commands = config.output_dir / COMMANDS_FILE
        seen = commands.read_text(encoding="utf-8").splitlines() if commands.is_file() else []
        if config.command and config.command not in seen:
            append_line(commands, config.command)
        base_evaluated = False
        for spec, seed, train_config in runs:
            directory = run_dir(config.output_dir, spec.label, seed)
            if not config.train_only and 0 in config.eval_steps and not base_evaluated:
                _evaluate(config, train_config, train_config.model,
                          config.output_dir / BASE_MODEL_DIR, log)
                base_evaluated = True
            checkpoint = _final_checkpoint(directory, train_config.num_steps)
            if checkpoint is not None and not config.eval_only and _after_evaluation_missing(directory):
                log(f"evaluate {directory}'s held-out problems after training (interrupted before)")
                _train(train_config, directory, log)  # resumed at its end: that evaluation only
            if (directory / "eval" / "results.json").is_file():
                log(f"reuse {directory}")
                if not config.train_only:
                    _evaluate(config, train_config, None, directory / "eval", log)  # re-graded if it must be
                    _evaluate_steps(config, train_config, directory, log)
                continue
            if checkpoint is None and config.eval_only:
                log(f"skip {directory} (not trained to step {train_config.num_steps} yet)")
                continue
            if checkpoint is None:  # train_config.resume: the run has a checkpoint (_training_config)
                log(f"train {spec.label} seed {seed} -> {directory}")
                checkpoint = _train(train_config, directory, log)
            assert checkpoint is not None
            if config.train_only:
                continue
            _evaluate(config, train_config, str(checkpoint), directory / "eval", log)
            _evaluate_steps(config, train_config, directory, log)
    if config.train_only:
        return config.output_dir
    return write_report(config.output_dir, config.baselines, config.bootstrap_resamples, GRADING_RULES_VERSION)


def _train(train_config: TrainConfig, directory: Path, log: Any) -> Path | None:
    """`train` one run of the comparison into ``directory``; its final checkpoint. A Ctrl-C or
    SIGTERM in its last step lets the run finish (as `ict train` does), then stops the comparison
    (KeyboardInterrupt: "interrupted", status 130) before its next evaluation or run starts."""
    from ict.training.trainer import train

    result = train(train_config, continue_with=COMPARE_CONTINUE)
    if result.stop_requested:
        log(f"stopped after training {directory} (a stop request came in its last step); to continue, "
            f"{COMPARE_CONTINUE}")
        raise KeyboardInterrupt
    return result.checkpoint


def _check_eval_context(config: CompareConfig, runs: list[tuple[MethodSpec, int, TrainConfig]]) -> None:
    """One-line UsageError, before anything trains, for an evaluation prompt + ``--eval-max-new-tokens``
    past the context of a run's model (`check_prompts_fit`, its tokenizer and config alone): it was
    refused at the first evaluation, after a run had trained."""
    from transformers import AutoConfig

    from ict.data.benchmarks import load_benchmarks
    from ict.models.loading import load_tokenizer
    from ict.models.rollout import check_prompts_fit

    assert config.output_dir is not None
    if not runs:
        return
    eval_config = _eval_config(config, runs[0][2], "", config.output_dir)
    prompts = [problem.prompt for benchmark in load_benchmarks(eval_config.benchmarks, eval_config.data_dir,
                                                               eval_config.limit, eval_config.answer_extraction)
               for problem in benchmark.problems]
    for model in dict.fromkeys(train_config.model for _, _, train_config in runs):
        tokenizer, source = load_tokenizer(model)
        try:
            check_prompts_fit(tokenizer, prompts, eval_config.system_prompt, config.eval_max_new_tokens,
                              AutoConfig.from_pretrained(source))
        except UsageError as error:
            raise UsageError(f"--eval-max-new-tokens {config.eval_max_new_tokens}: {error}") from None


def _check_reused_questions(config: CompareConfig, output_dirs: list[Path]) -> None:
    """UsageError unless the samples of each reused evaluation in ``output_dirs`` were drawn from
    the questions this process generates for the ``rg:`` benchmarks (some reasoning-gym tasks
    generate others in another process: runs evaluated then and now would be compared on other
    questions). Generates those benchmarks once; file benchmarks are not read."""
    from ict.data.benchmarks import load_benchmarks
    from ict.evaluation.records import check_same_problems, load_sample_records

    names = [name for name in expand_benchmark_names(config.eval_benchmarks) if name.startswith("rg:")]
    if not (names and output_dirs):
        return
    problems = [problem for benchmark in load_benchmarks(names, limit=config.eval_limit,
                                                         answer_extraction=config.eval_answer_extraction)
                for problem in benchmark.problems]
    for output_dir in output_dirs:
        check_same_problems(output_dir, problems, load_sample_records(output_dir / "samples.jsonl",
                                                                      afresh=_afresh(output_dir)),
                            "rerun with the PYTHONHASHSEED those runs were evaluated with (if one was set), or "
                            "evaluate every run anew in another --output-dir")


def _evaluate_steps(config: CompareConfig, train_config: TrainConfig, directory: Path,
                    log: Any) -> None:
    """Evaluate the run's checkpoints at ``config.eval_steps`` (0 and the final step excepted:
    the untrained model and ``eval/``) into ``evals/step-<N>/``; a missing one is reported."""
    from ict.runs.checkpoint import COMPLETE_MARKER, checkpoint_dir

    for step in sorted(config.eval_steps):
        if step in (0, train_config.num_steps):
            continue
        checkpoint = checkpoint_dir(directory) / f"step-{step:08d}"
        if not (checkpoint / COMPLETE_MARKER).is_file():
            log(f"no checkpoint of step {step} in {directory} (save_every "
                f"{train_config.save_every}, keep_checkpoints {train_config.keep_checkpoints}); "
                "not evaluated")
            continue
        _evaluate(config, train_config, str(checkpoint), step_eval_dir(directory, step), log)


def _eval_config(config: CompareConfig, train_config: TrainConfig, model: str,
                 output_dir: Path) -> EvalConfig:
    """The comparison's `ict eval` settings for ``model`` into ``output_dir``: sampling seed 0, the
    run's device, dtype and threads."""
    return EvalConfig(
        model=model, benchmarks=config.eval_benchmarks, data_dir=config.eval_data_dir,
        output_dir=str(output_dir), num_samples=config.eval_n, ks=config.ks,
        temperature=config.eval_temperature, max_new_tokens=config.eval_max_new_tokens, seed=0,
        limit=config.eval_limit, math_extraction=config.eval_math_extraction,
        answer_extraction=config.eval_answer_extraction, device=train_config.device,
        dtype=train_config.dtype, threads=train_config.num_threads)


def _evaluate(config: CompareConfig, train_config: TrainConfig, model: str | None, output_dir: Path,
              log: Any) -> None:
    """`ict eval` of ``model`` into ``output_dir`` with the comparison's settings (`_eval_config`);
    skipped when its results.json exists (its settings were checked before any run trained),
    unless it records other answer-grading rules than `GRADING_RULES_VERSION` (or none: older
    ones), or another ``verify_timeout`` than the comparison's (a hand-run ``ict eval
    --verify-timeout``: a check cut short is counted incorrect, and ict compare has no option to
    match it): then the same `ict eval` of the model it names resumes, which re-grades the stored
    completions and generates nothing. ``model`` None: only such a re-grade. Stopped (Ctrl-C,
    SIGTERM), it logs how to go on (the finished units of samples.jsonl are kept)."""
    from ict.evaluation.evaluate import evaluate

    if (output_dir / "results.json").is_file():
        evaluated, rules = graded_under(output_dir)
        model = evaluated.get("model") if evaluated is not None else None
        if not isinstance(model, str):  # a results.json without its config: as it is
            return
        assert evaluated is not None
        ours = _eval_config(config, train_config, model, output_dir).verify_timeout
        timeout = evaluated.get("verify_timeout", ours)  # none recorded: an ict eval of the default's
        reasons = ([f"grading rules {rules}, current {GRADING_RULES_VERSION}"] if rules != GRADING_RULES_VERSION
                   else []) + ([f"verify_timeout {timeout!r}, the comparison's {ours!r}"] if timeout != ours else [])
        if not reasons:
            return
        log(f"re-grade {output_dir} ({'; '.join(reasons)})")
    elif model is None:
        return
    else:
        log(f"evaluate {model} -> {output_dir}")
    try:
        evaluate(_eval_config(config, train_config, model, output_dir), progress=False, print_table=False,
                 afresh=_afresh(output_dir))
    except KeyboardInterrupt:  # Ctrl-C or SIGTERM: the command only said "interrupted"
        log(f"stopped evaluating {output_dir} (its finished samples are kept); to continue, {COMPARE_CONTINUE}")
        raise


def _afresh(output_dir: Path) -> str:
    """What a refusal of the samples in the evaluation directory ``output_dir`` says to pass (ict
    eval's `START_AFRESH` names --overwrite, which ict compare lacks): a run whose evaluation is
    moved aside is evaluated again."""
    return f"another --output-dir, or move {output_dir} aside to evaluate it again"


EVAL_SETTINGS = ("benchmarks", "data_dir", "num_samples", "ks", "temperature", "top_p", "max_new_tokens",
                 "system_prompt", "seed", "limit", "math_extraction", "answer_extraction")
"""The `EvalConfig` fields a reused evaluation must share with the comparison's (what its
problems, samples and graded metrics depend on; not the device, dtype or threads)."""


def _eval_setting(name: str, value: Any) -> Any:
    if name == "benchmarks":
        return sorted(expand_benchmark_names(value))
    if name == "data_dir":
        return None if value is None else str(Path(value).expanduser().resolve())
    return list(value) if name == "ks" else compared_setting(name, value)  # "" system prompt: None


def _check_eval_settings(output_dir: Path, eval_config: EvalConfig) -> None:
    """Refuse an evaluation in ``output_dir`` made with other `EVAL_SETTINGS` than
    ``eval_config``'s (a comparison rerun with another --eval-n reused it as it was, beside runs
    evaluated anew, and the report pooled both); a results.json without its config passes."""
    import json

    try:
        stored = json.loads((output_dir / "results.json").read_text(encoding="utf-8")).get("config")
    except (json.JSONDecodeError, UnicodeDecodeError, AttributeError):
        raise UsageError(f"{output_dir / 'results.json'} is not a JSON object of results; move "
                         f"{output_dir} aside to evaluate again") from None
    if not isinstance(stored, dict):
        return
    differing = [f"{name} {stored.get(name)!r} -> {getattr(eval_config, name)!r}"
                 for name in EVAL_SETTINGS if name in stored
                 and _eval_setting(name, stored[name]) != _eval_setting(name, getattr(eval_config, name))]
    if differing:
        raise UsageError(f"{output_dir} was evaluated with other settings ({', '.join(differing)}): "
                         "give the comparison's earlier --eval-* options, or move it aside to "
                         "evaluate again")
