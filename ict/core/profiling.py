"""Where a training step goes: wall time and peak memory per phase (`ict train --profile`).

`StepProfiler.phase(name)` is a context manager; phases may nest (the time of an inner phase is
not subtracted from the outer one, so list nested phases separately). Peak memory per phase: on
CUDA the allocator's peak (`torch.cuda.max_memory_allocated`, reset at each phase start); on CPU
the peak resident set size seen by a sampling thread (every 5 ms, from /proc/self/status) while
the phase runs. A disabled profiler costs one attribute lookup per phase.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import torch

_STATUS = Path("/proc/self/status")


def resident_bytes() -> int:
    """Current resident set size of this process (0 where /proc is missing)."""
    try:
        for line in _STATUS.read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


class StepProfiler:
    """Accumulates seconds and peak memory per phase name over the steps of a run."""

    def __init__(self, enabled: bool = False, device: torch.device | None = None) -> None:
        self.enabled = enabled
        self.cuda = device is not None and device.type == "cuda"
        self.seconds: dict[str, float] = {}
        self.calls: dict[str, int] = {}
        self.peak: dict[str, int] = {}
        self._active: list[str] = []
        self._stop = threading.Event()
        self._sampler: threading.Thread | None = None
        if enabled and not self.cuda:
            self._sampler = threading.Thread(target=self._sample, daemon=True)
            self._sampler.start()

    def _sample(self) -> None:
        while not self._stop.wait(0.005):
            rss = resident_bytes()
            for name in list(self._active):
                if rss > self.peak.get(name, 0):
                    self.peak[name] = rss

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        if not self.enabled:
            yield
            return
        if self.cuda:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
        self._active.append(name)
        start = time.perf_counter()
        try:
            yield
        finally:
            if self.cuda:
                torch.cuda.synchronize()
                self.peak[name] = max(self.peak.get(name, 0), torch.cuda.max_memory_allocated())
            else:
                self.peak[name] = max(self.peak.get(name, 0), resident_bytes())
            self.seconds[name] = self.seconds.get(name, 0.0) + time.perf_counter() - start
            self.calls[name] = self.calls.get(name, 0) + 1
            self._active.remove(name)

    def close(self) -> None:
        self._stop.set()

    def table(self, steps: int) -> str:
        """A markdown table: seconds per step and peak memory (MiB) of each phase."""
        kind = "GPU allocated" if self.cuda else "resident"
        lines = [f"| phase | seconds per step | share of the step | peak memory ({kind}, MiB) |",
                 "|---|---|---|---|"]
        total = self.seconds.get("step", sum(self.seconds.values()))
        for name, seconds in self.seconds.items():
            share = seconds / total if total else 0.0
            lines.append(f"| {name} | {seconds / max(steps, 1):.2f} | {share:.0%} | "
                         f"{self.peak.get(name, 0) / 2**20:.0f} |")
        return "\n".join(lines)
