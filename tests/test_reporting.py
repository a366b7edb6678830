"""`ict.runs.reporting` on its own: what metrics.jsonl holds across a resume and what the
end-of-run summary reads back from it (sparklines, window means, what was selected)."""

from __future__ import annotations

import json
import math

import torch
from rich.console import Console

from ict.runs.reporting import (
    ENVIRONMENT_FILE,
    MetricsLogger,
    append_environment,
    json_safe,
    phase_lines,
    print_summary,
    selection_summary,
    sparkline,
    step_line,
    summed_top_tokens,
)


def test_json_safe_writes_strict_json():
    assert json_safe({"a": [math.nan, (1, math.inf)], "b": torch.tensor(0.5), "c": -math.inf, "d": 2}) == {
        "a": [None, [1, None]], "b": 0.5, "c": None, "d": 2}


def test_sparkline_scales_rounds_and_leaves_a_gap_for_a_missing_value():
    assert sparkline([0.0, 0.5, 1.0, math.nan, 0.07, 0.08]) == "▁▅█ ▁▂"  # 0.5 -> 3.5 -> rounds up
    assert sparkline([2.0, 2.0]) == "▁▁"
    assert sparkline([math.nan]) == ""


def test_the_summary_reads_back_the_metrics_of_a_resumed_run_once_each(tmp_path):
    """Steps 1-3 logged, the run killed after its checkpoint at step 2, resumed: metrics.jsonl
    holds steps 1, 2 and the resumed 3 and 4, once each, and the summary's windows are their
    means (first 2 steps, last 2 steps)."""
    def line(step: int, reward: float, entropy: float | None) -> dict:
        return {"step": step, "reward_mean": reward, "entropy": entropy}

    first = MetricsLogger(tmp_path, tensorboard=False)
    for step, reward in ((1, 0.0), (2, 0.5), (3, 9.0)):
        first.log(line(step, reward, 1.0))
    first.close()
    resumed = MetricsLogger(tmp_path, tensorboard=False, resume_step=2)
    resumed.log(line(3, 0.25, math.nan))
    resumed.log(line(4, 1.0, 0.5))
    resumed.close()
    written = [json.loads(text) for text in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert written == [line(1, 0.0, 1.0), line(2, 0.5, 1.0), line(3, 0.25, None), line(4, 1.0, 0.5)]
    console = Console(record=True, width=200)
    print_summary(console, tmp_path, {}, {}, None)
    text = console.export_text()
    assert "reward per step   ▁▅▃█  (mean of the first 2 steps 0.250 -> last 2 0.625)" in text
    assert "entropy per step  ██ ▁  (first 2 1.000 -> last 2 0.500 nats)" in text


def test_the_summary_of_a_run_with_a_nan_reward_step_draws_it_as_a_gap(tmp_path):
    """A step whose mean reward was NaN (a plugin reward's NaN) is logged as null, and the end-of-run
    summary failed on it (TypeError in the sparkline) after the run had trained and been evaluated;
    it is a gap, as a null entropy is, and the window means are over the finite steps (first 4:
    (0 + 0.5 + 1) / 3, last 4: (0.5 + 1 + 1) / 3)."""
    logger = MetricsLogger(tmp_path, tensorboard=False)
    for step, reward in enumerate((0.0, 0.5, math.nan, 1.0, 1.0, 0.5, math.nan, 1.0), 1):
        logger.log({"step": step, "reward_mean": reward, "entropy": 1.0})
    logger.close()
    console = Console(record=True, width=200)
    print_summary(console, tmp_path, {}, {}, None)
    assert "reward per step   ▁▅ ██▅ █  (mean of the first 4 steps 0.500 -> last 4 0.833)" in console.export_text()


def test_the_selection_summary_covers_the_selecting_steps_only():
    """Steps of the full-token warm-up, and steps that selected every token, are left out of
    'what was selected'; the token counts add up over the rest, ties in string order."""
    lines = [
        {"full_token_warmup": 1.0, "selected_fraction": 0.5, "selected_token_prob_mean": 0.9,
         "top_selected_tokens": [["x", 50]]},
        {"full_token_warmup": 0.0, "selected_fraction": 1.0, "selected_token_prob_mean": 0.9},
        {"full_token_warmup": 0.0, "selected_fraction": 0.1, "selected_token_prob_mean": 0.2,
         "top_selected_tokens": [["b", 2], ["a", 1]], "top_unselected_tokens": [["z", 1]]},
        {"full_token_warmup": 0.0, "selected_fraction": 0.2, "selected_token_prob_mean": 0.4,
         "top_selected_tokens": [["a", 1], ["c", 3]]},
    ]
    texts = selection_summary(lines)
    assert texts[0].startswith("what was selected (mean over the 2 selecting steps;")
    assert "p(a*) mean 0.30" in texts[1]
    assert texts[2] == "  most often selected: 'c' 3, 'a' 2, 'b' 2"
    assert texts[3] == "  most often unselected: 'z' 1"
    assert summed_top_tokens(lines[2:], 2) == {"selected": [["c", 3], ["a", 2]], "unselected": [["z", 1]]}
    assert selection_summary(lines[:2]) == []


def test_tensorboard_keeps_the_points_up_to_the_checkpoint_and_replaces_the_later_ones(tmp_path):
    """Resumed from step 2: TensorBoard keeps steps 1-2 of the killed attempt (the resumed run does
    not log them again) and shows the resumed run's 3, not the killed attempt's."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    killed = MetricsLogger(tmp_path, tensorboard=True)
    for step in (1, 2, 3):
        killed.log({"step": step, "reward_mean": 0.5})
    killed.close()
    resumed = MetricsLogger(tmp_path, tensorboard=True, resume_step=2)
    for step in (3, 4):
        resumed.log({"step": step, "reward_mean": 1.0})
    resumed.close()
    board = EventAccumulator(str(tmp_path / "tensorboard"))
    board.Reload()
    assert [(event.step, event.value) for event in board.Scalars("train/reward_mean")] == [
        (1, 0.5), (2, 0.5), (3, 1.0), (4, 1.0)]


def test_the_phase_lines_count_what_the_selecting_phase_gained_and_lost():
    """After the warm-up 2 of 4 right (problems 0, 2), at the end 2 of 4 (1, 2): problem 1 gained,
    problem 0 lost, net 0, which is "added nothing"; the warm-up moved the accuracy 0.25 -> 0.5.
    With problem 3 right at the end too: net +1; with none right at the end: net -2, a cost (it
    said "added nothing" too)."""
    before = {"accuracy": 0.25, "num_problems": 4}
    warmup = {"accuracy": 0.5, "correct": [True, False, True, False]}
    after = {"accuracy": 0.5, "num_problems": 4, "correct": [False, True, True, False]}
    lines = phase_lines(before, warmup, after, ("ict", 11, 20))
    assert lines[0] == ("held-out accuracy: before 0.250 -> after the full-token warm-up (step 10) 0.500 -> "
                        "after ict's selection (step 20) 0.500 (4 problems, greedy)")
    assert lines[1] == ("ict's own phase (steps 11-20): 1 problem gained, 1 lost, net +0 of 4: ict's selecting "
                        "phase added nothing on these held-out problems; the warm-up (GRPO on every token) "
                        "moved it +0.250")
    after = {"accuracy": 0.75, "num_problems": 4, "correct": [False, True, True, True]}
    line = phase_lines(before, warmup, after, ("ict", 11, 20))[1]
    assert ": 2 problems gained, 1 lost, net +1 of 4: ict's selecting phase added 1 of 4;" in line
    assert line.endswith("moved it +0.250")
    after = {"accuracy": 0.0, "num_problems": 4, "correct": [False, False, False, False]}
    line = phase_lines(before, warmup, after, ("ict", 11, 20))[1]
    assert ": 0 problems gained, 2 lost, net -2 of 4: ict's selecting phase cost 2 of 4 on these "\
        "held-out problems;" in line


def test_the_phase_lines_say_how_the_evaluations_drew_and_when_they_drew_otherwise():
    """The warm-up's line said "greedy" whatever eval_temperature drew; and a run resumed with
    another eval_temperature (a setting a resume may change) compared its greedy "before" with an
    "after" sampled at 0.6 without a word. Evaluations that record no temperature (older
    eval.json files) are left out of the comparison (`test_an_evaluation_without_a_temperature_is_no_other_drawing`)."""
    before = {"accuracy": 0.25, "num_problems": 4, "temperature": 0.0}
    after = {"accuracy": 0.5, "num_problems": 4, "temperature": 0.6}
    assert phase_lines(before, None, after, None) == [
        "held-out accuracy: before 0.250 -> after 0.500 (4 problems)",
        "not comparable: the held-out evaluations drew otherwise (before greedy, after temperature 0.6; "
        "eval_temperature changed on a resume?)"]
    assert phase_lines({"accuracy": 0.25}, None, {**after, "temperature": 0}, None) == [
        "held-out accuracy: before 0.250 -> after 0.500 (4 problems)"]
    warmup = {"accuracy": 0.5, "correct": [True, False, True, False], "temperature": 0.6}
    sampled = {**after, "correct": [False, True, True, False]}
    lines = phase_lines({**before, "temperature": 0.6}, warmup, sampled, ("ict", 11, 20))
    assert lines[0].endswith("after ict's selection (step 20) 0.500 (4 problems, temperature 0.6)")
    assert len(lines) == 2 and lines[1].startswith("ict's own phase (steps 11-20): 1 problem gained")
    lines = phase_lines(before, {**warmup, "temperature": 0.0}, sampled, ("ict", 11, 20))
    assert lines[0].endswith("(4 problems, temperature 0.6)") and len(lines) == 3
    assert lines[2] == ("not comparable: the held-out evaluations drew otherwise (before greedy, after the "
                        "warm-up greedy, after temperature 0.6; eval_temperature changed on a resume?)")
    lines = phase_lines({**before, "temperature": 0.6}, {**warmup, "temperature": 0.0}, sampled, ("ict", 11, 20))
    assert lines[2].startswith("not comparable: the held-out evaluations drew otherwise (before temperature 0.6, "
                               "after the warm-up greedy, after temperature 0.6;")


def test_an_evaluation_without_a_temperature_is_no_other_drawing():
    """An eval.json written before evaluations recorded their temperature says nothing of how its
    "before" drew: a run at eval_temperature 0.7 throughout, resumed across that change, read it as
    greedy and ended with "not comparable ... (before greedy, after temperature 0.7; eval_temperature
    changed on a resume?)". Only recorded temperatures are compared."""
    before, warmup = {"accuracy": 0.25, "num_problems": 4}, {"accuracy": 0.5, "correct": [True, False, True, False]}
    after = {"accuracy": 0.75, "num_problems": 4, "temperature": 0.7, "correct": [True, True, True, False]}
    for unknown in ({}, {"temperature": None}, {"temperature": True}):  # no number: nothing known
        assert phase_lines({**before, **unknown}, None, after, None) == [
            "held-out accuracy: before 0.250 -> after 0.750 (4 problems)"]
    lines = phase_lines(before, warmup, after, ("ict", 2, 3))
    assert lines[0].endswith("after ict's selection (step 3) 0.750 (4 problems, temperature 0.7)")
    assert len(lines) == 2 and lines[1].startswith("ict's own phase (steps 2-3): 1 problem gained, 0 lost")
    # two recorded temperatures that differ still say so, the unrecorded one left out
    lines = phase_lines(before, {**warmup, "temperature": 0.0}, after, ("ict", 2, 3))
    assert lines[2] == ("not comparable: the held-out evaluations drew otherwise (after the warm-up greedy, "
                        "after temperature 0.7; eval_temperature changed on a resume?)")


def test_each_start_appends_its_first_step_to_the_environment_file(tmp_path):
    append_environment(tmp_path, 1)
    append_environment(tmp_path, 7)
    records = [json.loads(line) for line in (tmp_path / ENVIRONMENT_FILE).read_text().splitlines()]
    assert [record["first_step"] for record in records] == [1, 7]
    assert all("torch" in record["packages"] for record in records)


def test_a_start_after_a_torn_environment_record_keeps_its_own(tmp_path):
    """A resume on a full disk tore its environment.jsonl record (no newline at the end); the next
    start's record was appended onto that line and neither could be read (`ict compare`'s report:
    "with no readable line"). The next start's record is a line of its own."""
    (tmp_path / ENVIRONMENT_FILE).write_text('{"first_step": 1}\n{"first_step": 3, "pyth')
    append_environment(tmp_path, 5)
    lines = (tmp_path / ENVIRONMENT_FILE).read_text().splitlines()
    assert lines[:2] == ['{"first_step": 1}', '{"first_step": 3, "pyth'] and len(lines) == 3
    assert json.loads(lines[2])["first_step"] == 5

def test_tensorboard_leaves_out_a_non_finite_value(tmp_path):
    """A NaN metric (an entropy with no token to average) is null in metrics.jsonl and no point in
    TensorBoard; the step's finite metrics are plotted."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    logger = MetricsLogger(tmp_path, tensorboard=True)
    logger.log({"step": 1, "reward_mean": 0.5, "entropy": math.nan})
    logger.log({"step": 2, "reward_mean": 1.0, "entropy": 0.25})
    logger.close()
    board = EventAccumulator(str(tmp_path / "tensorboard"))
    board.Reload()
    assert [(event.step, event.value) for event in board.Scalars("train/entropy")] == [(2, 0.25)]
    assert [event.step for event in board.Scalars("train/reward_mean")] == [1, 2]


def test_the_step_line_names_a_step_whose_updates_were_skipped():
    """The console's line of a step: a step with skipped (non-finite) updates says how many, its
    undefined entropies as nan; a step without skips says nothing of them."""
    metrics = {"step": 3, "reward_mean": 0.25, "accuracy": 0.5, "entropy": math.nan, "renyi2": 1.5,
               "selected_fraction": 0.1, "response_length_mean": 7.0, "step_seconds": 2.0, "skipped_updates": 2}
    assert step_line(metrics, 10) == ("step    3/10  reward 0.250  acc 0.500  entropy nan  renyi2 1.500  selected "
                                      "0.100  len 7.0  2.0s  SKIPPED 2 non-finite update(s)")
    assert step_line({**metrics, "skipped_updates": 0}, 10).endswith("len 7.0  2.0s")


def test_the_curves_of_a_one_step_run_mark_their_points_on_an_integer_step_axis(tmp_path, monkeypatch):
    """ict train's curves.png: a line through one point draws nothing, and the step axis of one
    step read 0.96, 0.98, ... (MaxNLocator(integer=True) needs two integers in view). A point with
    no finite neighbour now has a marker, and the one tick in view is the step; a key logged null
    (entropy_selected at a step that selects nothing) is drawn as nothing, and a run of steps as a
    plain line."""
    from matplotlib.figure import Figure

    from ict.runs.reporting import plot_curves

    figures = []
    savefig = Figure.savefig
    monkeypatch.setattr(Figure, "savefig", lambda self, *a, **k: (figures.append(self), savefig(self, *a, **k))[1])
    plot_curves(tmp_path, [{"step": 1, "reward_mean": 0.5, "accuracy": 0.25, "entropy": 1.5, "renyi2": 1.0,
                            "entropy_selected": None}])
    ((left, right),) = [figure.axes for figure in figures]
    marked = {line.get_label(): (line.get_marker(), line.get_markevery())
              for axis in (left, right) for line in axis.get_lines()}
    assert marked == {"reward mean": ("o", [0]), "accuracy": ("o", [0]), "Shannon entropy (all)": ("o", [0]),
                      "Renyi-2 entropy (all)": ("o", [0]), "Shannon entropy (selected)": ("None", None)}
    for axis in (left, right):
        low, high = axis.get_xlim()
        assert [tick for tick in axis.get_xticks() if low <= tick <= high] == [1.0]
    figures.clear()
    plot_curves(tmp_path, [{"step": step, "reward_mean": 0.1 * step} for step in (1, 2, 3)])
    ((left, _),) = [figure.axes for figure in figures]
    assert left.get_lines()[0].get_marker() == "None"


def test_the_summary_prints_listed_tokens_and_paths_as_written(tmp_path):
    """The end-of-run summary went through rich's markup: a listed token ' [/' read as a closing tag
    (MarkupError: the trained run ended in a traceback, its held-out and file lines unprinted), and
    '[i]' as italics, printed as ''. Tokens of code and math; a run directory's '[' alike. Every
    line is printed as written."""
    run = tmp_path / "run[b]"
    run.mkdir()
    line = {"step": 1, "reward_mean": 0.5, "entropy": 1.0, "full_token_warmup": 0.0, "selected_fraction": 0.1,
            "top_selected_tokens": [[" [/", 3], ["]", 2], ["[i]", 1]], "top_unselected_tokens": [["[bold red]x", 4]]}
    (run / "metrics.jsonl").write_text(json.dumps(line) + "\n")
    console = Console(record=True, width=300)
    print_summary(console, run, {}, {}, run / "checkpoints" / "step-00000001")
    text = console.export_text()
    assert "  most often selected: ' [/' 3, ']' 2, '[i]' 1\n" in text
    assert "  most often unselected: '[bold red]x' 4\n" in text
    assert f"metrics: {run}/metrics.jsonl\n" in text and f"checkpoint: {run}/checkpoints/step-00000001\n" in text


def test_progress_labels_are_markup_only_where_asked():
    """`ict train`'s bar label is rich markup ("[bold]train": the word in bold); `ict eval`'s, a
    benchmark name, is shown as written (markup=False), brackets and all."""
    from rich.progress import Progress

    from ict.runs.reporting import progress_columns

    progress = Progress()
    progress.add_task("rg:figlet_font:static_word=[/B]", total=1)
    (task,) = progress.tasks
    trained = progress_columns("[bold]train")[0].render(task)
    assert trained.plain == "train" and [str(span.style) for span in trained.spans] == ["bold"]
    assert progress_columns("{task.description}", markup=False)[0].render(task).plain == task.description
