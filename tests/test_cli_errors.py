"""Bad input through the command line: one line on stderr naming the problem, exit code 2, no
traceback, and nothing already written is damaged."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def run_cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ict", *args], capture_output=True, text=True, cwd=cwd,
                          env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1",
                               "OMP_NUM_THREADS": "1", "HOME": str(cwd)}, timeout=300)


def assert_one_line_error(result: subprocess.CompletedProcess, *fragments: str) -> None:
    lines = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert result.returncode == 2, (result.returncode, result.stderr[-2000:])
    assert "Traceback" not in result.stderr, result.stderr[-2000:]
    assert len(lines) == 1, result.stderr[-2000:]
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])


@pytest.fixture(scope="module")
def workspace(tmp_path_factory, tiny_model_dir, arithmetic_task) -> Path:
    """A finished 1-step run (to check nothing gets damaged) and the bad inputs."""
    root = tmp_path_factory.mktemp("cli-errors")
    (root / "model").symlink_to(tiny_model_dir)
    shutil.copy(arithmetic_task, root / "task.jsonl")
    (root / "missing_field.jsonl").write_text(json.dumps({"prompt": "2+2?", "answer": "4"}) + "\n")
    (root / "bad_json.jsonl").write_text('{"question": "2+2?", "answer": "4"}\n{"question": oops}\n')
    (root / "empty_prompt.jsonl").write_text(json.dumps({"question": "  ", "answer": "4"}) + "\n")
    (root / "latin1.jsonl").write_bytes('{"question": "caf\u00e9?", "answer": "4"}\n'.encode("latin-1"))
    (root / "unknown_key.yaml").write_text("num_steps: 1\nlearnin_rate: 0.1\n")
    (root / "a_file").write_text("not a directory\n")
    (root / "empty_dir").mkdir()
    no_template = root / "no_template"
    shutil.copytree(tiny_model_dir, no_template)
    config_path = no_template / "tokenizer_config.json"
    config = json.loads(config_path.read_text())
    config.pop("chat_template", None)
    config_path.write_text(json.dumps(config))
    for name in ("chat_template.jinja", "chat_template.json"):
        (no_template / name).unlink(missing_ok=True)
    base = ["train", "--model", "model", "--dataset", "task.jsonl", "--reward", "last_number",
            "--num-steps", "1", "--prompts-per-step", "2", "--num-generations", "2",
            "--max-new-tokens", "4", "--no-progress", "--no-tensorboard"]
    done = run_cli(*base, "--run-dir", "done", cwd=root)
    assert done.returncode == 0, done.stderr[-2000:]
    return root


BASE = ["--model", "model", "--dataset", "task.jsonl", "--reward", "last_number", "--num-steps", "1",
        "--prompts-per-step", "2", "--num-generations", "2", "--max-new-tokens", "4", "--no-progress",
        "--no-tensorboard"]

CASES = [
    (["train", "--method", "ppo"], ["method='ppo'"]),
    (["train", "selector.reference=nope"], ["unknown JS reference"]),
    (["train", "--method", "entropy", "selector.scope=sequence"], ["has no option 'scope'"]),
    (["train", "--ratio", "1.5"], ["ratio must be in (0, 1]"]),
    (["train", "--method", "clip_cov", "selector.cov_low=5", "selector.cov_high=1"], ["cov_low < cov_high"]),
    (["train", "--num-stepz", "3"], []),  # argparse: exit 2, its own usage line
    (["train", *BASE, "--model", "no/such/dir", "--run-dir", "r1"], ["no/such/dir"]),
    (["train", *BASE, "--dataset", "missing_field.jsonl", "--run-dir", "r2"], ["row 1", "question"]),
    (["train", *BASE, "--dataset", "bad_json.jsonl", "--run-dir", "r3"], ["bad_json.jsonl:2", "not valid JSON"]),
    (["train", *BASE, "--dataset", "empty_prompt.jsonl", "--run-dir", "r4"], ["empty question"]),
    (["train", *BASE, "--dataset", "latin1.jsonl", "--run-dir", "r5"], ["not UTF-8"]),
    (["train", "--config", "unknown_key.yaml"], ["learnin_rate", "did you mean learning_rate"]),
    (["train", *BASE, "--run-dir", "a_file/run"], ["cannot create the run directory"]),
    (["train", *BASE, "--model", "no_template", "--run-dir", "r6"], ["no chat template"]),
    (["eval", "--model", "model", "--benchmarks", "nope"], ["unknown benchmark 'nope'"]),
    (["eval", "--model", "model", "--benchmarks", "gsm8k", "--data-dir", ".", "--output-dir", "a_file/x"],
     ["gsm8k.jsonl"]),
    (["eval", "--model", "model", "--n", "2", "--k", "4"], ["--k values must be in 1..n"]),
    (["eval", "--model", "empty_dir", "--benchmarks", "rg:chain_sum:size=2"], ["empty_dir holds no model"]),  # was 5 lines
]


@pytest.mark.slow  # a process start, a subprocess or a long verifier loop
@pytest.mark.parametrize("args,fragments", CASES, ids=[" ".join(case[0][:4]) for case in CASES])
def test_bad_input_is_one_line_and_exit_2(workspace, args, fragments):
    before = {path: path.read_bytes() for path in (workspace / "done").rglob("*") if path.is_file()}
    result = run_cli(*args, cwd=workspace)
    if args[:2] == ["train", "--num-stepz"]:
        assert result.returncode == 2 and "Traceback" not in result.stderr
        return
    assert_one_line_error(result, *fragments)
    after = {path: path.read_bytes() for path in (workspace / "done").rglob("*") if path.is_file()}
    assert before == after  # the finished run is untouched


@pytest.mark.slow  # a process start, a subprocess or a long verifier loop
def test_a_damaged_checkpoint_is_one_line(workspace):
    run = workspace / "damaged"
    shutil.copytree(workspace / "done", run)
    model_file = next(run.glob("checkpoints/step-*/model.safetensors"))
    model_file.write_bytes(model_file.read_bytes()[:1000])  # truncated
    result = run_cli("train", *BASE, "--num-steps", "2", "--run-dir", str(run), "--resume", cwd=workspace)
    assert_one_line_error(result, "is corrupt or truncated", "delete")


def flip_byte(path: Path, offset: int) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= 0x01
    path.write_bytes(bytes(data))


@pytest.mark.slow  # a process start per case
@pytest.mark.parametrize("damage", ["a weight's byte", "a tensor name in the header", "a key of trainer_state.json"])
def test_a_checkpoint_damaged_without_a_change_of_size_is_one_line(workspace, damage):
    """The manifest held sizes only: a flipped byte in the weights was trained on, a flipped
    tensor name raised a TypeError (the refusal's message sliced a set), a flipped JSON key a
    KeyError after the weights were loaded; all exited 1 or 0."""
    run = workspace / f"damaged-{damage.split()[1]}"
    shutil.copytree(workspace / "done", run)
    checkpoint = sorted(run.glob("checkpoints/step-*"))[-1]
    model_file = checkpoint / "model.safetensors"
    if damage == "a weight's byte":
        flip_byte(model_file, model_file.stat().st_size - 3)
    elif damage == "a tensor name in the header":
        header = model_file.read_bytes()[:4096]
        flip_byte(model_file, header.index(b"lm_head.weight") + 9 if b"lm_head.weight" in header
                  else header.index(b"weight") + 2)
    else:
        state = checkpoint / "trainer_state.json"
        state.write_text(state.read_text().replace('"step"', '"stap"'))
    result = run_cli("train", *BASE, "--num-steps", "3", "--run-dir", str(run), "--resume", cwd=workspace)
    assert_one_line_error(result, f"checkpoint {checkpoint}", "delete")


@pytest.mark.slow  # a process start, a subprocess or a long verifier loop
def test_debug_shows_the_traceback(workspace):
    result = run_cli("--debug", "train", *BASE, "--dataset", "bad_json.jsonl", "--run-dir", "r7", cwd=workspace)
    assert result.returncode != 0 and "Traceback" in result.stderr


# In-process (no model loads, nothing trains: each is refused while the options are checked).
REFUSED = [
    (["train", "--learning-rate", "inf"], ["learning_rate", "finite"]),
    (["train", "--lora-alpha", "nan"], ["lora_alpha", "finite"]),
    (["train", "--overlong-penalty-factor", "nan"], ["overlong_penalty_factor", "finite"]),
    (["train", "--max-grad-norm", "-1"], ["max_grad_norm must be >= 0"]),
    (["train", "--adam-beta1", "1"], ["adam_beta1 must be in [0, 1)"]),
    (["train", "--vllm-gpu-memory-utilization", "5"], ["vllm_gpu_memory_utilization must be in (0, 1]"]),
    (["train", "--max-response-length", "0"], ["max_response_length must be >= 1"]),
    (["train", "selector.ratio=nan"], ["option ratio must be a finite number, got nan"]),
    (["train", "selector.ratio=.nan"], ["option ratio must be a finite number, got nan"]),
    (["train", "--method", "random", "selector.seed=.inf"], ["option seed must be a finite number, got inf"]),
    (["train", "--config", "unclosed.yaml"], ["unclosed.yaml", "line 2, column 1"]),
    (["train", "dataset_config.max_terms=[1"], ["dataset_config.max_terms", "line 1, column 3"]),
    (["train", "--plugin", "syntax_error.py"], ["failed to import: SyntaxError"]),
    (["train", "--plugin", "raises.py"], ["failed to import: RuntimeError: boom"]),
    # a module the plugin imports is missing, not the plugin: it was "cannot import plugin ...; give
    # a module on the Python path or a .py file", to a user who gave one
    (["train", "--plugin", "imports_missing.py"],
     ["imports_missing.py' failed to import: ModuleNotFoundError: No module named 'no_such_module_for_ict'"]),
    (["train", "--plugin", "ict_test_imports_missing"],
     ["plugin 'ict_test_imports_missing' failed to import: ModuleNotFoundError: No module named 'no_such_module_for_ict'"]),
    (["train", "--plugin", "no_such_module_for_ict.sub"],
     ["cannot import plugin 'no_such_module_for_ict.sub': No module named 'no_such_module_for_ict'; give a module"]),
    (["eval", "--k", "1,,2"], ["ks", "none empty"]),
    (["eval", "--n", "4", "--k", "2,1,2"], ["--k needs distinct values"]),
    (["compare", "--output-dir", "a_file"], ["a_file is a file"]),
    # an empty directory name was the default (runs/..., train and eval) or the working directory
    (["train", "--run-dir", ""], ["--run-dir is empty"]),
    (["eval", "--output-dir", " "], ["--output-dir is empty"]),
    (["eval", "--data-dir", ""], ["--data-dir is empty"]),
    (["compare", "--output-dir", ""], ["--output-dir is empty"]),  # was output_dir, not the flag
    (["plot", "empty_run", "--out", ""], ["--out is empty"]),
    # a sampling seed out of ict train's range went to the vLLM engine as it was
    (["eval", "--seed", "-1"], ["sampling seeds must lie in [0, 2^32), got [-1]"]),
    (["eval", "--seeds", "0,4294967296"], ["sampling seeds must lie in [0, 2^32), got [4294967296]"]),
    (["compare", "--output-dir", "c", "--eval-benchmarks", "nope"], ["unknown benchmark 'nope'"]),
    (["compare", "--output-dir", "c", "--baselines", "grpo,nope"], ["--baselines 'nope'"]),
    (["compare", "--output-dir", "c", "--eval-limit", "0"], ["--eval-limit must be >= 1"]),
    (["compare", "--output-dir", "c", "--methods", "grpo,nope"], ["method='nope'"]),
    (["compare", "--report-only", "--output-dir", "typo/sub"], ["no runs under typo/sub/runs"]),
    (["compare", "--eval-only", "--output-dir", "typo/sub"], ["no runs under typo/sub/runs"]),
    # --report-only trains nothing: its --eval-steps are no run's steps past num_steps
    (["compare", "--report-only", "--eval-steps", "5", "--output-dir", "typo/sub"], ["no runs under typo/sub/runs"]),
    (["plot", "empty_run", "--out", "x.png"], ["nothing to plot"]),
    (["plot", "empty_run", "--out", "a_dir"], ["--out must name a PNG file"]),
    (["plot", "empty_run", "--out", "xpng"], ["--out must name a PNG file (FILE.png), got 'xpng'"]),
    (["plot", "empty_run", "--out", "x.svg"], ["--out must name a PNG file (FILE.png), got 'x.svg'"]),
    (["inspect", "--samples", "a_dir"], ["a_dir is not a file"]),
    (["inspect", "--prompt", "hi", "--html", "a_dir"], ["--html must name a file"]),
    # a metric's value was read with float(): "0.5" drawn as 0.5, true as 1, "high" and [1] an
    # error without the line; a step true read as 1; no plotted key a matplotlib ValueError
    (["plot", "text_value", "--out", "x.png"], ["text_value/metrics.jsonl:2: reward_mean must be a number or "
                                                "null, got '0.5'"]),
    (["plot", "list_value", "--out", "x.png"], ["list_value/metrics.jsonl:1: entropy must be a number or null"]),
    (["plot", "bool_value", "--out", "x.png"], ["bool_value/metrics.jsonl:1: reward_mean must be a number"]),
    (["plot", "bool_step", "--out", "x.png"], ["bool_step/metrics.jsonl:1: not a metrics record"]),
    (["plot", "no_plotted_key", "--out", "x.png"], ["nothing to plot: no step with a plotted metric"]),
    (["plot", "latin1_run", "--out", "x.png"], ["latin1_run/metrics.jsonl: not UTF-8 text"]),
    # an output under a file, or a name too long, was an OSError (exit 1) after the work
    (["plot", "empty_run", "--out", "a_file/x.png"], ["--out a_file/x.png: a_file is a file, not a directory"]),
    (["plot", "empty_run", "--out", "x" * 300 + ".png"], ["--out xxx", "File name too long"]),
    (["inspect", "--prompt", "hi", "--html", "a_file/x.html"], ["a_file is a file, not a directory"]),
    (["inspect", "--prompt", "hi", "--html", "x" * 300 + ".html"], ["--html xxx", "File name too long"]),
    (["inspect", "--prompt", " \n"], ["--prompt is empty"]),
    (["plot", "empty_run", "a_dir/../empty_run", "--out", "x.png"],  # was pooled with itself: n=2
     ["empty_run is given twice (empty_run, a_dir/../empty_run)"]),
    (["inspect", "--prompt", "hi", "--color", "entropy", "--reference", "seq_mean"],  # was ignored
     ["--reference is the js colour's reference; with --color entropy it changes nothing"]),
]


@pytest.mark.parametrize("args,fragments", REFUSED, ids=[" ".join(case[0]) for case in REFUSED])
def test_a_bad_value_is_refused_in_one_line_before_anything_runs(tmp_path, monkeypatch, capsys, args, fragments):
    """NaN and infinity, values out of their range, lists with a gap or a repeat, YAML that does not
    parse, a plugin that fails to import, names that match nothing, and paths of the wrong kind:
    one ``error:`` line, exit status 2, and nothing written (compare's directory not made)."""
    from ict.cli import main

    monkeypatch.chdir(tmp_path)
    (tmp_path / "unclosed.yaml").write_text("num_steps: [1\n")
    (tmp_path / "syntax_error.py").write_text("def broken(:\n")
    (tmp_path / "raises.py").write_text("raise RuntimeError('boom')\n")
    for name in ("imports_missing.py", "ict_test_imports_missing.py"):
        (tmp_path / name).write_text("import no_such_module_for_ict\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(sys, "dont_write_bytecode", True)  # an imported plugin's __pycache__ is no output
    (tmp_path / "a_file").write_text("not a directory\n")
    (tmp_path / "a_dir").mkdir()
    (tmp_path / "empty_run").mkdir()
    (tmp_path / "empty_run" / "metrics.jsonl").write_text("")
    for name, text in (("text_value", '{"step": 1, "reward_mean": 0.5}\n{"step": 2, "reward_mean": "0.5"}\n'),
                       ("list_value", '{"step": 1, "entropy": [1.0]}\n'),
                       ("bool_value", '{"step": 1, "reward_mean": true}\n'),
                       ("bool_step", '{"step": true, "reward_mean": 0.5}\n'),
                       ("no_plotted_key", '{"step": 1, "custom": 0.5}\n{"step": 2, "reward_mean": null}\n')):
        (tmp_path / name).mkdir()
        (tmp_path / name / "metrics.jsonl").write_text(text)
    (tmp_path / "latin1_run").mkdir()
    (tmp_path / "latin1_run" / "metrics.jsonl").write_bytes('{"step": 1, "note": "é"}\n'.encode("latin-1"))
    before = sorted(path.name for path in tmp_path.iterdir())
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: ") and "Traceback" not in err, err
    for fragment in fragments:
        assert fragment in err, (fragment, err)
    assert sorted(path.name for path in tmp_path.iterdir()) == before


def test_an_argparse_error_is_one_line_with_where_to_find_help(capsys):
    """argparse's errors (an unknown choice, a flag without its value) are one line naming the
    command's --help, not its whole usage text; exit status 2."""
    from ict.cli import main

    for args, command in ((["train", "--dtype", "bogus"], "ict train"), (["eval", "--k"], "ict eval"),
                          (["--no-such-flag"], "ict"), ([], "ict"), (["--debug"], "ict")):
        with pytest.raises(SystemExit) as stopped:
            main(args)
        err = capsys.readouterr().err
        assert stopped.value.code == 2 and err.count("\n") == 1, err
        assert err.startswith(f"{command}: error: ") and err.endswith(f"(see {command} --help)\n"), err
        if args == ["--no-such-flag"]:  # the flag is named, not a missing command
            assert "unrecognized arguments: --no-such-flag" in err, err
        if args in ([], ["--debug"]):
            assert "choose a command: train, eval, compare, plot, inspect" in err, err


def test_debug_after_the_command_shows_the_traceback(monkeypatch):
    """An error's hint says "run with --debug for the traceback"; appended to the command line as
    it was typed (`ict train ... --debug`) it was refused ("unrecognized arguments: --debug")."""
    from ict.cli import main
    from ict.core.errors import UsageError

    monkeypatch.delenv("ICT_DEBUG", raising=False)
    for args in (["train", "--num-steps", "0", "--debug"], ["--debug", "train", "--num-steps", "0"],
                 ["train", "--debug", "--num-steps", "0"]):
        with pytest.raises(UsageError, match="num_steps must be >= 1, got 0"):
            main(args)
    assert main(["train", "--num-steps", "0"]) == 2
    monkeypatch.setenv("ICT_DEBUG", "1")  # the variable the docstring names, as --debug
    with pytest.raises(UsageError, match="num_steps must be >= 1, got 0"):
        main(["train", "--num-steps", "0"])


def test_each_error_has_its_documented_exit_status_and_one_line(capsys, monkeypatch):
    """The module's contract (ict/cli/__init__.py): bad input 2, a diverged run 1, anything else 1
    with the --debug hint (its text on one line), Ctrl-C / SIGTERM 130 "interrupted"; --debug
    raises instead (Ctrl-C excepted)."""
    import argparse

    from ict.cli import _run
    from ict.core.errors import TrainingDiverged, UsageError

    monkeypatch.delenv("HF_ENDPOINT", raising=False)
    hint = " (run with --debug for the traceback)"
    cases = [(UsageError("bad option"), 2, "error: bad option"), (ValueError("bad value"), 2, "error: bad value"),
             (FileNotFoundError("no file"), 2, "error: no file"), (PermissionError("denied"), 2, "error: denied"),
             (NotADirectoryError("not dir"), 2, "error: not dir"), (IsADirectoryError("a dir"), 2, "error: a dir"),
             (TrainingDiverged("3 consecutive updates"), 1, "error: 3 consecutive updates"),
             (RuntimeError("first\n  second"), 1, "error: RuntimeError: first second" + hint),
             (RuntimeError(), 1, "error: RuntimeError: RuntimeError" + hint),
             (KeyboardInterrupt(), 130, "interrupted")]
    for error, status, line in cases:
        def fail(args, error=error):
            raise error

        assert _run(argparse.Namespace(run=fail), debug=False) == status, error
        assert capsys.readouterr().err == line + "\n"
        if not isinstance(error, KeyboardInterrupt):
            with pytest.raises(type(error)):
                _run(argparse.Namespace(run=fail), debug=True)
    assert _run(argparse.Namespace(run=lambda args: None), debug=False) == 0


COMBINATIONS = [  # options each valid alone, refused together before the model loads
    # was refused once the model had loaded and config.yaml and environment.jsonl were written
    (["--rollout-backend", "vllm"], ["rollout_backend=vllm needs vLLM: `pip install ict[vllm]`",
                                     "or use --rollout-backend hf"]),
    # was a run without any evaluation, and no word of it
    (["--eval-every", "1"], ["eval_every 1 evaluates the eval_size held-out problems, and eval_size is 0: set "
                                "eval_size, or eval_every 0"]),
]


@pytest.mark.parametrize("args,fragments", COMBINATIONS, ids=[" ".join(case[0]) for case in COMBINATIONS])
def test_options_that_do_not_go_together_are_refused_before_the_model_loads(
        tmp_path, monkeypatch, capsys, tiny_model_dir, arithmetic_task, args, fragments):
    """One ``error:`` line, exit status 2, no run directory made and no model loaded (vLLM is
    taken as not installed, whatever this machine has)."""
    import importlib.util

    import ict.training.trainer as trainer
    from ict.cli import main

    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *rest: None if name == "vllm" else real_find_spec(name, *rest))
    loaded = []
    real_load = trainer.load_model_and_tokenizer
    monkeypatch.setattr(trainer, "load_model_and_tokenizer", lambda *a, **k: loaded.append(a) or real_load(*a, **k))
    monkeypatch.chdir(tmp_path)
    base = ["train", "--model", str(tiny_model_dir), "--dataset", str(arithmetic_task), "--reward", "last_number",
            "--num-steps", "1", "--prompts-per-step", "2", "--num-generations", "2", "--max-new-tokens", "4",
            "--no-progress", "--no-tensorboard", "--run-dir", "run"]
    assert main([*base, *args]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: ") and "Traceback" not in err, err
    assert loaded == [] and sorted(path.name for path in tmp_path.iterdir()) == []
    for fragment in fragments:
        assert fragment in err, (fragment, err)


@pytest.mark.parametrize("name", ["samples.jsonl", "run.lock", "run.json"])
def test_a_directory_where_eval_writes_a_file_is_one_line_exit_2(tmp_path, capsys, tiny_model_dir, name):
    """A directory named samples.jsonl (run.lock, run.json) in --output-dir is bad input: it was
    exit status 1, "IsADirectoryError: ... (run with --debug for the traceback)"."""
    from ict.cli import main

    (tmp_path / "out" / name).mkdir(parents=True)
    assert main(["eval", "--model", str(tiny_model_dir), "--benchmarks", "rg:chain_sum:size=2", "--n", "2",
                 "--k", "1", "--max-new-tokens", "2", "--device", "cpu", "--backend", "hf", "--quiet",
                 "--output-dir", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: [Errno 21] Is a directory: ") and name in err and err.count("\n") == 1, err
