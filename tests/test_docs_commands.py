"""Every command line the README and the docs show is one the tools take: each `--option` of an
`ict` command or a benchmark script exists, each documented `ict train` line (and plugin line)
builds its configuration as `ict train` does, each `ict eval/compare/inspect/plot` line builds and
checks its own, and the quick-start comparisons train into a
directory of their own. Split from tests/test_docs_defaults.py (the defaults the docs restate)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from docs_helpers import ALL_DOCS, ROOT, command_options, command_parsers, doc_text

from ict.core.selectors import SELECTORS, TRAIN_OPTION_DEFAULTS, method_train_options

DOCS_WITH_COMMANDS = ["README.md", "docs/training.md", "docs/evaluation.md", "docs/method.md"]


COMMAND = re.compile(r"\bict (train|eval|compare|inspect|plot)\b([^`#|\n]*)")


OPTION = re.compile(r"(?<![\w-])(--[a-z](?:[a-z0-9-]*[a-z0-9])?)(?![\w*-])")


# options the docs name for a benchmark script or an installer, not for an `ict` command
NOT_ICT_OPTIONS = {"--unit": "benchmarks/paper_figures.py (docs/method.md)",
                   "--no-deps": "pip install"}


def _command_text(name: str) -> str:
    """:func:`doc_text` with the line breaks inside inline code spans (outside code blocks) made
    spaces, so a command wrapped in the prose is one line (`ict eval --model M` newline `--ks 1,4`)."""
    parts = re.split(r"(^```.*?^```)", doc_text(name), flags=re.S | re.M)
    return "".join(part if index % 2 else re.sub(r"`[^`]+`", lambda span: span[0].replace("\n", " "), part)
                   for index, part in enumerate(parts))


def test_every_option_a_documented_command_line_gives_is_that_commands():
    """Every `--option` in an `ict <command> ...` line of the README and every doc (a results
    or scaling note's command lines too, and an inline command wrapped over lines) is an option of
    that command (its --help)."""
    accepted = command_options()
    lines = [(name, match) for name in ALL_DOCS for match in COMMAND.finditer(_command_text(name))]
    wrong = [(name, command, option) for name, match in lines
             for command, option in [(match.group(1), o) for o in OPTION.findall(match.group(2))]
             if option not in accepted[command]]
    assert not wrong, wrong
    assert {name for name, _ in lines} >= {"docs/results.md", "docs/scaling.md", "docs/benchmarks.md"}
    wrapped = [match[0] for name, match in lines if name == "docs/results.md" and "--ks 1,4" in match[0]]
    assert wrapped and wrapped[0].startswith("ict eval --model smollm2-135m-instruct"), wrapped


def _script_options(path: Path) -> set[str]:
    """The option strings a script's argparse calls declare (``add_argument("--x", "--y", ...)``),
    read from its source (importing every script would cost seconds each), and ``--help``."""
    text = path.read_text()
    return {"--help", *re.findall(r"""add_argument\(\s*["'](--[a-z0-9-]+)["']""", text),
            *re.findall(r"""add_argument\(\s*["']--[a-z0-9-]+["']\s*,\s*["'](--[a-z0-9-]+)["']""", text)}


def test_every_option_a_documented_benchmark_command_gives_is_that_scripts():
    """Every `--option` after `benchmarks/<name>.py` on a line of the README, the docs, the
    benchmark scripts' own docstrings and examples/ is an option that script declares (a renamed
    option leaves no command that stops at "unrecognized arguments")."""
    scripts = {path.stem: _script_options(path) for path in (ROOT / "benchmarks").glob("*.py")}
    sources = [*(ROOT / name for name in ALL_DOCS), *sorted((ROOT / "benchmarks").glob("*.py")),
               *sorted(path for path in (ROOT / "examples").rglob("*") if path.suffix in {".py", ".sh"})]
    checked, wrong = 0, []
    for source in sources:
        for line in re.sub(r"\\\n\s*", " ", source.read_text()).splitlines():
            for match in re.finditer(r"benchmarks/(\w+)\.py((?:\s+(?:--?[\w-]+|[\w.,/=$:\"'x-]+))*)", line):
                options = OPTION.findall(match.group(2))
                checked += len(options)
                wrong += [(source.name, match.group(1), option) for option in options
                          if option not in scripts.get(match.group(1), set())]
    assert not wrong, wrong
    assert checked >= 100
    assert _script_options(ROOT / "benchmarks" / "stats_speed.py") >= {"--step", "--baseline", "--rounds"}


def test_every_option_the_docs_name_is_an_ict_option():
    """Every `--option` the README and the docs that show commands name in backticks or code
    blocks, outside a line that runs a script or an installer, is an option of some `ict`
    command (so a renamed option leaves no stale name in the prose)."""
    accepted = set().union(*command_options().values())
    wrong = []
    for name in DOCS_WITH_COMMANDS:
        text = doc_text(name)
        blocks = re.findall(r"```[a-z]*\n(.*?)```", text, flags=re.S)
        spans = re.findall(r"`([^`\n]+(?:\n[^`\n]+)?)`", re.sub(r"```.*?```", "", text, flags=re.S))
        for span in [line for block in blocks for line in block.splitlines()] + spans:
            if re.search(r"\bpython3? |\bpip |accelerate |\.py\b", span):
                continue
            wrong += [(name, option, span) for option in OPTION.findall(span)
                      if option not in accepted and option not in NOT_ICT_OPTIONS]
    assert not wrong, wrong


def test_the_option_scan_sees_the_options_of_a_command_line():
    line = "ict eval --model M --benchmarks paper \\\n    --n 8 --k 1,4,8 --eval-* x-y --not_an_option"
    match = COMMAND.search(re.sub(r"\\\n\s*", " ", line))
    assert match and OPTION.findall(match.group(2)) == ["--model", "--benchmarks", "--n", "--k"]
    assert "--no-such-flag" not in command_options()["train"] and "--n" in command_options()["eval"]


def _documented_train_lines() -> list[tuple[str, list[str]]]:
    """The words after `ict train` of each command in a code block of the README and docs/*.md
    (`...` dropped; `a ; b` is two), except those that need a file the docs leave to the user
    (`--plugin`), a run directory (`--resume`) or print the help."""
    import shlex

    lines = []
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        text = doc_text(str(path.relative_to(ROOT)))
        for block in re.findall(r"^```\w*\n(.*?)^```", text, flags=re.S | re.M):
            for part in (part for line in block.splitlines() for part in line.split("#")[0].split(";")):
                if (match := re.search(r"\bict train\b(.*)", part)) is None:
                    continue
                words = [word for word in shlex.split(match.group(1)) if word != "..."]
                if not {"--plugin", "--resume", "--help"} & set(words):
                    lines.append((path.name, words))
    return lines


def test_every_documented_ict_train_line_builds_its_configuration(monkeypatch):
    """Each documented `ict train` command line builds its configuration as `ict train` does
    (a method's options, presets and overrides checked, not only the flags' names); one that
    profiles (`--profile`) runs past the full-token warm-up, so that the selection it profiles
    runs (docs/training.md's `ict train --method ict --profile --num-steps 3` profiled 3 steps of
    ict's 10-step warm-up: GRPO's cost, the run's own note said)."""
    import ict.training.trainer
    from ict.cli import main

    built = []
    monkeypatch.setattr(ict.training.trainer, "train", built.append)
    lines = _documented_train_lines()
    assert len(lines) >= 15
    profiled = 0
    for name, words in lines:
        built.clear()
        assert main(["train", *words]) == 0 and len(built) == 1, (name, words)
        if built[0].profile:
            assert built[0].num_steps > built[0].full_token_warmup_steps, (name, words)
            profiled += 1
    assert profiled >= 1


def test_the_quick_start_comparisons_train_into_a_directory_of_their_own():
    """The README's and docs/evaluation.md's `ict compare` example trained into results/cpu-main,
    the committed first comparison: run as written it reused (and re-graded in place) the
    committed grpo, entropy and stapo runs, trained on the evaluation's questions before
    2026-11-28, and trained `ict` and `random` under today's defaults beside them, for one report.
    A training `ict compare` line of those two files names a directory that holds no committed
    runs (the results notes' commands, which made those directories, are not examples)."""
    import shlex

    trained = []
    for name in ("README.md", "docs/evaluation.md"):
        for block in re.findall(r"^```\w*\n(.*?)^```", doc_text(name), flags=re.S | re.M):
            for line in block.splitlines():
                if (match := re.search(r"\bict compare\b(.*)", line.split("#")[0])) is None:
                    continue
                words = shlex.split(match.group(1))
                if "--output-dir" in words and not {"--report-only", "--eval-only"} & set(words):
                    trained.append((name, words[words.index("--output-dir") + 1]))
    assert {name for name, _ in trained} == {"README.md", "docs/evaluation.md"}, trained
    committed = [(name, directory) for name, directory in trained if (ROOT / directory / "runs").exists()]
    assert not committed, committed


def test_ict_trains_help_states_icts_default_recipe_as_the_registry_holds_it():
    """`ict train --help` said ICT's default was the paper's score alone and that "--preset paper
    adds the rest of that reading": since issue 30 the rest (each response's top 10%, the
    Sparse-GRPO loss, the 10-step warm-up) is ict's default, and the preset adds nothing to it.
    The description states the default recipe with the registry's values."""
    description = " ".join(command_parsers()["train"].description.split())
    options = SELECTORS["ict"].defaults
    train = TRAIN_OPTION_DEFAULTS | method_train_options("ict")
    assert (f"the top {options['ratio']:.0%} of each response" in description
            and options["scope"] == "sequence" and options["reference"] == "group_mean_absorbing")
    assert f"Sparse-GRPO loss ({train['aggregation']})" in description
    assert f"a {train['full_token_warmup_steps']}-step full-token warm-up" in description
    assert "--preset paper adds" not in description


def test_every_documented_plugin_line_trains_a_selector_the_docs_register(monkeypatch, tmp_path):
    """`ict train --plugin my_selectors.py --method my_selector ...` (README, docs/training.md)
    named a selector no snippet registers: saved as my_selectors.py, the README's snippet
    registers `low_prob`, so the line was "unknown method". Each documented plugin line, with
    the Python block of the docs that registers its method saved as my_selectors.py, builds its
    configuration as `ict train` does (the selector's options checked)."""
    import shlex

    import ict.training.trainer
    from ict.cli import main

    blocks = {match[1]: block for name in ALL_DOCS
              for block in re.findall(r"```python\n(.*?)```", (ROOT / name).read_text(), flags=re.S)
              for match in re.finditer(r'@register_selector\("([\w-]+)"', block)}
    lines = [shlex.split(match[1]) for name in ALL_DOCS for match in
             re.finditer(r"\bict train (--plugin my_selectors\.py [^#\n]*)", doc_text(name))]
    assert len(lines) >= 2, lines
    built = []
    monkeypatch.setattr(ict.training.trainer, "train", built.append)
    registry = dict(SELECTORS)
    try:
        for index, words in enumerate(lines):
            words = [word for word in words if word != "..."]
            method = words[words.index("--method") + 1]
            assert method in blocks, (method, sorted(blocks))
            (tmp_path / str(index)).mkdir()  # a plugin file loads once per process (by its path)
            monkeypatch.chdir(tmp_path / str(index))
            (tmp_path / str(index) / "my_selectors.py").write_text(blocks[method])
            built.clear()
            assert main(["train", *words]) == 0 and built[0].method == method, words
            SELECTORS.clear()
            SELECTORS.update(registry)
    finally:
        SELECTORS.clear()
        SELECTORS.update(registry)


PLACEHOLDER = re.compile(r"(?<![\w./-])(?:DIR|RUN|OUT|METHOD)(?![\w-])")


class _Reached(Exception):
    """Raised where a documented command would start its work (train, evaluate, load a model)."""


def _documented_other_lines() -> list[tuple[str, str, list[str]]]:
    """(doc, command, words) of each `ict eval|compare|inspect|plot` line in a code block of the
    README and docs/*.md, with `...` dropped, a shell variable the block sets before it (`R=...`)
    put in, a `> file` redirection cut and a glob expanded from the repository root, as the shell
    would; a line that names a placeholder (DIR, RUN, OUT, METHOD) is left out, and so is a
    command's name in prose (README's layout: `ict eval: evaluate, ...`)."""
    import glob
    import shlex

    lines = []
    for name in ALL_DOCS:
        for block in re.findall(r"^```\w*\n(.*?)^```", doc_text(name), flags=re.S | re.M):
            variables: dict[str, str] = {}
            for line in block.splitlines():
                line = line.split("#")[0]
                if (assignment := re.fullmatch(r"\s*([A-Z_]+)=(\S+)\s*", line)) is not None:
                    variables[assignment[1]] = assignment[2]
                    continue
                line = re.sub(r"\$(\w+)", lambda m, known=variables: known.get(m[1], m[0]), line)
                for part in line.split(";"):
                    if (match := re.search(r"\bict (eval|compare|inspect|plot)(?=\s|$)(.*)", part)) is None:
                        continue
                    text = match.group(2).split(" > ")[0]
                    if PLACEHOLDER.search(text):
                        continue
                    words = [expanded for word in shlex.split(text) if word != "..." for expanded in
                             (sorted(glob.glob(word, root_dir=ROOT)) if "*" in word else [word])]
                    lines.append((name, match.group(1), words))
    return lines


@pytest.mark.slow  # ~30 s on 2 cores: every documented comparison builds each run's options (~0.1 s each)
def test_every_documented_eval_compare_inspect_and_plot_line_builds_its_configuration(
        monkeypatch, tmp_path, capsys):
    """Each documented `ict eval`, `ict compare`, `ict inspect` and `ict plot` command line builds
    and checks its configuration as the command does, up to where it would load a model, train or
    evaluate (option values and their combinations, benchmark and method names, --eval-ks against
    --eval-n, a comparison's every run's training options, --samples files, plot run directories),
    not only the options' names (test_every_option_a_documented_command_line_gives_is_that_commands).
    A comparison trains into a directory of its own (tmp_path), so nothing committed is reused or
    written; a `--report-only` line is checked against the committed directory it names, and left
    out when that is not in the repository (a recipe's /tmp copy, tested on its own above)."""
    import ict.analysis.plots
    import ict.evaluation.evaluate
    import ict.experiments.compare
    import ict.models.loading
    from ict.cli import main
    from ict.data.benchmark_names import split_benchmark_names
    from ict.data.benchmarks import expand_benchmark_names

    reached: list[str] = []

    def stop(what: str):
        def reach(*args, **kwargs):
            reached.append(what)
            raise _Reached(what)
        return reach

    def evaluate(config, **kwargs):
        config.validate()
        expand_benchmark_names(split_benchmark_names(config.benchmarks))
        reached.append("evaluate")

    def plot(config):
        config.validate()
        reached.append("plot")
        return config.out

    monkeypatch.setattr(ict.evaluation.evaluate, "evaluate", evaluate)
    monkeypatch.setattr(ict.analysis.plots, "plot", plot)
    monkeypatch.setattr(ict.models.loading, "load_inference_model", stop("load a model"))
    for name in ("_train", "_evaluate", "write_report"):
        monkeypatch.setattr(ict.experiments.compare, name, stop(name))
    monkeypatch.chdir(ROOT)
    lines = _documented_other_lines()
    checked = {"eval": 0, "compare": 0, "inspect": 0, "plot": 0}
    for index, (name, command, words) in enumerate(lines):
        if command == "compare":
            directory = words[words.index("--output-dir") + 1] if "--output-dir" in words else None
            if "--report-only" in words:
                if directory is None or not (ROOT / directory).is_dir():
                    continue
            else:
                own = tmp_path / str(index)
                (own / "runs").mkdir(parents=True)  # an --eval-only line evaluates what is there
                words = ([*words[:words.index("--output-dir") + 1], str(own), *words[words.index("--output-dir") + 2:]]
                         if directory is not None else [*words, "--output-dir", str(own)])
        reached.clear()
        status = main([command, *words])
        assert reached and status in (0, 1), (name, command, words, capsys.readouterr().err)
        checked[command] += 1
    assert checked["eval"] >= 7 and checked["compare"] >= 12 and checked["inspect"] >= 3 and checked["plot"] >= 1, checked
