"""`ict.runs.checkpoint` on its own (no training run): what a checkpoint restores, which ones are
kept, and what a resumed run keeps of metrics.jsonl. The end-to-end resume tests are in
tests/test_train.py, test_train_interrupts.py, test_resume.py and test_faults.py."""

from __future__ import annotations

import json
import os
import random
import re
import stat
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import build_tiny_model

from ict.core.errors import UsageError
from ict.runs.checkpoint import (
    COMPLETE_MARKER,
    append_line,
    checkpoint_step,
    complete_checkpoints,
    current_umask,
    latest_checkpoint,
    load_checkpoint,
    save_checkpoint,
    truncate_jsonl,
    verify_checkpoint,
)


def _model_and_optimizer(seed: int = 0):
    model = build_tiny_model(40, seed=seed, hidden_size=8, layers=1)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2, foreach=False)
    return model, optimizer


def _draws() -> tuple[float, float, float]:
    """One draw from each global random stream a checkpoint saves (Python, numpy, torch)."""
    return random.random(), float(np.random.rand()), float(torch.rand(()))


def test_a_checkpoint_restores_weights_optimizer_state_and_every_random_stream(tmp_path):
    """After load_checkpoint the model, the AdamW state (moments and step count) and the
    Python, numpy and torch random streams are exactly those at the save: the next draws of a
    plugin's reward, say, and the next update are the uninterrupted run's."""
    model, optimizer = _model_and_optimizer()
    for _ in range(2):
        optimizer.zero_grad()
        model(torch.tensor([[3, 5, 7]]), labels=torch.tensor([[3, 5, 7]])).loss.backward()
        optimizer.step()
    random.seed(11), np.random.seed(12), torch.manual_seed(13)
    _draws()
    path = save_checkpoint(tmp_path, 2, model, optimizer, {"warned": ["collapse"]})
    expected = _draws()
    weights = {name: tensor.clone() for name, tensor in model.state_dict().items()}
    state = optimizer.state_dict()

    other, other_optimizer = _model_and_optimizer(seed=1)  # other weights, no optimizer state
    random.seed(0), np.random.seed(0), torch.manual_seed(0)
    trainer_state = load_checkpoint(path, other, other_optimizer)
    assert _draws() == expected
    assert trainer_state == {"warned": ["collapse"], "step": 2}
    assert all(torch.equal(other.state_dict()[name], weights[name]) for name in weights)
    restored = other_optimizer.state_dict()
    assert restored["state"].keys() == state["state"].keys()
    for index, values in state["state"].items():
        assert restored["state"][index].keys() == values.keys()
        for key, value in values.items():
            assert torch.equal(restored["state"][index][key], value), (index, key)
    assert float(restored["state"][0]["step"]) == 2.0
    assert json.dumps(restored["param_groups"], sort_keys=True) == json.dumps(state["param_groups"], sort_keys=True)


def test_keep_checkpoints_keeps_the_newest_complete_ones(tmp_path):
    """keep=N leaves the N newest complete checkpoints by step (keep=0: every one); the
    temporary and trash directories of a process killed while saving are deleted."""
    model, optimizer = _model_and_optimizer()
    for keep, run in ((2, "two"), (1, "one"), (0, "all")):
        for leftover in (".tmp-step-00000004-x", ".del-step-00000003-7"):
            (tmp_path / run / "checkpoints" / leftover).mkdir(parents=True)
        for step in (1, 2, 3, 9, 10):
            save_checkpoint(tmp_path / run, step, model, optimizer, {}, keep=keep)
        names = [path.name for path in complete_checkpoints(tmp_path / run)]
        assert names == {2: ["step-00000009", "step-00000010"], 1: ["step-00000010"],
                         0: [f"step-{step:08d}" for step in (1, 2, 3, 9, 10)]}[keep], keep
        assert not [path for path in (tmp_path / run / "checkpoints").iterdir()
                    if path.name.startswith(".")]  # no temporary or trash directory left


def test_a_copied_checkpoint_under_another_name_is_not_a_checkpoint(tmp_path):
    """A complete checkpoint copied to ``step-best`` (or ``step-``) is left out of the run's
    checkpoints; the latest stays step 3 (sorting by int('best') was a ValueError traceback on
    every resume)."""
    import shutil

    model, optimizer = _model_and_optimizer()
    for step in (2, 3):
        save_checkpoint(tmp_path, step, model, optimizer, {})
    for name in ("step-best", "step-"):
        shutil.copytree(tmp_path / "checkpoints" / "step-00000003", tmp_path / "checkpoints" / name)
    assert [path.name for path in complete_checkpoints(tmp_path)] == ["step-00000002", "step-00000003"]
    assert checkpoint_step(tmp_path / "checkpoints" / "step-00000012") == 12
    assert checkpoint_step("step-best") is None and checkpoint_step("best-00000012") is None


def test_a_resumed_runs_metrics_keep_exactly_the_steps_up_to_its_checkpoint(tmp_path):
    """truncate_jsonl keeps the lines of steps <= the checkpoint's, byte for byte, and drops the
    later ones and a last line torn by a kill (kept, it broke the summary's read of the file
    once the resumed run appended after it)."""
    path = tmp_path / "metrics.jsonl"
    lines = [json.dumps({"step": step, "reward_mean": step / 4, "entropy": None}) for step in (1, 2, 3)]
    path.write_text("\n".join(lines) + "\n" + '{"step": 4, "rew')
    truncate_jsonl(path, 2)
    assert path.read_text() == lines[0] + "\n" + lines[1] + "\n"
    truncate_jsonl(path, 0)
    assert path.read_text() == ""
    truncate_jsonl(tmp_path / "none.jsonl", 3)  # no file: nothing to do
    assert not (tmp_path / "none.jsonl").exists()


def test_a_corrupted_metrics_line_before_the_last_is_refused_not_dropped(tmp_path):
    """A resume dropped every line that was no JSON, wherever it stood: a corrupted step 2 in the
    middle of metrics.jsonl vanished from the run's curves without a word. Only the last line (one
    a kill tore) is dropped now (blank lines skipped); another is one line naming file:line, and the
    file is left as it was."""
    path = tmp_path / "metrics.jsonl"
    text = '{"step": 1}\n{"step": 2, "rew\n{"step": 3}\n\n{"step": 4, "x"'
    path.write_text(text)
    with pytest.raises(UsageError, match=f"^{re.escape(str(path))}:2: not valid JSON "):
        truncate_jsonl(path, 3)
    assert path.read_text() == text
    path.write_text('{"step": 1}\n{"step": 2}\n\n{"step": 3, "rew\n\n')  # torn, then blank lines
    truncate_jsonl(path, 3)
    assert path.read_text() == '{"step": 1}\n{"step": 2}\n'


@pytest.mark.parametrize(("line", "what"), [
    ('{"step": "3", "reward_mean": 0.5}', "a record's step is '3', not a number"),
    ("[1, 2]", "a record's step is None, not a number"), ('{"step": null}', "a record's step is None, not a number"),
    ('{"step": true}', "a record's step is True, not a number"), ('{"reward_mean": 0.5}', "a record has no step"),
    ("{}", "a record has no step")])
def test_a_metrics_record_whose_step_is_no_number_is_one_line_naming_the_file(tmp_path, line, what):
    """A hand-edited metrics.jsonl whose record has a text step ended a resume in a TypeError
    traceback (str <= int); a JSON line that is no object was dropped silently; a record without
    a step was kept as step 0 by every resume, wherever it stood (and `ict plot` then refused the
    file). Each is now one line naming the file, and the file is left as it was."""
    path = tmp_path / "metrics.jsonl"
    text = json.dumps({"step": 1, "reward_mean": 0.25}) + "\n" + line + "\n"
    path.write_text(text)
    with pytest.raises(UsageError, match=f"^{re.escape(f'{path}: {what} ({line!r}): restore the file')}"):
        truncate_jsonl(path, 2)
    assert path.read_text() == text


def _sizes_only_checkpoint(tmp_path: Path) -> tuple[Path, dict]:
    """A step-1 checkpoint whose manifest records sizes only (as before 2026-11-27, no CRC-32s);
    returns (its path, the full manifest it was written with)."""
    model, optimizer = _model_and_optimizer()
    path = save_checkpoint(tmp_path, 1, model, optimizer, {})
    marker = path / COMPLETE_MARKER
    manifest = json.loads(marker.read_text())
    marker.write_text(json.dumps({"step": 1, "files": {name: {"size": entry["size"]}
                                                       for name, entry in manifest["files"].items()}}))
    return path, manifest


@pytest.mark.parametrize("damage", ["trainer_state.json without step", "rng.json not an object",
                                    "optimizer.safetensors header"])
def test_a_checkpoint_with_sizes_only_still_has_its_json_keys_and_headers_checked(tmp_path, damage):
    """A checkpoint written before the manifest held CRC-32s (sizes only) gets no byte check, so
    a damaged JSON file or safetensors header of the same size is found by verify_checkpoint's
    own checks: one line naming the checkpoint, before a KeyError or a safetensors error could
    come from loading it."""
    path, manifest = _sizes_only_checkpoint(tmp_path)
    verify_checkpoint(path)  # intact: sizes only pass
    if damage.startswith("trainer_state"):
        (path / "trainer_state.json").write_text('{"stap": 1}'.ljust(manifest["files"]["trainer_state.json"]["size"]))
        expected = "trainer_state.json has no 'step'"
    elif damage.startswith("rng"):
        size = manifest["files"]["rng.json"]["size"]
        (path / "rng.json").write_text("[1]".ljust(size))
        expected = "rng.json has no 'numpy'"
    else:
        data = bytearray((path / "optimizer.safetensors").read_bytes())
        data[8] = ord("[")  # the JSON header's opening brace
        (path / "optimizer.safetensors").write_bytes(bytes(data))
        expected = "corrupt or truncated"
    with pytest.raises(UsageError, match="corrupt or truncated") as error:
        verify_checkpoint(path)
    assert expected in str(error.value) and "\n" not in str(error.value)


@pytest.mark.parametrize("saved_layers, model_layers", [(1, 2), (2, 1)])
def test_a_checkpoint_of_another_architecture_is_refused_before_the_optimizer(tmp_path, saved_layers,
                                                                              model_layers):
    """Weights the model lacks (unexpected) or lacks in the checkpoint (missing: they would keep
    their initial values) are one line naming the checkpoint, not a partial load."""
    saved = build_tiny_model(40, hidden_size=8, layers=saved_layers)
    path = save_checkpoint(tmp_path, 1, saved, torch.optim.AdamW(saved.parameters()), {})
    model = build_tiny_model(40, hidden_size=8, layers=model_layers)
    kind = "missing ['model.layers.1" if model_layers > saved_layers else "unexpected ['model.layers.1"
    with pytest.raises(UsageError, match="does not match the model") as error:
        load_checkpoint(path, model, None)
    assert kind in str(error.value)


def test_a_corrupt_checkpoints_fix_names_the_one_to_resume_from_or_a_fresh_start(tmp_path):
    """The refusal of a corrupt checkpoint said "delete it to resume from the previous checkpoint"
    also when the run had no earlier one (deleting it starts the run over). It now names the
    complete checkpoint before it, or says the run starts over."""
    model, optimizer = _model_and_optimizer()
    first = save_checkpoint(tmp_path, 1, model, optimizer, {}, keep=0)
    second = save_checkpoint(tmp_path, 2, model, optimizer, {}, keep=0)
    for path in (first, second):
        weights = path / "model.safetensors"
        weights.write_bytes(weights.read_bytes()[:100])
    with pytest.raises(UsageError, match=rf"delete {second} to resume from {first.name}, or") as error:
        verify_checkpoint(second)
    assert "\n" not in str(error.value)
    with pytest.raises(UsageError, match=r"to start the run over \(it has no earlier checkpoint\)"):
        load_checkpoint(first, model, optimizer)


def test_optimizer_state_that_is_not_a_tensor_survives_the_round_trip():
    """`flatten_optimizer_state`: tensors go to safetensors, anything else (a plain step count)
    to the JSON part; `unflatten_optimizer_state` puts both back under the parameter's index."""
    from ict.runs.checkpoint import flatten_optimizer_state, unflatten_optimizer_state

    state = {"state": {0: {"step": 3, "exp_avg": torch.ones(2)}, 1: {"step": 5}},
             "param_groups": [{"lr": 0.1, "params": [0, 1]}]}
    tensors, meta = flatten_optimizer_state(state)
    assert sorted(tensors) == ["state.0.exp_avg"] and meta["scalars"] == {"0": {"step": 3}, "1": {"step": 5}}
    back = unflatten_optimizer_state(tensors, json.loads(json.dumps(meta)))
    assert back["state"][0]["step"] == 3 and back["state"][1] == {"step": 5}
    assert torch.equal(back["state"][0]["exp_avg"], torch.ones(2))
    assert back["param_groups"] == state["param_groups"]


def test_the_saved_step_is_the_checkpoints_even_when_the_trainer_state_holds_an_older_one(tmp_path):
    """A resumed run's trainer state holds the step it resumed from (trainer_state.json's "step");
    its next checkpoint must record its own step, or the run would resume from the older one."""
    model, optimizer = _model_and_optimizer()
    path = save_checkpoint(tmp_path, 5, model, optimizer, {"step": 2, "consecutive_skips": 0})
    assert load_checkpoint(path, model, optimizer) == {"step": 5, "consecutive_skips": 0}


def test_a_truncated_file_is_refused_by_its_size_in_a_manifest_of_sizes_only(tmp_path):
    """Without CRC-32s (checkpoints before 2026-11-27) the recorded size is the one check of the
    tensor bytes: model.safetensors cut short at its end (its header intact) is refused."""
    path, _ = _sizes_only_checkpoint(tmp_path)
    weights = path / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-4])
    with pytest.raises(UsageError, match="model.safetensors is missing or truncated"):
        verify_checkpoint(path)


def test_the_latest_checkpoint_is_the_newest_complete_one(tmp_path):
    """--resume continues from the newest complete checkpoint (docs/training.md): of steps 2, 9 and
    10 (keep_checkpoints 0) step 10's, not an older one (the resumed run would redo its steps), and
    not a step-11 directory without the COMPLETE marker."""
    model, optimizer = _model_and_optimizer()
    for step in (2, 9, 10):
        save_checkpoint(tmp_path, step, model, optimizer, {"saved_at": step})
    (tmp_path / "checkpoints" / "step-00000011").mkdir()
    latest = latest_checkpoint(tmp_path)
    assert latest is not None and latest.name == "step-00000010"
    assert load_checkpoint(latest, model, optimizer)["saved_at"] == 10
    assert latest_checkpoint(tmp_path / "elsewhere") is None


def test_append_line_starts_a_line_of_its_own_after_a_torn_last_line(tmp_path):
    """A write a full disk cut short leaves a last line without its newline; the next line appended
    (a resume's environment record, a compare command) was glued onto it, and both were lost. It
    starts a line of its own; a file that ends with a newline, an empty or a missing one gets none."""
    path = tmp_path / "log.txt"
    append_line(path, "first")
    append_line(path, "second")
    with open(path, "ab") as handle:
        handle.write(b'{"thi')  # the torn write
    append_line(path, "fourth \u00e9")
    assert path.read_bytes() == b'first\nsecond\n{"thi\nfourth \xc3\xa9\n'
    for before, after in ((b"", b"x\n"), (b"{", b"{\nx\n"), (b"\n", b"\nx\n")):  # one byte torn
        short = tmp_path / "short.txt"
        short.write_bytes(before)
        append_line(short, "x")
        assert short.read_bytes() == after


def test_write_failure_reads_the_file_systems_refusal_of_a_write_and_nothing_else(tmp_path):
    """An OSError gives its reason; safetensors' SafetensorError (no OSError) of an I/O error the
    I/O error after "I/O error: "; any other error, a SafetensorError of a bad header too, None
    (the trainer's one-line "cannot write FILE" is for the file system's refusals only)."""
    import errno

    from safetensors.torch import save_file

    from ict.core.errors import write_failure

    with pytest.raises(Exception) as refused:  # noqa: PT011 - safetensors' own error type
        save_file({"a": torch.zeros(1)}, str(tmp_path / "missing" / "x.safetensors"))
    assert not isinstance(refused.value, OSError)
    assert write_failure(refused.value).startswith("No such file or directory (os error 2)")
    assert write_failure(OSError(errno.ENOSPC, "No space left on device")) == "No space left on device"
    header = type("SafetensorError", (Exception,), {})("Error while deserializing header: HeaderTooLarge")
    assert write_failure(header) is None
    assert write_failure(RuntimeError("I/O error: not a write")) is None


@pytest.mark.parametrize(("umask", "lora"), [(0o022, False), (0o027, True), (0o077, False)])
def test_a_checkpoint_has_the_modes_the_umask_gives_as_the_run_directorys_other_files(tmp_path, umask, lora):
    """A plain open/mkdir under umask U gives 0666 & ~U and 0777 & ~U; the checkpoint directory
    was 0700 (tempfile.mkdtemp) and its .safetensors files 0600 (safetensors), whatever the umask:
    a group sharing the runs could read metrics.jsonl but not the checkpoints (nor a LoRA run's
    adapter/)."""
    model, optimizer = _model_and_optimizer()
    if lora:
        from peft import LoraConfig, get_peft_model

        model = get_peft_model(model, LoraConfig(r=2, target_modules=["q_proj"]))
        optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2, foreach=False)
    previous = os.umask(umask)
    try:
        path = save_checkpoint(tmp_path / "run", 3, model, optimizer, {}, tokenizer=None)
    finally:
        os.umask(previous)
    expected_file, expected_dir = {0o022: (0o644, 0o755), 0o027: (0o640, 0o750), 0o077: (0o600, 0o700)}[umask]
    assert stat.S_IMODE(path.stat().st_mode) == expected_dir
    modes = {file.name: stat.S_IMODE(file.stat().st_mode) for file in path.rglob("*") if file.is_file()}
    assert {"model.safetensors", "optimizer.safetensors", "rng.safetensors", COMPLETE_MARKER} <= set(modes)
    assert ("adapter_model.safetensors" in modes) == lora
    assert modes == dict.fromkeys(modes, expected_file)
    assert all(stat.S_IMODE(directory.stat().st_mode) == expected_dir for directory in path.rglob("*")
               if directory.is_dir())


@pytest.mark.parametrize("lora", [False, True])
def test_a_checkpoint_in_a_set_group_id_directory_stays_in_its_group(tmp_path, lora):
    """A group's shared runs directory is set-group-ID: what is made in it takes its group, and a
    directory the bit too. chmod(2) clears the bit: the step directory lost it, and the marker,
    written after the chmod, took the user's own group (0640: the shared group could read the
    weights but not the marker, so it could neither verify nor load the checkpoint)."""
    shared = tmp_path / "shared"
    shared.mkdir()
    group = os.getegid()
    # another group than the user's own where one is allowed (any, for root): the marker's group shows
    for gid in sorted({*os.getgroups(), *([12345] if os.geteuid() == 0 else [])} - {group}):
        try:
            os.chown(shared, -1, gid)
        except OSError:
            continue
        group = gid
        break
    os.chmod(shared, 0o2770)
    (shared / "probe").mkdir()
    if not (shared / "probe").stat().st_mode & stat.S_ISGID:
        pytest.skip("this file system gives no set-group-ID directories")
    model, optimizer = _model_and_optimizer()
    if lora:  # its adapter/ directory too
        from peft import LoraConfig, get_peft_model

        model = get_peft_model(model, LoraConfig(r=2, target_modules=["q_proj"]))
        optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2, foreach=False)
    previous = os.umask(0o027)
    try:
        path = save_checkpoint(shared / "run", 3, model, optimizer, {}, tokenizer=None)
    finally:
        os.umask(previous)
    directories = [path, *(directory for directory in path.rglob("*") if directory.is_dir())]
    assert len(directories) == 1 + lora
    assert all(stat.S_IMODE(directory.stat().st_mode) == 0o2750 for directory in directories)
    groups = {str(file.relative_to(path)): file.stat().st_gid for file in path.rglob("*")}
    assert COMPLETE_MARKER in groups and groups == dict.fromkeys(groups, group)


def test_saving_a_checkpoint_leaves_the_umask_alone(tmp_path, monkeypatch):
    """The umask is read from /proc/self/status (Linux): setting it to 0o077 and back, to read it,
    made a file another thread (a logger's, a tokenizer's) created in between private (0600)."""
    try:
        status = Path("/proc/self/status").read_text()
    except OSError:
        status = ""
    if "\nUmask:" not in status:
        pytest.skip("no Umask line in /proc/self/status (not Linux, or a kernel before 4.7)")
    model, optimizer = _model_and_optimizer()
    previous = os.umask(0o027)
    set_to = []
    real_umask = os.umask

    def umask(mask: int) -> int:
        set_to.append(mask)
        return real_umask(mask)

    monkeypatch.setattr(os, "umask", umask)
    try:
        assert current_umask() == 0o027
        path = save_checkpoint(tmp_path / "run", 3, model, optimizer, {}, tokenizer=None)
    finally:
        real_umask(previous)
    assert set_to == []
    assert stat.S_IMODE((path / "model.safetensors").stat().st_mode) == 0o640
