"""`ict.core.profiling`: the phase table's numbers and the resident-memory reading, worked by hand
(no timing is asserted)."""

from __future__ import annotations

import ict.core.profiling as profiling
from ict.core.profiling import StepProfiler, resident_bytes


def test_the_table_gives_seconds_per_step_share_of_the_step_and_peak_mib():
    """4 s of 'step' over 2 steps is 2.00 s per step; 'generation' (1 s inside it) 0.50 s, 25%
    of the step; 3 MiB peak; without a 'step' phase the share is of all phases' sum."""
    profiler = StepProfiler()
    profiler.seconds = {"step": 4.0, "generation": 1.0}
    profiler.peak = {"step": 3 * 2**20}
    lines = profiler.table(2).splitlines()
    assert lines[0] == "| phase | seconds per step | share of the step | peak memory (resident, MiB) |"
    assert lines[2:] == ["| step | 2.00 | 100% | 3 |", "| generation | 0.50 | 25% | 0 |"]
    profiler.seconds = {"generation": 3.0, "rewards": 1.0}
    assert profiler.table(0).splitlines()[2:] == ["| generation | 3.00 | 75% | 0 |",
                                                  "| rewards | 1.00 | 25% | 0 |"]


def test_phases_count_their_calls_and_a_disabled_profiler_records_nothing(tmp_path, monkeypatch):
    """Each phase's calls are counted and its peak is at least the resident size read at its end
    (here a fixed /proc/self/status of 1234 kB); a disabled profiler keeps no record."""
    status = tmp_path / "status"
    status.write_text("Name:\tpython\nVmPeak:\t  9999 kB\nVmRSS:\t    1234 kB\n")
    monkeypatch.setattr(profiling, "_STATUS", status)
    assert resident_bytes() == 1234 * 1024
    monkeypatch.setattr(profiling, "_STATUS", tmp_path / "missing")
    assert resident_bytes() == 0
    monkeypatch.setattr(profiling, "_STATUS", status)
    profiler = StepProfiler(enabled=True)
    try:
        for _ in range(2):
            with profiler.phase("step"), profiler.phase("generation"):
                pass
    finally:
        profiler.close()
    assert profiler.calls == {"step": 2, "generation": 2}
    assert profiler.peak == {"step": 1234 * 1024, "generation": 1234 * 1024}
    assert profiler._active == []
    disabled = StepProfiler()
    with disabled.phase("step"):
        pass
    assert disabled.seconds == disabled.calls == disabled.peak == {}
