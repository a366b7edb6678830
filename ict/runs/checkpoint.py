"""Checkpoints without pickle: safetensors for tensors, JSON for everything else, atomic writes.

Layout of `RUN_DIR/checkpoints/step-00000012/`:
- `model.safetensors`: the model's state dict (shared/tied tensors stored once);
- `optimizer.safetensors` + `optimizer.json`: the optimizer state flattened to tensors named
  `state.<param index>.<key>`, plus the non-tensor parts (param groups, scalar state) as JSON;
- `rng.safetensors` + `rng.json`: torch CPU/CUDA generator states, numpy and Python `random`;
- `trainer_state.json`: step and trainer bookkeeping; `config.json`/tokenizer files so the
  directory also loads with `from_pretrained` (full fine-tuning) or as a peft adapter (`adapter/`);
- `COMPLETE`: written last; a JSON manifest `{"step": N, "files": {relative path: {"size",
  "crc32"}}}` that `verify_checkpoint` checks before anything is loaded (a truncated file, or one
  whose bytes changed, is refused).

Test hook: `ICT_CHECKPOINT_WRITE_DELAY=<seconds>` sleeps that long after each file written into the
temporary directory, so a fault-injection test can SIGKILL the process while a checkpoint is being
written (tests/test_faults.py). Unset in normal use.

Everything is written into a hidden temporary directory that is renamed into place only after
`COMPLETE` exists, so a crash mid-write never leaves a checkpoint that looks complete; loading
uses `safetensors` and `json` only (no unpickling).
"""

from __future__ import annotations

import json
import os
import random
import shutil
import stat
import tempfile
import time
import zlib
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors.torch import load_file, load_model, save_file, save_model

from ict.core.errors import UsageError

COMPLETE_MARKER = "COMPLETE"
CHECKPOINT_PREFIX = "step-"


def checkpoint_dir(run_dir: str | Path) -> Path:
    return Path(run_dir) / "checkpoints"


def truncate_jsonl(path: str | Path, max_step: int) -> None:
    """Keep the lines of a metrics JSONL file whose `step` <= `max_step` (a resumed run's lines
    up to its checkpoint), dropping a torn last line (blank lines skipped, as `ict plot` reads the
    file); a line that is no JSON before the last (a corrupted step: dropping it lost that step
    without a word), a record without a step or whose step is no number (a JSON line that is no
    object, or ``"step": "3"``) is a one-line UsageError naming the file. Atomic: temp file +
    fsync + rename, so a kill during the rewrite leaves the old file intact."""
    path = Path(path)
    if not path.exists():
        return
    kept = []
    numbered = [(number, line) for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1)
                if line.strip()]
    for index, (number, line) in enumerate(numbered):
        try:
            record = json.loads(line)
        except ValueError:
            if index == len(numbered) - 1:
                continue  # the last line, torn by a kill mid-write
            raise UsageError(f"{path}:{number}: not valid JSON ({line[:80]!r}), and not the last line (one a "
                             "kill tore): restore the file, or start another --run-dir") from None
        step = record.get("step") if isinstance(record, dict) else None
        if not isinstance(step, (int, float)) or isinstance(step, bool):  # a hand-edited line: no step to cut at
            what = ("a record has no step" if isinstance(record, dict) and "step" not in record
                    else f"a record's step is {step!r}, not a number")
            raise UsageError(f"{path}: {what} ({line[:80]!r}): restore the file, or start another --run-dir")
        if step <= max_step:
            kept.append(line + "\n")
    write_atomically(path, "".join(kept))


def write_atomically(path: str | Path, text: str) -> None:
    """Replace the file at ``path`` with ``text``: a temp file beside it, fsync, rename, so a kill
    during the write leaves the old file (or none) and never a torn one. UTF-8, whatever the locale."""
    path = Path(path)
    temp = path.with_name(f".{path.name}.tmp")
    with open(temp, "w", encoding="utf-8") as handle:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(temp, path)


def append_line(path: str | Path, line: str) -> None:
    """Append ``line`` and a newline to the text file ``path`` (created if missing), on a line of
    its own: after a last line that a full disk or a kill cut short (no newline at its end) it
    starts a new line, so that the torn line does not swallow it."""
    with open(path, "a+b") as handle:
        end = handle.seek(0, os.SEEK_END)
        torn = False
        if end:
            handle.seek(end - 1)
            torn = handle.read(1) != b"\n"
        handle.write((b"\n" if torn else b"") + line.encode("utf-8") + b"\n")


# ---------------------------------------------------------------------------------------------
# Optimizer and RNG state <-> tensors + JSON

def flatten_optimizer_state(state_dict: dict[str, Any]) -> tuple[dict[str, torch.Tensor],
                                                                 dict[str, Any]]:
    """Split `optimizer.state_dict()` into named tensors and a JSON-able remainder."""
    tensors: dict[str, torch.Tensor] = {}
    scalars: dict[str, dict[str, Any]] = {}
    for index, values in state_dict["state"].items():
        for key, value in values.items():
            if isinstance(value, torch.Tensor):
                tensors[f"state.{index}.{key}"] = value.detach().contiguous().cpu()
            else:
                scalars.setdefault(str(index), {})[key] = value
    return tensors, {"param_groups": state_dict["param_groups"], "scalars": scalars}


def unflatten_optimizer_state(tensors: dict[str, torch.Tensor],
                              meta: dict[str, Any]) -> dict[str, Any]:
    """Inverse of `flatten_optimizer_state`."""
    state: dict[int, dict[str, Any]] = {}
    for name, value in tensors.items():
        _, index, key = name.split(".", 2)
        state.setdefault(int(index), {})[key] = value
    for index, values in meta.get("scalars", {}).items():
        state.setdefault(int(index), {}).update(values)
    return {"state": state, "param_groups": meta["param_groups"]}


def capture_rng_state() -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    tensors = {"torch_cpu": torch.get_rng_state()}
    if torch.cuda.is_available():
        for index, state in enumerate(torch.cuda.get_rng_state_all()):
            tensors[f"torch_cuda_{index}"] = state
    kind, keys, position, has_gauss, gauss = np.random.get_state()
    python_state = random.getstate()
    meta = {
        "numpy": {"kind": kind, "keys": keys.tolist(), "position": int(position),
                  "has_gauss": int(has_gauss), "gauss": float(gauss)},
        "python": [python_state[0], list(python_state[1]), python_state[2]],
    }
    return tensors, meta


def restore_rng_state(tensors: dict[str, torch.Tensor], meta: dict[str, Any]) -> None:
    torch.set_rng_state(tensors["torch_cpu"])
    if torch.cuda.is_available():
        states = [tensors[f"torch_cuda_{index}"] for index in range(torch.cuda.device_count())
                  if f"torch_cuda_{index}" in tensors]
        if states:
            torch.cuda.set_rng_state_all(states)
    numpy_state = meta["numpy"]
    np.random.set_state((numpy_state["kind"], np.array(numpy_state["keys"], dtype=np.uint32),
                         numpy_state["position"], numpy_state["has_gauss"],
                         numpy_state["gauss"]))
    version, internal, gauss = meta["python"]
    random.setstate((version, tuple(internal), gauss))


# ---------------------------------------------------------------------------------------------
# Save / find / load

def _write_json(path: Path, data: Any) -> None:
    path.write_text(json.dumps(data, indent=1, sort_keys=True))


def fsync_path(path: Path) -> None:
    """fsync one file or directory (directory entries: makes a rename durable)."""
    handle = os.open(path, os.O_RDONLY)
    try:
        os.fsync(handle)
    except OSError:  # some file systems refuse fsync on directories
        pass
    finally:
        os.close(handle)


def current_umask() -> int:
    """The process's umask: the ``Umask:`` line of Linux's /proc/self/status (4.7+), read without
    changing it; elsewhere set, then set back (Python has no getter; 0o077 in between: a file that
    another thread, a tokenizer's, a logger's, creates meanwhile is private rather than open to all)."""
    try:
        with open("/proc/self/status", encoding="ascii", errors="replace") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8) & 0o777
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o077)
    os.umask(mask)
    return mask


def _as_umask_allows(root: Path) -> None:
    """``root`` and everything in it given the modes a plain ``open``/``mkdir`` gives them, 0666 for
    a file and 0777 for a directory less the umask: `tempfile.mkdtemp` makes ``root`` 0700 and
    safetensors writes its files 0600, so a checkpoint was unreadable to the group that reads the
    rest of the run directory (one chmod a file, at each save). A directory keeps its set-group-ID
    bit (a shared group directory's, inherited: chmod(2) clears it, and the files written into it
    afterwards, the marker, took the user's own group, unreadable to the shared one)."""
    mask = current_umask()
    for path in (root, *root.rglob("*")):
        if path.is_symlink():
            continue
        if path.is_dir():
            os.chmod(path, (0o777 & ~mask) | (path.stat().st_mode & stat.S_ISGID))
        else:
            os.chmod(path, 0o666 & ~mask)


def _fsync_dir(path: Path) -> None:
    for file in sorted(path.rglob("*")):
        fsync_path(file)
    fsync_path(path)


WRITE_DELAY_ENV = "ICT_CHECKPOINT_WRITE_DELAY"


def _write_delay() -> None:
    """The `ICT_CHECKPOINT_WRITE_DELAY` test hook (see the module docstring)."""
    delay = os.environ.get(WRITE_DELAY_ENV)
    if delay:
        time.sleep(float(delay))


def _remove_dir(path: Path) -> None:
    """Delete a checkpoint directory so that a kill mid-way never leaves a partial directory
    that still looks complete: rename it to a hidden name first (atomic), then delete."""
    trash = path.with_name(f".del-{path.name}-{os.getpid()}")
    os.replace(path, trash)
    shutil.rmtree(trash, ignore_errors=True)


def remove_leftovers(run_dir: str | Path) -> None:
    """Delete the temporary and trash directories (``.tmp-*``, ``.del-*``: a whole checkpoint
    each) that a process killed while saving or deleting a checkpoint left in RUN_DIR/checkpoints;
    by the process holding the run directory, before each save and on resume (a run resumed at its
    last step saves none)."""
    root = checkpoint_dir(run_dir)
    if not root.is_dir():
        return
    for path in root.iterdir():
        if path.is_dir() and path.name.startswith((".tmp-", ".del-")):
            shutil.rmtree(path, ignore_errors=True)


def save_checkpoint(run_dir: str | Path, step: int, model: Any, optimizer: torch.optim.Optimizer,
                    trainer_state: dict[str, Any], tokenizer: Any = None,
                    keep: int = 0) -> Path:
    """Write checkpoint `step` atomically; keep only the newest `keep` complete ones (0: all)."""
    root = checkpoint_dir(run_dir)
    root.mkdir(parents=True, exist_ok=True)
    final = root / f"{CHECKPOINT_PREFIX}{step:08d}"
    remove_leftovers(run_dir)  # one process writes a run directory at a time
    temp = Path(tempfile.mkdtemp(prefix=f".tmp-{final.name}-", dir=root))
    try:
        save_model(model, str(temp / "model.safetensors"))
        _write_delay()
        tensors, meta = flatten_optimizer_state(optimizer.state_dict())
        save_file(tensors, str(temp / "optimizer.safetensors"))
        _write_delay()
        _write_json(temp / "optimizer.json", meta)
        rng_tensors, rng_meta = capture_rng_state()
        save_file(rng_tensors, str(temp / "rng.safetensors"))
        _write_json(temp / "rng.json", rng_meta)
        _write_delay()
        _write_json(temp / "trainer_state.json", {**trainer_state, "step": step})
        if hasattr(model, "peft_config"):
            model.save_pretrained(temp / "adapter")
        else:
            model.config.save_pretrained(temp)
            if getattr(model, "generation_config", None) is not None:
                model.generation_config.save_pretrained(temp)
        if tokenizer is not None:
            tokenizer.save_pretrained(temp)
        _as_umask_allows(temp)
        files = {str(file.relative_to(temp)): {"size": file.stat().st_size, "crc32": _crc32(file)}
                 for file in sorted(temp.rglob("*")) if file.is_file()}
        _fsync_dir(temp)
        _write_delay()
        _write_json(temp / COMPLETE_MARKER, {"step": step, "files": files})
        fsync_path(temp / COMPLETE_MARKER)
        fsync_path(temp)
        if final.exists():
            _remove_dir(final)
        os.replace(temp, final)
        fsync_path(root)
    finally:
        if temp.exists():
            shutil.rmtree(temp, ignore_errors=True)
    if keep > 0:
        for old in complete_checkpoints(run_dir)[:-keep]:
            _remove_dir(old)
    return final


def checkpoint_step(path: str | Path) -> int | None:
    """The step of checkpoint directory `path` (``step-00000012`` -> 12); None for another name."""
    digits = Path(path).name.removeprefix(CHECKPOINT_PREFIX)
    return int(digits) if Path(path).name.startswith(CHECKPOINT_PREFIX) and digits.isdigit() else None


def complete_checkpoints(run_dir: str | Path) -> list[Path]:
    """Complete checkpoints of a run, oldest first (incomplete temp directories and other names
    are ignored)."""
    root = checkpoint_dir(run_dir)
    if not root.is_dir():
        return []
    found = [path for path in root.iterdir()
             if path.is_dir() and checkpoint_step(path) is not None and (path / COMPLETE_MARKER).is_file()]
    return sorted(found, key=checkpoint_step)


def latest_checkpoint(run_dir: str | Path) -> Path | None:
    found = complete_checkpoints(run_dir)
    return found[-1] if found else None


def _crc32(path: Path) -> int:
    """CRC-32 of a file's bytes (a checkpoint manifest's check: any flipped bit, at ~1 GB/s)."""
    checksum = 0
    with open(path, "rb") as handle:
        while chunk := handle.read(1 << 24):
            checksum = zlib.crc32(chunk, checksum)
    return checksum


# The keys each JSON file of a checkpoint must hold (what load_checkpoint and the trainer read)
_JSON_KEYS = {"optimizer.json": ("param_groups",), "rng.json": ("numpy", "python"), "trainer_state.json": ("step",)}


def _corrupt_checkpoint_fix(path: Path, name: str | None = None) -> str:
    """The fix of a bad checkpoint `path`: delete it (`name`, default its path) to resume from the
    checkpoint before it, or, where the run has none, to start the run over."""
    step = checkpoint_step(path)
    earlier = [other for other in complete_checkpoints(path.parent.parent)
               if step is not None and checkpoint_step(other) < step]  # type: ignore[operator]
    then = (f"resume from {earlier[-1].name}" if earlier else
            "start the run over (it has no earlier checkpoint)")
    return f"delete {name or path} to {then}, or start a new run with another --run-dir"


def verify_checkpoint(path: str | Path) -> None:
    """Raise UsageError (one line, with the fix) unless `path` is a complete, intact checkpoint:
    the marker exists, every file of its manifest has its recorded size and CRC-32 (size alone in
    checkpoints written before 2026-11-27), the JSON files parse and hold the keys they are read
    for, and the safetensors headers are valid. Nothing is loaded into a model."""
    from safetensors import safe_open

    path = Path(path)
    fix = _corrupt_checkpoint_fix(path)
    marker = path / COMPLETE_MARKER
    if not marker.is_file():
        raise UsageError(f"checkpoint {path} is incomplete (no {COMPLETE_MARKER} marker): {fix}")
    try:
        text = marker.read_text()
        manifest = json.loads(text) if text.strip().startswith("{") else {"files": {}}
        for name, recorded in manifest.get("files", {}).items():
            recorded = recorded if isinstance(recorded, dict) else {"size": recorded}
            if not (path / name).is_file() or (path / name).stat().st_size != recorded["size"]:
                raise ValueError(f"{name} is missing or truncated")
            if "crc32" in recorded and _crc32(path / name) != recorded["crc32"]:
                raise ValueError(f"{name} does not hold the bytes written (CRC-32)")
        for name, keys in _JSON_KEYS.items():
            data = json.loads((path / name).read_text())
            missing = [key for key in keys if not isinstance(data, dict) or key not in data]
            if missing:
                raise ValueError(f"{name} has no {missing[0]!r}")
        for name in ("model.safetensors", "optimizer.safetensors", "rng.safetensors"):
            with safe_open(str(path / name), framework="pt") as handle:
                list(handle.keys())
    except (OSError, ValueError, UnicodeDecodeError, Exception) as error:
        if isinstance(error, UsageError):
            raise
        detail = str(error).splitlines()[0] if str(error) else type(error).__name__
        raise UsageError(f"checkpoint {path} is corrupt or truncated ({detail}): {fix}") from None


def load_checkpoint(path: str | Path, model: Any, optimizer: torch.optim.Optimizer | None,
                    restore_rng: bool = True) -> dict[str, Any]:
    """Restore model weights, optimizer state and RNG states; return the trainer state.

    The checkpoint is verified first (`verify_checkpoint`), so a corrupt one raises UsageError
    before the model or optimizer is touched."""
    path = Path(path)
    verify_checkpoint(path)
    fix = _corrupt_checkpoint_fix(path, "it")
    try:
        missing, unexpected = load_model(model, str(path / "model.safetensors"),
                                         strict=False, device=str(next(model.parameters()).device))
    except RuntimeError as error:  # e.g. a tensor's shape is not the model's
        raise UsageError(f"checkpoint {path} does not match the model ({str(error).splitlines()[0]}): {fix}") from None
    if missing or unexpected:
        raise UsageError(f"checkpoint {path} does not match the model (missing {sorted(missing)[:3]}, "
                         f"unexpected {sorted(unexpected)[:3]}): {fix}")
    if optimizer is not None:
        device = next(model.parameters()).device
        tensors = load_file(str(path / "optimizer.safetensors"), device=str(device))
        meta = json.loads((path / "optimizer.json").read_text())
        state = unflatten_optimizer_state(tensors, meta)
        for values in state["state"].values():  # AdamW keeps `step` on the CPU unless fused
            if "step" in values and isinstance(values["step"], torch.Tensor):
                values["step"] = values["step"].cpu()
        optimizer.load_state_dict(state)
    if restore_rng:
        restore_rng_state(load_file(str(path / "rng.safetensors")),
                          json.loads((path / "rng.json").read_text()))
    return json.loads((path / "trainer_state.json").read_text())
