"""Sizes no machine here can hold are refused in one line (exit 2) before the model loads:
completions a step (`ict train --num-generations`), completions a problem (`ict eval --n`) and
generated reasoning-gym problems (``rg:...:size=``, ``--dataset-size``), each at least
`ITEM_BYTES` (a completion) or `PROBLEM_BYTES` (a problem) of memory, against the machine's RAM + swap."""

from __future__ import annotations

import sys

import pytest

import ict.core.errors as errors
from ict.cli import main
from ict.core.errors import ITEM_BYTES, PROBLEM_BYTES, UsageError
from ict.data.benchmark_names import parse_reasoning_gym_name
from ict.data.training_data import reasoning_gym_problems
from ict.evaluation.evaluate import EvalConfig
from ict.training.config import TrainConfig

GIB = 2**30


@pytest.fixture
def one_gib_machine(monkeypatch) -> None:
    monkeypatch.setattr(errors, "machine_memory_bytes", lambda: GIB)


def test_the_bound_is_below_what_a_completion_holds() -> None:
    """Each completion of a rollout holds its own list of token ids (`Rollout.completion_ids`), an
    object of at least `sys.getsizeof([])` bytes, and a pointer to it; each generated problem its
    `Problem` object, the object's `__dict__`, its reasoning-gym entry (a dict), its prompt and
    its slot in the list (a one-digit chain_sum, the shortest of questions)."""
    from ict.data.benchmarks import load_reasoning_gym

    assert (ITEM_BYTES, PROBLEM_BYTES) == (64, 256)
    assert ITEM_BYTES <= sys.getsizeof([]) + 8
    trained = reasoning_gym_problems("chain_sum", 3, 0, {"min_terms": 2, "max_terms": 2, "min_digits": 1,
                                                         "max_digits": 1})
    evaluated = load_reasoning_gym("rg:chain_sum:min_terms=2:max_terms=2:min_digits=1:max_digits=1:size=3").problems
    for problem in (*trained, *evaluated):
        held = (sys.getsizeof(problem) + sys.getsizeof(vars(problem)) + sys.getsizeof(problem.entry)
                + sys.getsizeof(problem.prompt) + 8)
        assert PROBLEM_BYTES <= held


def test_train_config_refuses_completions_a_step_past_the_machines_memory(one_gib_machine) -> None:
    """1 GiB holds 2**30 / 64 = 16,777,216 completions: 8 x 2,097,152 are accepted, 8 x 2,097,153
    (16,777,224) refused."""
    TrainConfig(prompts_per_step=8, num_generations=2_097_152).validate()
    with pytest.raises(UsageError) as error:
        TrainConfig(prompts_per_step=8, num_generations=2_097_153).validate()
    assert str(error.value) == ("16,777,224 completions a step (prompts_per_step 8 x num_generations 2097153) need at "
                                "least 1 GiB of memory (64 bytes each), more than this machine's 1.0 GiB of RAM + "
                                "swap: lower num_generations or prompts_per_step")


def test_eval_config_and_rg_sizes_refuse_past_the_machines_memory(one_gib_machine) -> None:
    EvalConfig(num_samples=16_777_216, ks=(1,)).validate()
    with pytest.raises(UsageError, match=r"^16,777,217 completions a problem \(--n\) need at least 1 GiB .*: lower --n$"):
        EvalConfig(num_samples=16_777_217, ks=(1,)).validate()
    # problems: 2**30 / 256 = 4,194,304
    assert parse_reasoning_gym_name("rg:chain_sum:size=4194304")[2] == 4_194_304
    with pytest.raises(UsageError) as error:
        parse_reasoning_gym_name("rg:chain_sum:size=4194305")
    assert str(error.value) == ("4,194,305 problems of 'rg:chain_sum:size=4194305' need at least 1 GiB of memory "
                                "(256 bytes each), more than this machine's 1.0 GiB of RAM + swap: lower size")
    with pytest.raises(UsageError, match=r"^4,194,305 problems of reasoning-gym task 'chain_sum' .*\(256 bytes each\)"):
        reasoning_gym_problems("chain_sum", 4_194_305, 0)
    assert len(reasoning_gym_problems("chain_sum", 3, 0)) == 3


@pytest.mark.parametrize("argv", [
    ["train", "--num-generations", "1000000000000", "--device", "cpu", "--num-steps", "1"],
    ["train", "--dataset", "chain_sum", "--dataset-size", "10000000000000", "--device", "cpu", "--num-steps", "1"],
    ["eval", "--n", "10000000000000", "--k", "1", "--benchmarks", "rg:chain_sum:size=2", "--device", "cpu"],
    ["eval", "--benchmarks", "rg:chain_sum:size=10000000000000", "--n", "1", "--k", "1", "--device", "cpu"],
])
def test_the_cli_refuses_sizes_no_machine_holds_before_loading_the_model(argv, tiny_model_dir, tmp_path, capsys,
                                                                        monkeypatch) -> None:
    """Hundreds of TiB: `ict train --num-generations 1e12` loaded the model, then ran out of memory
    (MemoryError, or exit 137); `size=` and `--dataset-size` generated problems until it did."""
    import ict.models.loading as loading

    def no_load(*args, **kwargs):
        raise AssertionError("the model was loaded")

    for name in ("load_model_and_tokenizer", "load_inference_model", "load_tokenizer"):
        monkeypatch.setattr(loading, name, no_load)
    out = ["--run-dir", str(tmp_path / "run")] if argv[0] == "train" else ["--output-dir", str(tmp_path / "out")]
    assert main([*argv, "--model", str(tiny_model_dir), *out]) == 2
    error = capsys.readouterr().err.strip()
    assert "bytes each), more than this machine's" in error and "\n" not in error


def test_rg_sizes_in_scientific_notation_are_read_as_the_cli_reads_numbers(one_gib_machine) -> None:
    """``--n 1e1`` and a config file's ``dataset_size: 1e1`` are 10, but ``rg:...:size=1e1`` was
    refused ("size must be an integer ..., got 10.0"), and ``size=1e9`` by that message instead of
    its memory: 10**9 problems x 256 bytes = 238.4 GiB, past 1 GiB."""
    from ict.data.benchmarks import load_reasoning_gym

    assert parse_reasoning_gym_name("rg:chain_sum:size=1e1:seed=7e0")[2:] == (10, 7)
    written = [problem.prompt for problem in load_reasoning_gym("rg:chain_sum:size=1e1:seed=7e0").problems]
    assert written == [problem.prompt for problem in load_reasoning_gym("rg:chain_sum:size=10:seed=7").problems]
    with pytest.raises(UsageError) as error:
        parse_reasoning_gym_name("rg:chain_sum:size=1e9")
    assert str(error.value) == ("1,000,000,000 problems of 'rg:chain_sum:size=1e9' need at least 238 GiB of memory "
                                "(256 bytes each), more than this machine's 1.0 GiB of RAM + swap: lower size")
    for bad, option in (("rg:chain_sum:size=2.5", "size"), ("rg:chain_sum:size=1e999", "size"),
                        ("rg:chain_sum:seed=1.5", "seed")):
        with pytest.raises(UsageError, match=rf"^reasoning-gym {option} must be an integer in "):
            parse_reasoning_gym_name(bad)
