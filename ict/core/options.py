"""Options from documented dataclasses: one field = one option, one help text, one default.

`option(default, help, choices)` declares a field; `parse_field` converts a string (command line,
``key=value``) or a YAML value to the field's type. The command-line flags are made from the same
fields by `ict.cli.options.add_dataclass_options`.
Every command uses them: `ict train` (`TrainConfig`), `ict eval` (`EvalConfig`), `ict compare`
(`CompareConfig`), `ict inspect` (`InspectConfig`) and `ict plot` (`PlotConfig`).
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import json
import math
import re
import types
import typing
from dataclasses import field
from pathlib import Path
from typing import Any

import yaml

from ict.core.errors import UsageError, check_path_given


def option(default: Any, help: str, choices: tuple[str, ...] | None = None,
           positional: bool = False) -> Any:
    """A dataclass field with its help text (and allowed values) in the metadata; `positional`:
    on the command line an argument without a flag (one or more values for a tuple field).
    Fields declared without `option` (no help text) are internal: no flag, no YAML key."""
    metadata: dict[str, Any] = {"help": help}
    if choices:
        metadata["choices"] = choices
    if positional:
        metadata["positional"] = True
    if isinstance(default, list | dict):
        return field(default_factory=lambda: type(default)(default), metadata=metadata)
    return field(default=default, metadata=metadata)


@functools.cache
def type_hints(cls: type) -> types.MappingProxyType[str, Any]:
    """Field name -> resolved annotation of the dataclass `cls` (``typing.get_type_hints``, read-only),
    resolved once a class: each call resolves every string annotation anew (~2 ms for TrainConfig),
    and a config's parse asks once a field."""
    return types.MappingProxyType(typing.get_type_hints(cls))


def option_fields(cls: type) -> list[dataclasses.Field]:
    """The fields of the dataclass `cls` that are options (declared with `option`: they carry a
    help text); the others are internal (no flag, no YAML key)."""
    return [item for item in dataclasses.fields(cls) if "help" in item.metadata]


def _option_names_of(kinds: tuple[type, ...], classes: tuple[type, ...]) -> frozenset[str]:
    """Names of the options of the dataclasses whose type (optional or not) is one of `kinds`."""
    names = set()
    for cls in classes:
        hints = type_hints(cls)
        names.update(item.name for item in option_fields(cls) if optional_inner(hints[item.name])[0] in kinds)
    return frozenset(names)


def text_option_names(*classes: type) -> frozenset[str]:
    """Names of the text options (``str`` or ``Path``, optional or not) of the dataclasses."""
    return _option_names_of((str, Path), classes)


def number_option_names(*classes: type) -> frozenset[str]:
    """Names of the number options (``int`` or ``float``, optional or not) of the dataclasses."""
    return _option_names_of((int, float), classes)


def default_of(item: dataclasses.Field) -> Any:
    if item.default is not dataclasses.MISSING:
        return item.default
    return item.default_factory()  # type: ignore[misc]


def optional_inner(annotation: Any) -> tuple[Any, bool]:
    """(inner type, is optional) for `X | None`."""
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        args = [arg for arg in typing.get_args(annotation) if arg is not type(None)]
        return args[0], len(args) < len(typing.get_args(annotation))
    return annotation, False


def describe(value: Any) -> str:
    """Short text form of a default for --help; an empty text or list is ``""``, as it is typed
    (``--eval-steps ""``), not a blank."""
    if isinstance(value, dict):
        return json.dumps(value, separators=(",", ":"))
    text = ",".join(map(str, value)) if isinstance(value, tuple) else str(value)
    return text or '""'


def suggestion(cls: type, name: str) -> str:
    close = difflib.get_close_matches(name.replace("-", "_"), list(type_hints(cls)), n=1)
    return f" (did you mean {close[0]}?)" if close else ""


INT64_LIMIT = 2**63
"""An int option's values lie in [-2^63, 2^63) (`parse_field`): torch's sizes, counts and steps are int64."""


def parse_field(cls: type, name: str, raw: Any) -> Any:
    """Convert `raw` (a string from the CLI or a YAML value) to the type of field `name` of the
    dataclass `cls`; a bad value is a one-line `UsageError`."""
    types_by_name = type_hints(cls)
    if name not in types_by_name:
        raise UsageError(f"unknown option {name!r}{suggestion(cls, name)}")
    inner, optional = optional_inner(types_by_name[name])
    if isinstance(raw, str) and optional and raw.strip().lower() in ("none", "null", "~"):
        return None
    if raw is None:
        if optional:
            return None
        raise UsageError(f"{name} cannot be null")
    try:
        if inner is bool:
            if isinstance(raw, bool):
                return raw
            text = str(raw).strip().lower()
            if text in ("1", "true", "yes", "on"):
                return True
            if text in ("0", "false", "no", "off"):
                return False
            raise ValueError
        # a number's text (`--num-steps 1e3`) is read as a config file reads it
        number = _number_text(raw) if isinstance(raw, str) and inner in (int, float) else raw
        if inner is int:
            if not -INT64_LIMIT <= (value := _integer(number)) < INT64_LIMIT:  # --lora-rank 1e30: torch's OverflowError
                raise UsageError(f"bad value for {name}: {raw!r:.80} (expected int within int64: -2^63..2^63-1)")
            return value
        if inner is float:  # finite: no option means anything by nan or inf
            if isinstance(number, bool) or not math.isfinite(value := float(number)):
                raise ValueError
            return value
        if inner is dict or typing.get_origin(inner) is dict:
            value = yaml.safe_load(raw) if isinstance(raw, str) else raw
            if value is None:
                return {}
            if not isinstance(value, dict):
                raise ValueError
            return dict(value)
        if typing.get_origin(inner) is tuple:  # tuple[int, ...]: "1,4", a YAML list or argv list
            element = typing.get_args(inner)[0]
            if isinstance(raw, str):
                parts = raw.split(",") if raw.strip() else []  # "": the empty list, as YAML's []
            elif isinstance(raw, dict):  # a mapping's keys are no list
                raise ValueError
            else:
                parts = [raw] if isinstance(raw, int | float) and not isinstance(raw, bool) else list(raw)
            # "1,,2": an item missing; a nested list or mapping or a null item is no item's text
            if any(part is None or isinstance(part, dict | list | tuple) or not str(part).strip() for part in parts):
                raise ValueError
            if element is not int and any(isinstance(part, bool) for part in parts):  # YAML 1.1's [a, yes]
                _text_of_boolean(cls, name, next(part for part in parts if isinstance(part, bool)))
            return tuple(_scalar(element, str(part).strip()) for part in parts)
        if inner is str or inner is Path:
            if isinstance(raw, dict | list):
                raise ValueError
            if isinstance(raw, bool):  # YAML 1.1 reads off, no, on, yes (unquoted) as booleans
                return _text_of_boolean(cls, name, raw)
            if inner is Path:  # named by its flag, as the commands' own checks name it
                check_path_given("--" + name.replace("_", "-"), raw, "give a path")
            return _scalar(inner, str(raw))
    except (ValueError, TypeError, OverflowError, yaml.YAMLError):
        if typing.get_origin(inner) is tuple:
            kind = f"a comma-separated list of {getattr(typing.get_args(inner)[0], '__name__', 'value')}s, none empty"
        else:
            kind = {float: "a finite float"}.get(inner, getattr(inner, "__name__", str(inner)))
        raise UsageError(f"bad value for {name}: {raw!r:.80} (expected {kind})") from None
    raise UsageError(f"unsupported option type for {name}")


def _text_of_boolean(cls: type, name: str, value: bool) -> str:
    """A text option that YAML read as a boolean (``autocast: off``): the one choice that YAML
    word can be (``off``); free text is a one-line UsageError (``dataset_subset: no`` was the
    text "False")."""
    words = ("true", "yes", "on") if value else ("false", "no", "off")
    field_of = {item.name: item for item in dataclasses.fields(cls)}.get(name)
    matches = [choice for choice in (field_of.metadata.get("choices") or ()) if choice in words] if field_of else []
    if len(matches) == 1:
        return matches[0]
    raise UsageError(f"{name}: YAML reads an unquoted {' / '.join(words)} as {str(value).lower()}; quote the text "
                     f"(e.g. {name}: '{words[1]}')")


class _OptionsLoader(yaml.SafeLoader):
    """PyYAML's safe loader, refusing a key given twice in one mapping (PyYAML keeps the last)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":  # `<<: *base`: its keys may be overridden
                continue
            key = self.construct_object(key_node, deep=True)
            line = key_node.start_mark.line + 1
            if isinstance(key, typing.Hashable) and key in seen:
                raise UsageError(f"key {key!r} is given twice (lines {seen[key]} and {line}): keep one")
            if isinstance(key, typing.Hashable):
                seen[key] = line
        return super().construct_mapping(node, deep)


# plain scalars YAML 1.1 reads as other than text: 0123 is 83 (octal), 1_000 is 1000, 1:30 is 90
_TEXT_TAG = "tag:yaml.org,2002:str"
_NOT_TEXT_TAGS = frozenset({"tag:yaml.org,2002:int", "tag:yaml.org,2002:float", "tag:yaml.org,2002:timestamp"})
# YAML 1.1's booleans that YAML 1.2 (core schema) reads as text: yes, no, on, off (any case form)
_BOOL_TAG = "tag:yaml.org,2002:bool"
_YAML12_BOOL = re.compile(r"true|True|TRUE|false|False|FALSE")
# YAML 1.2's (core schema) numbers; anything else plain is text there (1_000, 1:30, 2024-01-01)
_YAML12_INT = re.compile(r"[-+]?[0-9]+|0o[0-7]+|0x[0-9a-fA-F]+")
_YAML12_FLOAT = re.compile(r"[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?|[-+]?\.(inf|Inf|INF)|\.(nan|NaN|NAN)")


def _yaml12_reading(text: str) -> Any:
    """What YAML 1.2 (core schema) reads the plain scalar `text` as: an int, a float or the text."""
    if _YAML12_INT.fullmatch(text):
        return int(text[2:], 8) if text.startswith("0o") else int(text, 16) if text.startswith("0x") else int(text)
    if _YAML12_FLOAT.fullmatch(text):
        return float(text.lower().replace(".inf", "inf").replace(".nan", "nan"))
    return text


def _misread(loader: yaml.SafeLoader, name: str, node: yaml.Node, typed: bool) -> None:
    """One-line UsageError for the plain scalar `node` (the value of `name`) that YAML 1.1 reads
    as a number or date written otherwise: for a text option (`typed`) any such reading
    (``0123`` is 83); for a value of unknown type (a ``dataset_config`` key) one that YAML 1.2
    reads otherwise (``0123`` is 123 there, ``1_000`` and ``1:30`` text; ``0x1F`` is 31 in both),
    and a text of YAML 1.1 that YAML 1.2 reads as a number (``1e3`` is 1000.0 there) or a boolean
    of YAML 1.1 that YAML 1.2 reads as text (``yes`` is True, 'yes' there)."""
    if not (isinstance(node, yaml.ScalarNode) and node.style is None):
        return
    short = name.rsplit(".", 1)[-1]
    if node.tag == _BOOL_TAG and not typed and not _YAML12_BOOL.fullmatch(node.value):
        word = str(loader.construct_object(node)).lower()
        raise UsageError(f"{name}: YAML 1.1 reads an unquoted {node.value} as {word}, YAML 1.2 as "
                         f"{node.value!r}; write {word} for the boolean, or quote the text "
                         f"(e.g. {short}: '{node.value}')")
    if node.tag == _TEXT_TAG and not typed and isinstance(other := _yaml12_reading(node.value), int | float):
        raise UsageError(f"{name}: YAML 1.1 reads an unquoted {node.value} as {node.value!r}, YAML 1.2 as {other!r}; "
                         f"quote it for the text (e.g. {short}: '{node.value}'), or write the number as {other!r}")
    if node.tag not in _NOT_TEXT_TAGS:
        return
    value = loader.construct_object(node)
    if typed and str(value) != node.value:
        raise UsageError(f"{name}: YAML reads an unquoted {node.value} as {value!r}, "
                         f"not the text; quote it (e.g. {short}: '{node.value}')")
    other = _yaml12_reading(node.value)
    if not typed and not (type(other) is type(value) and (other == value or other != other and value != value)):
        raise UsageError(f"{name}: YAML 1.1 reads an unquoted {node.value} as {value!r}, YAML 1.2 as {other!r}; "
                         f"quote it for the text (e.g. {short}: '{node.value}')"
                         + (", or write the number plainly" if isinstance(value, int | float) else ""))


def _number_node(loader: yaml.SafeLoader, name: str, node: yaml.Node) -> yaml.Node:
    """The plain scalar `node` of the number option `name` as YAML 1.2 reads it: ``1e3`` (text
    in YAML 1.1) is 1000.0, ``0o17`` is 15. A number YAML 1.1 reads otherwise than YAML 1.2 and
    Python's ``float`` (``017`` is 15, not 17; ``1:30`` is 90) is a one-line UsageError;
    ``1_000`` is 1000 in all but YAML 1.2, which reads the text that the option reads as 1000."""
    if not (isinstance(node, yaml.ScalarNode) and node.style is None):
        return node
    other = _yaml12_reading(node.value)
    if node.tag == _TEXT_TAG and isinstance(other, int | float):
        tag = "tag:yaml.org,2002:int" if isinstance(other, int) else "tag:yaml.org,2002:float"
        return yaml.ScalarNode(tag, repr(other), node.start_mark, node.end_mark)
    if node.tag not in ("tag:yaml.org,2002:int", "tag:yaml.org,2002:float"):
        return node
    value = loader.construct_object(node)
    plain = other if isinstance(other, int | float) else _python_number(other)  # 1_000: 1000, as on the command line
    if plain != value and not (value != value and plain != plain):
        short = name.rsplit(".", 1)[-1]  # 017: YAML 1.2's 17 first, the likelier meant
        plainly = (f"{short}: {other!r} for YAML 1.2's reading, {short}: {value!r} for YAML 1.1's"
                   if isinstance(other, int | float) else f"e.g. {short}: {value!r}")
        raise UsageError(f"{name}: YAML 1.1 reads an unquoted {node.value} as {value!r}, YAML 1.2 as {other!r}; "
                         f"write the number plainly ({plainly})")
    return node


def _number_text(text: str) -> int | float:
    """A number option's text (command line, ``key=value``) read as a config file reads its
    plain scalar (`_number_node`): YAML 1.2's number (``1e3`` is 1000.0, ``0x10`` 16, ``017``
    17), else Python's (``1_000`` is 1000); anything else is a ValueError."""
    value = _yaml12_reading(text.strip())
    if isinstance(value, str) and (value := _python_number(text)) is None:
        raise ValueError(text)
    return value


def _python_number(text: str) -> int | float | None:
    """`text` as Python's ``int`` or else ``float`` reads it (``1_000`` is 1000), else None."""
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return None


class _OptionsDumper(yaml.SafeDumper):
    """PyYAML's safe dumper, quoting a text that YAML 1.2 reads as a number (`_yaml12_reading`):
    PyYAML writes YAML 1.1, where ``1e3`` and ``0o17`` are plain text, and `load_options_yaml`
    refuses them plain in a mapping of unknown types (``dataset_config``)."""


def _represent_text(dumper: yaml.SafeDumper, text: str) -> yaml.ScalarNode:
    quoted = isinstance(_yaml12_reading(text), int | float)
    return dumper.represent_scalar(_TEXT_TAG, text, style="'" if quoted else None)


_OptionsDumper.add_representer(str, _represent_text)


def dump_options_yaml(values: dict[str, Any]) -> str:
    """``values`` as YAML text (keys in their order) that `load_options_yaml` reads back as they
    are: ``yaml.safe_dump``'s, with a text YAML 1.2 reads as a number quoted (``'1e3'``)."""
    return yaml.dump(values, Dumper=_OptionsDumper, sort_keys=False)


TOO_DEEP = "lists or mappings nested too deeply to read (Python's recursion limit)"
"""The `yaml.YAMLError` of a value nested deeper than PyYAML's recursive reading reaches (a
RecursionError, exit 1, before): `[[[...]]]` thousands deep."""


def load_options_yaml(text: str, text_options: typing.Collection[str] = (),
                      untyped_mappings: typing.Collection[str] = (),
                      number_options: typing.Collection[str] = (), prefix: str = "") -> Any:
    """`text` parsed as PyYAML's safe_load does, except for one-line `UsageError`s: a key given
    twice in one mapping, and a text option (a name in `text_options`; ``selector.reference`` for
    a key of the mapping `selector`, or the dotted key itself) whose unquoted value YAML reads as
    a number or date written otherwise (``system_prompt: 0123`` is 83); ``dataset_subset: 2024``
    is still the text 2024. A value in a mapping named in `untyped_mappings` (``dataset_config``,
    whose types are the task's, as a mapping or dotted keys ``dataset_config.KEY``), or of a
    dotted name there (``selector.seed``), is refused only where YAML 1.1 and 1.2 read it
    differently (`_misread`). A number option (`number_options`) is read as YAML 1.2 reads it
    where YAML 1.1 reads the text (``num_steps: 1e3`` is 1000.0), and refused where the two read
    different numbers (`_number_node`: ``017`` is 15 in YAML 1.1, 17 in YAML 1.2). `prefix`
    (``dataset_config.``) names the keys of a mapping given alone. A YAML syntax error is
    `yaml.YAMLError` (nesting too deep too: `TOO_DEEP`)."""
    loader = _OptionsLoader(text)

    def check(name: str, node: yaml.Node) -> yaml.Node:
        untyped = "." in name and (name in untyped_mappings or name.split(".", 1)[0] in untyped_mappings)
        if name in number_options:
            return _number_node(loader, name, node)
        if name in text_options or untyped:
            _misread(loader, name, node, typed=name in text_options)
        return node

    try:
        node = loader.get_single_node()
        if node is None:
            return None
        for index, (key_node, value_node) in enumerate(node.value if isinstance(node, yaml.MappingNode) else ()):
            if not isinstance(key_node, yaml.ScalarNode):
                continue
            name = prefix + str(key_node.value).replace("-", "_")
            node.value[index] = (key_node, check(name, value_node))
            if isinstance(value_node, yaml.MappingNode):
                for inner_index, (inner_key, inner_value) in enumerate(value_node.value):
                    if isinstance(inner_key, yaml.ScalarNode):
                        value_node.value[inner_index] = (inner_key, check(f"{name}.{inner_key.value}", inner_value))
        return loader.construct_document(node)
    except RecursionError:  # PyYAML composes and builds nested values recursively
        raise yaml.YAMLError(TOO_DEEP) from None
    finally:
        loader.dispose()


def load_value_yaml(text: str, name: str, typed: bool, number: bool = False) -> Any:
    """One value (``dataset_config.KEY=0123`` on the command line) read as YAML, with
    `load_options_yaml`'s check of a misread (`_misread`: `typed` for a text option) or, for a
    `number` option, its reading as YAML 1.2 reads it (`_number_node`)."""
    loader = _OptionsLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        if number:
            node = _number_node(loader, name, node)
        else:
            _misread(loader, name, node, typed)
        return loader.construct_document(node)
    except RecursionError:
        raise yaml.YAMLError(TOO_DEEP) from None
    finally:
        loader.dispose()


def merge_dotted_keys(values: dict[str, Any]) -> dict[str, Any]:
    """A config file's options with each dotted key (``selector.ratio``) whose option is also given
    as a mapping (``selector: {reference: prev}``) merged into it, whatever their order in the
    file (a later mapping replaced the dotted key's value); a key given both ways is a one-line
    UsageError. A dotted key without such a mapping stays, to set that key of an earlier layer's."""
    merged = dict(values)
    for name in [name for name in values if "." in name and name.split(".", 1)[0] in values]:
        head, tail = name.split(".", 1)
        mapping = merged[head] or {}
        if not isinstance(mapping, dict) or tail in mapping:
            raise UsageError(f"{name} is given twice (and {head} as {merged[head]!r}): keep one")
        merged[head] = {**mapping, tail: merged.pop(name)}
    return merged


def yaml_problem(error: yaml.YAMLError) -> str:
    """A YAML parse error in one line: its problem and where (``line L, column C``), without the
    snippet PyYAML quotes over several lines."""
    problem = getattr(error, "problem", None)
    mark = getattr(error, "problem_mark", None)
    if problem and mark is not None:
        return f"{problem} at line {mark.line + 1}, column {mark.column + 1}"
    return " ".join(str(error).split())


def _integer(number: Any) -> int:
    """An int option's number (`_number_text`'s, or a config file's): an int, or a float of integral
    value (``1e3``); a bool, ``2.5`` or a non-finite float is a ValueError."""
    if isinstance(number, bool) or (isinstance(number, float) and not number.is_integer()):
        raise ValueError(number)
    return int(number)


def _scalar(kind: type, text: str) -> Any:
    """`text` as an int (a list item read as an int option reads its number: ``--seeds 0,1e1`` is
    0, 10, as ``--seed 1e1`` is 10), a path or a string (`kind`)."""
    return _integer(_number_text(text)) if kind is int else Path(text) if kind is Path else str(text)


def check_choices(config: Any) -> None:
    """One-line `UsageError` for a field of the dataclass instance `config` whose value is not one
    of the field's declared choices (`option(..., choices)`); ``None`` (unset) passes."""
    for item in dataclasses.fields(config):
        choices = item.metadata.get("choices")
        value = getattr(config, item.name)
        if choices and value is not None and value not in choices:
            raise UsageError(f"{item.name}={value!r} is not one of {', '.join(choices)}")
