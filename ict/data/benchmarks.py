"""Benchmark registry and loaders: one data-driven table, name -> source, fields, answer type, prompt.

A benchmark is loaded either from a local directory (``--data-dir DIR`` holding ``<name>.jsonl``,
one JSON object per line, in the formats of the published redistributions, see
``docs/evaluation.md``) or from the Hugging Face hub (``datasets.load_dataset``). Each row becomes a
`Problem`: the question, the rendered prompt, and a normalized gold answer

* ``math``: a bare LaTeX answer (see `ict.answers.gold.normalize_gold`), checked with math-verify;
* ``choice``: the option letter (``A``...), options rendered in the prompt as ``A) ...``;
* ``reasoning_gym``: the generated entry, scored by the task's own scorer.

Reasoning-gym tasks are named ``rg:<task>[:key=value]...`` and generated
(`ict.data.benchmark_names`: the names of a list, an ``rg:`` name's task, options, size and seed).
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from ict.answers.gold import normalize_gold
from ict.core.errors import UsageError, check_input_file, encodes_as_utf8, first_line
from ict.core.problems import (
    CHOICE_TEMPLATE,
    MATH_TEMPLATE,
    OPTION_LETTERS,
    REASONING_GYM_TEMPLATES,
    Problem,
    render_options,
    render_template,
)
from ict.data.benchmark_names import parse_reasoning_gym_name, split_benchmark_names
from ict.data.hub import go_offline, hub_reachable
from ict.data.rows import (
    Rows,
    checked_answer,
    checked_choices,
    checked_object,
    checked_question,
    checked_text,
    describe,
    gold_index,
    python_literal,
    read_records,
)

AnswerType = Literal["math", "choice", "reasoning_gym"]
Group = Literal["math", "olympiad", "commonsense", "reasoning_gym"]

# The 18 MMLU subjects of the MMLU-STEM redistribution (the local mmlu_stem.jsonl; lm-eval's STEM
# category without anatomy). A hub load of cais/mmlu keeps these subjects only.
MMLU_STEM_SUBJECTS = (
    "abstract_algebra", "astronomy", "college_biology", "college_chemistry",
    "college_computer_science", "college_mathematics", "college_physics", "computer_security",
    "conceptual_physics", "electrical_engineering", "elementary_mathematics",
    "high_school_biology", "high_school_chemistry", "high_school_computer_science",
    "high_school_mathematics", "high_school_physics", "high_school_statistics",
    "machine_learning",
)


@dataclass(frozen=True)
class HubSource:
    """Where a benchmark lives on the Hugging Face hub; several configs are concatenated."""

    path: str
    split: str
    configs: tuple[str | None, ...] = (None,)
    row_filter: tuple[str, tuple[str | int, ...]] | None = None
    """(field, allowed values): keep only rows whose field is one of the values."""
    gated: bool = False
    """The dataset needs its terms accepted on the hub and a login; the load error says so."""


@dataclass(frozen=True)
class BenchmarkSpec:
    """One registry entry. Field lists are tried in order; the first field present wins, so
    the hub layout and the common redistributions load with the same spec.

    gold_fields: (field, gold format) pairs; formats of `normalize_gold` for math
    (``latex``, ``gsm8k``, ``number``, ``list``, ``boxed_solution``) and, for multiple choice,
    ``index`` (0-based int or digit string), ``letter`` (``"C"``), ``label`` (matched against the
    labels of a ``{"label": [...], "text": [...]}`` choices field, e.g. ARC's "1"-"4").
    choices_format: ``list`` (a list or its Python-literal string), ``label_text`` (dict of
    parallel ``label``/``text`` lists), ``gpqa`` (``Correct Answer`` + ``Incorrect Answer 1-3``,
    shuffled with a per-question fixed seed)."""

    name: str
    group: Group
    answer_type: AnswerType
    description: str
    hub: HubSource | None
    question_fields: tuple[str, ...]
    gold_fields: tuple[tuple[str, str], ...]
    prompt_template: str
    choices_fields: tuple[str, ...] = ()
    choices_format: Literal["list", "label_text", "gpqa", ""] = ""
    id_fields: tuple[str, ...] = ("unique_id", "id", "idx")
    context_field: str | None = None


REGISTRY: dict[str, BenchmarkSpec] = {}


def register_benchmark(spec: BenchmarkSpec) -> BenchmarkSpec:
    """Add (or replace) a registry entry."""
    REGISTRY[spec.name] = spec
    return spec


_MATH_QUESTION = ("problem", "question", "Problem", "Question")
_AIME_GOLD = (("answer", "number"), ("Answer", "number"))
_AIME_IDS = ("id", "ID", "problem_idx", "unique_id", "idx")

for _spec in (
    BenchmarkSpec(
        "math500", "math", "math", "MATH-500 (PRM800K test split of MATH)",
        HubSource("HuggingFaceH4/MATH-500", "test"),
        _MATH_QUESTION, (("answer", "latex"), ("solution", "boxed_solution")), MATH_TEMPLATE,
    ),
    # AIME 2023 (I and II, 30 problems). Hub id an assumption: di-zhang-fdu/AIME_1983_2024 (split
    # train, one CSV of every AIME 1983-2023, columns ID "2023-I-1", Year, Problem Number,
    # Question, Answer, Part), rows of Year 2023 kept. Local aime23.jsonl: that layout, or the
    # problem/answer of the AI-MO/aimo-validation-aime and MathArena/aime_2023_I/II sets.
    BenchmarkSpec(
        "aime23", "olympiad", "math", "AIME 2023 (I and II), integer answers",
        HubSource("di-zhang-fdu/AIME_1983_2024", "train", row_filter=("Year", (2023, "2023"))),
        _MATH_QUESTION, _AIME_GOLD, MATH_TEMPLATE, id_fields=_AIME_IDS,
    ),
    BenchmarkSpec(
        "aime24", "olympiad", "math", "AIME 2024 (I and II), integer answers",
        HubSource("HuggingFaceH4/aime_2024", "train"),
        _MATH_QUESTION, _AIME_GOLD, MATH_TEMPLATE, id_fields=_AIME_IDS,
    ),
    # AIME 2025 (I and II, 30 problems). Hub id an assumption: opencompass/AIME2025, configs
    # AIME2025-I and AIME2025-II (split test, fields question, answer). Local aime25.jsonl: that
    # layout, or problem/answer/id of yentinglin/aime_2025 and math-ai/aime25.
    BenchmarkSpec(
        "aime25", "olympiad", "math", "AIME 2025 (I and II), integer answers",
        HubSource("opencompass/AIME2025", "test", ("AIME2025-I", "AIME2025-II")),
        _MATH_QUESTION, _AIME_GOLD, MATH_TEMPLATE, id_fields=_AIME_IDS,
    ),
    BenchmarkSpec(
        "amc23", "olympiad", "math", "AMC 2023 (answers stored as floats, e.g. 27.0)",
        HubSource("math-ai/amc23", "test"),
        _MATH_QUESTION, (("answer", "number"),), MATH_TEMPLATE,
    ),
    BenchmarkSpec(
        "olympiadbench", "olympiad", "math", "OlympiadBench, open-ended English math (competition)",
        HubSource("Hothan/OlympiadBench", "train", ("OE_TO_maths_en_COMP",)),
        _MATH_QUESTION, (("final_answer", "list"),), MATH_TEMPLATE, context_field="context",
    ),
    BenchmarkSpec(
        "minerva_math", "math", "math", "Minerva Math (MIT OCW science problems)",
        HubSource("math-ai/minervamath", "test"),
        _MATH_QUESTION, (("answer", "latex"), ("solution", "boxed_solution")), MATH_TEMPLATE,
    ),
    BenchmarkSpec(
        "gsm8k", "math", "math", "GSM8K grade-school word problems (test)",
        HubSource("openai/gsm8k", "test", ("main",)),
        _MATH_QUESTION, (("answer", "gsm8k"),), MATH_TEMPLATE,
    ),
    BenchmarkSpec(
        "mmlu_stem", "commonsense", "choice", "MMLU, 18 STEM subjects (4 options)",
        HubSource("cais/mmlu", "test", ("all",), ("subject", MMLU_STEM_SUBJECTS)),
        ("question",), (("answer", "index"),), CHOICE_TEMPLATE,
        choices_fields=("choices",), choices_format="list",
    ),
    BenchmarkSpec(
        "mmlu_pro", "commonsense", "choice", "MMLU-Pro (up to 10 options)",
        HubSource("TIGER-Lab/MMLU-Pro", "test"),
        ("question",), (("answer_index", "index"), ("answer", "letter")), CHOICE_TEMPLATE,
        choices_fields=("options", "choices"), choices_format="list",
        id_fields=("question_id", "id"),
    ),
    # GPQA diamond (198 questions), gated on the hub (split train, config gpqa_diamond). Fields of
    # the hub rows and of a local gpqa_diamond.jsonl: Question, Correct Answer, Incorrect Answer
    # 1-3, Record ID. The four options are shuffled per row with a seed from the SHA-256 of the
    # question text, so the correct letter varies and is the same on every machine and run.
    BenchmarkSpec(
        "gpqa_diamond", "commonsense", "choice",
        "GPQA diamond (gated on the hub; options shuffled with a per-question fixed seed)",
        HubSource("Idavidrein/gpqa", "train", ("gpqa_diamond",), gated=True),
        ("Question", "question"), (("Correct Answer", "gpqa"),), CHOICE_TEMPLATE,
        choices_fields=("Correct Answer",), choices_format="gpqa", id_fields=("Record ID", "id"),
    ),
    BenchmarkSpec(
        "commonsense_qa", "commonsense", "choice", "CommonsenseQA (validation split, 5 options)",
        HubSource("tau/commonsense_qa", "validation"),
        ("question",), (("answerKey", "label"),), CHOICE_TEMPLATE,
        choices_fields=("choices",), choices_format="label_text", id_fields=("id",),
    ),
    BenchmarkSpec(
        "arc_challenge", "commonsense", "choice", "ARC-Challenge (test; some rows label 1-4)",
        HubSource("allenai/ai2_arc", "test", ("ARC-Challenge",)),
        ("question",), (("answerKey", "label"),), CHOICE_TEMPLATE,
        choices_fields=("choices",), choices_format="label_text", id_fields=("id",),
    ),
):
    register_benchmark(_spec)

SUITES: dict[str, tuple[str, ...]] = {
    "math": ("math500", "gsm8k", "minerva_math"),
    "olympiad": ("aime24", "aime25", "amc23", "olympiadbench"),
    "commonsense": ("commonsense_qa", "arc_challenge", "mmlu_stem", "mmlu_pro", "gpqa_diamond"),
    # The paper's seven: GSM8K, MATH-500, MMLU-STEM, GPQA diamond, AIME 2023, 2024 and 2025.
    "paper": ("gsm8k", "math500", "mmlu_stem", "gpqa_diamond", "aime23", "aime24", "aime25"),
}


@dataclass
class Benchmark:
    """A loaded benchmark: its spec, problems, where they came from, and (reasoning-gym) the
    dataset object whose ``score_answer`` scores completions."""

    spec: BenchmarkSpec
    problems: list[Problem]
    source: str
    scorer: Any = None
    config: dict[str, Any] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.spec.name


# --------------------------------------------------------------------------------------------
# Names and suites
# --------------------------------------------------------------------------------------------


def available_benchmarks() -> list[str]:
    """Registered benchmark names (reasoning-gym tasks are added as ``rg:<task>``)."""
    return sorted(REGISTRY)


def expand_benchmark_names(names: str | Sequence[str]) -> list[str]:
    """Comma-separated names and suite names (`split_benchmark_names`) -> unique benchmark names in
    order.

    ``"paper"`` expands to its seven benchmarks; ``rg:...`` names pass through after validation.
    Unknown names raise `UsageError` listing what exists."""
    if isinstance(names, str):
        names = split_benchmark_names(names)
    result: list[str] = []
    for raw in names:
        name = raw.strip()
        if not name:
            continue
        members = SUITES.get(name, (name,))
        for member in members:
            if member.startswith("rg:"):
                parse_reasoning_gym_name(member)
            elif member not in REGISTRY:
                raise UsageError(
                    f"unknown benchmark {member!r}; known: {', '.join(available_benchmarks())}; "
                    f"suites: {', '.join(SUITES)}; or rg:<reasoning-gym task>"
                )
            if member not in result:
                result.append(member)
    if not result:
        raise UsageError("no benchmark given (e.g. --benchmarks gsm8k,math500 or a suite name)")
    return result


def group_of(name: str) -> str:
    """The group (math / olympiad / commonsense / reasoning_gym) a benchmark belongs to."""
    if name.startswith("rg:"):
        return "reasoning_gym"
    return REGISTRY[name].group


# --------------------------------------------------------------------------------------------
# Row -> Problem
# --------------------------------------------------------------------------------------------


def _first_field(row: dict[str, Any], fields: Sequence[str]) -> tuple[str, Any] | None:
    for name in fields:
        if name in row and row[name] is not None and row[name] != "":
            return name, row[name]
    return None


def _choices_and_answer(spec: BenchmarkSpec, row: dict[str, Any]) -> tuple[list[str], int]:
    """Option texts and the 0-based index of the correct one."""
    if spec.choices_format == "gpqa":
        return _gpqa_options(spec, row)
    found = _first_field(row, spec.choices_fields)
    if found is None:
        raise ValueError(f"row has none of the choices fields {spec.choices_fields}")
    name, value = found
    labels: list[str] | None = None
    if spec.choices_format == "label_text":
        refusal = f"field {name!r} must be an object with 'label' and 'text' lists"
        if isinstance(value, str):
            value = python_literal(value, f"{refusal}, got {describe(value)}")
        if not isinstance(value, dict) or "label" not in value or "text" not in value:
            raise ValueError(refusal)
        labels = [label.strip() for label in checked_choices(value["label"], f"{name}.label")]
        options = checked_choices(value["text"], f"{name}.text")
        if len(labels) != len(options) or len(set(labels)) != len(labels):  # no label -> text pairing
            raise ValueError(f"field {name!r} needs one distinct label per text, got labels {labels} "
                             f"for {len(options)} texts")
    else:
        options = checked_choices(value, name)
    for gold_field, gold_format in spec.gold_fields:
        if gold_field not in row or row[gold_field] is None or row[gold_field] == "":
            continue
        raw = checked_answer(row[gold_field], gold_field)
        if gold_format == "index":
            found_index = gold_index(raw)  # 1 and 1.0, not 1.5
            if found_index is None:
                raise ValueError(f"gold index must be an integer (0-based), got {raw!r}")
            index = found_index
        elif gold_format == "letter":
            letter = str(raw).strip().upper()
            if len(letter) != 1 or letter not in OPTION_LETTERS:  # str.index would find "B" in "BC"
                raise ValueError(f"gold letter must be one letter A-Z, got {raw!r}")
            index = OPTION_LETTERS.index(letter)
        elif gold_format == "label":
            if labels is None:
                raise ValueError("gold format 'label' needs label_text choices")
            if str(raw).strip() not in labels:
                raise ValueError(f"gold label {raw!r} is not one of the labels {', '.join(labels)}")
            index = labels.index(str(raw).strip())
        else:
            raise ValueError(f"unknown choice gold format {gold_format!r}")
        if not 0 <= index < len(options):
            raise ValueError(f"answer index {index} out of range for {len(options)} options")
        return options, index
    raise ValueError(f"row has none of the answer fields {[f for f, _ in spec.gold_fields]}")


GPQA_FIELDS = ("Correct Answer", "Incorrect Answer 1", "Incorrect Answer 2", "Incorrect Answer 3")


def _gpqa_options(spec: BenchmarkSpec, row: dict[str, Any]) -> tuple[list[str], int]:
    """GPQA's four answers (`GPQA_FIELDS`, correct first) shuffled by ``random.Random(seed)``,
    seed = the first 8 bytes (big-endian) of the SHA-256 of the question text as stored; returns
    the options and the index of the correct one."""
    missing = [name for name in GPQA_FIELDS if name not in row]
    if missing:
        raise ValueError(f"row has no {', '.join(repr(name) for name in missing)}")
    texts = [checked_text(row[name], name).strip() for name in GPQA_FIELDS]
    question = str((_first_field(row, spec.question_fields) or ("", ""))[1])
    seed = int.from_bytes(hashlib.sha256(question.encode()).digest()[:8], "big")
    order = list(range(len(texts)))  # the permutation shuffle() applies to the texts themselves
    random.Random(seed).shuffle(order)
    return [texts[i] for i in order], order.index(0)


def problem_from_row(spec: BenchmarkSpec, row: dict[str, Any], index: int) -> Problem:
    """Build a `Problem` from one raw row (hub or local file). Raises ValueError on a bad row."""
    row = checked_object(row)
    found = _first_field(row, spec.question_fields)
    if found is None:
        raise ValueError(f"row has none of the question fields {spec.question_fields}")
    question = str(checked_question(found[1], found[0], messages=False)).strip()
    if spec.context_field and row.get(spec.context_field):
        context = checked_text(row[spec.context_field], spec.context_field)
        question = f"{context.strip()}\n\n{question}"
    id_found = _first_field(row, spec.id_fields)
    problem_id = str(id_found[1]) if id_found else str(index)
    if spec.answer_type == "choice":
        options, answer_index = _choices_and_answer(spec, row)
        prompt = render_template(spec.prompt_template, question, render_options(options))
        return _encodable(Problem(prompt, OPTION_LETTERS[answer_index], "choice", choices=options, entry=row,
                                  benchmark=spec.name, index=index, problem_id=problem_id, question=question))
    for gold_field, gold_format in spec.gold_fields:
        if gold_field in row and row[gold_field] is not None and row[gold_field] != "":
            raw = checked_answer(row[gold_field], gold_field)
            if isinstance(raw, list) and len(raw) == 1:
                raw = raw[0]  # one answer stored as a list (["... \\boxed{3}"], [70]): read in its field's format
            # a list (["1", "2"], as a redistribution stores it) is read as one: its repr "['1', '2']" was the gold
            gold = normalize_gold(raw, "list" if isinstance(raw, list) else gold_format)  # type: ignore[arg-type]
            break
    else:
        raise ValueError(f"row has none of the answer fields {[f for f, _ in spec.gold_fields]}")
    if not gold:
        raise ValueError("empty gold answer")
    prompt = render_template(spec.prompt_template, question)
    return _encodable(Problem(prompt, gold, spec.answer_type, entry=row, benchmark=spec.name, index=index,
                              problem_id=problem_id, question=question))


def _encodable(problem: Problem) -> Problem:
    """`problem`, or ValueError when its gold or id is no valid Unicode text: JSON's ``\\ud800``
    escapes a lone surrogate, which no UTF-8 file takes (``ict eval`` failed at the record's write,
    after generating, without naming the row). The question and options are checked as fields
    (`ict.data.rows.checked_question`, `checked_choices`)."""
    for what, text in (("gold answer", problem.answer), ("id", problem.problem_id)):
        if not encodes_as_utf8(text):
            raise ValueError(f"its {what} is no valid Unicode text (a lone surrogate such as \\ud800)")
    return problem


# --------------------------------------------------------------------------------------------
# Loading
# --------------------------------------------------------------------------------------------


def read_jsonl(path: Path) -> Rows:
    """Rows of a JSON-lines file (blank lines skipped); a bad line raises `UsageError` with its
    line number (`ict.data.rows.read_records`, the one JSON-lines reader)."""
    return read_records(path)


def _load_hub_rows(spec: BenchmarkSpec) -> tuple[list[dict[str, Any]], str]:
    assert spec.hub is not None
    hub = spec.hub
    try:
        from datasets import load_dataset
    except ImportError as error:  # pragma: no cover - datasets is a dependency
        raise UsageError("loading from the hub needs the `datasets` package") from error
    if not hub_reachable():
        go_offline()
    rows: list[dict[str, Any]] = []
    for config in hub.configs:
        try:
            dataset = load_dataset(hub.path, config, split=hub.split)
        except Exception as error:  # noqa: BLE001 - any failure: offline, gated, renamed
            gated = (f"; gated: accept its terms at https://huggingface.co/datasets/{hub.path} "
                     "and log in (hf auth login)" if hub.gated else "")
            raise UsageError(
                f"cannot load benchmark {spec.name!r} from the Hugging Face hub "
                f"({hub.path}{'/' + config if config else ''}, split {hub.split}): {first_line(error)[:200]}"
                f" -- offline? pass --data-dir DIR holding {spec.name}.jsonl{gated}"
            ) from None
        rows.extend(dict(row) for row in dataset)
    if hub.row_filter is not None:
        key, allowed = hub.row_filter
        rows = [row for row in rows if row.get(key) in allowed]
    label = f"hub:{hub.path}" + (f"/{','.join(c for c in hub.configs if c)}" if hub.configs[0] else "")
    return rows, f"{label}:{hub.split}"


def _kept_by_filter(rows: Rows, row_filter: tuple[str, tuple[str | int, ...]] | None) -> Rows:
    """The local rows ``row_filter`` (the hub source's ``(field, allowed values)``) keeps, each
    with its line: a file in the hub's layout (e.g. every AIME year, or every MMLU subject) loads
    the benchmark's rows alone; a row without the field (another redistribution's layout) is kept."""
    if row_filter is None:
        return rows
    key, allowed = row_filter
    kept = [index for index, row in enumerate(rows) if key not in row or row[key] in allowed]
    numbers = None if rows.numbers is None else [rows.numbers[index] for index in kept]
    return Rows([rows[index] for index in kept], rows.source, numbers, rows.unit)


def load_reasoning_gym(name: str, answer_extraction: str = "tag") -> Benchmark:
    """Generate a reasoning-gym evaluation set (see `parse_reasoning_gym_name`); the prompt
    template follows the answer extraction (`ict.core.problems.REASONING_GYM_TEMPLATES`)."""
    import reasoning_gym

    task, config, size, seed = parse_reasoning_gym_name(name)
    try:
        dataset = reasoning_gym.create_dataset(task, size=size, seed=seed, **config)
    except (TypeError, ValueError, AssertionError) as error:
        raise UsageError(f"cannot create reasoning-gym task {name!r}: {error}") from None
    spec = BenchmarkSpec(name, "reasoning_gym", "reasoning_gym", f"reasoning-gym {task}", None,
                         ("question",), (("answer", "latex"),),
                         REASONING_GYM_TEMPLATES[answer_extraction])
    problems = []
    for index in range(size):
        entry = dataset[index]
        question = str(entry["question"]).strip()
        problems.append(Problem(render_template(spec.prompt_template, question), str(entry["answer"]),
                                "reasoning_gym", scorer=dataset, entry=entry, benchmark=name,
                                index=index, problem_id=str(index), question=question))
    return Benchmark(spec, problems, f"reasoning_gym:{task}:seed={seed}", scorer=dataset,
                     config={"task": task, "size": size, "seed": seed, **config})


def load_benchmark(
    name: str, data_dir: str | Path | None = None, limit: int | None = None,
    answer_extraction: str = "tag",
) -> Benchmark:
    """Load one benchmark.

    data_dir: directory with ``<name>.jsonl`` (a missing file is a `UsageError`); ``None`` loads
    from the hub (offline, this fails with one `UsageError` line that says to pass --data-dir).
    limit: keep the first ``limit`` problems (in file order).
    Reasoning-gym names (``rg:...``) are generated and ignore ``data_dir``; their prompt follows
    ``answer_extraction`` (``tag`` or ``last_number``, see `ict.answers.grading`)."""
    if limit is not None and limit < 1:
        raise UsageError(f"--limit must be >= 1, got {limit}")
    if name.startswith("rg:"):
        benchmark = load_reasoning_gym(name, answer_extraction)
    else:
        if name not in REGISTRY:
            expand_benchmark_names([name])  # raises the informative error
        spec = REGISTRY[name]
        if data_dir is not None:
            directory = Path(data_dir).expanduser()
            if directory.exists() and not directory.is_dir():  # "<file>/gsm8k.jsonl not found" hid why
                raise UsageError(f"--data-dir {directory} is not a directory (expected the directory of "
                                 "<name>.jsonl files)")
            path = directory / f"{name}.jsonl"
            if path.is_dir():  # "not found" sent the user looking for a file that is there
                raise UsageError(f"benchmark file {path} is a directory, not a file (expected <name>.jsonl "
                                 "in --data-dir)")
            if not path.exists():
                raise UsageError(f"benchmark file not found: {path} (expected <name>.jsonl in "
                                 f"--data-dir)")
            # a pipe or a device (not "not found": it is there), read more than once or without end
            check_input_file("benchmark file", path, "give a regular <name>.jsonl file in --data-dir")
            rows, source = read_jsonl(path), str(path)
            if spec.hub is not None:  # a file in the hub source's layout holds its other rows too
                rows = _kept_by_filter(rows, spec.hub.row_filter)
        else:
            if spec.hub is None:
                raise UsageError(f"benchmark {name!r} has no hub source; pass --data-dir")
            rows, source = _load_hub_rows(spec)
            rows = Rows(rows, source)
        problems = []
        for index, row in enumerate(rows):
            try:
                problems.append(problem_from_row(spec, row, index))
            except (ValueError, KeyError, TypeError, SyntaxError) as error:
                raise UsageError(f"{rows.where(index)} of {name}: {error}") from None
        if not problems:
            raise UsageError(f"{source}: benchmark {name!r} has no rows")
        benchmark = Benchmark(spec, problems, source)
    if limit is not None:
        benchmark.problems = benchmark.problems[:limit]
    return benchmark


def load_benchmarks(
    names: str | Sequence[str], data_dir: str | Path | None = None, limit: int | None = None,
    answer_extraction: str = "tag",
) -> list[Benchmark]:
    """`load_benchmark` for each name after suite expansion (`expand_benchmark_names`), with the
    same `data_dir`, `limit` and `answer_extraction`."""
    return [load_benchmark(name, data_dir, limit, answer_extraction)
            for name in expand_benchmark_names(names)]


# The reasoning-gym set constants, moved to `ict.data.benchmark_names` on 2026-12-01, still read from here
# (with a DeprecationWarning) until ict 0.3.0, as the module paths of `ict.MOVED_MODULES` are.
_MOVED_TO_BENCHMARK_NAMES = frozenset({"REASONING_GYM_EVAL_SEED", "REASONING_GYM_DEFAULT_SIZE"})


def __getattr__(name: str) -> Any:
    """``ict.data.benchmarks.NAME`` for a name of `_MOVED_TO_BENCHMARK_NAMES`: the object at its new
    home, with a DeprecationWarning (``from ict.data.benchmarks import REASONING_GYM_EVAL_SEED`` was
    an ImportError after the move)."""
    if name not in _MOVED_TO_BENCHMARK_NAMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import warnings

    from ict.data import benchmark_names

    warnings.warn(f"ict.data.benchmarks.{name} moved to ict.data.benchmark_names.{name}; the old path is "
                  "removed in ict 0.3.0", DeprecationWarning, stacklevel=2)
    return getattr(benchmark_names, name)
