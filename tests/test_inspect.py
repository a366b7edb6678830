"""`ict inspect` on a tiny random model: coloured spans, selections, HTML in headless Chromium;
its sources of completions (--prompt, --samples) and their one-line refusals. The scores and
marks against float64 recomputations: tests/test_inspect_scores.py."""

from __future__ import annotations

import html
import re
import shutil
import subprocess
import tempfile

import numpy as np
import pytest
from eval_helpers import samples_file

from ict.cli import main

pytestmark = pytest.mark.usefixtures("one_thread")


def _render(tiny_model_dir, tmp_path, color="entropy", tokens="10", seed="0"):
    page = tmp_path / "view.html"
    assert main(["inspect", "--model", str(tiny_model_dir), "--prompt", "what is 1 + 2 ?",
                 "--n", "4", "--max-new-tokens", tokens, "--seed", seed, "--color", color,
                 "--html", str(page)]) == 0
    return page


def test_html_has_a_coloured_span_per_token(tiny_model_dir, tmp_path, capsys):
    page = _render(tiny_model_dir, tmp_path).read_text()
    spans = re.findall(r"<span class='tok([^']*)' style='background:rgb\((\d+),(\d+),(\d+)\)' "
                       r"title='entropy=([0-9.]+)'>", page)
    assert len(spans) >= 4
    values = [float(s[4]) for s in spans]
    low, high = min(values), max(values)
    for _classes, red, green, _blue, value in spans:  # the shade follows the score (min..max)
        level = (float(value) - low) / (high - low)
        assert int(red) == 255 and abs(int(green) - int(255 - 200 * level)) <= 1
    # 20-Entropy marks the ceil(20%) highest-entropy tokens of the batch
    marked = sorted(float(s[4]) for s in spans if "entropy20" in s[0].split())
    assert marked and min(marked) >= sorted(values)[-len(marked)] - 1e-4
    assert any("ict" in s[0].split() for s in spans)
    assert "http" not in page and "<script" not in page  # self-contained
    assert "Jaccard(ICT, 20-Entropy)" in capsys.readouterr().out


def test_html_renders_in_headless_chromium(tiny_model_dir, tmp_path):
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        pytest.skip("chromium is not installed (apt-get install chromium)")
    page = _render(tiny_model_dir, tmp_path, color="js")
    shot = tmp_path / "shot.png"
    subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                    "--disable-background-networking", "--disable-component-update",
                    "--disable-sync", f"--user-data-dir={tempfile.mkdtemp()}",
                    f"--screenshot={shot}", "--window-size=1200,900", page.as_uri()],
                   check=True, timeout=120, capture_output=True)
    assert shot.stat().st_size > 5_000


def test_each_selection_shows_its_anatomy(tiny_model_dir, tmp_path, capsys):
    """The anatomy lines of ICT's and 20-Entropy's selections, recomputed by hand (float64) from
    the page's spans: one prompt, G = 4 completions of ragged lengths; a position has "fewer than
    G alive" when some completion is shorter; relative position t / L; an end token is a
    finished completion's final <|im_end|>."""
    page = _render(tiny_model_dir, tmp_path, color="js", tokens="40", seed="1").read_text()
    printed = capsys.readouterr().out
    rows = [re.findall(r"<span class='tok([^']*)'[^>]*>([^<]*)</span>", block)
            for block in page.split("<div class='prompt'>")[1:]]
    lengths = [len(row) for row in rows]
    assert len(rows) == 4 and len(set(lengths)) > 1  # ragged: some positions have < G alive
    assert any(row[-1][1].strip() == "&lt;|im_end|&gt;" for row in rows)  # some completion finished

    def figures(label):
        marks = [(t, len(row), text) for row in rows for t, (classes, text) in enumerate(row)
                 if label is None or label in classes.split()]
        return (np.mean([sum(n > t for n in lengths) < 4 for t, _, _ in marks]),
                np.mean([t / n for t, n, _ in marks]),
                np.mean([t == n - 1 and text.strip() == "&lt;|im_end|&gt;" for t, n, text in marks]))

    everything = figures(None)
    for label in ("ict", "entropy20"):
        selected = figures(label)
        expected = (f"{label}: fewer than G alive {selected[0]:.2f} (all {everything[0]:.2f}), "
                    f"relative position t/L {selected[1]:.2f} (all {everything[1]:.2f}), "
                    f"end tokens {selected[2]:.2f} (all {everything[2]:.2f}), decided by a tie ")
        assert expected in printed and expected in page
    assert re.search(r"stapo: .*decided by a tie 0\.00", printed)  # STAPO ranks nothing


def test_samples_file_first_prompts_and_end_tokens(tiny_model_dir, tmp_path, capsys):
    """An evaluation's samples.jsonl as --samples: --num-prompts keeps the file's first K prompts
    (in file order), a finished record's completion ends on the tokenizer's EOS token, an
    unfinished one does not; the page names the model and the file."""
    import json

    from transformers import AutoTokenizer

    records = [("what is 1 + 2 ?", "the sum is 3", True), ("what is 1 + 2 ?", "so it is 3 and", False),
               ("what is 4 + 4 ?", "it is 8", True), ("what is 4 + 4 ?", "8", True),
               ("what is 9 - 2 ?", "7", True), ("what is 9 - 2 ?", "it is 7", True)]
    samples = tmp_path / "samples.jsonl"
    samples.write_text("".join(json.dumps({"prompt": p, "completion": c, "finished": f, "extra": 1}) + "\n"
                               for p, c, f in records))
    page = tmp_path / "view.html"
    assert main(["inspect", "--model", str(tiny_model_dir), "--samples", str(samples),
                 "--num-prompts", "2", "--html", str(page)]) == 0
    text = page.read_text()
    blocks = text.split("<div class='prompt'>")[1:]
    assert len(blocks) == 4 and "9 - 2" not in text
    assert "what is 1 + 2 ?" in blocks[0] and "(same prompt)" in blocks[1] and "4 + 4" in blocks[2]
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    for block, (_, completion, finished) in zip(blocks, records, strict=False):
        tokens = re.findall(r"<span class='tok[^']*'[^>]*>([^<]*)</span>", block)
        expected = len(tokenizer.encode(completion, add_special_tokens=False)) + finished
        assert len(tokens) == expected
        assert (tokens[-1].strip() == "&lt;|im_end|&gt;") == finished
    assert f"model: {tiny_model_dir}" in text and f"completions: {samples} (first 2 prompts)" in text


def test_page_shows_each_prompt_whole_as_the_model_saw_it(tiny_model_dir, tmp_path):
    """A long, multi-line prompt is printed whole, in the tokenizer's own chat template (not a
    tail of it), with its line breaks kept on the page."""
    import json

    from transformers import AutoTokenizer

    prompt = "\n".join(f"line {i}: what is 1 + 2 ?" for i in range(20))
    samples = tmp_path / "samples.jsonl"
    samples.write_text("".join(json.dumps({"prompt": prompt, "completion": c}) + "\n"
                               for c in ("3", "it is 3")))
    page = tmp_path / "view.html"
    assert main(["inspect", "--model", str(tiny_model_dir), "--samples", str(samples),
                 "--html", str(page)]) == 0
    text = page.read_text()
    seen = AutoTokenizer.from_pretrained(tiny_model_dir).apply_chat_template(
        [{"role": "user", "content": prompt}], tokenize=False, add_generation_prompt=True)
    assert len(seen) > 400 and seen.startswith("<|im_start|>user line 0:")
    blocks = text.split("<div class='prompt'>")[1:]
    assert blocks[0].startswith(f"#0: {html.escape(seen)}</div>") and "(same prompt)" in blocks[1]
    assert re.search(r"\.prompt\{[^}]*white-space:pre-wrap", text)


@pytest.mark.parametrize(("lines", "options", "message"), [
    (['{"prompt": "a", "completion": "b"}', '{"prompt": "a", "completion": "c"}'],
     ["--prompt", "x", "--num-prompts", "1"], "--num-prompts needs --samples"),
    (['{"prompt": "a", "completion": "b"}', '{"prompt": "a", "completion": "c"}'],
     ["--num-prompts", "0"], "--num-prompts needs --samples and must be >= 1"),
    (['{"prompt": "a", "completion": "b"}', '{"prompt": "a", "completion": "c"}',
      '{"prompt": "d", "completion": "e"}'], [], "every prompt needs the same number"),
    (['{"prompt": "a"}'], [], "not a {prompt, completion} JSON record"),
    (['{"prompt": "a", "completion": "b"}', '{"prompt": "c", "completion": "d"}'], [],
     "one completion per prompt"),  # every JS score was 0, and ICT still marked a token
    (['{"prompt": ["a"], "completion": "b"}'], [], "prompt and completion must be text"),  # was a TypeError
    (['{"prompt": "a", "completion": null}'], [], "prompt and completion must be text"),
    (['{"prompt": "a", "completion": "b"}', '{"prompt": "a", "completion": "c"}'], ["--n", "8"],
     "--n sample completions of --prompt"),  # was ignored
    (['{"prompt": "a", "completion": "b", "finished": "false"}', '{"prompt": "a", "completion": "c"}'], [],
     'samples.jsonl:1: finished must be true or false, got \'false\''),  # was read as finished
    (['{"prompt": "a", "completion": ""}', '{"prompt": "a", "completion": ""}'], [],
     "every completion is empty"),  # was a page of nan under a made-up 0..1 colour scale
    ([b'{"prompt": "caf\xe9", "completion": "b"}'], [], "samples.jsonl:1: not UTF-8 text"),  # named no file (now its line too)
    (['{"prompt": "a", "completion": "x\\ud800"}', '{"prompt": "a", "completion": "y"}'], [],
     "samples.jsonl:1: the completion is not valid text (a lone surrogate, as \\ud800)"),  # a TypeError
    (['{"prompt": "a", "completion": "b"}'], ["--prompt", "a\udcff"], "--prompt is not valid text"),  # argv b"a\xff"
    (['{"prompt": "a", "completion": "b"}'], ["--prompt", "x", "--n", "1"], "--n must be >= 2"),
    (['{"prompt": "a", "completion": "b"}'], ["--prompt", "x", "--max-new-tokens", "0"],
     "--max-new-tokens must be >= 1"),
])
def test_bad_samples_exit_2(tiny_model_dir, tmp_path, capsys, lines, options, message):
    samples = tmp_path / "samples.jsonl"
    if isinstance(lines[0], bytes):
        samples.write_bytes(b"\n".join(lines) + b"\n")
    else:
        samples.write_text("\n".join(lines) + "\n")
    args = ["inspect", "--model", str(tiny_model_dir)]
    args += options if "--prompt" in options else ["--samples", str(samples), *options]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1, err


class _ByteTokenizer:
    """A byte-level vocabulary: token i is the byte sequence BYTES[i]; decoding joins the bytes
    and reads them as UTF-8 with replacement, as a byte-level BPE tokenizer does."""

    BYTES = [b"a", "日".encode()[:1], "日".encode()[1:], " ", "本".encode()[:2], "本".encode()[2:], b"!"]

    def decode(self, ids):
        return b"".join(self.BYTES[i] if isinstance(self.BYTES[i], bytes) else self.BYTES[i].encode()
                        for i in ids).decode("utf-8", errors="replace")


def test_a_character_split_over_byte_tokens_shows_whole_on_its_last_token():
    """Each token was decoded alone, so a CJK character over 2 or 3 byte tokens showed (and was
    counted) as U+FFFD marks; now it shows whole on its last token and the others are ''."""
    from ict.models.tokens import token_strings

    assert token_strings(_ByteTokenizer(), [0, 1, 2, 3, 4, 5, 6]) == ["a", "", "日", " ", "", "本", "!"]
    assert token_strings(_ByteTokenizer(), [0, 1]) == ["a", "\ufffd"]  # cut mid-character at the end
    assert token_strings(_ByteTokenizer(), []) == []


def test_the_learning_curve_legend_names_every_method_of_any_panel(tmp_path, monkeypatch):
    """The legend was read from the first panel only: a method drawn in another panel alone was
    missing from it."""
    from matplotlib.figure import Figure

    from ict.analysis.plots import plot_learning_curves

    seen = []
    legend = Figure.legend
    monkeypatch.setattr(Figure, "legend", lambda self, handles, labels, **kw: (
        seen.append(list(labels)), legend(self, handles, labels, **kw))[1])
    rows = [{"method": method, "seed": 0, "step": step, "benchmark": bench, "metric": "pass@1", "problems": 4,
             "value": 0.1 + step / 100} for method, bench in (("grpo", "a"), ("ict", "a"), ("ict", "b"), ("stapo", "b"))
            for step in (0, 10)]
    plot_learning_curves(rows, tmp_path / "curves.png")
    assert seen == [["grpo", "ict", "stapo"]]


def test_an_evaluations_greedy_records_are_not_scored_with_its_samples(tiny_model_dir, tmp_path):
    """`ict eval --greedy` writes one greedy record per problem beside the sampled ones; it was
    scored as one more completion of the group (shifting the group's JS references)."""
    records = [{"prompt": p, "completion": c, **extra} for p in ("what is 1 + 2 ?", "what is 4 + 4 ?")
               for c, extra in (("3", {}), ("it is 3", {}), ("so 3", {"greedy": True}))]
    samples = samples_file(tmp_path / "samples.jsonl", records)
    page = tmp_path / "view.html"
    assert main(["inspect", "--model", str(tiny_model_dir), "--samples", str(samples), "--html", str(page)]) == 0
    blocks = page.read_text().split("<div class='prompt'>")[1:]
    assert len(blocks) == 4 and not any("so" in re.findall(r"<span[^>]*>([^<]*)</span>", b) for b in blocks)


def test_paths_under_the_home_directory_are_read_and_written_there(tiny_model_dir, tmp_path, monkeypatch):
    """--html ~/view.html (e.g. from --config, or --html=~/...: no shell expands it) passed the check
    before the work, which expands ~, and then failed to write after the model had scored every
    token (no directory ./~); --samples ~/samples.jsonl was 'not a file'. Both now name ~'s files."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(tmp_path)
    samples_file(home / "samples.jsonl", [{"prompt": "what is 1 + 2 ?", "completion": c} for c in ("3", "it is 3")])
    assert main(["inspect", "--model", str(tiny_model_dir), "--samples", str(home / "samples.jsonl"),
                 "--html", "~/view.html"]) == 0
    assert (home / "view.html").is_file() and not (tmp_path / "~").exists()
    assert main(["inspect", "--model", str(tiny_model_dir), "--samples", "~/samples.jsonl",
                 "--html", str(home / "other.html")]) == 0
    assert "> is</span>" in (home / "other.html").read_text()  # the file's second completion


def test_a_samples_path_with_a_byte_that_is_not_utf8_is_named_on_the_page(tiny_model_dir, tmp_path):
    """A --samples file named with a byte that is not UTF-8 (a legal Linux name: argv reads 0xff as
    U+DCFF) was read and scored, and then the page's subtitle, which names the file, could not be
    written: "error: 'utf-8' codec can't encode character '\\udcff'", exit 2, no page. The page
    is written, the byte shown as \\udcff."""
    samples = tmp_path / "samples\udcff.jsonl"
    samples_file(samples, [{"prompt": "what is 1 + 2 ?", "completion": c} for c in ("3", "it is 3")])
    page = tmp_path / "view.html"
    assert main(["inspect", "--model", str(tiny_model_dir), "--samples", str(samples),
                 "--html", str(page)]) == 0
    text = page.read_text(encoding="utf-8")
    assert f"completions: {tmp_path}/samples\\udcff.jsonl;" in text
    assert "> is</span>" in text  # the file's second completion


def test_each_seeds_draw_of_an_evaluation_is_its_own_group(tiny_model_dir, tmp_path):
    """An evaluation with --seeds 0 1 writes two draws of n completions per problem (samples.jsonl
    keeps every seed's units): they were scored as one group of 2n, so each token's JS reference
    (its group's mean) mixed the two draws (/tmp/s55/k/seeds.py: a seed-1 token's JS 0.0549
    against 0.0 in its own draw). Each (prompt, seed) is now one group of n, as sampled, the
    seeds of a prompt in file order; --num-prompts counts prompts, each with all its seeds."""
    from transformers import AutoTokenizer

    from ict.analysis.token_view import rollout_from_samples

    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    draws = [("what is 1 + 2 ?", 0, ["the sum is 3", "it is 4"]), ("what is 4 + 4 ?", 0, ["8", "it is 8"]),
             ("what is 1 + 2 ?", 1, ["3", "so it is 3 and"]), ("what is 4 + 4 ?", 1, ["9", "8 8"])]
    samples = samples_file(tmp_path / "samples.jsonl", [
        {"prompt": prompt, "completion": completion, "seed": seed, "sample": index, "greedy": False}
        for prompt, seed, completions in draws for index, completion in enumerate(completions)]
        + [{"prompt": "what is 1 + 2 ?", "completion": "1", "seed": True, "sample": 2, "greedy": False}])
    rollout = rollout_from_samples(tokenizer, samples)  # seed true: no seed 1, left out as ict eval does
    assert rollout.completions == [completions for _, _, completions in draws]
    assert rollout.completion_ids == [[tokenizer.encode(text, add_special_tokens=False) for text in completions]
                                      for _, _, completions in draws]
    assert [text.count("1 + 2") for text in rollout.prompt_texts] == [1, 0, 1, 0]
    assert rollout.seeds == [0, 0, 1, 1]  # each group's, for the views' labels
    first = rollout_from_samples(tokenizer, samples, num_prompts=1)
    assert first.completions == [draws[0][2], draws[2][2]] and first.seeds == [0, 1]


def test_the_views_show_each_seeds_draw_under_its_own_prompt_and_seed(tiny_model_dir, tmp_path, capsys):
    """Seed 0's two completions of a problem, then seed 1's: the page showed one prompt over four
    completions ("(same prompt)" three times) and the terminal four bare lines, though each seed's
    pair is scored as a group of its own. Each seed's draw now starts with its prompt, and both
    views name each completion's seed."""
    records = [{"prompt": "what is 1 + 2 ?", "completion": completion, "seed": seed, "sample": sample}
               for seed, completions in ((0, ["3", "it is 3"]), (1, ["4", "so 3"]))
               for sample, completion in enumerate(completions)]
    page = tmp_path / "view.html"
    assert main(["inspect", "--model", str(tiny_model_dir), "--samples",
                 str(samples_file(tmp_path / "samples.jsonl", records)), "--html", str(page)]) == 0
    headings = [html.unescape(text) for text in re.findall(r"<div class='prompt'>([^<]*)</div>", page.read_text())]
    assert [heading.split(": ", 1)[0] for heading in headings] == [
        "#0 (seed 0)", "#1 (seed 0)", "#2 (seed 1)", "#3 (seed 1)"]
    assert ["what is 1 + 2 ?" in heading for heading in headings] == [True, False, True, False]
    assert headings[1].endswith(": (same prompt)") and headings[3].endswith(": (same prompt)")
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("#")]
    assert [line.split(": ", 1)[0] for line in lines] == ["#0 (seed 0)", "#1 (seed 0)", "#2 (seed 1)",
                                                          "#3 (seed 1)"]


def test_prompt_mode_samples_at_the_given_temperature_and_seed(tiny_model_dir, tmp_path):
    """--prompt: the page's completions are those generate_completions samples with --n, --seed,
    --temperature and --max-new-tokens (the seed and the temperature were each free to be dropped)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from ict.models.rollout import SamplingSettings, generate_completions
    from ict.models.tokens import token_strings

    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir).eval()
    for temperature, seed in (("0.3", "5"), ("1.5", "7")):
        page = tmp_path / f"view{seed}.html"
        assert main(["inspect", "--model", str(tiny_model_dir), "--prompt", "what is 1 + 2 ?", "--n", "3",
                     "--max-new-tokens", "8", "--temperature", temperature, "--seed", seed, "--html", str(page)]) == 0
        shown = [[html.unescape(text) for text in re.findall(r"<span class='tok[^']*'[^>]*>([^<]*)</span>", block)]
                 for block in page.read_text().split("<div class='prompt'>")[1:]]
        rollout = generate_completions(model, tokenizer, ["what is 1 + 2 ?"],
                                       SamplingSettings(float(temperature), 8), num_samples=3, seed=int(seed))
        expected = [[text.replace("\n", "\u21b5\n") for text in token_strings(tokenizer, ids)]
                    for ids in rollout.completion_ids[0]]
        assert shown == expected


def test_inspect_needs_exactly_one_source_of_completions_and_valid_prompt_text(tmp_path):
    """Both --prompt and --samples (the prompt would be silently ignored), neither (nothing to
    score), and a prompt holding a byte that is not UTF-8 (argv's \\udcff) are one-line refusals."""
    from ict.analysis.token_view import InspectConfig
    from ict.core.errors import UsageError

    samples = tmp_path / "samples.jsonl"
    samples.write_text("")
    for config in (InspectConfig(prompt="hi", samples=str(samples)), InspectConfig()):
        with pytest.raises(UsageError, match="give exactly one of --prompt and --samples"):
            config.validate()
    with pytest.raises(UsageError, match="--prompt is not valid text"):
        InspectConfig(prompt="caf\udce9").validate()


def test_a_temperature_below_the_statistics_floor_is_refused_before_the_model_loads(tmp_path, capsys):
    """--temperature 1e-9 passed the check (> 0): the model loaded (and, with --prompt, sampled),
    then the statistics refused it (their floor, 1e-6). Now it is refused first: with a model
    directory that does not exist, the temperature is named, not the model."""
    from ict.analysis.token_view import InspectConfig
    from ict.core.errors import UsageError

    samples = tmp_path / "samples.jsonl"
    samples.write_text('{"prompt": "a", "completion": "b"}\n{"prompt": "a", "completion": "c"}\n')
    for source in (["--samples", str(samples)], ["--prompt", "what is 1 + 2 ?"]):
        assert main(["inspect", "--model", str(tmp_path / "no-model"), *source, "--temperature", "1e-9"]) == 2
        assert capsys.readouterr().err == "error: --temperature must be >= 1e-06 (the statistics' temperature), got 1e-09\n"
    assert InspectConfig(samples=str(samples), temperature=1e-6).validate().temperature == 1e-6  # the floor itself
    with pytest.raises(UsageError, match="--temperature must be >= 1e-06"):
        InspectConfig(samples=str(samples), temperature=9.99e-7).validate()


@pytest.mark.parametrize(("options", "message"), [
    (["--html", " "], "--html is empty: give the page's file (FILE.html), or leave it out"),
    (["--html", ""], "--html is empty: give the page's file (FILE.html), or leave it out"),  # was "got '.'"
])
def test_a_blank_page_or_samples_path_is_refused_before_the_model_loads(tmp_path, capsys, monkeypatch, options,
                                                                        message):
    """--html " " passed validation and, after the scoring, wrote a page named " " into the working
    directory (exit 0); --html "" was refused as "got '.'" and --samples "" as "--samples  is not a
    file". Each is named as empty now, before the model loads (a missing model is not reached)."""
    monkeypatch.chdir(tmp_path)
    samples = tmp_path / "samples.jsonl"
    samples.write_text('{"prompt": "a", "completion": "b"}\n{"prompt": "a", "completion": "c"}\n')
    assert main(["inspect", "--model", str(tmp_path / "no-model"), "--samples", str(samples), *options]) == 2
    assert capsys.readouterr().err == f"error: {message}\n"
    assert main(["inspect", "--model", str(tmp_path / "no-model"), "--samples", ""]) == 2
    assert capsys.readouterr().err == "error: --samples is empty: give a JSONL file of {prompt, completion} records\n"
    assert sorted(path.name for path in tmp_path.iterdir()) == ["samples.jsonl"]


@pytest.mark.parametrize("spelling", ["same", "dotted", "link"])
def test_a_page_named_as_the_samples_file_is_refused_before_the_model_loads(tmp_path, capsys, spelling):
    """``--html`` naming the ``--samples`` file (an evaluation's samples.jsonl) wrote the page over
    it: every record of the evaluation lost, exit 0."""
    samples = tmp_path / "run" / "samples.jsonl"
    samples.parent.mkdir()
    text = '{"prompt": "a", "completion": "b"}\n{"prompt": "a", "completion": "c"}\n'
    samples.write_text(text)
    page = {"same": samples, "dotted": tmp_path / "run" / ".." / "run" / "samples.jsonl", "link": tmp_path / "l"}[spelling]
    if spelling == "link":
        page.symlink_to(samples)
    assert main(["inspect", "--model", str(tmp_path / "no-model"), "--samples", str(samples), "--html", str(page)]) == 2
    assert capsys.readouterr().err == (f"error: --html {page} is the --samples file: the page would replace its "
                                       "records; give another file (FILE.html)\n")
    assert samples.read_text() == text


def test_a_prompt_drawn_twice_is_two_problems_and_a_repeated_record_counts_once(tiny_model_dir, tmp_path):
    """reasoning-gym draws repeat prompts (119 distinct prompts among the 200 problems of the
    committed cpu-ablation evaluations): each repeat was sampled n times, and they were merged into
    one group of 2n, 3n, ..., so `ict inspect --samples` refused those files ("found 4, 8, 12, 16,
    20"). A problem is now its (benchmark, index) with its prompt; a record written twice, equal in
    every field, counts once, as `ict eval` counts it."""
    from transformers import AutoTokenizer

    from ict.analysis.token_view import rollout_from_samples

    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    draws = [("rg:a", 0, "what is 1 + 2 ?", ["3", "it is 4"]), ("rg:a", 1, "what is 4 + 4 ?", ["8", "8 8"]),
             ("rg:a", 2, "what is 1 + 2 ?", ["so 3", "2"]), ("rg:b", 0, "what is 1 + 2 ?", ["1", "3 3"])]
    records = [{"benchmark": benchmark, "index": index, "prompt": prompt, "completion": completion, "seed": 0,
                "sample": sample, "greedy": False}
               for benchmark, index, prompt, completions in draws for sample, completion in enumerate(completions)]
    samples = samples_file(tmp_path / "samples.jsonl", records + [records[2]])  # problem 1's first record again
    rollout = rollout_from_samples(tokenizer, samples)
    assert rollout.completions == [completions for *_, completions in draws]
    assert [text.count("1 + 2") for text in rollout.prompt_texts] == [1, 0, 1, 1]
    assert rollout_from_samples(tokenizer, samples, num_prompts=3).completions == [
        completions for *_, completions in draws[:3]]


def test_a_draw_graded_twice_counts_once(tiny_model_dir, tmp_path):
    """Two records of one draw that differ only in grading fields (one completion graded twice, a
    file concatenated with its re-graded copy) are one draw, as `ict eval` counts them
    (`same_draw`): `ict inspect --samples` refused one such record ("found 2, 3") and doubled every
    group of a file re-graded whole. Two records of one sample with another completion stay two."""
    from transformers import AutoTokenizer

    from ict.analysis.token_view import rollout_from_samples
    from ict.core.errors import UsageError

    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    draws = [(0, "what is 1 + 2 ?", ["3", "it is 4"]), (1, "what is 4 + 4 ?", ["8", "8 8"])]
    records = [{"benchmark": "rg:a", "index": index, "prompt": prompt, "completion": completion, "seed": 0,
                "sample": sample, "greedy": False, "extracted": completion, "correct": False, "grading": 1}
               for index, prompt, completions in draws for sample, completion in enumerate(completions)]
    regraded = [{**record, "correct": True, "grading": 2} for record in records]
    expected = [["3", "it is 4"], ["8", "8 8"]]
    for name, rows in (("one", records + regraded[:1]), ("all", records + regraded)):
        assert rollout_from_samples(tokenizer, samples_file(tmp_path / f"{name}.jsonl", rows)).completions == expected
    seed_1 = [{**record, "seed": 1, "completion": f"{record['completion']}!"} for record in records[:2]]
    rows = records + seed_1 + [{**seed_1[1], "grading": 2}]  # seed 1's sample 1 graded again
    assert rollout_from_samples(tokenizer, samples_file(tmp_path / "seeds.jsonl", rows)).completions == [
        ["3", "it is 4"], ["8", "8 8"], ["3!", "it is 4!"]]  # groups in the order they begin
    other = [*records, {**records[0], "completion": "5"}]  # sample 0 of problem 0 drawn again: two draws
    with pytest.raises(UsageError, match=r"found 2, 3\)$"):
        rollout_from_samples(tokenizer, samples_file(tmp_path / "other.jsonl", other))
