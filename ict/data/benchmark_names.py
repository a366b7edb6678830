"""Benchmark names as given: a comma-separated list split into names, and an ``rg:`` name parsed
into its reasoning-gym task, options, size and seed.

Reasoning-gym tasks are named ``rg:<task>`` with optional ``:key=value`` parts, e.g.
``rg:chain_sum:max_terms=2:max_digits=1:size=100``. They are generated with seed
`REASONING_GYM_EVAL_SEED` (1_000_003), unless a ``seed=`` part says otherwise. Problem ``i`` of a
set of seed ``s`` is reasoning-gym's draw ``s + i``: `ict train`'s draws (``seed`` ..
``seed + dataset_size - 1``) are other draws while ``seed + dataset_size <= 1_000_003``.
"""

from __future__ import annotations

from typing import Any

from ict.core.errors import PROBLEM_BYTES, UsageError, check_fits_in_memory, is_integer
from ict.data.rows import python_literal

REASONING_GYM_EVAL_SEED = 1_000_003
"""Seed of generated reasoning-gym evaluation sets (draws 1_000_003 + i; training draws seed + i)."""
REASONING_GYM_DEFAULT_SIZE = 200


def split_benchmark_names(text: str) -> list[str]:
    """``"gsm8k, rg:t:ops=['+','-']"`` -> ``["gsm8k", "rg:t:ops=['+','-']"]``: the names of a
    comma-separated list, stripped, blanks left out. A comma inside brackets, parentheses, braces
    or quotes belongs to an ``rg:`` option's value (a Python literal, `parse_reasoning_gym_name`);
    a quote or an opening bracket left open is a `UsageError` (it took every later name into the
    value: ``rg:basic_arithmetic:format_style="simple,gsm8k`` evaluated no gsm8k). In quotes a backslash
    escapes the next character, as in Python (``['O\\'Brien']`` is closed)."""
    names, start, depth, quote, escaped = [], 0, 0, "", False
    for position, char in enumerate(text):
        if escaped:  # the character after a backslash in quotes: \' in 'O\'Brien' closes nothing
            escaped = False
        elif quote:
            escaped, quote = char == "\\", "" if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char in "([{":
            depth += 1
        elif char in ")]}":
            depth = max(depth - 1, 0)
        elif char == "," and depth == 0:
            names.append(text[start:position])
            start = position + 1
    if quote or depth:
        left_open = f"a {quote} quote" if quote else "an opening bracket ((, [ or {)"
        raise UsageError(f"{left_open} is not closed in the benchmark list {text!r}: close it (an rg: option's "
                         "text goes in matching quotes)")
    names.append(text[start:])
    return [name.strip() for name in names if name.strip()]


def parse_reasoning_gym_name(name: str) -> tuple[str, dict[str, Any], int, int]:
    """``rg:<task>[:key=value]...`` -> (task, config, size, seed).

    ``size`` (default `REASONING_GYM_DEFAULT_SIZE`) and ``seed`` (default
    `REASONING_GYM_EVAL_SEED`, at least 0) are taken out of the config; values are Python literals when they
    parse as such (``3``, ``0.5``, ``True``, ``[1,2]``), else strings; ``size`` and ``seed`` are
    integers, written as the command line's number options may be (``size=1e3`` is 1000)."""
    parts = name.split(":")
    if len(parts) < 2 or parts[0] != "rg" or not parts[1]:
        raise UsageError(f"bad reasoning-gym benchmark {name!r}; use rg:<task>[:key=value]...")
    task = parts[1]
    try:
        import reasoning_gym
        from reasoning_gym.factory import DATASETS
    except ImportError as error:  # pragma: no cover - dependency
        raise UsageError("reasoning-gym tasks need the `reasoning-gym` package") from error
    del reasoning_gym
    if task not in DATASETS:
        raise UsageError(f"unknown reasoning-gym task {task!r} (e.g. chain_sum, basic_arithmetic, "
                         f"products, gcd; {len(DATASETS)} tasks in all)")
    config: dict[str, Any] = {}
    for part in parts[2:]:
        if "=" not in part:
            raise UsageError(f"bad reasoning-gym option {part!r} in {name!r}; use key=value")
        key, value = part.split("=", 1)
        if key.strip() in config:  # the last one was taken: another set than the name shows
            raise UsageError(f"reasoning-gym option {key.strip()!r} is given twice in {name!r}")
        try:  # a Python literal (size=10, digits=[1, 2]), else the text itself
            config[key.strip()] = python_literal(value, "")
        except ValueError:
            config[key.strip()] = value.strip()
    size, seed = config.pop("size", REASONING_GYM_DEFAULT_SIZE), config.pop("seed", REASONING_GYM_EVAL_SEED)
    # 1e3 (a float) is 1000, as the number options of the command line and a config file read it
    size, seed = (int(value) if isinstance(value, float) and value.is_integer() else value for value in (size, seed))
    for option, value in (("size", size), ("seed", seed)):
        if not is_integer(value):
            raise UsageError(f"reasoning-gym {option} must be an integer in {name!r}, got {value!r}")
    if size < 1:
        raise UsageError(f"reasoning-gym size must be >= 1 in {name!r}")
    check_fits_in_memory(size, f"problems of {name!r}", "lower size", PROBLEM_BYTES)  # all generated before the first is asked
    if seed < 0:  # random.Random(-s) is Random(s): problems i and 2s - i (draws -s + i, s - i) were one question
        raise UsageError(f"reasoning-gym seed must be >= 0 in {name!r}, got {seed} (Python's random takes a seed -s "
                         "as s: a negative seed asks questions twice)")
    return task, config, size, seed
