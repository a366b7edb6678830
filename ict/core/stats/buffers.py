"""Reused storage for the tiles and their temporaries: on a CPU a fresh ``[n, vt]`` tensor a tile
can cost more than its writes, since glibc may hand a freed block this large back to the system
and the next tile's pages then fault in again (docs/benchmarks.md counts them)."""

from __future__ import annotations

import torch
from torch import Tensor


class TileBuffer:
    """One storage that tiles are written into, each overwriting the previous one."""

    def __init__(self) -> None:
        self.storage: Tensor | None = None

    def take(self, rows: int, columns: int, dtype: torch.dtype, device: torch.device) -> Tensor:
        """A ``[rows, columns]`` view of the storage, reallocated when too small or of another
        dtype or device (``device``: a tensor's, with its index)."""
        size = rows * columns
        storage = self.storage
        if (storage is None or storage.numel() < size or storage.dtype != dtype
                or storage.device != device):
            self.storage = None  # freed before its successor is allocated
            self.storage = torch.empty(size, dtype=dtype, device=device)
        return self.storage[:size].view(rows, columns)


class Scratch:
    """Named :class:`TileBuffer` s for the temporaries of the torch folds: a temporary taken under a
    name overwrites that name's previous one, so a caller takes each name once a tile and lets
    none outlive its tile."""

    def __init__(self) -> None:
        self._buffers: dict[str, TileBuffer] = {}

    def buffer(self, name: str) -> TileBuffer:
        """The buffer of ``name`` (e.g. for a head's :meth:`tile`)."""
        return self._buffers.setdefault(name, TileBuffer())

    def take(self, name: str, like: Tensor) -> Tensor:
        """An uninitialised tensor of ``like``'s ``[n, vt]`` shape, dtype and device."""
        return self.buffer(name).take(*like.shape, like.dtype, like.device)


def scratch_like(scratch: Scratch | None, name: str, like: Tensor) -> Tensor:
    """``scratch.take(name, like)``, or a fresh tensor like ``like`` without a scratch."""
    return torch.empty_like(like) if scratch is None else scratch.take(name, like)
