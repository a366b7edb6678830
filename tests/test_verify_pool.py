"""The math-verify worker pool's recovery (`ict.answers.verify.MathVerifier`), with a stand-in worker
that speaks the worker protocol (length-prefixed pickles) and starts in a second, not seconds."""

from __future__ import annotations

import select
import time
import types

import pytest
from verify_helpers import use_fake_workers

import ict.answers.verify as verify_module
from ict.answers.verify import MathVerifier


@pytest.fixture
def fake_workers(monkeypatch, tmp_path):
    """Call with the start modes ("ok,fail,ok"; the last repeats; `verify_helpers.FAKE_WORKER`);
    returns the start counter file."""
    return lambda modes: use_fake_workers(monkeypatch, tmp_path, modes)


def _kill_workers(pool: MathVerifier) -> None:
    for worker in pool._workers:
        assert worker is not None
        worker.process.kill()
        worker.process.wait()


@pytest.mark.parametrize("num_workers", [1, 2])
def test_workers_that_died_while_idle_are_restarted(fake_workers, num_workers):
    """Every worker of the pool killed between checks (by the OS, say): the next check's send
    fails, the slot is emptied and the check goes back to the queue. With no worker busy or
    starting, the pool's wait was min() of nothing: a ValueError instead of a restart."""
    fake_workers("ok")
    pool = MathVerifier(num_workers=num_workers)
    try:
        assert [v.extracted for v in pool.check_batch([("a", "1"), ("b", "1")], 10.0)] == ["a", "b"]
        _kill_workers(pool)
        verdicts = pool.check_batch([("c", "1"), ("d", "1")], 10.0)
    finally:
        pool.close()
    assert [(v.correct, v.extracted, v.status) for v in verdicts] == [(True, "c", "ok"), (True, "d", "ok")]
    assert pool.restarts == num_workers


def test_a_pool_whose_restart_failed_starts_another_worker_next_time(fake_workers):
    """A restarted worker that exits before its "ready" fails that batch (a RuntimeError, as
    documented); it was left in its slot, killed, and every later batch selected on its closed
    pipe: OSError (bad file descriptor) for the life of the pool."""
    starts = fake_workers("ok,fail,ok")
    pool = MathVerifier(num_workers=1)
    try:
        assert pool.check("a", "1", 10.0).extracted == "a"
        _kill_workers(pool)
        with pytest.raises(RuntimeError, match="failed to start"):
            pool.check("b", "1", 10.0)
        verdict = pool.check("c", "1", 10.0)
    finally:
        pool.close()
    assert (verdict.correct, verdict.extracted, verdict.status) == (True, "c", "ok")
    assert starts.read_text() == "xxx"


def test_an_interrupted_batch_leaves_no_worker_busy_with_its_check(fake_workers, monkeypatch):
    """Ctrl-C while a check is in flight (KeyboardInterrupt out of the pool's select): the worker
    kept computing the abandoned check, so the next batch's check queued behind it and was judged a
    timeout (incorrect) although the answer was right. The busy worker is now killed (reaped: no
    process left) and the next check gets a fresh one."""
    import psutil

    fake_workers("ok")
    pool = MathVerifier(num_workers=1)
    try:
        assert pool.check("a", "1", 10.0).status == "ok"
        interrupted = pool._workers[0]
        assert interrupted is not None

        def interrupt(*args, **kwargs):
            raise KeyboardInterrupt

        monkeypatch.setattr(verify_module, "select", types.SimpleNamespace(select=interrupt))
        with pytest.raises(KeyboardInterrupt):
            pool.check("sleep 60", "1", 120.0)
        monkeypatch.setattr(verify_module, "select", select)
        assert not psutil.pid_exists(interrupted.process.pid)
        verdict = pool.check("c", "1", 10.0)
    finally:
        pool.close()
    assert (verdict.correct, verdict.extracted, verdict.status) == (True, "c", "ok")


@pytest.mark.parametrize("seconds", [0.0, -1.0, float("nan"), 86_400.5, 1e10, float("inf")])
def test_a_time_bound_out_of_range_is_refused_before_any_check(fake_workers, seconds):
    """A bound over MAX_TIMEOUT_SECONDS (a day) overflowed select's timeout after the check had
    been sent to a worker (OverflowError: timestamp out of range), and the worker stayed busy with
    it; it is a ValueError before any worker starts."""
    starts = fake_workers("ok")
    pool = MathVerifier(num_workers=1)
    try:
        with pytest.raises(ValueError, match=r"timeout_seconds must be in \(0, 86400\]"):
            pool.check("a", "1", seconds)
    finally:
        pool.close()
    assert not starts.exists()


def test_close_leaves_no_worker_process_and_workers_ignore_the_terminals_ctrl_c(fake_workers):
    """`close` kills and reaps every worker (no process left, not even a zombie); workers run in their
    own session, so the Ctrl-C that asks a training run to stop (SIGINT to the terminal's process
    group) does not kill the checks in flight, which would judge them errors (incorrect)."""
    import os

    import psutil

    fake_workers("ok")
    pool = MathVerifier(num_workers=2)
    try:
        assert [v.status for v in pool.check_batch([("a", "1"), ("b", "1")], 10.0)] == ["ok", "ok"]
        pids = [worker.process.pid for worker in pool._workers if worker is not None]
        assert len(pids) == 2
        assert all(os.getsid(pid) == pid != os.getsid(0) for pid in pids)
    finally:
        pool.close()
    assert not any(psutil.pid_exists(pid) for pid in pids)
    assert pool.check("c", "1", 10.0).status == "ok"  # a closed pool starts workers again
    pool.close()


@pytest.mark.parametrize("num_workers", [0, -1])
def test_a_pool_needs_a_worker(num_workers):
    with pytest.raises(ValueError, match="num_workers must be >= 1"):
        MathVerifier(num_workers=num_workers)


def test_a_forked_child_starts_its_own_workers(fake_workers):
    """After a fork the child must not talk to the parent's workers through the inherited pipes
    (their replies would go to whichever process reads first): it starts its own, and the parent's
    pool keeps working."""
    import json
    import os

    fake_workers("ok")
    pool = MathVerifier(num_workers=1)
    try:
        assert pool.check("a", "1", 10.0).status == "ok"
        parent_worker = pool._workers[0].process.pid
        read_end, write_end = os.pipe()
        child = os.fork()
        if child == 0:  # the child: one check, its worker's pid back to the parent, then exit
            try:
                verdict = pool.check("b", "1", 10.0)
                os.write(write_end, json.dumps([verdict.extracted, pool._workers[0].process.pid]).encode())
                pool.close()
            finally:
                os._exit(0)
        os.close(write_end)
        with os.fdopen(read_end) as handle:
            extracted, child_worker = json.loads(handle.read())
        os.waitpid(child, 0)
        assert extracted == "b"
        assert child_worker != parent_worker
        assert pool.check("c", "1", 10.0).extracted == "c"
        assert pool._workers[0].process.pid == parent_worker
    finally:
        pool.close()


def test_a_worker_restarted_late_in_a_batch_serves_a_batch_after_its_start_deadline(fake_workers, monkeypatch):
    """A worker that dies while checks are pending is restarted without waiting; when the other worker
    finishes the batch first, the new one sends its "ready" after the batch returned. The next batch
    came after the restart's start deadline (120 s: the next training step or evaluation chunk), so
    no select ran (the bound already past) and the "ready" waiting in its pipe was never read: the
    batch failed with "the math-verify worker process failed to start". The pool's clock is moved
    200 s on between the batches."""
    fake_workers("ok,ok,slow:4")
    offset = [0.0]
    clock = types.SimpleNamespace(monotonic=lambda: time.monotonic() + offset[0], sleep=time.sleep)
    monkeypatch.setattr(verify_module, "time", clock)
    pool = MathVerifier(num_workers=2)
    try:
        # worker 1 sleeps 1 s on its first check, so worker 0's death is seen while b and c are
        # pending (and a restart is due) on any machine, and finishes b and c long before the
        # restarted worker's 4 s start (with "a" at once, a loaded machine could finish a, b and c
        # before seeing the death: no restart, nothing to test)
        first = pool.check_batch([("die", "1"), ("sleep 1", "1"), ("b", "1"), ("c", "1")], 10.0)
        assert [v.status for v in first] == ["error", "ok", "ok", "ok"]
        restarted = pool._workers[0]
        assert restarted is not None and not restarted.ready  # its start takes 4 s
        assert select.select([restarted.read_fd], [], [], 60.0)[0]  # now its "ready" is in the pipe
        offset[0] += 200.0
        second = pool.check_batch([("d", "1"), ("e", "1")], 10.0)
    finally:
        pool.close()
    assert [(v.status, v.extracted) for v in second] == [("ok", "d"), ("ok", "e")]
