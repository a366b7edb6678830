"""Integrations of ict's token selectors into other RL trainers.

- :mod:`ict.integrations.trl`: a ``trl.GRPOTrainer`` subclass (``pip install 'ict[trl]'``).
- :mod:`ict.integrations.verl`: a verl 0.9 policy loss ``"ict"`` (verl in its own environment).

Each integration imports its engine lazily, so ``import ict`` never needs TRL or verl.
"""

from typing import Any

from ict.core.selectors import (
    check_options,
    parse_selector_options,
    ranking_population,
    resolve_options,
)


def parse_token_selector(spec: str, with_preset: bool = False) -> Any:
    """``"name:key=value,key=value"`` -> ``(name, options)``, the selector's fully resolved options:
    the registry's defaults < the preset named by a ``preset=NAME`` item < the given options.

    ``"ict:reference=group_mean,ratio=0.1"`` -> ``("ict", {"ratio": 0.1, "reference": "group_mean",
    ...})``. Values are parsed by the registry's one strict parser
    (:func:`ict.core.selectors.parse_selector_options`: ``flase`` is an error, not False) and
    checked on a dummy batch (`check_options`), so a bad spec fails in one line (ValueError) before
    a model is loaded; a spec that is not a string is refused the same way. ``with_preset=True``
    returns ``(name, options, preset)`` (preset or None).
    """
    if not isinstance(spec, str):  # hydra and Python configs hand null, numbers or lists through as typed
        raise ValueError(f"token_selector must be a string 'name:key=value,...' (e.g. 'ict:ratio=0.1'), got {spec!r}")
    name, _, raw = spec.partition(":")
    name = name.strip()
    given: dict[str, str] = {}
    for item in filter(None, (part.strip() for part in raw.split(","))):
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep:
            raise ValueError(f"token_selector option {item!r} must be key=value (e.g. ratio=0.1)")
        if key in given:
            raise ValueError(f"token_selector option {key!r} is given twice in {spec!r}")
        given[key] = value.strip()
    preset = given.pop("preset", None)
    options = resolve_options(name, parse_selector_options(name, given), preset)
    check_options(name, options)
    return (name, options, preset) if with_preset else (name, options)


def ranks_within_groups(name: str, options: dict[str, Any]) -> bool:
    """Whether selector ``name`` ranks the G completions of each prompt together: a ``group``
    ranking population, or ``scope=group`` of a selector whose population is wider (``random``
    declares ``batch``), which ranks each fragment of a group as a group when a micro- or
    mini-batch holds only part of it."""
    return ranking_population(name, options) == "group" or options.get("scope") == "group"
