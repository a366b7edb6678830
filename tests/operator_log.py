"""A recorder of the operators torch runs while it is open, for the tests of what a call computes
and in which order (on the CPU, that order stands for the order in which a GPU's queue receives
them)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

READS = frozenset({"_local_scalar_dense", "nonzero", "_unique2", "unique_consecutive"})
"""Operators that read a value or a size back to the host (a sync on a GPU)."""

Label = Callable[[str, tuple, Any], object]
"""``label(name, args, result)``: what to record of one operator (``name`` without its overload),
or None to leave it out."""


class OperatorLog(TorchDispatchMode):
    """``entries``: each operator run under it, in order, as ``label`` records it (by default its
    name)."""

    def __init__(self, label: Label | None = None) -> None:
        super().__init__()
        self.label = label
        self.entries: list[Any] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        result = func(*args, **(kwargs or {}))
        name = func.__name__.split(".")[0]
        entry = name if self.label is None else self.label(name, args, result)
        if entry is not None:
            self.entries.append(entry)
        return result


def reads_storage(value: object, tensor: torch.Tensor) -> bool:
    """Whether ``value`` is a tensor on ``tensor``'s storage (a view of it included)."""
    return (isinstance(value, torch.Tensor)
            and value.untyped_storage().data_ptr() == tensor.untyped_storage().data_ptr())


def casts_of(tensor: torch.Tensor) -> Label:
    """A label that records the shape of each cast (``_to_copy``) of ``tensor`` or a view of it."""
    return lambda name, args, result: (tuple(args[0].shape) if name == "_to_copy" and reads_storage(args[0], tensor)
                                       else None)
