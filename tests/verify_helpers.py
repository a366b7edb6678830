"""A stand-in math-verify worker for the pool's tests (`ict.answers.verify.MathVerifier`): it speaks
the worker protocol (length-prefixed pickles) and starts in a second, not seconds."""

from __future__ import annotations

import subprocess
import sys
import types
from pathlib import Path

import ict.answers.verify as verify_module

# argv: a file counting the starts, then one mode per start, the last repeating ("ok"; "fail": exit
# before "ready"; "slow:S": "ready" after S seconds, as math-verify's import on a loaded machine).
# A check's completion "sleep S" answers after S seconds, "die" ends the worker; any other is judged
# correct, as extracted.
FAKE_WORKER = """
import os, pickle, struct, sys, time
with open(sys.argv[1], "a") as handle:
    handle.write("x")
start = len(open(sys.argv[1]).read())
modes = sys.argv[2].split(",")
mode = modes[min(start, len(modes)) - 1]
if mode == "fail":
    sys.exit(3)
if mode.startswith("slow:"):
    time.sleep(float(mode.split(":")[1]))
def send(message):
    payload = pickle.dumps(message)
    os.write(1, struct.pack(">I", len(payload)) + payload)
def read(size):
    data = b""
    while len(data) < size:
        chunk = os.read(0, size - len(data))
        if not chunk:
            sys.exit(0)
        data += chunk
    return data
send(("ready", os.getpid()))
while True:
    task_id, completion, gold, extraction = pickle.loads(read(struct.unpack(">I", read(4))[0]))
    if completion == "die":
        os._exit(1)
    if completion.startswith("sleep "):
        time.sleep(float(completion.split()[1]))
    send((task_id, True, completion, "ok"))
"""


def use_fake_workers(monkeypatch, directory: Path, modes: str) -> Path:
    """Make the pool start `FAKE_WORKER` with ``modes`` ("ok,fail,ok"; the last repeats) instead of
    math-verify workers; returns the file that counts the starts (one ``x`` a start)."""
    script = directory / "fake_worker.py"
    script.write_text(FAKE_WORKER)
    starts = directory / "starts"

    def start_fake(args, **kwargs):
        return subprocess.Popen([sys.executable, str(script), str(starts), modes], **kwargs)

    fake = types.SimpleNamespace(Popen=start_fake, PIPE=subprocess.PIPE, DEVNULL=subprocess.DEVNULL,
                                 TimeoutExpired=subprocess.TimeoutExpired)
    monkeypatch.setattr(verify_module, "subprocess", fake)  # this module's only
    return starts
