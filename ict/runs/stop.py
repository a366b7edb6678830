"""A run's stop request: the first Ctrl-C (SIGINT) or SIGTERM asks the step loop to checkpoint
after the current step and stop; the second aborts at once."""

from __future__ import annotations

import contextlib
import signal
import threading
from typing import Any

STOP_MESSAGES = {
    signal.SIGINT: "stopping after this step (checkpointed; Ctrl-C again aborts)",
    signal.SIGTERM: "SIGTERM: stopping after this step (checkpointed; a second SIGTERM or Ctrl-C aborts)",
}
"""What the first signal prints, by the signal that came (a scheduler's SIGTERM is not a Ctrl-C)."""


class StopRequest:
    """First SIGINT/SIGTERM: set `requested` (the loop checkpoints after the current step and
    stops); the second: abort at once. Signal handlers exist only in the main thread."""

    def __init__(self, console: Any) -> None:
        self.requested = False
        self.console = console
        self.previous: dict[int, Any] = {}
        if threading.current_thread() is threading.main_thread():
            for number in (signal.SIGINT, signal.SIGTERM):
                self.previous[number] = signal.signal(number, self._handle)

    def _handle(self, number: int, frame: Any) -> None:
        if self.requested:
            raise KeyboardInterrupt
        self.requested = True
        with contextlib.suppress(Exception):
            self.console.print(STOP_MESSAGES.get(number, STOP_MESSAGES[signal.SIGINT]))

    def restore(self) -> None:
        for number, handler in self.previous.items():
            signal.signal(number, handler)
        self.previous = {}
