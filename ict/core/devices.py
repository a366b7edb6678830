"""Small host tensors moved to a device without making the host wait for it."""

from __future__ import annotations

import torch
from torch import Tensor


def to_device_unblocking(tensor: Tensor, device: torch.device | str) -> Tensor:
    """``tensor`` on ``device``: itself when already there; from the CPU to a CUDA device through
    pinned memory and a non-blocking copy (from pageable memory the driver may synchronise with
    the stream to stage the copy), so the host never waits for the device; else ``.to(device)``."""
    device = torch.device(device)
    if tensor.device == device:
        return tensor
    if tensor.device.type == "cpu" and device.type == "cuda":
        return tensor.pin_memory().to(device, non_blocking=True)
    return tensor.to(device)
