"""Where a GPU path waits for the host: every operator that synchronises the device, counted by
the line that called it (the innermost frame outside torch: ours, or TRL's or transformers').

Three kinds, each a full drain of the CUDA stream's queue before the host goes on:

- ``read``: a value or a size read back (``.item()``, ``.tolist()``, ``nonzero``, ``unique``,
  ``masked_select``, boolean indexing, ``repeat_interleave`` by a tensor);
- ``copy to host``: a device tensor copied to the CPU (``.cpu()``, ``.tolist()``);
- ``copy to device``: a CPU tensor copied to the device without ``non_blocking`` (PyTorch then
  calls ``cudaStreamSynchronize`` after ``cudaMemcpyAsync``: ``at::cuda::memcpy_and_sync``), which
  no count on CPU tensors can see. ``copy to device (non_blocking)`` is listed apart: it waits only
  when its source is pageable memory that the driver must stage.

It is an operator-level ``TorchDispatchMode``, so it sees the autograd engine's threads as well
(PyTorch carries the mode into them). ``device_only`` (a GPU run) counts only reads of device
tensors: a CPU tensor's value is read without the device (the optimizers' ``step`` counters, for
one). Without it (a CPU run, standing in for the GPU) every read counts, ``.tolist()`` included
(a CPU tensor answers it without the dispatcher: counted by a patch), and there are no copies. On CUDA, ``torch.cuda.set_sync_debug_mode`` counts the same synchronisations from the
other side (``cuda_sync_warnings``), as a check that none escaped the census.

``launches=True`` also counts, as ``launch``, every operator that is not a view (one kernel
launch each on a GPU, roughly: a host round trip that leaves the device idle where its queue
is empty, as between small operators); :meth:`SyncCensus.total` leaves them out.
"""

from __future__ import annotations

import collections
import sys
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

ROOT = Path(__file__).resolve().parents[1]
READS = {"_local_scalar_dense", "nonzero", "_unique2", "unique_dim", "unique_consecutive", "masked_select"}
NO_KERNEL = {"scalar_tensor", "_unsafe_view", "empty", "empty_strided"}  # not views, but no device work


HARNESS: set[Any] = set()
"""Code objects of wrappers around the measured call (see :func:`harness`): never a location."""


def harness(function: Callable[..., Any]) -> Callable[..., Any]:
    """Marks ``function`` (a wrapper that starts or pauses the census) as no place of its own."""
    HARNESS.add(function.__code__)
    return function


def _place(frame: Any) -> str:
    path = frame.f_code.co_filename
    if "-packages/" in path:
        path = path.split("-packages/", 1)[1]  # trl/trainer/grpo_trainer.py
    elif Path(path).is_relative_to(ROOT):
        path = str(Path(path).relative_to(ROOT))
    return f"{path}:{frame.f_lineno} ({frame.f_code.co_name})"


def _location() -> str:
    """The innermost frame outside torch, this file and the harness, as ``path:line (function)``
    (another library's, such as TRL's, by its path inside the installed packages)."""
    frame = sys._getframe(2)
    while frame is not None:
        code = frame.f_code
        if code.co_filename != __file__ and code not in HARNESS and "/torch/" not in code.co_filename:
            return _place(frame)
        frame = frame.f_back
    return "(torch)"


def _kind(func: Any, args: tuple, kwargs: dict, device_only: bool) -> str | None:
    """Which synchronisation ``func(*args, **kwargs)`` is, or None."""
    name = func.__name__.split(".")[0]
    read = not device_only or (isinstance(args[0], torch.Tensor) and args[0].device.type != "cpu")
    if name in READS:
        return "read" if read else None
    if name == "repeat_interleave" and isinstance(args[0], torch.Tensor) and len(args) == 1:
        return "read" if read else None  # repeats given as a tensor: the output's size is their sum
    if name == "index" and any(isinstance(index, torch.Tensor) and index.dtype == torch.bool
                               for index in args[1] if index is not None):
        return "read" if read else None
    if name in ("_to_copy", "copy_"):
        source = args[1] if name == "copy_" else args[0]
        target = args[0].device if name == "copy_" else kwargs.get("device", source.device)
        source_type, target_type = source.device.type, torch.device(target).type
        if source_type != "cpu" and target_type == "cpu":
            return "copy to host"
        if source_type == "cpu" and target_type not in ("cpu", "meta"):
            non_blocking = kwargs.get("non_blocking", False) if name == "_to_copy" else (
                args[2] if len(args) > 2 else kwargs.get("non_blocking", False))
            return "copy to device (non_blocking)" if non_blocking else "copy to device"
    return None


class SyncCensus(TorchDispatchMode):
    """``counts[(kind, location)]``: the synchronising operators run while the mode is on."""

    def __init__(self, device_only: bool = False, launches: bool = False) -> None:
        super().__init__()
        self.device_only = device_only
        self.launches = launches
        self.paused = False  # while True, nothing is counted (a part of the call left out)
        self.counts: collections.Counter[tuple[str, str]] = collections.Counter()
        self._tolist: Any = None

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        kind = None if self.paused else _kind(func, args, kwargs, self.device_only)
        if kind is not None:
            self.counts[(kind, _location())] += 1
        if (self.launches and not self.paused and not func.is_view
                and func.__name__.split(".")[0] not in NO_KERNEL):
            self.counts[("launch", _location())] += 1
        return func(*args, **kwargs)

    def __enter__(self) -> SyncCensus:
        census, original = self, torch.Tensor.tolist
        self._tolist = original

        def tolist(tensor: torch.Tensor) -> Any:  # a CPU tensor's tolist bypasses the dispatcher
            if tensor.device.type == "cpu" and not census.device_only and not census.paused:
                census.counts[("read", _location())] += 1
            return original(tensor)

        torch.Tensor.tolist = tolist
        return super().__enter__()

    def __exit__(self, *exc: Any) -> None:
        torch.Tensor.tolist = self._tolist
        super().__exit__(*exc)

    def total(self, kinds: tuple[str, ...] = ("read", "copy to host", "copy to device")) -> int:
        return sum(count for (kind, _), count in self.counts.items() if kind in kinds)


def census_of(function: Callable[[], Any], cuda: bool) -> tuple[SyncCensus, int | None]:
    """Run ``function`` once under :class:`SyncCensus` (launches counted too), and on CUDA under the
    sync debug mode as well; returns the census and the number of CUDA's synchronisation warnings
    (None on CPU)."""
    census = SyncCensus(device_only=cuda, launches=True)
    if not cuda:
        with census:
            function()
        return census, None
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            with census:
                function()
        finally:
            torch.cuda.set_sync_debug_mode("default")
    torch.cuda.synchronize()
    return census, sum("synchroniz" in str(warning.message) for warning in caught)


def print_census(name: str, census: SyncCensus, cuda_warnings: int | None, file: Any = None) -> None:
    """A markdown table of ``census``'s synchronisations, most frequent first (its launches, if
    counted, as a total in the title)."""
    file = file or sys.stdout
    check = "" if cuda_warnings is None else f"; CUDA's sync debug mode warned {cuda_warnings} times"
    launches = f"; operators launching device work: {census.total(('launch',))}" if census.launches else ""
    print(f"\nsynchronisations in {name}: {census.total()}{check}{launches}\n\n| kind | where | count |\n|---|---|---|",
          file=file)
    for (kind, where), count in census.counts.most_common():
        if kind != "launch":
            print(f"| {kind} | {where} | {count} |", file=file)
    print(file=file, flush=True)
