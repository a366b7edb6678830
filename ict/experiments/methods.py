"""The methods of an `ict compare`: ``--methods`` parsed into :class:`MethodSpec` (a training
method, its options and the run label they make) and each spec's training overrides."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from ict.core.errors import UsageError
from ict.training.config import METHOD_ALIASES, TrainConfig


@dataclass
class MethodSpec:
    """One compared method: ``name`` (a TrainConfig method), its options, and a label."""

    name: str
    options: dict[str, str] = field(default_factory=dict)

    @property
    def label(self) -> str:
        if not self.options:
            return self.name
        parts = [f"{key}={value}" for key, value in self.options.items()]
        return re.sub(r"[^A-Za-z0-9_.=-]", "_", self.name + "-" + "-".join(parts))


def parse_methods(text: str) -> list[MethodSpec]:
    """``"grpo,ict:reference=seq_mean,ratio=0.2,random"`` -> specs. A ``key=value`` item after a
    ``method:`` item belongs to that method."""
    specs: list[MethodSpec] = []
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        if ":" in item:
            name, first = item.split(":", 1)
            specs.append(MethodSpec(name.strip(), {}))
            item = first
        elif "=" not in item:
            specs.append(MethodSpec(item, {}))
            continue
        if "=" not in item or not specs:
            raise UsageError(f"bad method option {item!r}; use method:key=value,key=value")
        key, value = item.split("=", 1)
        specs[-1].options[key.strip()] = value.strip()
    if not specs:  # it said "needs distinct methods, got ''"
        raise UsageError("--methods needs at least one method (e.g. --methods grpo,ict)")
    labels = [spec.label for spec in specs]
    if len(set(labels)) != len(labels):
        raise UsageError(f"--methods needs distinct methods, got {text!r}")
    return specs


def method_overrides(spec: MethodSpec, plugin: str | None = None) -> dict[str, str]:
    """TrainConfig ``key=value`` overrides of one method spec: ``preset`` -> the registry preset,
    an option of the method's selector -> ``selector.<key>``, anything else (e.g.
    ``aggregation``) -> the training option of that name (checked when the config is built).
    ``plugin`` (the runs' ``plugin`` option) is imported first: its selectors' options too."""
    from ict.core.selectors import SELECTORS

    if plugin:
        TrainConfig(plugin=plugin).load_plugins()
    selector = SELECTORS.get(METHOD_ALIASES.get(spec.name, spec.name))
    selector_keys = set(selector.defaults) if selector is not None else set()
    overrides = {"method": spec.name}
    for key, value in spec.options.items():
        overrides[f"selector.{key}" if key in selector_keys else key] = value
    return overrides
