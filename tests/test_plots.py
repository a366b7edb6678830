"""`ict plot` and the learning curves: the numbers drawn, read back from the figure's lines and bands
against hand computations (mean over the runs that logged a step, min..max band, line styles)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from matplotlib.collections import LineCollection
from matplotlib.figure import Figure

from ict.cli import main


@pytest.fixture
def saved_figures(monkeypatch):
    """Every figure saved during the test (still readable after plt.close)."""
    figures = []
    savefig = Figure.savefig
    monkeypatch.setattr(Figure, "savefig", lambda self, *args, **kwargs: (figures.append(self),
                                                                          savefig(self, *args, **kwargs))[1])
    return figures


def _write_run(path, records):
    path.mkdir(parents=True)
    (path / "metrics.jsonl").write_text("".join(json.dumps(record) + "\n" for record in records))


def _band(collection, steps):
    """(low, high) at each step of a fill_between band."""
    vertices = collection.get_paths()[0].vertices
    return [(vertices[vertices[:, 0] == step][:, 1].min(), vertices[vertices[:, 0] == step][:, 1].max())
            for step in steps]


def test_plot_draws_the_mean_over_the_runs_of_a_method_and_their_range(tmp_path, saved_figures):
    """--by method pools runs/ict/seed0..2 as one label (n=3): the line is the mean over the runs
    that logged the step (a null or a missing step left out, not read as 0), the band min..max;
    the one grpo run has no band. 'all' keys are solid, 'selected' ones dashed; the knee, a figure
    of the batch's score curves and not of the selected tokens, solid; no empty axis is shown."""
    entropy = {"seed0": [1.0, 2.0, 3.0], "seed1": [2.0, None, 5.0], "seed2": [6.0, 4.0]}
    for seed, values in entropy.items():
        _write_run(tmp_path / "runs" / "ict" / seed,
                   [{"step": step, "entropy": value, "entropy_selected": 0.5 * step, "score_knee_fraction": 0.1}
                    for step, value in enumerate(values, 1)])
    _write_run(tmp_path / "runs" / "grpo" / "seed0", [{"step": step, "entropy": 9.0} for step in (1, 2, 3)])
    runs = [str(tmp_path / "runs" / method / seed) for method, seed in
            (("ict", "seed0"), ("ict", "seed1"), ("ict", "seed2"), ("grpo", "seed0"))]
    assert main(["plot", *runs, "--by", "method", "--out", str(tmp_path / "curves.png")]) == 0
    (figure,) = saved_figures
    handles = figure.legends[0].legend_handles
    colour = {handle.get_label(): handle.get_color() for handle in handles}
    assert {"ict (n=3)", "grpo (n=1)"} <= set(colour)
    axes = {axis.get_title(): axis for axis in figure.axes if axis.get_visible()}
    assert sorted(axes) == ["Paper: score knee", "Shannon entropy"]
    panel = axes["Shannon entropy"]
    lines = {(line.get_color(), line.get_linestyle()): line for line in panel.get_lines()}
    ict_all, ict_selected = lines[(colour["ict (n=3)"], "-")], lines[(colour["ict (n=3)"], "--")]
    assert list(ict_all.get_xdata()) == [1, 2, 3]
    assert list(ict_all.get_ydata()) == pytest.approx([(1 + 2 + 6) / 3, (2 + 4) / 2, (3 + 5) / 2])
    assert list(ict_selected.get_ydata()) == pytest.approx([0.5, 1.0, 1.5])
    assert list(lines[(colour["grpo (n=1)"], "-")].get_ydata()) == [9.0, 9.0, 9.0]
    bands = panel.collections
    assert len(bands) == 2  # ict's two keys; grpo's one run has none
    expected = [[(1, 6), (2, 4), (3, 5)], [(0.5, 0.5), (1.0, 1.0), (1.5, 1.5)]]
    assert sorted(_band(band, [1, 2, 3]) for band in bands) == sorted(expected)
    knee = axes["Paper: score knee"].get_lines()
    assert [line.get_linestyle() for line in knee] == ["-"]


def test_learning_curves_are_drawn_in_percent(tmp_path, saved_figures):
    """pass@k values (fractions) are drawn as percent, the line the mean over seeds."""
    from ict.analysis.plots import plot_learning_curves

    rows = [{"method": "ict", "seed": seed, "step": step, "benchmark": "b", "metric": "pass@1", "problems": 4,
             "value": value} for seed, values in enumerate(([0.25, 0.5], [0.5, 1.0])) for step, value in
            zip((0, 10), values, strict=True)]
    plot_learning_curves(rows, tmp_path / "curves.png")
    (figure,) = saved_figures
    (line,) = figure.axes[0].get_lines()
    assert list(line.get_xdata()) == [0, 10] and list(line.get_ydata()) == pytest.approx([37.5, 75.0])
    assert figure.axes[0].get_ylabel() == "pass@1 (%)"


def test_by_method_pools_run_directories_given_relative_to_one_of_them(tmp_path, saved_figures, monkeypatch):
    """`cd runs/ict/seed0 && ict plot . ../seed1 --by method`: the labels were the parent names of
    the paths as typed, '' and '..', two labels of one run each, instead of one pooled 'ict' (n=2)
    whose line is the mean of the two runs."""
    for seed, values in ((0, [1.0, 2.0]), (1, [3.0, 6.0])):
        _write_run(tmp_path / "runs" / "ict" / f"seed{seed}",
                   [{"step": step, "entropy": value} for step, value in enumerate(values, 1)])
    monkeypatch.chdir(tmp_path / "runs" / "ict" / "seed0")
    assert main(["plot", ".", "../seed1", "--by", "method", "--out", str(tmp_path / "curves.png")]) == 0
    (figure,) = saved_figures
    labels = [handle.get_label() for handle in figure.legends[0].legend_handles]
    assert labels == ["ict (n=2)", "all response tokens", "selected tokens"]
    (line,) = [axis for axis in figure.axes if axis.get_title() == "Shannon entropy"][0].get_lines()
    assert list(line.get_ydata()) == pytest.approx([2.0, 4.0])


def test_the_learning_curve_band_is_the_min_and_max_over_seeds(tmp_path, saved_figures):
    """Mutation test of plot_learning_curves' band: three seeds at steps 0 and 10 (pass@1 0.1,
    0.4, 0.7 then 0.2, 0.3, 1.0) give the band 10..70 then 20..100 percent around the means 40 and
    50."""
    from ict.analysis.plots import plot_learning_curves

    values = {0: [0.1, 0.4, 0.7], 10: [0.2, 0.3, 1.0]}
    rows = [{"method": "ict", "seed": seed, "step": step, "benchmark": "b", "metric": "pass@1", "problems": 10,
             "value": per_seed[seed]} for step, per_seed in values.items() for seed in range(3)]
    plot_learning_curves(rows, tmp_path / "curves.png")
    (figure,) = saved_figures
    (line,) = figure.axes[0].get_lines()
    assert list(line.get_ydata()) == pytest.approx([40.0, 50.0])
    (band,) = figure.axes[0].collections
    assert _band(band, [0, 10]) == [pytest.approx((10.0, 70.0)), pytest.approx((20.0, 100.0))]


def test_a_point_without_a_neighbour_is_drawn_as_a_marker(tmp_path, saved_figures):
    """A line through one point draws nothing: the panels of a one-step run were empty axes, and a
    step between nulls (entropy_selected null at step 2) vanished. Such a point now has a marker
    (hollow for the selected tokens) and, pooled, its min..max as a bar; a point next to another
    finite one has none (the line shows it)."""
    for seed, (reward, entropy) in enumerate(((0.25, 1.0), (0.75, 2.0))):
        _write_run(tmp_path / "runs" / "ict" / f"seed{seed}", [{"step": 1, "reward_mean": reward, "entropy": entropy}])
    _write_run(tmp_path / "runs" / "grpo" / "seed0",
               [{"step": step, "entropy": 3.0, "entropy_selected": value}
                for step, value in ((1, 0.5), (2, None), (3, 0.7), (4, 0.9), (5, None), (6, 1.1))])
    runs = [str(tmp_path / "runs" / method / seed) for method, seed in
            (("ict", "seed0"), ("ict", "seed1"), ("grpo", "seed0"))]
    assert main(["plot", *runs, "--by", "method", "--out", str(tmp_path / "curves.png")]) == 0
    (figure,) = saved_figures
    colour = {handle.get_label(): handle.get_color() for handle in figure.legends[0].legend_handles}
    axes = {axis.get_title(): axis for axis in figure.axes if axis.get_visible()}
    (reward,) = axes["Reward"].get_lines()
    assert (reward.get_marker(), reward.get_markevery(), list(reward.get_ydata())) == ("o", [0], [0.5])
    # the one step's min..max (the band of one step, fill_between's, has no width)
    (bar,) = [collection for collection in axes["Reward"].collections if isinstance(collection, LineCollection)]
    assert bar.get_segments()[0].tolist() == [[1.0, 0.25], [1.0, 0.75]]
    lines = {(line.get_color(), line.get_linestyle()): line for line in axes["Shannon entropy"].get_lines()}
    ict_all = lines[(colour["ict (n=2)"], "-")]
    assert (ict_all.get_marker(), ict_all.get_markevery(), list(ict_all.get_ydata())) == ("o", [0], [1.5])
    assert lines[(colour["grpo (n=1)"], "-")].get_marker() == "None"  # six steps in a row: a line
    selected = lines[(colour["grpo (n=1)"], "--")]
    assert (selected.get_marker(), selected.get_markevery(), selected.get_markerfacecolor()) == ("o", [0, 5], "none")


def test_isolated_points_are_the_finite_values_without_a_finite_neighbour():
    from ict.analysis.plots import isolated_points

    nan, inf = float("nan"), float("inf")
    assert isolated_points(np.array([1.0])) == [0]
    assert isolated_points(np.array([nan])) == []
    assert isolated_points(np.array([1.0, 2.0])) == []
    assert isolated_points(np.array([1.0, nan, 2.0, 3.0, inf, 4.0, nan])) == [0, 5]


def test_the_step_axis_of_a_one_step_run_shows_integer_steps(tmp_path, saved_figures):
    """MaxNLocator(integer=True) falls back to fractional ticks when fewer than two integers are in
    view: a one-step run's step axis read 0.945, 0.960, ..., 1.050 (training step 0.96). Now the
    ticks in view are the step, 1."""
    _write_run(tmp_path / "run", [{"step": 1, "reward_mean": 0.5}])
    assert main(["plot", str(tmp_path / "run"), "--out", str(tmp_path / "curves.png")]) == 0
    (figure,) = saved_figures
    (axis,) = [axis for axis in figure.axes if axis.get_visible()]
    low, high = axis.get_xlim()
    assert [tick for tick in axis.get_xticks() if low <= tick <= high] == [1.0]


def test_the_held_out_accuracy_of_eval_every_is_drawn_at_its_steps(tmp_path, saved_figures):
    """ict train --eval-every 2 logs eval_accuracy on steps 2 and 4 only; ict plot drew no panel of
    it. Its panel's line runs through the evaluated steps (the steps between have no value, not a
    null), the mean over the runs of a label; a run without it adds no panel."""
    for seed, values in ((0, (0.25, 0.5)), (1, (0.75, 1.0))):
        _write_run(tmp_path / "runs" / "ict" / f"seed{seed}",
                   [{"step": step, "reward_mean": 0.1, **({"eval_accuracy": values[step // 2 - 1]} if step % 2 == 0
                                                          else {})} for step in range(1, 5)])
    runs = [str(tmp_path / "runs" / "ict" / f"seed{seed}") for seed in (0, 1)]
    assert main(["plot", *runs, "--by", "method", "--out", str(tmp_path / "curves.png")]) == 0
    (figure,) = saved_figures
    axes = {axis.get_title(): axis for axis in figure.axes if axis.get_visible()}
    assert sorted(axes) == ["Held-out accuracy", "Reward"]
    (line,) = axes["Held-out accuracy"].get_lines()
    assert list(line.get_xdata()) == [2, 4] and list(line.get_ydata()) == pytest.approx([0.5, 0.75])
    assert line.get_linestyle() == "-" and line.get_marker() == "None"  # no selected tokens; a line
    assert axes["Held-out accuracy"].get_ylabel() == "fraction of held-out problems"


def test_held_out_points_of_different_eval_temperatures_are_not_one_curve(tmp_path, saved_figures):
    """ict train records each held-out point's eval_temperature; a run resumed with another
    (greedy at steps 2 and 4, temperature 1 at 6 and 8) and a run never told (no field) were drawn
    as one line through all their points, the figure silent about it. Each temperature is its own
    line now, its marker named in the legend, the panel's title says so; one temperature: as before."""
    _write_run(tmp_path / "a", [{"step": step, "reward_mean": 0.1, **({"eval_accuracy": step / 10,
                                "eval_temperature": 0 if step <= 4 else 1.0} if step % 2 == 0 else {})}
                                for step in range(1, 9)])
    _write_run(tmp_path / "b", [{"step": 2, "eval_accuracy": 0.5}])
    assert main(["plot", str(tmp_path / "a"), str(tmp_path / "b"), "--out", str(tmp_path / "c.png")]) == 0
    (figure,) = saved_figures
    (axis,) = [axis for axis in figure.axes if axis.get_title().startswith("Held-out accuracy")]
    assert axis.get_title() == "Held-out accuracy (a line per sampling temperature)"
    drawn = sorted((list(line.get_xdata()), list(line.get_ydata()), line.get_marker()) for line in axis.get_lines())
    assert drawn == [([2], [0.5], "^"), ([2, 4], [0.2, 0.4], "o"), ([6, 8], [0.6, 0.8], "s")]
    legend = [text.get_text() for text in figure.legends[0].get_texts()]
    assert legend[-3:] == ["held-out accuracy: greedy", "held-out accuracy: temperature 1",
                           "held-out accuracy: temperature not recorded"]
    saved_figures.clear()  # every point at one temperature: one line, no marker, the title as it was
    assert main(["plot", str(tmp_path / "b"), "--out", str(tmp_path / "d.png")]) == 0
    (axis,) = [axis for axis in saved_figures[0].axes if axis.get_title() == "Held-out accuracy"]
    assert [line.get_marker() for line in axis.get_lines()] == ["o"]  # a lone point's marker, as before


def test_a_run_directory_with_a_byte_that_is_not_utf8_is_named_in_the_legend(tmp_path, saved_figures):
    """A run directory named with a byte that is not UTF-8 (a legal Linux name: argv reads 0xff as
    U+DCFF) made its legend label a lone surrogate, which matplotlib's font engine refuses: "error:
    TypeError: set_text(): incompatible function arguments ...", exit 1, no figure. The legend
    shows the byte as \\udcff, by run and by method (the parent's name)."""
    run = tmp_path / "run\udcff"
    _write_run(run, [{"step": 1, "entropy": 2.0}])
    pooled = tmp_path / "ict\udcff" / "seed0"
    _write_run(pooled, [{"step": 1, "entropy": 3.0}])
    assert main(["plot", str(run), "--out", str(tmp_path / "a.png")]) == 0
    assert main(["plot", str(pooled), "--by", "method", "--out", str(tmp_path / "b.png")]) == 0
    labels = [[handle.get_label() for handle in figure.legends[0].legend_handles][0] for figure in saved_figures]
    assert labels == [f"{tmp_path}/run\\udcff (n=1)", "ict\\udcff (n=1)"]
    entropy = [axis for axis in saved_figures[0].axes if axis.get_title() == "Shannon entropy"][0]
    assert list(entropy.get_lines()[0].get_ydata()) == [2.0]


def test_each_runs_drawn_series_is_its_metrics_file_step_for_step(tmp_path, saved_figures):
    """Four runs labelled by directory, written by the trainer's own `MetricsLogger`: 3 steps; 5
    steps resumed from step 2 (the killed attempt's steps 3-4 replaced); NaN entropy at steps 2 and
    4 (null in the file, a gap in the line); 3 steps and a torn fourth line. Each run's line in each
    panel is its file's values at its 1-based steps (read with json, the torn line left out):
    nothing dropped, shifted by a step, or taken from the killed attempt."""
    import math

    from ict.runs.reporting import MetricsLogger

    def record(step, scale, **changes):
        return {"step": step, "reward_mean": scale * step, "entropy": 1 + scale / step, "renyi2": 0.5 + scale / step,
                "entropy_selected": 2 + scale / step, "selected_fraction": 0.2, **changes}

    def log(name, records, resume_step=0):
        (tmp_path / name).mkdir(exist_ok=True)
        logger = MetricsLogger(tmp_path / name, tensorboard=False, resume_step=resume_step)
        for line in records:
            logger.log(line)
        logger.close()

    log("short", [record(step, 0.1) for step in (1, 2, 3)])
    log("resumed", [record(step, 0.9) for step in (1, 2, 3, 4)])
    log("resumed", [record(step, 0.2) for step in (3, 4, 5)], resume_step=2)
    log("nan", [record(step, 0.3, **({"entropy": math.nan} if step in (2, 4) else {})) for step in range(1, 6)])
    log("torn", [record(step, 0.4) for step in (1, 2, 3)])
    with (tmp_path / "torn" / "metrics.jsonl").open("a") as handle:
        handle.write(json.dumps(record(4, 0.4))[:30])
    names = ["short", "resumed", "nan", "torn"]
    assert main(["plot", *(str(tmp_path / name) for name in names), "--out", str(tmp_path / "c.png")]) == 0
    (figure,) = saved_figures
    colour = {handle.get_label(): handle.get_color() for handle in figure.legends[0].legend_handles}
    axes = {axis.get_title(): axis for axis in figure.axes if axis.get_visible()}
    panels = {"Reward": [("reward_mean", "-")], "Shannon entropy": [("entropy", "-"), ("entropy_selected", "--")],
              "Renyi-2 entropy": [("renyi2", "-")], "Selected fraction": [("selected_fraction", "-")]}
    assert sorted(axes) == sorted(panels)
    expected_steps = {"short": [1, 2, 3], "resumed": [1, 2, 3, 4, 5], "nan": [1, 2, 3, 4, 5], "torn": [1, 2, 3]}
    for name in names:
        text = (tmp_path / name / "metrics.jsonl").read_text()
        records = [json.loads(line) for line in text.split("\n")[:len(expected_steps[name])]]
        assert [line["step"] for line in records] == expected_steps[name]
        for title, keys in panels.items():
            drawn = {(line.get_color(), line.get_linestyle()): line for line in axes[title].get_lines()}
            for key, style in keys:
                line = drawn[(colour[f"{tmp_path / name} (n=1)"], style)]
                assert list(line.get_xdata()) == expected_steps[name], (name, key)
                values = [math.nan if item[key] is None else item[key] for item in records]
                assert list(line.get_ydata()) == pytest.approx(values, nan_ok=True), (name, key)
    entropy = {(line.get_color(), line.get_linestyle()): line for line in axes["Shannon entropy"].get_lines()}
    resumed = entropy[(colour[f"{tmp_path / 'resumed'} (n=1)"], "-")].get_ydata()
    assert list(resumed) == pytest.approx([1.9, 1.45, 1 + 0.2 / 3, 1.05, 1.04])  # 1-2 killed attempt's, 3-5 resumed's
    nan = entropy[(colour[f"{tmp_path / 'nan'} (n=1)"], "-")].get_ydata()
    assert list(nan) == pytest.approx([1.3, math.nan, 1.1, math.nan, 1.06], nan_ok=True)


def _vertical_lines(axis):
    """(x, colour, style) of the axis's vertical lines (axvline: two equal x data, y 0..1 in axes units)."""
    return [(line.get_xdata()[0], line.get_color(), line.get_linestyle()) for line in axis.get_lines()
            if len(line.get_xdata()) == 2 and line.get_xdata()[0] == line.get_xdata()[1]]


def test_the_end_of_a_full_token_warm_up_is_a_dotted_line_in_its_labels_colour(tmp_path, saved_figures):
    """The curves did not show where ICT's full-token warm-up (GRPO on every token) ends and its
    selection starts, so a turn in the entropy at that step read as the method's doing. Each panel
    now has a dotted vertical line half a step after a label's last warm-up step (metrics
    ``full_token_warmup``), in its colour, one per distinct end among its runs; a run without a
    warm-up has none, and the legend names the line only when one is drawn."""
    from ict.runs.reporting import warmup_end

    for seed, warm in ((0, 2), (1, 2), (2, 3)):
        _write_run(tmp_path / "runs" / "ict" / f"seed{seed}",
                   [{"step": step, "entropy": 1.0, "full_token_warmup": float(step <= warm)} for step in range(1, 6)])
    _write_run(tmp_path / "runs" / "grpo" / "seed0",
               [{"step": step, "entropy": 2.0, "full_token_warmup": 0.0} for step in range(1, 6)])
    runs = sorted(str(path) for path in (tmp_path / "runs").glob("*/seed*"))
    assert main(["plot", *runs, "--by", "method", "--out", str(tmp_path / "curves.png")]) == 0
    assert main(["plot", runs[0], "--out", str(tmp_path / "grpo.png")]) == 0
    warmed, plain = saved_figures
    colour = {handle.get_label(): handle.get_color() for handle in warmed.legends[0].legend_handles}
    (panel,) = [axis for axis in warmed.axes if axis.get_visible()]
    assert sorted(_vertical_lines(panel)) == [(2.5, colour["ict (n=3)"], ":"), (3.5, colour["ict (n=3)"], ":")]
    assert "end of the full-token warm-up" in colour
    (panel,) = [axis for axis in plain.axes if axis.get_visible()]
    assert _vertical_lines(panel) == []
    assert "end of the full-token warm-up" not in [h.get_label() for h in plain.legends[0].legend_handles]
    assert warmup_end([{"step": 1, "full_token_warmup": 1.0}, {"step": 2, "full_token_warmup": 0.0}]) == 1.5
    assert warmup_end([{"step": 1}, {"step": 2}]) is None  # lines older than the key


def test_a_runs_own_curves_mark_the_end_of_its_warm_up(tmp_path, saved_figures):
    """A run's curves.png (`ict train`'s, `plot_curves`) marks the end of its full-token warm-up on
    both panels, named once in the legend; a run without one has no such line."""
    from ict.runs.reporting import plot_curves

    lines = [{"step": step, "reward_mean": 0.1 * step, "entropy": 1.0, "full_token_warmup": float(step <= 3)}
             for step in range(1, 7)]
    plot_curves(tmp_path, lines)
    plot_curves(tmp_path, [{**line, "full_token_warmup": 0.0} for line in lines])
    warmed, plain = saved_figures
    assert [[x for x, _, style in _vertical_lines(axis) if style == ":"] for axis in warmed.axes] == [[3.5], [3.5]]
    labels = [text.get_text() for axis in warmed.axes for text in axis.get_legend().get_texts()]
    assert labels.count("end of the full-token warm-up") == 1
    assert [_vertical_lines(axis) for axis in plain.axes] == [[], []]


def test_a_run_that_never_left_its_warm_up_has_no_line_at_its_end(tmp_path, saved_figures):
    """A run shorter than its full-token warm-up (ICT's 10 steps with ``--num-steps 3``) or stopped
    inside it logs ``full_token_warmup`` at every step: its warm-up did not end, yet the curves drew
    "end of the full-token warm-up" half a step after its last step (stretching the axis there)."""
    from ict.runs.reporting import plot_curves, warmup_end

    inside = [{"step": step, "reward_mean": 0.1 * step, "entropy": 1.0, "full_token_warmup": 1.0}
              for step in (1, 2, 3)]
    assert warmup_end(inside) is None
    assert warmup_end([*inside, {"step": 4, "full_token_warmup": 0.0}]) == 3.5
    assert warmup_end(inside[::-1] + [{"step": 4, "full_token_warmup": 0.0}]) == 3.5  # order of the lines
    plot_curves(tmp_path, inside)
    _write_run(tmp_path / "runs" / "ict" / "seed0", inside)  # a label pooling it with a run that left its warm-up
    _write_run(tmp_path / "runs" / "ict" / "seed1", [*inside[:2], {**inside[2], "full_token_warmup": 0.0}])
    assert main(["plot", str(tmp_path / "runs" / "ict" / "seed0"), str(tmp_path / "runs" / "ict" / "seed1"),
                 "--by", "method", "--out", str(tmp_path / "curves.png")]) == 0
    own, pooled = saved_figures
    assert [_vertical_lines(axis) for axis in own.axes] == [[], []]
    assert [axis.get_xlim()[1] < 3.5 for axis in own.axes] == [True, True]
    labels = [text.get_text() for axis in own.axes for text in axis.get_legend().get_texts()]
    assert "end of the full-token warm-up" not in labels
    panels = [axis for axis in pooled.axes if axis.get_visible()]
    assert len(panels) == 2  # reward, entropy
    assert [[x for x, _, _ in _vertical_lines(axis)] for axis in panels] == [[2.5]] * len(panels)


def _drawn_as_written(figure, text):
    """Whether matplotlib draws ``text`` as its characters: as wide as the same string drawn with
    mathtext off (two ``$`` otherwise start mathtext, which drops them and sets the rest in italics)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    renderer = FigureCanvasAgg(figure).get_renderer()  # the figure is closed: a canvas of its own
    plain = figure.text(0, 0, text.get_text(), fontsize=text.get_fontsize(), parse_math=False)
    return text.get_window_extent(renderer).width == pytest.approx(plain.get_window_extent(renderer).width)


def test_run_directories_and_methods_named_with_dollar_signs_are_named_as_written(tmp_path, saved_figures):
    """matplotlib reads a label with two ``$`` as mathtext: a run directory named price_$5_or_$6 (a
    legal name) failed the whole figure ("error: ... ParseSyntaxException", exit 2, no figure), and
    a_$x$ showed as an italic x. The legend names each run as written; so do the learning curves'
    legend and panel titles (method and benchmark names)."""
    from ict.analysis.plots import plot_learning_curves

    runs = [tmp_path / "price_$5_or_$6", tmp_path / "a_$x$"]
    for index, run in enumerate(runs):
        _write_run(run, [{"step": 1, "entropy": 2.0}])
        assert main(["plot", str(run), "--out", str(tmp_path / f"{index}.png")]) == 0
    for figure, run in zip(saved_figures, runs, strict=True):
        (label,) = [text for text in figure.legends[0].get_texts() if text.get_text().endswith("(n=1)")]
        assert label.get_text() == f"{run} (n=1)" and _drawn_as_written(figure, label)
    rows = [{"method": "m_$x$", "seed": 0, "step": step, "benchmark": "b_$y$", "metric": "pass@1", "value": 0.5}
            for step in (0, 5)]
    assert plot_learning_curves(rows, tmp_path / "curves.png") is not None
    figure = saved_figures[-1]
    (legend,) = figure.legends[0].get_texts()
    title = [axis.title for axis in figure.axes if axis.get_visible()][0]
    assert (legend.get_text(), title.get_text()) == ("m_$x$", "pass@1: b_$y$")
    assert _drawn_as_written(figure, legend) and _drawn_as_written(figure, title)


def test_a_method_named_with_a_leading_underscore_keeps_its_legend_entry(tmp_path, saved_figures):
    """matplotlib leaves a label starting "_" out of an axis' legend handles: a comparison's run
    directory runs/_old/seed0 was drawn in the learning curves but missing from their legend."""
    from ict.analysis.plots import plot_learning_curves

    rows = [{"method": method, "seed": 0, "step": step, "benchmark": "b", "metric": "pass@1", "problems": 4,
             "value": 0.5} for method in ("_old", "ict") for step in (0, 10)]
    plot_learning_curves(rows, tmp_path / "curves.png")
    (figure,) = saved_figures
    assert [text.get_text() for text in figure.legends[0].get_texts()] == ["_old", "ict"]
    colour = {line.get_label(): line.get_color() for line in figure.axes[0].get_lines()}
    assert [handle.get_color() for handle in figure.legends[0].legend_handles] == [colour["_old"], colour["ict"]]
