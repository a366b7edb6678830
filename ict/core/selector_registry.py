"""The selector registry: how a selector is declared, its options resolved and checked, and run.

A selector is a named function ``fn(inputs: SelectionInputs, **options)`` returning a boolean
``[B, T]`` mask, a subset of the response mask, of the tokens the policy-gradient loss updates (or
a :class:`Selection` that also carries a per-token KL penalty). :data:`SELECTORS` is the one place
that declares each selector's options, defaults, presets and ranking population; register your
own with :func:`register_selector` (e.g. in a module loaded by :func:`load_plugin`). The built-in
selectors (GRPO's ``all``, ICT and the baselines) are :mod:`ict.core.selectors`, which re-exports
these names; they are registered whenever a selector is looked up.
"""

from __future__ import annotations

import inspect
import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import torch
from torch import Tensor

from ict.core.errors import UsageError, check_input_file, is_finite_number
from ict.core.ranking import SCOPES, Selection
from ict.core.stats import TokenStatistics, check_token_shapes, score_key

BUILT_IN_MODULE = "ict.core.selectors"
"""The module whose selectors are built in (see :attr:`Selector.built_in`)."""

POPULATIONS = ("token", *SCOPES)
METHOD_ALIASES = {"grpo": "all"}
"""Method names that are not selector names (the only alias: the field calls GRPO "grpo")."""
_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_-]*")  # a --method, an ict compare item, a run directory's name


@dataclass
class SelectionInputs:
    """Everything a selector may look at, each ``[B, T]`` unless stated.

    ``advantages`` is ``[B]`` or ``[B, T]``; ``group_ids`` ``[B]`` labels the rows that share a
    prompt (needed by ``scope="group"``); ``old_log_probs`` are the rollout policy's log-probs
    (``None``: equal to the current ones, ratio 1) and ``clip_range`` the loss's
    ``(clip_low, clip_high)``, used by Clip-Cov to skip tokens the ratio clip already clips.
    """

    stats: TokenStatistics
    response_mask: Tensor
    advantages: Tensor | None = None
    token_ids: Tensor | None = None
    generator: torch.Generator | None = None
    group_ids: Tensor | None = None
    old_log_probs: Tensor | None = None
    clip_range: tuple[float, float] | None = None


SelectorFunction = Callable[..., "Tensor | Selection"]


@dataclass(frozen=True)
class Preset:
    """A named setting of a method: selector options plus the training options it implies
    (e.g. the loss aggregation), and a note saying where the values come from."""

    selector_options: dict[str, Any]
    train_options: dict[str, Any]
    note: str


@dataclass(frozen=True)
class Selector:
    """A registered selector: its function, default options, the JS references it needs, the
    rows it must see at once (``population(options)``, one of :data:`POPULATIONS`), presets and
    the closed ranges ``(low, high)`` of its numeric options that have one. ``built_in``: registered in :mod:`ict.core.selectors`, its masks tested to lie within the response mask
    (``tests/test_selectors.py``), so :func:`select` does not check them on the device (a host
    synchronisation between the statistics and the loss)."""

    name: str
    function: SelectorFunction
    defaults: dict[str, Any]
    js_references: Callable[[dict[str, Any]], tuple[str, ...]]
    population: Callable[[dict[str, Any]], str]
    presets: dict[str, Preset]
    description: str
    train_defaults: dict[str, Any]
    built_in: bool = False
    ranges: dict[str, tuple[float, float]] = field(default_factory=dict)


SELECTORS: dict[str, Selector] = {}


def register_selector(
    name: str,
    defaults: dict[str, Any] | None = None,
    js_references: Callable[[dict[str, Any]], tuple[str, ...]] | None = None,
    population: str | Callable[[dict[str, Any]], str] = "token",
    presets: dict[str, Preset] | None = None,
    train_defaults: dict[str, Any] | None = None,
    ranges: dict[str, tuple[float, float]] | None = None,
) -> Callable[[SelectorFunction], SelectorFunction]:
    """Decorator registering ``fn(inputs, **options) -> bool mask [B, T] | Selection``.

    ``defaults`` lists every option the selector accepts; ``js_references(options)`` says which
    JS references (see :mod:`ict.core.stats`) must be computed for it; ``population`` (a name or a
    function of the options) is the smallest set of rows whose tokens it ranks together:
    ``"token"`` (a per-token rule), ``"sequence"``, ``"group"`` or ``"batch"``; ``ranges`` maps
    a numeric option to the closed interval ``(low, high)`` its values must lie in (``high`` may be
    ``math.inf``): a value outside is refused with a one-line ValueError. The first line of the
    function's docstring is its description in ``--help``. A name of other characters than
    letters, digits, ``_`` and ``-`` (``,``, ``:``, ``=`` split specs), a built-in selector's or
    a method alias's (``grpo``), or a function that does not take each option (or needs another
    argument) is a one-line ValueError.
    """
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise ValueError(f"selector name {name!r}: use letters, digits, _ and - (it is a --method, an ict "
                         "compare --methods item and a token_selector 'name:key=value')")
    unranged = sorted(set(ranges or {}) - set(defaults or {}))
    if unranged:
        raise ValueError(f"selector {name!r}: ranges given for {unranged[0]!r}, which is not one of its options")

    def decorator(function: SelectorFunction) -> SelectorFunction:
        built_in = function.__module__ == BUILT_IN_MODULE
        if not built_in and (name in METHOD_ALIASES or (name in SELECTORS and SELECTORS[name].built_in)):
            raise ValueError(f"selector {name!r} is built in (or a method's other name): give yours another name")
        _check_signature(name, function, defaults or {})
        population_of = population if callable(population) else (lambda options: population)
        SELECTORS[name] = Selector(
            name=name,
            function=function,
            defaults=dict(defaults or {}),
            js_references=js_references or (lambda options: ()),
            population=population_of,
            presets=dict(presets or {}),
            description=(function.__doc__ or name).strip().splitlines()[0],
            train_defaults=_checked_train_options(name, train_defaults or {}),
            built_in=built_in,
            ranges=dict(ranges or {}),
        )
        return function

    return decorator


def _check_signature(name: str, function: SelectorFunction, defaults: dict[str, Any]) -> None:
    """One-line ValueError unless ``function(inputs, **options)`` can be called with each option
    of ``defaults`` (a TypeError at the first step, or on the start-up check, otherwise)."""
    parameters = list(inspect.signature(function).parameters.values())[1:]  # after `inputs`
    named = {item.name for item in parameters if item.kind in (item.POSITIONAL_OR_KEYWORD, item.KEYWORD_ONLY)}
    if not any(item.kind == item.VAR_KEYWORD for item in parameters):
        missing = sorted(set(defaults) - named)
        if missing:
            raise ValueError(f"selector {name!r}: its function takes no argument {missing[0]!r}, one of its "
                             "options (defaults)")
    needed = [item.name for item in parameters if item.default is item.empty and item.name not in defaults
              and item.kind in (item.POSITIONAL_OR_KEYWORD, item.KEYWORD_ONLY)]
    if needed:
        raise ValueError(f"selector {name!r}: its function's argument {needed[0]!r} is not one of its options: "
                         f"give it a default in defaults={{{needed[0]!r}: ...}}")


TRAIN_OPTION_DEFAULTS: dict[str, Any] = {"aggregation": "token_mean", "full_token_warmup_steps": 0}
"""The training options a method may set (its ``train_defaults``, a preset's ``train_options``)
and their values for a method that sets none: the loss aggregation (``ict.core.loss``) and the
number of first steps that update every response token. A training configuration leaves them
unset (``None``) to take the method's value (:func:`method_train_options`)."""


def _checked_train_options(name: str, options: dict[str, Any]) -> dict[str, Any]:
    unknown = sorted(set(options) - set(TRAIN_OPTION_DEFAULTS))
    if unknown:
        raise ValueError(f"selector {name!r}: {unknown[0]!r} is not a training option a method sets "
                         f"({', '.join(TRAIN_OPTION_DEFAULTS)})")
    return dict(options)


def method_train_options(name: str, preset: str | None = None) -> dict[str, Any]:
    """The training options of selector ``name``: :data:`TRAIN_OPTION_DEFAULTS`, updated by the
    selector's ``train_defaults``, then by the preset's ``train_options``."""
    resolved = {**TRAIN_OPTION_DEFAULTS, **_get_selector(name).train_defaults}
    if preset is not None:
        resolved.update(get_preset(name, preset).train_options)
    return resolved


def _get_selector(name: str) -> Selector:
    import ict.core.selectors  # noqa: F401 (registers the built-in selectors)

    if name not in SELECTORS:
        raise ValueError(f"unknown selector {name!r}; registered: {', '.join(sorted(SELECTORS))} (a plugin's: "
                         "import its module first; verl: list it in VERL_USE_EXTERNAL_MODULES)")
    return SELECTORS[name]


def get_preset(name: str, preset: str) -> Preset:
    """The preset ``preset`` of selector ``name`` (ValueError naming the known ones)."""
    presets = _get_selector(name).presets
    if preset not in presets:
        known = ", ".join(sorted(presets)) or "none"
        raise ValueError(f"selector {name!r} has no preset {preset!r} (presets: {known})")
    return presets[preset]


def resolve_options(
    name: str, options: dict[str, Any] | None = None, preset: str | None = None
) -> dict[str, Any]:
    """The selector's defaults, updated by the preset's selector options, then by ``options``
    (``None`` values keep the earlier value)."""
    selector = _get_selector(name)
    resolved = dict(selector.defaults)
    if preset is not None:
        resolved.update(get_preset(name, preset).selector_options)
    for key, value in (options or {}).items():
        if key not in selector.defaults:
            accepted = ", ".join(selector.defaults) or "none"
            raise ValueError(f"selector {name!r} has no option {key!r} (accepted: {accepted})")
        if value is not None:
            resolved[key] = _checked_option(selector, key, value)
    return resolved


def _checked_option(selector: Selector, key: str, value: Any) -> Any:
    """``value`` if it has the kind of the option's default (a bool for a bool, a finite real
    number for a number, text for text; anything but a non-finite number for a default of None)
    and lies in the option's range, else a one-line ValueError: ``complement="no"`` would read as
    true, ``kl_coef=-1`` reward moving away."""
    default, name = selector.defaults[key], selector.name
    if isinstance(default, bool):
        ok = isinstance(value, bool)
    elif isinstance(default, int | float):
        ok = is_finite_number(value)
    elif isinstance(default, str):
        ok = isinstance(value, str)
    else:  # no option means anything by nan or inf
        ok = not (isinstance(value, float) and not math.isfinite(value))
    if not ok:
        kind = {bool: "true or false", str: "text"}.get(type(default), "a finite number")
        raise ValueError(f"selector {name!r} option {key} must be {kind}, got {value!r}")
    if key in selector.ranges and is_finite_number(value):
        low, high = selector.ranges[key]
        if not low <= value <= high:
            allowed = f">= {low:g}" if high == math.inf else f"in [{low:g}, {high:g}]"
            raise ValueError(f"selector {name!r} option {key} must be {allowed}, got {value!r}")
    return value


def required_js_references(name: str, options: dict[str, Any] | None = None) -> tuple[str, ...]:
    """JS references that :func:`ict.core.stats.token_statistics` must compute for this selector
    (its ``js_references(options)``: a tuple of names; one name alone, ``"prev"``, is a one-line
    ValueError, not the references ``p``, ``r``, ``e``, ``v``)."""
    references = _get_selector(name).js_references(resolve_options(name, options))
    if isinstance(references, str):
        raise ValueError(f"selector {name!r}: js_references must return a tuple of names, e.g. "
                         f"({references!r},), got {references!r}")
    return tuple(references)


def ranking_population(name: str, options: dict[str, Any] | None = None) -> str:
    """The rows selector ``name`` must see at once to return the mask it would return on the
    whole batch: ``"token"``, ``"sequence"``, ``"group"`` or ``"batch"`` (see the module doc)."""
    population = _get_selector(name).population(resolve_options(name, options))
    if population not in POPULATIONS:
        raise ValueError(f"selector {name!r} declares population {population!r}; use one of {POPULATIONS}")
    return population


def parse_selector_options(name: str, raw: dict[str, Any]) -> dict[str, Any]:
    """Options given as text (``{"ratio": "0.2"}``) converted to the type of each default.

    A default of ``None`` accepts YAML scalars (``7``, ``0.5``, ``none``, text). Unknown keys and
    unconvertible values raise ValueError naming the accepted keys or the expected type.
    """
    import yaml

    selector = _get_selector(name)
    parsed: dict[str, Any] = {}
    for key, value in raw.items():
        if key not in selector.defaults:
            accepted = ", ".join(selector.defaults) or "none"
            raise ValueError(f"selector {name!r} has no option {key!r} (accepted: {accepted})")
        default = selector.defaults[key]
        if not isinstance(value, str):
            parsed[key] = value
            continue
        text = value.strip()
        if text.lower() in ("none", "null", "~"):
            parsed[key] = None  # the default (resolve_options keeps it)
            continue
        try:
            if isinstance(default, bool):
                if text.lower() not in ("true", "false", "1", "0", "yes", "no"):
                    raise ValueError
                parsed[key] = text.lower() in ("true", "1", "yes")
            elif isinstance(default, int):
                parsed[key] = int(text)
            elif isinstance(default, float):
                parsed[key] = float(text)
            elif isinstance(default, str):
                parsed[key] = text
            else:
                parsed[key] = yaml.safe_load(text)
        except (ValueError, yaml.YAMLError):
            kind = type(default).__name__
            raise ValueError(f"selector {name!r} option {key}={value!r} is not a {kind}") from None
    return parsed  # checked (kind, finiteness, range) by resolve_options


_LOADED_PLUGINS: set[str] = set()


def load_plugin(module: str) -> None:
    """Import ``module`` (a dotted module name or a path to a ``.py`` file) so that the selectors
    it registers with :func:`register_selector` become available by name. A plugin runs once per
    process: loading the same module or file again does nothing."""
    import importlib
    import importlib.util
    from pathlib import Path

    path = Path(module)
    key = str(path.resolve()) if module.endswith(".py") else module
    if key in _LOADED_PLUGINS:
        return
    if module.endswith(".py") and not path.exists():
        raise ValueError(f"plugin file not found: {module}")
    if module.endswith(".py"):
        try:  # a directory, a pipe or a device named .py is there: not "not found"
            check_input_file("plugin file", path, "give a .py file or a module name")
        except UsageError as error:
            raise ValueError(str(error)) from None
    try:
        if module.endswith(".py"):
            spec = importlib.util.spec_from_file_location(f"ict_plugin_{path.stem}", path)
            assert spec is not None and spec.loader is not None
            loaded = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(loaded)
        else:
            importlib.import_module(module)
        _LOADED_PLUGINS.add(key)
    except Exception as error:  # noqa: BLE001 - the plugin's own code failed: one line (--debug: the traceback)
        missing = (error.name or "") if isinstance(error, ModuleNotFoundError) else ""
        if missing and f"{module}.".startswith(f"{missing}."):
            # the plugin module (or its package) is not there; a module the plugin imports is its own error
            raise ValueError(f"cannot import plugin {module!r}: {error}; give a module on the Python "
                             "path or a .py file") from None
        message = " ".join(str(error).split()) or "no message"
        raise ValueError(f"plugin {module!r} failed to import: {type(error).__name__}: {message}") from error


def _dummy_inputs() -> SelectionInputs:
    """A tiny ``[2, 3]`` batch with every score (each JS reference with each metric), for start-up checks."""
    from ict.core.stats import JS_REFERENCES, SCORE_METRICS

    shape = (2, 3)
    zeros = torch.zeros(shape)
    stats = TokenStatistics(zeros - 1.0, zeros + 1.0, zeros + 0.5,
                            {score_key(ref, metric): zeros.clone() for ref in JS_REFERENCES for metric in SCORE_METRICS})
    return SelectionInputs(stats, torch.ones(shape, dtype=torch.bool), torch.tensor([1.0, -1.0]),
                           torch.zeros(shape, dtype=torch.long), torch.Generator().manual_seed(0),
                           torch.zeros(2, dtype=torch.long))


def check_options(name: str, options: dict[str, Any] | None = None) -> Selection:
    """Raise ValueError when selector ``name`` rejects ``options`` (an unknown key, a JS
    reference that does not exist, a bad scope...): it is run once on a tiny dummy batch, so a
    bad value fails before any model is loaded. Returns that dummy `Selection` (e.g. to see
    whether the selector adds a ``kl_penalty``)."""
    from ict.core.stats import split_score_key

    resolved = resolve_options(name, options)
    for key in required_js_references(name, resolved):
        split_score_key(key)  # one-line ValueError for an unknown reference or metric
    try:
        return select(name, _dummy_inputs(), **resolved)
    except SelectorFailed as failed:  # a plugin's own code failed: one line naming it (--debug: the traceback)
        if isinstance(failed.error, ValueError):  # the plugin's own refusal of an option, as it says it
            raise failed.error from None
        raise ValueError(f"selector {name!r} failed on a dummy [2, 3] batch (the start-up check): "
                         f"{failed.reason}") from failed.error


class SelectorFailed(ValueError):
    """A plugin selector's own code raised while selecting (a built-in's error is raised as it
    is): one line naming the selector, its file (or module) and the error (``error``; ``reason``: its type
    and message), a ValueError so that the command line exits with 2."""

    def __init__(self, name: str, source: str, error: Exception) -> None:
        self.name, self.source, self.error = name, source, error
        self.reason = f"{type(error).__name__}: {' '.join(str(error).split()) or 'no message'}"
        super().__init__(f"selector {name!r} (plugin {source}) failed: {self.reason}")

    def __reduce__(self) -> tuple[Any, ...]:  # pickled whole (a worker process's error, e.g. verl's)
        return SelectorFailed, (self.name, self.source, self.error)


def select(name: str, inputs: SelectionInputs, **options: Any) -> Selection:
    """Run the selector ``name``; its ``mask`` is a bool ``[B, T]`` subset of the response mask.
    A plugin selector's own error is a `SelectorFailed` naming it."""
    selector = _get_selector(name)
    _check_input_shapes(inputs)
    resolved = resolve_options(name, options)
    try:
        result = selector.function(inputs, **resolved)
    except Exception as error:
        if selector.built_in:
            raise
        code = getattr(selector.function, "__code__", None)  # its file: a plugin file's module is ict_plugin_<stem>
        raise SelectorFailed(name, code.co_filename if code else selector.function.__module__, error) from error
    selection = result if isinstance(result, Selection) else Selection(mask=result)
    mask = selection.mask
    response_mask = inputs.response_mask.bool()
    if not isinstance(mask, Tensor) or mask.dtype != torch.bool or mask.shape != response_mask.shape:
        got = f"{mask.dtype} of shape {tuple(mask.shape)}" if isinstance(mask, Tensor) else type(mask).__name__
        raise ValueError(f"selector {name!r} must return a bool mask of shape {tuple(response_mask.shape)}, "
                         f"got {got}")
    if not selector.built_in and (mask & ~response_mask).any():
        raise ValueError(f"selector {name!r} selected tokens outside the response mask")
    if selection.tie_decided is None:
        selection = replace(selection, tie_decided=torch.zeros_like(mask))
    return selection


def _check_input_shapes(inputs: SelectionInputs) -> None:
    """One-line ValueError unless the inputs have the shapes :class:`SelectionInputs` states
    (``[B, T]`` as the response mask; ``[B]`` group ids; ``[B]`` or ``[B, T]`` advantages): a
    shorter ``group_ids`` would leave rows out of every population, nothing broadcast."""
    shape = tuple(inputs.response_mask.shape)
    if len(shape) != 2:
        raise ValueError(f"response_mask must be [B, T], got {list(shape)}")
    stats = inputs.stats
    check_token_shapes(shape, {
        "token_ids": inputs.token_ids, "old_log_probs": inputs.old_log_probs, "stats.log_probs": stats.log_probs,
        "stats.entropy": stats.entropy, **{f"js_scores[{key!r}]": value for key, value in stats.js_scores.items()}},
        {"group_ids": inputs.group_ids}, inputs.advantages)


def select_tokens(name: str, inputs: SelectionInputs, **options: Any) -> Tensor:
    """Run the selector ``name``; returns its bool ``[B, T]`` mask (see :func:`select`)."""
    return select(name, inputs, **options).mask
