"""Training problems: reasoning-gym tasks, local JSONL/JSON/Parquet files, Hugging Face datasets.

Every source yields `Problem`s: the prompt (text or chat messages), the gold answer, optional
multiple-choice options, and the `kind` that picks the default reward (`reasoning_gym`, `math`,
`choice`). Reasoning-gym problems keep their dataset entry so its own scorer can judge them.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ict.core.errors import PROBLEM_BYTES, UsageError, check_fits_in_memory, first_line
from ict.core.problems import OPTION_LETTERS, Problem, choice_prompt
from ict.data.hub import go_offline, hub_reachable
from ict.data.rows import (
    checked_answer,
    checked_choices,
    checked_object,
    checked_question,
    gold_index,
    read_records,
    row_location,
)

FILE_SUFFIXES = (".jsonl", ".json", ".parquet")
EVAL_SEED_OFFSET = 1_000_003
HELD_OUT_DRAWS = 4
"""reasoning-gym: a held-out set of n distinct questions is the first n distinct of 4n draws"""


def is_dataset_file(dataset: str) -> bool:
    """Whether `load_training_data` reads ``dataset`` as a local file: a .jsonl/.json/.parquet name,
    or a path that exists (else it is a reasoning-gym task or a hub id), but for a reasoning-gym
    task's name: a directory or file ``countdown`` in the working directory (no data file: none
    without a suffix is read) left no way to name the task."""
    if dataset.lower().endswith(FILE_SUFFIXES):
        return True
    return os.path.exists(dataset) and not is_reasoning_gym_task(dataset)


def is_reasoning_gym_task(name: str) -> bool:
    from reasoning_gym.factory import DATASETS

    return name in DATASETS


def questions_digest(problems: Sequence[Problem]) -> str:
    """SHA-256 (hex, 16 digits) of the problems' prompts in order: a resumed run checks that its
    data gave the same questions (some reasoning-gym tasks draw other questions for the same seed
    in another process, e.g. with another ``PYTHONHASHSEED``; a file may be edited, a hub dataset
    get a new revision)."""
    text = json.dumps([problem.prompt for problem in problems], ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def reasoning_gym_problems(name: str, size: int, seed: int, options: dict[str, Any] | None = None,
                           prompt_suffix: str = "") -> list[Problem]:
    """`size` problems of reasoning-gym task `name` generated with `seed` and task `options`."""
    check_fits_in_memory(size, f"problems of reasoning-gym task {name!r}", "lower dataset_size (or eval_size)",
                         PROBLEM_BYTES)
    import reasoning_gym

    try:
        dataset = reasoning_gym.create_dataset(name, size=size, seed=seed, **(options or {}))
    except (TypeError, ValueError, AssertionError) as error:
        raise UsageError(f"bad reasoning-gym task {name!r} or options {options}: {error}") from None
    return [Problem(prompt=entry["question"] + prompt_suffix, answer=str(entry["answer"]),
                    kind="reasoning_gym", scorer=dataset, entry=entry) for entry in dataset]


def _get_field(record: dict[str, Any], path: str) -> Any:
    """`record[path]`, where a dotted path walks nested mappings (`reward_model.ground_truth`)."""
    value: Any = record
    for part in path.split("."):
        if not isinstance(value, dict) or part not in value:
            raise UsageError(f"field {path!r} not found in record with keys {sorted(record)}")
        value = value[part]
    return value


def _choice_gold(raw: Any, num_choices: int) -> str:
    text = str(raw).strip()
    index = gold_index(raw)  # 1 and 1.0, not 1.5 or '²'
    if index is not None and 0 <= index < num_choices:
        return OPTION_LETTERS[index]
    if len(text) == 1 and text.upper() in OPTION_LETTERS[:num_choices]:
        return text.upper()
    raise UsageError(f"multiple-choice answer {raw!r} is neither an index nor an option letter")


def records_to_problems(records: Sequence[dict[str, Any]], question_field: str,
                        answer_field: str, choices_field: str | None = None,
                        prompt_suffix: str = "", skipped: list[str] | None = None) -> list[Problem]:
    """Map raw records (file rows / hub rows) to problems with the given field names.

    A question that is a list of chat messages is used as the conversation; a choices field may
    hold a list or its Python-literal string (as in MMLU copies). Field values are checked by
    `ict.data.rows` (null, booleans, objects, malformed messages are refused). Math golds are
    normalised with `ict.answers.gold.normalize_gold` (`#### 42` -> `42`, `['$2$']` -> `2`). A row
    that cannot be used raises a `UsageError` naming its file, line and row (`Rows.where`), unless
    `skipped` is a list: then the row is left out and its reason appended there."""
    problems = []
    for index, record in enumerate(records):
        try:
            problems.append(_record_to_problem(record, question_field, answer_field, choices_field,
                                               prompt_suffix))
        except (UsageError, ValueError) as error:
            where = row_location(records, index)
            if skipped is None:
                raise UsageError(f"{where}: {error}") from None
            skipped.append(f"{where}: {error}")
    return problems


def _record_to_problem(record: Any, question_field: str, answer_field: str,
                       choices_field: str | None, prompt_suffix: str) -> Problem:
    """One problem from one record; a bad value raises `ValueError` or `UsageError`."""
    from ict.answers.gold import normalize_gold

    record = checked_object(record)
    try:
        question = _get_field(record, question_field)
        raw_answer = _get_field(record, answer_field)
    except UsageError as error:
        raise UsageError(f"{error}; set --question-field/--answer-field") from None
    question = checked_question(question, question_field, messages=not choices_field)
    raw_answer = checked_answer(raw_answer, answer_field)
    if choices_field:
        choices = checked_choices(_get_field(record, choices_field), choices_field)
        prompt = choice_prompt(question, choices) + prompt_suffix
        return Problem(prompt=prompt, answer=_choice_gold(raw_answer, len(choices)), kind="choice",
                       choices=choices, entry=record)
    if isinstance(question, list):
        prompt: str | list[dict[str, str]] = question
        if prompt_suffix:
            prompt[-1]["content"] = prompt[-1]["content"] + prompt_suffix
    else:
        prompt = question + prompt_suffix
    try:
        gold = normalize_gold(raw_answer)
    except ValueError as error:
        raise UsageError(f"cannot read gold answer {raw_answer!r:.80}: {error}") from None
    if not gold.strip():
        raise UsageError(f"gold answer {raw_answer!r:.80} is empty once normalised")
    return Problem(prompt=prompt, answer=gold, kind="math", entry=record)


def hub_records(dataset_id: str, subset: str | None, split: str) -> list[dict[str, Any]]:
    """Rows of a Hugging Face hub dataset; a load that fails (offline, or a split or subset the
    dataset lacks) is a one-line UsageError with the first line of datasets' reason, asking for a
    local path."""
    import datasets

    offline = not hub_reachable()
    if offline:  # a copy already in the datasets cache still works; nothing else is tried
        go_offline()
    try:
        dataset = datasets.load_dataset(dataset_id, subset, split=split)
    except Exception as error:  # network errors come as many types (requests, hub, OSError)
        # the reason: "(offline or not found)" alone sent a user online, with a split the dataset lacks, to a file
        raise UsageError(f"cannot load hub dataset {dataset_id!r} ({f'subset {subset}, ' if subset else ''}split "
                         f"{split}): {first_line(error)[:200]} -- offline or not found? pass a local "
                         ".jsonl/.json/.parquet file instead, with --question-field/--answer-field") from None
    return [dict(row) for row in dataset]


def question_key(problem: Problem) -> str:
    """What makes two problems the same question: the prompt's text (chat messages as JSON)."""
    return problem.prompt if isinstance(problem.prompt, str) else json.dumps(problem.prompt, sort_keys=True)


def distinct_questions(problems: Sequence[Problem], count: int) -> list[Problem]:
    """The first `count` problems of distinct questions (`question_key`), in order."""
    seen: set[str] = set()
    kept = []
    for problem in problems:
        key = question_key(problem)
        if key not in seen and len(kept) < count:
            seen.add(key)
            kept.append(problem)
    return kept


def without_questions(problems: Sequence[Problem], held_out: Sequence[Problem]) -> list[Problem]:
    """`problems` less every one whose question is held out (a small task, e.g. chain_sum's 200
    sums of two digits, repeats each question many times in 10,000 draws)."""
    held = {question_key(problem) for problem in held_out}
    return [problem for problem in problems if question_key(problem) not in held]


@dataclass
class TrainingData:
    """Training problems, held-out evaluation problems and a short description of the source."""

    train: list[Problem]
    eval: list[Problem]
    description: str


def load_training_data(dataset: str, *, dataset_config: dict[str, Any] | None = None,
                       dataset_subset: str | None = None, dataset_split: str = "train",
                       dataset_size: int = 10000, question_field: str = "question",
                       answer_field: str = "answer", choices_field: str | None = None,
                       prompt_suffix: str = "", eval_size: int = 0,
                       seed: int = 0, skip_bad_rows: bool = False,
                       held_out_sets: Sequence[str] = (), held_out_rule: str = "distinct") -> TrainingData:
    """Load training problems and `eval_size` held-out ones, of distinct questions that no
    training problem asks (`without_questions`: training drops every repeat of a held-out one).

    reasoning-gym: the held-out questions are the first `eval_size` distinct ones generated with
    another seed (`seed + 1000003`; `HELD_OUT_DRAWS` x `eval_size` draws, fewer when the task has
    fewer); files and hub datasets: the last `eval_size` distinct questions after a seeded
    shuffle (a file without repeated questions: its last `eval_size` rows). A row that cannot be
    used is refused (`UsageError`), or with `skip_bad_rows` left out and counted in the
    description. `held_out_sets`: reasoning-gym evaluation sets (``rg:`` names, as `ict eval`
    generates them) whose questions a reasoning-gym training task leaves out too.
    ``held_out_rule="draws"``: the rule before 2026-11-28, for runs started then: reasoning-gym's
    first `eval_size` draws of the evaluation seed, a file's last `eval_size` shuffled rows, with
    no question left out of training."""
    if held_out_rule not in ("distinct", "draws"):
        raise UsageError(f"held_out_rule must be distinct or draws, got {held_out_rule!r}")
    skipped: list[str] | None = [] if skip_bad_rows else None
    is_file = is_dataset_file(dataset)
    if held_out_sets and (is_file or not is_reasoning_gym_task(dataset)):
        raise UsageError("held_out_sets (reasoning-gym evaluation sets) needs a reasoning-gym training task, "
                         f"not {dataset!r}")
    if is_file:
        records = read_records(dataset, skipped)
        problems = records_to_problems(records, question_field, answer_field, choices_field,
                                       prompt_suffix, skipped)
        description = f"file {dataset}"
    elif is_reasoning_gym_task(dataset):
        generated = reasoning_gym_problems(dataset, dataset_size, seed, dataset_config, prompt_suffix)
        drawn = without_evaluation_sets(generated, held_out_sets)
        description = f"reasoning-gym {dataset} {dataset_config or {}}"
        if len(drawn) < len(generated):
            description += (f" ({len(generated) - len(drawn)} of {len(generated)} problems left out of "
                            f"training: they ask a question of {', '.join(held_out_sets)})")
        if held_out_rule == "draws":
            return TrainingData(drawn, reasoning_gym_problems(dataset, eval_size, seed + EVAL_SEED_OFFSET,
                                                              dataset_config, prompt_suffix) if eval_size else [],
                                description)
        held_out = distinct_questions(reasoning_gym_problems(
            dataset, HELD_OUT_DRAWS * eval_size, seed + EVAL_SEED_OFFSET, dataset_config, prompt_suffix),
            eval_size) if eval_size else []
        return _split_off(drawn, held_out, description, eval_size)
    elif "/" in dataset:
        records = hub_records(dataset, dataset_subset, dataset_split)
        problems = records_to_problems(records, question_field, answer_field, choices_field,
                                       prompt_suffix, skipped)
        description = f"hub {dataset}:{dataset_subset or ''}:{dataset_split}"
    else:
        raise UsageError(f"dataset {dataset!r} is neither a reasoning-gym task, a file, nor a hub "
                         "id (org/name)")
    if skipped:
        description += f" ({len(skipped)} unusable rows skipped; first: {skipped[0]})"
    if not problems:
        raise UsageError(f"dataset {dataset!r} has no usable rows")
    order = list(range(len(problems)))
    random.Random(seed).shuffle(order)
    shuffled = [problems[index] for index in order]
    if held_out_rule == "draws":
        eval_count = min(eval_size, len(problems) - 1)
        cut = len(shuffled) - eval_count
        return TrainingData(shuffled[:cut], shuffled[cut:], description)
    questions = len({question_key(problem) for problem in problems})
    eval_count = min(eval_size, questions - 1)  # at least one question left to train on
    held_out = distinct_questions(shuffled[::-1], eval_count)[::-1] if eval_count > 0 else []
    return _split_off(shuffled, held_out, description, eval_size)


def without_evaluation_sets(drawn: list[Problem], names: Sequence[str]) -> list[Problem]:
    """Reasoning-gym problems `drawn` less those whose question (the task's text) one of the
    evaluation sets `names` asks (``rg:`` names, generated as `ict eval` generates them); a
    one-line UsageError when none is left."""
    from ict.data.benchmarks import load_reasoning_gym

    if not names:
        return drawn
    for name in names:
        if not name.startswith("rg:"):
            raise UsageError(f"held_out_sets takes reasoning-gym evaluation sets (rg:TASK:...), got {name!r}")
    asked = {problem.question for name in names for problem in load_reasoning_gym(name).problems}
    kept = [problem for problem in drawn if str(problem.entry["question"]).strip() not in asked]
    if not kept:
        raise UsageError(f"every training problem asks a question of the held-out sets {', '.join(names)}")
    return kept


def _split_off(drawn: list[Problem], held_out: list[Problem], description: str, eval_size: int) -> TrainingData:
    """`TrainingData` of `drawn` less the held-out questions; the description counts the drop, and
    says so when fewer than `eval_size` distinct questions could be held out."""
    if len(held_out) < eval_size:
        description += (f" (only {len(held_out)} of eval_size {eval_size} held out: the data has too few "
                        "distinct questions)")
    train = without_questions(drawn, held_out)
    if not train:
        raise UsageError(f"every training problem asks a held-out question ({len(held_out)} held out): "
                         "lower eval_size, or widen the task")
    if len(train) < len(drawn):
        description += (f" ({len(drawn) - len(train)} of {len(drawn)} problems left out of training: "
                        f"they ask one of the {len(held_out)} held-out questions)")
    return TrainingData(train, held_out, description)


class PromptSampler:
    """Endless stream of training-problem batches: a seeded shuffle per epoch.

    The stream is a pure function of (seed, batch index), so resuming at step n only needs n."""

    def __init__(self, problems: Sequence[Problem], batch_size: int, seed: int) -> None:
        if not problems:
            raise UsageError("no training problems")
        self.problems = list(problems)
        self.batch_size = batch_size
        self.seed = seed
        self._orders: dict[int, list[int]] = {}

    def _order(self, epoch: int) -> list[int]:
        if epoch not in self._orders:
            order = list(range(len(self.problems)))
            random.Random(self.seed * 1_000_003 + epoch).shuffle(order)
            self._orders = {epoch: order}
        return self._orders[epoch]

    def batch(self, index: int) -> list[Problem]:
        """The `index`-th batch (0-based)."""
        count = len(self.problems)
        start = index * self.batch_size
        items = []
        for position in range(start, start + self.batch_size):
            epoch, offset = divmod(position, count)
            items.append(self.problems[self._order(epoch)[offset]])
        return items
