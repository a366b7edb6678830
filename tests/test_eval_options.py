"""`ict eval`'s options: each from `EvalConfig`, checked at its documented bounds before the model
loads (temperature, top-p, k, seeds, the output directory), and reaching the generator as given.
Split from test_evaluate.py."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from ict.cli import main
from ict.evaluation.evaluate import EvalConfig

pytestmark = pytest.mark.usefixtures("one_thread")


def test_sampling_options_are_checked_at_their_documented_bounds():
    """k in 1..n, temperature >= 0 (0: greedy), top-p in (0, 1] (1: no nucleus cut), limit >= 1,
    sampling seeds in [0, 2^32) (as ict train's; the vLLM engine takes them)."""
    from ict.core.errors import UsageError
    from ict.evaluation.evaluate import EvalConfig

    for good in (dict(num_samples=2, ks=(1, 2)), dict(temperature=0.0), dict(top_p=1.0), dict(limit=1),
                 dict(seed=2**32 - 1), dict(seeds=(0, 2**32 - 1))):
        EvalConfig(**good).validate()
    for bad in (dict(num_samples=2, ks=(3,)), dict(ks=(0,)), dict(temperature=-0.1), dict(top_p=0.0),
                dict(top_p=1.01), dict(limit=0), dict(seed=2**32), dict(seeds=(1, 2**32)), dict(seed=-1)):
        with pytest.raises(UsageError):
            EvalConfig(**bad).validate()


def test_a_bad_top_p_or_temperature_is_refused_naming_that_option_and_its_value():
    """--top-p 0 was refused as "--temperature must be >= 0 and --top-p in (0, 1]" at a valid
    temperature, and --temperature -1 the same, without the value given."""
    from ict.core.errors import UsageError
    from ict.evaluation.evaluate import EvalConfig

    for options, message in ((dict(top_p=0.0), "--top-p must be in (0, 1], got 0"),
                             (dict(top_p=1.5), "--top-p must be in (0, 1], got 1.5"),
                             (dict(temperature=-1.0), "--temperature must be 0 (greedy) or >= 1e-06, got -1")):
        with pytest.raises(UsageError) as refusal:
            EvalConfig(**options).validate()
        assert str(refusal.value) == message


def test_a_temperature_too_cold_to_sample_at_is_refused_before_the_model_loads(tiny_model_dir, tmp_path,
                                                                               capsys):
    """At --temperature 1e-40 the logits / T overflow float32 (3 / 1e-40 = 3e40 > 3.4e38) and the
    softmax is NaN: the tiny model's sampler stopped mid-run with a RuntimeError (exit 1, the
    output directory left behind). Now one line, exit 2, nothing written; the bound is ict train's
    (``MIN_TEMPERATURE``, 1e-6); 0 is greedy."""
    from eval_helpers import one_gsm8k_problem

    from ict.core.errors import UsageError

    assert torch.isnan(torch.softmax(torch.tensor([3.0, 1.0]) / 1e-40, dim=-1)).all()
    data, _ = one_gsm8k_problem(tmp_path)
    out = tmp_path / "out"
    assert main(["eval", "--model", str(tiny_model_dir), "--benchmarks", "gsm8k", "--data-dir", str(data),
                 "--output-dir", str(out), "--n", "2", "--k", "1", "--max-new-tokens", "4", "--device", "cpu",
                 "--temperature", "1e-40", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.strip().splitlines() == ["error: --temperature must be 0 (greedy) or >= 1e-06, got 1e-40"]
    assert not out.exists()
    for good in (0.0, 1e-6):
        EvalConfig(temperature=good).validate()
    for bad in (1e-7, 5e-324):
        with pytest.raises(UsageError, match="--temperature must be 0"):
            EvalConfig(temperature=bad).validate()


def test_the_default_output_dir_of_a_model_given_as_dot_is_named_by_its_directory(tmp_path, monkeypatch):
    """runs/eval/<model>: ``--model .`` (a checkpoint directory, from inside it) wrote to runs/eval
    itself, as ``..`` and ``/`` did, the parent of every other default output directory. Now
    the directory's own name; a named model keeps its slug."""
    from pathlib import PurePosixPath

    checkpoint = tmp_path / "checkpoints" / "step-00000200"
    checkpoint.mkdir(parents=True)
    monkeypatch.chdir(checkpoint)
    expected = {".": "step-00000200", "./": "step-00000200", "..": "checkpoints", "/": "model",
                "Qwen/Qwen2.5-0.5B-Instruct": "Qwen_Qwen2.5-0.5B-Instruct", "runs/x/": "runs_x"}
    for model, name in expected.items():
        assert PurePosixPath(EvalConfig(model=model).resolved_output_dir()) == PurePosixPath("runs/eval", name)
    assert EvalConfig(model=".", output_dir="~/out").resolved_output_dir() == Path("~/out").expanduser()


def test_the_vllm_engine_is_seeded_with_the_first_sampling_seed(tiny_model_dir, monkeypatch):
    """The vLLM engine took --seed even with --seeds given, where --seed is unused and unchecked:
    --seeds 5,6 seeded it 0, and --seed 2^40 --seeds 0 passed validation and reached it (vLLM seeds
    numpy, which refuses seeds from 2^32 on). It takes the first of the run's sampling seeds."""
    import ict.models.vllm_backend as vllm_backend
    from ict.evaluation import generator as module

    engine_seeds = []

    class Engine:
        def __init__(self, *args, **kwargs):
            engine_seeds.append(kwargs["seed"])

    monkeypatch.setattr(vllm_backend, "VLLMBackend", Engine)
    monkeypatch.setattr(module, "vllm_installed", lambda: True)
    for settings, first in ((dict(seeds=(5, 6)), 5), (dict(seed=2**40, seeds=(0,)), 0), (dict(seed=7), 7)):
        config = EvalConfig(model=str(tiny_model_dir), device="cpu", backend="vllm", max_new_tokens=8, **settings)
        config.validate()
        assert module.load_generator(config).name == "vllm"
        assert engine_seeds[-1] == first


def test_an_empty_k_list_is_refused_as_empty_not_as_repeated(capsys):
    """``--k ""`` (or ``ks: []`` in a config) said "--k needs distinct values, got " (nothing
    repeats in an empty list); it now asks for a value. A repeated k keeps its message."""
    assert main(["eval", "--model", "m", "--k", "", "--quiet"]) == 2
    assert capsys.readouterr().err.strip() == "error: --k needs at least one value (e.g. --k 1,4)"
    assert main(["eval", "--model", "m", "--k", "1,1", "--quiet"]) == 2
    assert capsys.readouterr().err.strip() == "error: --k needs distinct values, got 1,1"


def test_the_generator_samples_with_the_configured_temperature_top_p_and_length(monkeypatch):
    import types

    from ict.evaluation.evaluate import EvalConfig, Generator
    from ict.models import rollout

    calls = []

    def fake_generate(model, tokenizer, prompts, sampling, **kwargs):
        calls.append((sampling, kwargs))
        n = kwargs["num_samples"]
        return types.SimpleNamespace(completions=[["x"] * n for _ in prompts],
                                     completion_ids=[[[1]] * n for _ in prompts],
                                     finished=[[True] * n for _ in prompts])

    monkeypatch.setattr(rollout, "generate_completions", fake_generate)
    config = EvalConfig(temperature=0.8, top_p=0.5, max_new_tokens=7, batch_size=6)
    Generator(None, None, config).generate(["p", "q"], 3, False, 11)
    Generator(None, None, config).generate(["p"], 1, True, 12)
    (sampled, sampled_kwargs), (greedy, greedy_kwargs) = calls
    assert sampled == rollout.SamplingSettings(0.8, 7, 0.5, False) and not sampled.is_greedy
    assert (sampled_kwargs["num_samples"], sampled_kwargs["seed"], sampled_kwargs["batch_size"]) == (3, 11, 6)
    assert greedy.is_greedy and greedy.generate_kwargs() == {"do_sample": False}
    assert (greedy_kwargs["num_samples"], greedy_kwargs["seed"]) == (1, 12)


def test_every_eval_option_comes_from_the_dataclass():
    import argparse
    import dataclasses

    from ict.cli import evaluate as eval_command
    from ict.evaluation.evaluate import EvalConfig

    parser = argparse.ArgumentParser(prog="ict")
    subparsers = parser.add_subparsers()
    eval_parser = eval_command.add_parser(subparsers)
    help_text = " ".join(eval_parser.format_help().split())
    for item in dataclasses.fields(EvalConfig):
        assert "--" + item.name.replace("_", "-") in help_text, item.name
        assert item.metadata.get("help"), item.name
    assert "(default: 1,4)" in help_text and "(default: smollm2-135m-instruct)" in help_text
    args = parser.parse_args(["eval", "--n", "3", "--k", "1,2", "--output-dir", "x"])
    assert (args.num_samples, args.ks, args.output_dir) == ("3", "1,2", "x")
