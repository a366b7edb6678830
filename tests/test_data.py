"""Training data sources: files with field mappings, reasoning-gym, hub ids offline, sampling."""

from __future__ import annotations

import json
import random

import pytest

from ict.core.errors import UsageError
from ict.data.training_data import PromptSampler, is_dataset_file, load_training_data, read_records


def test_jsonl_with_nested_field_mapping_and_gsm8k_gold(tmp_path):
    path = tmp_path / "data.jsonl"
    rows = [{"prompt": [{"role": "user", "content": f"q{index}"}],
             "reward_model": {"ground_truth": f"steps #### 1,00{index}"}} for index in range(5)]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    data = load_training_data(str(path), question_field="prompt",
                              answer_field="reward_model.ground_truth", eval_size=2, seed=0)
    assert len(data.train) == 3 and len(data.eval) == 2
    every = data.train + data.eval
    assert sorted(problem.answer for problem in every) == [f"100{index}" for index in range(5)]
    assert all(isinstance(problem.prompt, list) for problem in every)
    assert all(problem.kind == "math" for problem in every)


def test_a_data_file_under_home_loads_with_a_tilde(tmp_path, monkeypatch):
    # `dataset: ~/data.jsonl` in a config file reaches ict unexpanded
    (tmp_path / "data.jsonl").write_text('{"question": "1+1", "answer": "2"}\n{"question": "1+2", "answer": "3"}\n')
    monkeypatch.setenv("HOME", str(tmp_path))
    data = load_training_data("~/data.jsonl")
    assert sorted(problem.answer for problem in data.train) == ["2", "3"]


def test_parquet_and_multiple_choice(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.table({"question": ["2+2?", "3+3?"], "choices": [["3", "4"], ["6", "7"]],
                      "answer": [1, 0]})
    path = tmp_path / "mc.parquet"
    pq.write_table(table, path)
    assert len(read_records(path)) == 2
    data = load_training_data(str(path), choices_field="choices")
    answers = {problem.prompt.splitlines()[0]: problem.answer for problem in data.train}
    assert answers == {"2+2?": "B", "3+3?": "A"}
    # one renderer for training and evaluation: "A) x", as ict.data.benchmarks renders MMLU
    assert "B) 4" in data.train[0].prompt or "B) 7" in data.train[0].prompt


def test_missing_field_and_missing_file_give_usage_errors(tmp_path):
    path = tmp_path / "d.jsonl"
    path.write_text(json.dumps({"q": "x", "a": "1"}) + "\n")
    with pytest.raises(UsageError, match="field 'question' not found"):
        load_training_data(str(path))
    with pytest.raises(UsageError, match="not found"):
        load_training_data(str(tmp_path / "absent.jsonl"))


def test_reasoning_gym_train_and_eval_use_different_seeds():
    options = {"min_terms": 2, "max_terms": 2, "min_digits": 2, "max_digits": 2}
    data = load_training_data("chain_sum", dataset_config=options, dataset_size=20, eval_size=20,
                              seed=0)
    assert len(data.train) == 20 and len(data.eval) == 20
    assert [p.prompt for p in data.train] != [p.prompt for p in data.eval]
    problem = data.train[0]
    assert problem.kind == "reasoning_gym"
    assert problem.scorer.score_answer(answer=problem.answer, entry=problem.entry) == 1.0
    with pytest.raises(UsageError, match="bad reasoning-gym task"):
        load_training_data("chain_sum", dataset_config={"no_such_option": 1})


def test_hub_id_offline_fails_with_one_line_pointing_to_local_files(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(UsageError) as error:
        load_training_data("openai/gsm8k", dataset_subset="main")
    message = str(error.value)
    assert "\n" not in message and "local" in message and "openai/gsm8k" in message


def test_a_hub_dataset_that_fails_to_load_says_why(monkeypatch):
    """Online, a split the dataset lacks was refused as "cannot load hub dataset ... (offline or not
    found): pass a local ... file [ValueError]": datasets' reason (the splits there are) was dropped."""
    import datasets

    from ict.data import training_data

    def load_dataset(path, name, split):
        raise ValueError(f'Unknown split "{split}". Should be one of [\'train\', \'test\'].\nmore detail')

    monkeypatch.setattr(training_data, "hub_reachable", lambda: True)
    monkeypatch.setattr(datasets, "load_dataset", load_dataset)
    with pytest.raises(UsageError) as error:
        load_training_data("openai/gsm8k", dataset_subset="main", dataset_split="validation")
    assert str(error.value) == (
        "cannot load hub dataset 'openai/gsm8k' (subset main, split validation): Unknown split \"validation\". "
        "Should be one of ['train', 'test']. -- offline or not found? pass a local .jsonl/.json/.parquet file "
        "instead, with --question-field/--answer-field")


def test_unknown_dataset_name():
    with pytest.raises(UsageError, match="neither a reasoning-gym task"):
        load_training_data("no_such_task_name")


def test_prompt_sampler_is_a_pure_function_of_the_batch_index():
    from ict.data.training_data import Problem

    problems = [Problem(prompt=str(index), answer=str(index), kind="math") for index in range(10)]
    sampler = PromptSampler(problems, batch_size=4, seed=3)
    first = [[p.prompt for p in sampler.batch(index)] for index in range(5)]
    again = PromptSampler(problems, batch_size=4, seed=3)
    assert [[p.prompt for p in again.batch(index)] for index in (4, 0)] == [first[4], first[0]]
    # every epoch visits each problem once
    epoch = [prompt for batch in first for prompt in batch][:10]
    assert sorted(epoch, key=int) == [str(index) for index in range(10)]


def test_bad_rows_are_refused_or_skipped_with_a_count(tmp_path):
    path = tmp_path / "mixed.jsonl"
    path.write_bytes(b'{"question": "1+1?", "answer": "2"}\n{"question": oops}\n'
                     b'{"question": "  ", "answer": "3"}\n{"prompt": "x", "answer": "4"}\n'
                     b'{"question": "caf\xe9?", "answer": "5"}\n[1, 2]\n{"question": "2+2?", "answer": "4"}\n')
    with pytest.raises(UsageError, match="mixed.jsonl:2: not valid JSON"):
        load_training_data(str(path))
    data = load_training_data(str(path), skip_bad_rows=True)
    assert sorted(problem.answer for problem in data.train + data.eval) == ["2", "4"]
    assert "5 unusable rows skipped" in data.description


def test_held_out_questions_are_never_trained_on(tmp_path):
    """chain_sum with two one-digit terms has 200 distinct questions: 10,000 training draws ask
    them all, so the held-out set (another seed) was wholly in the training set (64 of 64), with
    repeats (52 distinct). Now it is `eval_size` distinct questions and training drops every
    repeat of them; checked against reasoning-gym's own draws."""
    import reasoning_gym

    options = {"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 1}
    data = load_training_data("chain_sum", dataset_config=options, dataset_size=2000, eval_size=64, seed=0)
    held = [p.prompt for p in data.eval]
    assert len(held) == 64 == len(set(held))
    drawn = [entry["question"] for entry in reasoning_gym.create_dataset("chain_sum", size=2000, seed=0, **options)]
    assert len(set(drawn) & set(held)) > 40  # the task is that small: most held-out questions are drawn
    assert [p.prompt for p in data.train] == [q for q in drawn if q not in set(held)]
    assert "left out of training" in data.description
    with pytest.raises(UsageError, match="every training problem asks a held-out question"):
        load_training_data("chain_sum", dataset_config=options, dataset_size=1, eval_size=200, seed=0)

    # a file that repeats its questions: held out by question, not by row
    path = tmp_path / "repeats.jsonl"
    path.write_text("".join(json.dumps({"question": f"q{index % 5}", "answer": str(index % 5)}) + "\n"
                            for index in range(50)))
    data = load_training_data(str(path), eval_size=2, seed=0)
    held = {p.prompt for p in data.eval}
    assert len(data.eval) == 2 == len(held)
    assert len(data.train) == 30 and not held & {p.prompt for p in data.train}
    # without repeats the split is the seeded shuffle's last rows, as before
    path.write_text("".join(json.dumps({"question": f"q{index}", "answer": "1"}) + "\n" for index in range(10)))
    data = load_training_data(str(path), eval_size=3, seed=0)
    order = list(range(10))
    random.Random(0).shuffle(order)
    assert [p.prompt for p in data.eval] == [f"q{index}" for index in order[7:]]
    assert [p.prompt for p in data.train] == [f"q{index}" for index in order[:7]]
    # five questions, eval_size 5: four held out (one is left to train on), and the description says so
    path.write_text("".join(json.dumps({"question": f"q{index}", "answer": "1"}) + "\n" for index in range(5)))
    data = load_training_data(str(path), eval_size=5, seed=0)
    assert (len(data.eval), len(data.train)) == (4, 1)
    assert "only 4 of eval_size 5 held out" in data.description


def test_a_run_started_before_the_distinct_rule_resumes_with_its_draws(tmp_path):
    """held_out_rule=draws is the rule before 2026-11-28 (checked against reasoning-gym's own
    draws and the seeded shuffle); a run's config.yaml written before the option existed resumes
    with it, so a resumed run trains on the problems it started on and evaluates the same set."""
    import reasoning_gym
    import yaml

    from ict.training.config_loading import build_config, save_config

    options = {"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 1}
    data = load_training_data("chain_sum", dataset_config=options, dataset_size=300, eval_size=64, seed=0,
                              held_out_rule="draws")
    draws = [entry["question"] for entry in reasoning_gym.create_dataset("chain_sum", size=64, seed=1_000_003,
                                                                         **options)]
    assert [p.prompt for p in data.eval] == draws and len(set(draws)) < 64
    assert [p.prompt for p in data.train] == [
        entry["question"] for entry in reasoning_gym.create_dataset("chain_sum", size=300, seed=0, **options)]
    path = tmp_path / "rows.jsonl"
    path.write_text("".join(json.dumps({"question": f"q{index % 3}", "answer": "1"}) + "\n" for index in range(9)))
    order = list(range(9))
    random.Random(0).shuffle(order)
    data = load_training_data(str(path), eval_size=4, seed=0, held_out_rule="draws")
    assert [p.prompt for p in data.eval] == [f"q{index % 3}" for index in order[5:]]
    data = load_training_data(str(path), eval_size=4, seed=0)  # distinct: 2 of 3 questions at most
    assert len(data.eval) == 2 and "only 2 of eval_size 4 held out" in data.description

    run = tmp_path / "run"
    run.mkdir()
    save_config(build_config(None, {}, {"run_dir": str(run), "eval_size": "8"}), run / "config.yaml")
    saved = yaml.safe_load((run / "config.yaml").read_text())
    assert saved["held_out_rule"] == "distinct"
    assert build_config(None, {}, {"run_dir": str(run), "resume": "true"}).held_out_rule == "distinct"
    del saved["held_out_rule"]  # written with held_out_sets (the two came together): distinct
    (run / "config.yaml").write_text(yaml.safe_dump(saved))
    assert build_config(None, {}, {"run_dir": str(run), "resume": "true"}).held_out_rule == "distinct"
    del saved["held_out_sets"]  # written before both options existed
    (run / "config.yaml").write_text(yaml.safe_dump(saved))
    assert build_config(None, {}, {"run_dir": str(run), "resume": "true"}).held_out_rule == "draws"
    with pytest.raises(UsageError, match="held_out_rule is 'draws'"):
        build_config(None, {}, {"run_dir": str(run), "resume": "true", "held_out_rule": "distinct"})


def test_a_choice_answer_index_must_name_one_of_the_options():
    """An answer given as an index must be < the number of options (index 4 of four options is
    no option: it read as "E"); a letter is upper-cased and must be one of the options'."""
    from ict.data.training_data import records_to_problems

    def gold(answer, choices=("1", "2", "3", "4")):
        return records_to_problems([{"question": "q", "choices": list(choices), "answer": answer}],
                                   "question", "answer", "choices")[0].answer

    assert [gold(0), gold(3), gold("2"), gold("b"), gold("D")] == ["A", "D", "C", "B", "D"]
    for bad in (4, "4", "E", "e", -1, "²"):  # "²" is a digit (str.isdigit) that int() refuses
        with pytest.raises(UsageError, match="neither an index nor an option letter"):
            gold(bad)


def test_a_choice_answer_index_may_be_an_integral_float():
    """``1.0`` (or its text) is index 1, as ``1`` is (it was 'neither an index nor an option
    letter'); ``1.5`` and ``4.0`` of four options still name no option."""
    from ict.data.training_data import records_to_problems

    def gold(answer):
        return records_to_problems([{"question": "q", "choices": ["1", "2", "3", "4"], "answer": answer}],
                                   "question", "answer", "choices")[0].answer

    assert [gold(1.0), gold("2.0"), gold(0.0)] == ["B", "C", "A"]
    for bad in (1.5, "1.5", 4.0, -1.0):
        with pytest.raises(UsageError, match="neither an index nor an option letter"):
            gold(bad)


def test_a_blank_gold_is_refused_and_a_boolean_is_no_option_index():
    """`checked_answer`: "non-blank text" (a gold of spaces was kept); `gold_index`: None for
    anything but an integer, an integral float or its text, so not for ``True`` (an int in
    Python, which read as option index 1)."""
    from ict.data.rows import checked_answer, gold_index

    for blank in ("", "   ", "\n\t"):
        with pytest.raises(ValueError, match="field 'answer' is empty"):
            checked_answer(blank, "answer")
    assert checked_answer(" 7 ", "answer") == " 7 "
    assert [gold_index(True), gold_index(False), gold_index(1), gold_index(" 2.0 ")] == [None, None, 1, 2]


def test_each_epoch_of_the_prompt_stream_is_a_new_shuffle():
    """The docstring's "a seeded shuffle per epoch": epochs 0, 1 and 2 each visit every problem
    once, and not in one repeated order."""
    from ict.data.training_data import Problem

    problems = [Problem(prompt=str(index), answer=str(index), kind="math") for index in range(10)]
    sampler = PromptSampler(problems, batch_size=10, seed=3)
    epochs = [[p.prompt for p in sampler.batch(index)] for index in range(3)]
    for epoch in epochs:
        assert sorted(epoch, key=int) == [str(index) for index in range(10)]
    assert len({tuple(epoch) for epoch in epochs}) == 3


def test_no_two_seeds_share_an_epochs_order():
    """Runs of different seeds (ict compare's 0, 1, 2) draw unrelated prompt streams: no epoch of
    one seed repeats an epoch of another (a shuffle seeded with seed + epoch gave seed 1's first
    epoch to seed 0's second)."""
    from ict.data.training_data import Problem

    problems = [Problem(prompt=str(index), answer=str(index), kind="math") for index in range(20)]
    orders = {tuple(p.prompt for p in PromptSampler(problems, batch_size=20, seed=seed).batch(epoch))
              for seed in range(4) for epoch in range(4)}
    assert len(orders) == 16


def test_held_out_sets_leave_out_questions_of_tasks_that_pad_them_with_whitespace():
    """leg_counting's questions end in a newline; an evaluation set's questions are stripped."""
    import reasoning_gym

    held = {entry["question"].strip() for entry in reasoning_gym.create_dataset("leg_counting", size=5, seed=0)}
    data = load_training_data("leg_counting", dataset_size=20, seed=0,
                              held_out_sets=["rg:leg_counting:size=5:seed=0"])
    assert len(data.train) <= 15
    assert not {p.entry["question"].strip() for p in data.train} & held


@pytest.mark.parametrize("value", ["true", "YES", "on", "1"])
def test_hub_offline_variables_that_huggingface_hub_reads_as_true_skip_the_network(monkeypatch, value):
    """hub_reachable took only HF_HUB_OFFLINE=1 (or HF_DATASETS_OFFLINE=1) for offline: with
    HF_HUB_OFFLINE=true, which huggingface_hub itself reads as offline, it still opened a
    connection to the hub (3 s of timeout on an offline machine before each load)."""
    import socket

    from ict.data import hub

    connections = []
    monkeypatch.setattr(socket, "create_connection", lambda *args, **kwargs: connections.append(args))
    for name in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"):
        monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
        monkeypatch.delenv("HF_DATASETS_OFFLINE", raising=False)
        monkeypatch.setenv(name, value)
        assert hub.hub_reachable() is False
    assert connections == []


def test_the_draws_rule_leaves_at_least_one_problem_to_train_on(tmp_path):
    """held_out_rule=draws: eval_size at or above the number of rows holds out all but one (the
    last rows of the seeded shuffle), never every row."""
    path = tmp_path / "rows.jsonl"
    path.write_text("".join(json.dumps({"question": f"q{index}", "answer": "1"}) + "\n" for index in range(3)))
    order = list(range(3))
    random.Random(0).shuffle(order)
    data = load_training_data(str(path), eval_size=5, seed=0, held_out_rule="draws")
    assert [p.prompt for p in data.train] == [f"q{order[0]}"]
    assert [p.prompt for p in data.eval] == [f"q{index}" for index in order[1:]]


def test_a_prompt_suffix_ends_the_last_chat_message(tmp_path):
    """A chat-message question takes `prompt_suffix` at the end of its last message (a text
    question at its end)."""
    path = tmp_path / "chat.jsonl"
    rows = [{"question": [{"role": "system", "content": "s"}, {"role": "user", "content": "q"}], "answer": "1"},
            {"question": "t", "answer": "2"}]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    prompts = sorted((p.prompt for p in load_training_data(str(path), prompt_suffix=" Think.").train), key=str)
    assert prompts == [[{"role": "system", "content": "s"}, {"role": "user", "content": "q Think."}], "t Think."]


def test_a_directory_or_file_named_as_a_reasoning_gym_task_leaves_the_task_its_name(tmp_path, monkeypatch):
    """``--dataset chain_sum`` run where a directory ``chain_sum`` (say an earlier --run-dir) or a
    file ``gcd`` is: it was read as that path, "data file chain_sum is a directory" or "unsupported
    data file gcd", and config.yaml named it by its absolute path: no way to train on the task
    from there. The task is generated (reasoning-gym's own draws); a path of another name is a file."""
    import reasoning_gym

    from ict.training.config import TrainConfig

    monkeypatch.chdir(tmp_path)
    (tmp_path / "chain_sum").mkdir()
    (tmp_path / "gcd").write_text("not data\n")
    for task in ("chain_sum", "gcd"):
        data = load_training_data(task, dataset_size=3, seed=5)
        assert [problem.prompt for problem in data.train] == [
            entry["question"] for entry in reasoning_gym.create_dataset(task, size=3, seed=5)]
        config = TrainConfig(dataset=task)
        config.absolute_local_paths()
        assert config.dataset == task
    (tmp_path / "mydata").write_text("not data\n")
    assert is_dataset_file("mydata") and is_dataset_file("chain_sum.jsonl") and not is_dataset_file("org/not_here")
    with pytest.raises(UsageError, match=r"^unsupported data file mydata \(use .jsonl"):
        load_training_data("mydata")
