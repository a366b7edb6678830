"""Integrations of ict's token selectors into other RL trainers.

- :mod:`ict.integrations.trl`: a ``trl.GRPOTrainer`` subclass (``pip install 'ict[trl]'``).
- :mod:`ict.integrations.verl`: a verl 0.9 policy loss ``"ict"`` (verl in its own environment).

Each integration imports its engine lazily, so ``import ict`` never needs TRL or verl.
"""

from typing import Any

from ict.core.selectors import check_options, resolve_options


def parse_token_selector(spec: str) -> tuple[str, dict[str, Any]]:
    """``"name:key=value,key=value"`` -> ``(name, options)``; values take the type of the default.

    ``"ict:reference=group_mean,ratio=0.1"`` -> ``("ict", {"reference": "group_mean", "ratio": 0.1})``.
    The option values are checked on a dummy batch (`check_options`), so a bad value fails
    before a model is loaded.
    """
    name, _, raw = spec.partition(":")
    name = name.strip()
    defaults = resolve_options(name)  # raises for an unknown selector
    options: dict[str, Any] = {}
    for item in filter(None, (part.strip() for part in raw.split(","))):
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep:
            raise ValueError(f"token_selector option {item!r} must be key=value (e.g. ratio=0.1)")
        if key not in defaults:
            accepted = ", ".join(defaults) or "none"
            raise ValueError(f"selector {name!r} has no option {key!r} (accepted: {accepted})")
        options[key] = _coerce(value.strip(), defaults[key])
    check_options(name, options)
    return name, options


def _coerce(value: str, default: Any) -> Any:
    if value.lower() in ("none", "null"):
        return None
    if isinstance(default, bool):
        return value.lower() in ("1", "true", "yes")
    if isinstance(default, (int, float)) or default is None:
        for kind in (int, float) if not isinstance(default, float) else (float,):
            try:
                return kind(value)
            except ValueError:
                pass
    return value
