"""`--resume`'s configuration: the run's config.yaml is the base, the options a resumed run may
change are taken, any other change, an empty or missing config.yaml and one that is not UTF-8
are refused in one line, and the paths it names resolve from any working directory."""

from __future__ import annotations

import pytest

from ict.core.errors import UsageError
from ict.training.config import TrainConfig
from ict.training.config_loading import build_config


def test_resume_continues_with_the_runs_config_yaml_and_refuses_changes(tmp_path):
    """``--resume --run-dir X`` took the defaults for every option not given again (method ict,
    learning rate 2e-5, temperature 1.0 for a GRPO run at 3e-3 and 0.7), and rewrote config.yaml
    to match: now the run's config.yaml is the base, the options that only say how long and how
    visibly it runs may change, and any other change is one line."""
    from ict.training.config_loading import save_config

    run_dir = tmp_path / "run"
    run_dir.mkdir()
    first = build_config(None, {"method": "grpo", "learning_rate": "3e-3", "temperature": "0.7",
                                "num_steps": "4", "run_dir": str(run_dir)}, {"dataset_config.max_terms": "3"})
    save_config(first, run_dir / "config.yaml")
    resumed = build_config(None, {"run_dir": str(run_dir), "resume": True, "num_steps": "6", "progress": False}, {})
    for name in ("method", "learning_rate", "temperature", "dataset_config", "selector", "aggregation"):
        assert getattr(resumed, name) == getattr(first, name), name
    assert (resumed.num_steps, resumed.resume, resumed.progress) == (6, True, False)
    same = build_config(None, {"run_dir": str(run_dir), "resume": True, "method": "grpo", "temperature": "0.7"}, {})
    assert same.to_dict() == {**first.to_dict(), "resume": True}
    for options, name in (({"learning_rate": "2e-5"}, "learning_rate"), ({"method": "ict"}, "method"),
                          ({"weight_decay": "0.5"}, "weight_decay")):
        with pytest.raises(UsageError, match=rf"^--resume continues .*run with its config.yaml, where {name} is"):
            build_config(None, {"run_dir": str(run_dir), "resume": True, **options}, {})
    fresh = tmp_path / "fresh"  # no config.yaml yet: the options as given
    assert build_config(None, {"run_dir": str(fresh), "resume": True}, {}).method == "ict"


@pytest.mark.parametrize(("first", "given"), [("random", "grpo"), ("random", "entropy"), ("ict", "stapo")])
def test_resume_with_another_method_is_refused_as_a_change_not_by_the_runs_selector_options(tmp_path, first,
                                                                                            given):
    """The run's selector options met the new method's checks before the resume's comparison:
    `--resume --method grpo` of a random run said "selector 'all' has no option 'ratio'" (an option
    the user never gave) instead of the refusal of the change. A bad selector option given on
    resume keeps its own message."""
    from ict.training.config_loading import save_config

    run_dir = tmp_path / "run"
    run_dir.mkdir()
    save_config(build_config(None, {"method": first, "run_dir": str(run_dir)}, {}), run_dir / "config.yaml")
    with pytest.raises(UsageError) as error:
        build_config(None, {"run_dir": str(run_dir), "resume": True, "method": given}, {})
    assert str(error.value) == (f"--resume continues {run_dir} with its config.yaml, where method is "
                                f"{first!r}, not {given!r}: drop the option, or start another --run-dir")
    with pytest.raises(UsageError, match=r"^ratio must be in \(0, 1\], got 5"):
        build_config(None, {"run_dir": str(run_dir), "resume": True, "ratio": "5"}, {})


def test_resume_accepts_a_new_value_of_each_option_the_docs_say_it_may_change(tmp_path):
    """docs/training.md lists the options a resumed run may change; each is accepted with another
    value and taken (a name dropped from RESUME_MAY_CHANGE was a refusal the docs deny)."""
    import re
    from pathlib import Path

    from ict.training.config_loading import RESUME_MAY_CHANGE, save_config

    docs = (Path(__file__).resolve().parents[1] / "docs" / "training.md").read_text()
    listed = re.search(r"runs may change \((.*?)\), and any other option", docs, re.S).group(1)
    names = re.findall(r"`(\w+)`", listed)
    assert set(names) == RESUME_MAY_CHANGE - {"resume", "run_dir"}
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    first = build_config(None, {"method": "grpo", "run_dir": str(run_dir), "eval_size": "4"}, {})  # eval_every's
    save_config(first, run_dir / "config.yaml")
    changed = {"num_steps": "7", "device": "cpu", "num_threads": "1", "progress": "false", "tensorboard": "false",
               "profile": "true", "save_every": "3", "keep_checkpoints": "5", "eval_every": "2",
               "eval_temperature": "0.5", "verify_timeout": "9.0"}
    assert set(changed) == set(names)
    resumed = build_config(None, {"run_dir": str(run_dir), "resume": True}, changed)
    for name, value in changed.items():
        assert getattr(resumed, name) != getattr(first, name), name
        assert str(getattr(resumed, name)).lower() == value, name


def test_resume_takes_the_runs_resolution_of_an_auto_option_and_refuses_a_lost_config_yaml(tmp_path):
    """The original command again with --resume: its `statistics_from auto` was refused against
    the run's resolved `logits`. A config.yaml emptied by a kill mid-write (it was rewritten in
    place), or missing beside checkpoints, resumed with every default (another model, 50 steps,
    another learning rate); both are one line now."""
    from ict.training.config_loading import save_config

    run_dir = tmp_path / "run"
    run_dir.mkdir()
    first = build_config(None, {"method": "grpo", "learning_rate": "3e-3", "run_dir": str(run_dir)}, {})
    first.statistics_from = "logits"  # as the trainer saves it, resolved
    save_config(first, run_dir / "config.yaml")
    again = build_config(None, {"method": "grpo", "learning_rate": "3e-3", "run_dir": str(run_dir), "resume": True,
                                "statistics_from": "auto"}, {})
    assert again.statistics_from == "logits"
    first.device = "cpu"
    save_config(first, run_dir / "config.yaml")
    assert build_config(None, {"run_dir": str(run_dir), "resume": True, "device": "auto"}, {}).device == "auto"
    (run_dir / "config.yaml").write_text("")
    with pytest.raises(UsageError, match=r"^--resume: .*config.yaml is empty: restore it"):
        build_config(None, {"run_dir": str(run_dir), "resume": True}, {})
    (run_dir / "config.yaml").unlink()
    (run_dir / "checkpoints" / "step-00000002").mkdir(parents=True)
    (run_dir / "checkpoints" / "step-00000002" / "COMPLETE").write_text("{}")
    with pytest.raises(UsageError, match=r"^--resume: .*config.yaml is missing, but the run has checkpoints"):
        build_config(None, {"run_dir": str(run_dir), "resume": True}, {})


def test_a_resumed_runs_config_yaml_not_utf8_is_a_one_line_error_naming_it(tmp_path):
    """build_config read RUN_DIR/config.yaml with the locale's codec (to see whether it is empty)
    before load_yaml: a byte that is not UTF-8 gave "'utf-8' codec can't decode byte 0xe9 ...",
    a UnicodeDecodeError naming no file."""
    (tmp_path / "config.yaml").write_bytes("num_steps: 1\n# caf\u00e9\n".encode("latin-1"))
    with pytest.raises(UsageError, match=r"config\.yaml: not UTF-8 text") as error:
        build_config(None, {"resume": True, "run_dir": str(tmp_path)}, {})
    assert "\n" not in str(error.value)


def test_a_run_resumed_from_another_directory_reads_the_model_data_and_plugin_it_started_with(
        tmp_path, monkeypatch):
    """A relative --model directory, --dataset file and --plugin file were stored in config.yaml
    as typed, so `--resume` from another working directory found none of them (or another file of
    that name there, trained on silently): config.yaml names them as absolute paths now; hub ids,
    task names, modules and the offline default's name stay as typed, and `~` is expanded."""
    import yaml

    from ict.models.loading import OFFLINE_DEFAULT_MODEL
    from ict.training.config_loading import save_config

    start, elsewhere, run_dir = tmp_path / "start", tmp_path / "elsewhere", tmp_path / "run"
    for directory in (start / "model", elsewhere / "model", run_dir):
        directory.mkdir(parents=True)
    for place in (start, elsewhere):  # the same names in both directories: the worse case
        (place / "sums.jsonl").write_text('{"question": "1 + 1", "answer": "2"}\n')
        (place / "plugin_rel_resume.py").write_text("")
    monkeypatch.chdir(start)
    first = build_config(None, {"model": "model", "dataset": "sums.jsonl", "method": "grpo",
                                "plugin": "json, plugin_rel_resume.py", "run_dir": str(run_dir)}, {})
    save_config(first, run_dir / "config.yaml")
    saved = yaml.safe_load((run_dir / "config.yaml").read_text())
    expected = {"model": f"{start}/model", "dataset": f"{start}/sums.jsonl",
                "plugin": f"json,{start}/plugin_rel_resume.py"}
    assert {name: saved[name] for name in expected} == expected
    monkeypatch.chdir(elsewhere)
    resumed = build_config(None, {"run_dir": str(run_dir), "resume": True, "num_steps": "60"}, {})
    assert {name: getattr(resumed, name) for name in expected} == expected
    with pytest.raises(UsageError, match=r"where dataset is '.*/start/sums.jsonl', not '.*/elsewhere/sums.jsonl'"):
        build_config(None, {"run_dir": str(run_dir), "resume": True, "dataset": "sums.jsonl"}, {})
    monkeypatch.setenv("HOME", str(start))
    home = build_config(None, {"model": "~/model", "dataset": "~/sums.jsonl", "plugin": "~/plugin_rel_resume.py"}, {})
    assert (home.model, home.dataset, home.plugin) == (
        f"{start}/model", f"{start}/sums.jsonl", f"{start}/plugin_rel_resume.py")
    TrainConfig(plugin="~/plugin_rel_resume.py").load_plugins()  # as ict compare loads it first
    (elsewhere / OFFLINE_DEFAULT_MODEL).mkdir()  # the name loads the offline default, not this
    kept = build_config(None, {"model": OFFLINE_DEFAULT_MODEL, "dataset": "chain_sum"}, {})
    assert (kept.model, kept.dataset, kept.plugin) == (OFFLINE_DEFAULT_MODEL, "chain_sum", None)
    hub = build_config(None, {"model": "Qwen/Qwen2.5-0.5B-Instruct", "dataset": "openai/gsm8k"}, {})
    assert (hub.model, hub.dataset) == ("Qwen/Qwen2.5-0.5B-Instruct", "openai/gsm8k")


def test_a_config_yaml_from_before_disable_dropout_resumes_with_dropout_on(tiny_model_dir, arithmetic_task, tmp_path,
                                                                           one_thread):
    """A run's config.yaml written before 2026-11-27 has no ``disable_dropout``: its model's dropout
    (LoRA's too) was on. It resumed with the default, dropout off (another computation than the
    run's), and one with ``lora_dropout > 0`` could not resume at all: "lora_dropout 0.1 needs
    disable_dropout: false", also with --no-disable-dropout given (the run's own config failed the
    check). Now its absence means false: the resumed run ends as the uninterrupted dropout-on run."""
    import io

    import yaml
    from rich.console import Console
    from train_helpers import read_metrics, tiny_config

    from ict.runs.checkpoint import latest_checkpoint
    from ict.training.trainer import train

    options = dict(method="grpo", lora_rank=4, lora_dropout=0.3, disable_dropout=False, num_steps=2)
    whole, stopped = tmp_path / "whole", tmp_path / "stopped"
    train(tiny_config(tiny_model_dir, arithmetic_task, whole, **options), console=Console(file=io.StringIO()))
    train(tiny_config(tiny_model_dir, arithmetic_task, stopped, **{**options, "num_steps": 1}),
          console=Console(file=io.StringIO()))
    saved = yaml.safe_load((stopped / "config.yaml").read_text())
    del saved["disable_dropout"]  # as written before the option existed
    (stopped / "config.yaml").write_text(yaml.safe_dump(saved))
    resumed = build_config(None, {"run_dir": str(stopped), "resume": True, "num_steps": "2"}, {})
    assert (resumed.disable_dropout, resumed.lora_dropout) == (False, 0.3)
    train(resumed, console=Console(file=io.StringIO()))
    timing = ("seconds", "per_second")
    assert [{key: value for key, value in line.items() if not key.endswith(timing)}
            for line in read_metrics(stopped)] == [
        {key: value for key, value in line.items() if not key.endswith(timing)} for line in read_metrics(whole)]
    assert ((latest_checkpoint(stopped) / "model.safetensors").read_bytes()
            == (latest_checkpoint(whole) / "model.safetensors").read_bytes())
    # a config.yaml that has the key keeps its value
    saved["disable_dropout"], saved["lora_dropout"] = True, 0.0
    (stopped / "config.yaml").write_text(yaml.safe_dump(saved))
    assert build_config(None, {"run_dir": str(stopped), "resume": True}, {}).disable_dropout is True


@pytest.mark.parametrize(("name", "value", "allowed"), [("entropy_explosion_factor", 0.5, ">= 1"),
                                                         ("entropy_collapse_fraction", 1.5, "in [0, 1]")])
def test_a_stored_value_a_later_check_refuses_is_named_with_its_config_yaml(tmp_path, name, value, allowed):
    """A run started when ``entropy_explosion_factor: 0.5`` was allowed (before 2026-12-01) could
    not resume: "entropy_explosion_factor must be >= 1, got 0.5", no word of where from (the user
    gave no such option: its config.yaml holds it). Now the refusal names the file to edit."""
    import yaml

    from ict.training.config_loading import save_config

    run_dir = tmp_path / "run"
    run_dir.mkdir()
    save_config(build_config(None, {"method": "grpo", "run_dir": str(run_dir)}, {}), run_dir / "config.yaml")
    saved = yaml.safe_load((run_dir / "config.yaml").read_text())
    (run_dir / "config.yaml").write_text(yaml.safe_dump({**saved, name: value}))  # as written then
    with pytest.raises(UsageError) as error:
        build_config(None, {"run_dir": str(run_dir), "resume": True, "num_steps": "6"}, {})
    assert str(error.value) == (f"--resume: config file {run_dir / 'config.yaml'}: {name} must be {allowed}, "
                                f"got {value}")
