"""A run's stop request (`ict.runs.stop.StopRequest`): the first SIGINT or SIGTERM asks the step loop
to stop after its step (one message), the second aborts at once (KeyboardInterrupt); `restore` puts
the previous handlers back; off the main thread no handler is installed."""

from __future__ import annotations

import signal
import threading

import pytest

from ict.runs.stop import StopRequest


class Console:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def print(self, message: str) -> None:
        self.lines.append(message)


@pytest.mark.parametrize("number", [signal.SIGINT, signal.SIGTERM])
def test_the_first_signal_asks_to_stop_and_the_second_aborts(number):
    before = {other: signal.getsignal(other) for other in (signal.SIGINT, signal.SIGTERM)}
    console = Console()
    stop = StopRequest(console)
    try:
        assert stop.requested is False
        signal.raise_signal(number)
        assert stop.requested is True
        expected = {signal.SIGINT: "stopping after this step (checkpointed; Ctrl-C again aborts)",
                    signal.SIGTERM: "SIGTERM: stopping after this step (checkpointed; a second "
                                    "SIGTERM or Ctrl-C aborts)"}
        assert console.lines == [expected[number]]
        with pytest.raises(KeyboardInterrupt):
            signal.raise_signal(number)
        assert len(console.lines) == 1
    finally:
        stop.restore()
    assert {other: signal.getsignal(other) for other in before} == before


def test_either_signal_counts_towards_the_second():
    stop = StopRequest(Console())
    try:
        signal.raise_signal(signal.SIGTERM)
        with pytest.raises(KeyboardInterrupt):
            signal.raise_signal(signal.SIGINT)
    finally:
        stop.restore()


def test_a_console_that_fails_does_not_lose_the_request():
    class Broken:
        def print(self, message: str) -> None:
            raise OSError("closed")

    stop = StopRequest(Broken())
    try:
        signal.raise_signal(signal.SIGINT)
        assert stop.requested is True
    finally:
        stop.restore()


def test_off_the_main_thread_no_handler_is_installed():
    before = signal.getsignal(signal.SIGINT)
    made: list[StopRequest] = []
    thread = threading.Thread(target=lambda: made.append(StopRequest(Console())))
    thread.start()
    thread.join()
    assert len(made) == 1 and made[0].previous == {} and made[0].requested is False
    assert signal.getsignal(signal.SIGINT) is before
    made[0].restore()
    assert signal.getsignal(signal.SIGINT) is before
