"""`ict inspect`'s numbers against float64 recomputations from one plain forward pass per
completion: the JS to each group reference and ICT's marks, entropy and Renyi-2 with their
shades, the paper's figures of ICT's selection, STAPO's silenced tokens, a LoRA checkpoint's
scores and those after a system prompt. The page and its inputs: tests/test_inspect.py."""

from __future__ import annotations

import html
import math
import re

import numpy as np
import pytest
from eval_helpers import samples_file

from ict.cli import main

pytestmark = pytest.mark.usefixtures("one_thread")


def test_paper_figures_of_the_ict_selection_match_an_independent_forward(tiny_model_dir, tmp_path, capsys):
    """The printed p(a*) mean/std, high:low entropy ratio and p(a*) > beta share of ICT's marks,
    recomputed here from one plain forward pass per completion (no padding, no batching): p =
    softmax(logits / T), p(a*) its sampled entry, H = -sum p log p, beta = sum p^2; the median is
    that of all response tokens' entropies (the lower middle value)."""
    import json

    prompt = "what is 1 + 2 ?"
    completions = ["the sum is 3", "so 1 + 2 = 3 .", "the answer is 3 and so", "what is the sum ? 3 3"]
    samples = tmp_path / "samples.jsonl"
    samples.write_text("".join(json.dumps({"prompt": prompt, "completion": c}) + "\n" for c in completions))
    page = tmp_path / "view.html"
    assert main(["inspect", "--model", str(tiny_model_dir), "--samples", str(samples), "--temperature", "0.8",
                 "--color", "js", "--html", str(page)]) == 0
    printed = capsys.readouterr().out
    marks = [[("ict" in classes.split()) for classes in re.findall(r"<span class='tok([^']*)'", block)]
             for block in page.read_text().split("<div class='prompt'>")[1:]]

    tokenizer, probabilities = _plain_forward(tiny_model_dir)
    sampled, entropy, beta, selected = [], [], [], []
    for completion, flags in zip(completions, marks, strict=True):
        ids = tokenizer.encode(completion, add_special_tokens=False)
        assert len(ids) == len(flags)
        for token, p in zip(ids, probabilities(prompt, ids, 0.8), strict=True):
            sampled.append(float(p[token]))
            entropy.append(float(-(p * p.log()).sum()))
            beta.append(float((p * p).sum()))
        selected += flags
    median = sorted(entropy)[(len(entropy) - 1) // 2]
    chosen = [i for i, flag in enumerate(selected) if flag]
    mean = np.mean([sampled[i] for i in chosen])
    std = np.std([sampled[i] for i in chosen])
    high = sum(entropy[i] > median for i in chosen)
    low = len(chosen) - high
    above = np.mean([sampled[i] > beta[i] for i in chosen])
    line = next(text for text in printed.splitlines() if text.strip().startswith("ict: p(a*) mean"))
    numbers = dict(re.findall(r"(p\(a\*\) mean|p\(a\*\) std|high:low entropy|p\(a\*\) > beta) ([0-9.]+|inf)", line))
    assert float(numbers["p(a*) mean"]) == pytest.approx(mean, abs=0.0051)
    assert float(numbers["p(a*) std"]) == pytest.approx(std, abs=0.0051)
    assert float(numbers["high:low entropy"]) == pytest.approx(high / low if low else math.inf, abs=0.0051)
    assert float(numbers["p(a*) > beta"]) == pytest.approx(above, abs=0.0051)
    assert "the paper: p(a*) mean 0.18, p(a*) std 0.09" in printed
    assert re.search(r"sorted ICT score per response: score knee (0\.\d\d|1\.00|nan)", printed)
    assert "ict leaves out most often:" in printed and "The paper's figures" in page.read_text()


def _plain_forward(model_dir, model=None):
    """The tiny model's tokenizer and ``probabilities(prompt, ids, temperature)``: softmax(logits /
    T) in float64, ``[len(ids), V]``, at each response token of ``ids``, from one plain forward pass
    of ``model`` (default: the one saved in ``model_dir``) over the chat-rendered user ``prompt``
    (after a ``system`` message if given) followed by ``ids`` (no padding, no batching)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = (model or AutoModelForCausalLM.from_pretrained(model_dir)).eval()

    def probabilities(prompt, ids, temperature, system=None):
        messages = [{"role": "system", "content": system}] if system else []
        chat = tokenizer.apply_chat_template([*messages, {"role": "user", "content": prompt}], tokenize=False,
                                             add_generation_prompt=True)
        prompt_ids = tokenizer(chat, add_special_tokens=False)["input_ids"]
        with torch.no_grad():
            logits = model(torch.tensor([prompt_ids + ids])).logits[0].double()
        return torch.softmax(logits[len(prompt_ids) - 1:len(prompt_ids) - 1 + len(ids)] / temperature, dim=-1)

    return tokenizer, probabilities


def test_a_lora_checkpoint_is_scored_as_its_base_with_the_adapter_merged(tiny_model_dir, tmp_path):
    """A LoRA run's checkpoint (``adapter/`` as the trainer's save_checkpoint writes it, tokenizer
    files, no config.json) was refused ("merge first") though ict eval loads it; inspect loads it as
    eval does. Every token's entropy on the page equals a float64 forward of the base with the
    adapter merged by peft's merge_and_unload, after the prompt in the checkpoint's own chat
    template (here not the base's; the loader's docstring: the checkpoint's tokenizer), and differs
    from the base's own."""
    import torch
    from peft import LoraConfig, PeftModel, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from ict.runs.checkpoint import save_checkpoint

    torch.manual_seed(0)
    lora = LoraConfig(r=2, lora_alpha=8, target_modules=["q_proj", "v_proj", "down_proj"], init_lora_weights=False)
    adapted = get_peft_model(AutoModelForCausalLM.from_pretrained(tiny_model_dir), lora)  # B != 0
    tokenizer, base_probabilities = _plain_forward(tiny_model_dir)
    own = AutoTokenizer.from_pretrained(tiny_model_dir)
    own.chat_template = own.chat_template.replace("assistant ", "assistant so the answer : ")
    checkpoint = save_checkpoint(tmp_path / "run", 3, adapted, torch.optim.SGD(adapted.parameters(), lr=0.1), {},
                                 tokenizer=own)
    merged = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float64),
                                       str(checkpoint / "adapter")).merge_and_unload()
    _, probabilities = _plain_forward(checkpoint, merged)
    records = [("the sum is 3", True), ("it is 3 and 4", False), ("3", True), ("so 3", True)]
    samples = samples_file(tmp_path / "samples.jsonl", [{"prompt": "what is 1 + 2 ?", "completion": c, "finished": f}
                                                         for c, f in records])
    page = tmp_path / "view.html"
    assert main(["inspect", "--model", str(checkpoint), "--samples", str(samples), "--temperature", "0.7",
                 "--color", "entropy", "--html", str(page)]) == 0
    shown = [[float(v) for v in re.findall(r"title='entropy=([0-9.]+)'>", block)]
             for block in page.read_text().split("<div class='prompt'>")[1:]]
    gap = 0.0
    for row, (completion, finished) in zip(shown, records, strict=True):
        ids = tokenizer.encode(completion, add_special_tokens=False) + [tokenizer.eos_token_id] * finished
        want, base = ((-(p * p.log()).sum(-1)).tolist() for p in (probabilities("what is 1 + 2 ?", ids, 0.7),
                                                               base_probabilities("what is 1 + 2 ?", ids, 0.7)))
        assert row == pytest.approx(want, abs=6e-5)
        gap = max(gap, *(abs(a - b) for a, b in zip(want, base, strict=True)))
    assert gap > 0.01  # the adapter changes the numbers


def test_stapo_marks_the_tokens_it_would_silence(tiny_model_dir, tmp_path, capsys):
    """STAPO silences only tokens of positive advantage; the view passed zero advantages, so it
    marked none, and its class (stapo_silenced) had no rule in the page's CSS (.stapo). Now each
    completion counts as rewarded: the struck tokens are STAPO's spurious ones, A = +1, p < tau_p
    and entropy below the quantile of those tokens' (checked here from float64 statistics)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from ict.analysis.token_view import rollout_from_samples
    from ict.models.forward import response_logits
    from ict.models.rollout import pack_rollout

    completions = ["the sum is 3 and 5 then 9", "it is 3 , 4 , 7 or 2", "so 3", "7 plus 8 is 1 5"]
    samples = samples_file(tmp_path / "samples.jsonl", [{"prompt": "what is 1 + 2 ?", "completion": c}
                                                         for c in completions])
    page = tmp_path / "view.html"
    assert main(["inspect", "--model", str(tiny_model_dir), "--samples", str(samples), "--temperature", "0.05",
                 "--html", str(page)]) == 0
    text = page.read_text()
    assert re.search(r"\.stapo_silenced\{text-decoration:line-through\}", text)
    struck = [["stapo_silenced" in classes.split() for classes in re.findall(r"<span class='tok([^']*)'", block)]
              for block in text.split("<div class='prompt'>")[1:]]
    assert "stapo_silenced silences most often" in text and "silences most often" in capsys.readouterr().out

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir).eval()
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    batch = pack_rollout(rollout_from_samples(tokenizer, samples), tokenizer.pad_token_id)
    with torch.no_grad():
        log_p = torch.log_softmax(response_logits(model, batch).double() / 0.05, dim=-1)
    entropy = -(log_p.exp() * log_p).sum(-1)
    chosen = log_p.gather(-1, batch.response_ids.unsqueeze(-1)).squeeze(-1)
    mask = batch.response_mask.bool()
    candidates = mask & (chosen.exp() < 0.002)
    threshold = torch.quantile(entropy[candidates], 0.75)
    expected = candidates & (entropy < threshold)
    assert expected.any()
    assert struck == [expected[row, :int(mask[row].sum())].tolist() for row in range(len(completions))]


def _js(p, q):
    """JS(p || q) in nats, float64: H(m) - H(p)/2 - H(q)/2 with m = (p + q)/2."""
    def entropy(x):
        return float(-(x * x.clamp_min(1e-300).log()).sum())
    return entropy((p + q) / 2) - entropy(p) / 2 - entropy(q) / 2


def test_every_js_score_and_ict_mark_matches_a_float64_recomputation(tiny_model_dir, tmp_path):
    """The page's JS of every token to each group reference, recomputed here from one plain forward
    pass per completion: q = the mean over the group's completions alive at t (row i left out for
    the _loo references) plus, for the absorbing ones, a point mass on the end token of each
    completion its record marks finished that ended before t. The view inferred "finished" from
    the padding, so a completion cut short of the batch's longest (finished: false) was absorbed
    as if it had ended: its last word a point mass in its group's reference (off by 0.08 here).
    ICT's marks: the top ceil(0.1 N_b) of each response by JS to group_mean_absorbing."""
    import torch

    records = [("what is 1 + 2 ?", "the sum is 3", True), ("what is 1 + 2 ?", "so it is 3 and 1 + 2", False),
               ("what is 1 + 2 ?", "3", True), ("what is 1 + 2 ?", "it is", False),
               ("what is 4 + 4 ?", "it is 8 so 8", True), ("what is 4 + 4 ?", "8", True),
               ("what is 4 + 4 ?", "8 8", False), ("what is 4 + 4 ?", "the answer 8 is", True)]
    samples = samples_file(tmp_path / "samples.jsonl", [{"prompt": p, "completion": c, "finished": f}
                                                         for p, c, f in records])
    tokenizer, probabilities = _plain_forward(tiny_model_dir)
    rows = []
    for prompt, completion, finished in records:
        ids = tokenizer.encode(completion, add_special_tokens=False) + [tokenizer.eos_token_id] * finished
        rows.append((prompt, ids, probabilities(prompt, ids, 0.7), finished))

    def expected(reference):
        scores = []
        for i, (prompt, ids, p, _) in enumerate(rows):
            scores.append([])
            for t in range(len(ids)):
                parts = []
                for j, (other, other_ids, other_p, other_finished) in enumerate(rows):
                    if other != prompt or (j == i and "loo" in reference):
                        continue
                    if t < len(other_ids):
                        parts.append(other_p[t])
                    elif "absorbing" in reference and other_finished:
                        parts.append(torch.nn.functional.one_hot(torch.tensor(other_ids[-1]), p.shape[1]).double())
                scores[-1].append(_js(p[t], torch.stack(parts).mean(0)) if parts else 0.0)
        return scores

    for reference in ("group_mean_absorbing", "group_mean_loo_absorbing", "group_mean", "group_mean_loo"):
        page = tmp_path / f"{reference}.html"
        assert main(["inspect", "--model", str(tiny_model_dir), "--samples", str(samples), "--temperature", "0.7",
                     "--color", "js", "--reference", reference, "--html", str(page)]) == 0
        spans = [re.findall(r"<span class='tok([^']*)'[^>]*title='js=([0-9.]+)'>", block)
                 for block in page.read_text().split("<div class='prompt'>")[1:]]
        want = expected(reference)
        assert [len(row) for row in spans] == [len(row) for row in want]
        for row, want_row in zip(spans, want, strict=True):
            assert [float(value) for _, value in row] == pytest.approx(want_row, abs=6e-5), reference
            if reference == "group_mean_absorbing":
                top = sorted(range(len(want_row)), key=lambda t: -want_row[t])[:math.ceil(len(want_row) / 10)]
                assert [t for t, (classes, _) in enumerate(row) if "ict" in classes.split()] == sorted(top)


def test_renyi2_colours_shades_jaccard_and_left_out_tokens_match_the_page(tiny_model_dir, tmp_path, capsys):
    """--color renyi2: every token's tooltip is -log sum p^2 (float64, one plain forward pass per
    completion, p = softmax(logits / T)); its shade is white -> red over the batch's range (green =
    blue); the printed Jaccard(ICT, 20-Entropy) and the tokens ICT leaves out are those of the
    page's marks (counted by token id)."""
    from collections import Counter

    prompt = "what is 1 + 2 ?"
    completions = ["the sum is 3", "3", "is 3", "the sum 3 3"]
    samples = samples_file(tmp_path / "samples.jsonl", [{"prompt": prompt, "completion": c} for c in completions])
    page = tmp_path / "view.html"
    assert main(["inspect", "--model", str(tiny_model_dir), "--samples", str(samples), "--temperature", "0.7",
                 "--color", "renyi2", "--html", str(page)]) == 0
    printed = capsys.readouterr().out
    assert "<h1>Token view (renyi2)</h1>" in page.read_text()  # no JS reference named for an entropy colour
    # the tokens each selection leaves out: ICT's and 20-Entropy's (STAPO's are its silenced ones, listed once)
    assert sorted(re.findall(r"^(\S+) leaves out most often: ", printed, re.MULTILINE)) == ["entropy20", "ict"]
    spans = [re.findall(r"<span class='tok([^']*)' style='background:rgb\((\d+),(\d+),(\d+)\)' "
                        r"title='renyi2=([0-9.]+)'>([^<]*)</span>", block)
             for block in page.read_text().split("<div class='prompt'>")[1:]]
    tokenizer, probabilities = _plain_forward(tiny_model_dir)
    expected = []
    for completion in completions:
        p = probabilities(prompt, tokenizer.encode(completion, add_special_tokens=False), 0.7)
        expected += (-(p * p).sum(-1).log()).tolist()
    tokens = [span for row in spans for span in row]
    assert [float(span[4]) for span in tokens] == pytest.approx(expected, abs=6e-5)
    low, high = min(expected), max(expected)
    for _, red, green, blue, _, _ in tokens:
        assert red == "255" and green == blue
    shades = [int(green) for _, _, green, _, _, _ in tokens]
    assert shades == pytest.approx([255 - 200 * (value - low) / (high - low) for value in expected], abs=1.01)
    ict = [("ict" in span[0].split()) for span in tokens]
    entropy20 = [("entropy20" in span[0].split()) for span in tokens]
    both = sum(a and b for a, b in zip(ict, entropy20, strict=True))
    either = sum(a or b for a, b in zip(ict, entropy20, strict=True))
    assert f"Jaccard(ICT, 20-Entropy) = {both / either:.3f}" in printed
    # the lists count token ids (a completion's first token reads '3', after a token ' 3': one id), each
    # named as it reads after a space (the tiny tokenizer's words)
    names = [" " + tokenizer.convert_ids_to_tokens(token) for completion in completions
             for token in tokenizer.encode(completion, add_special_tokens=False)]
    assert [html.unescape(span[5]).strip() for span in tokens] == [name.strip() for name in names]
    left_out = Counter(name for name, flag in zip(names, ict, strict=True) if not flag)
    assert len(left_out) <= 10  # the line lists them all
    line = next(text for text in printed.splitlines() if text.startswith("ict leaves out most often: "))
    assert dict((token, int(count)) for token, count in re.findall(r"'([^']*)' x(\d+)", line)) == left_out
    chosen = Counter(name for name, flag in zip(names, ict, strict=True) if flag)
    line = next(text for text in printed.splitlines() if text.startswith("ict selects most often: "))
    assert dict((token, int(count)) for token, count in re.findall(r"'([^']*)' x(\d+)", line)) == chosen
    # no record says finished: no end token (the padding of the shorter ones ends nothing)
    assert re.search(r"ict: fewer than G alive [0-9.]+ \(all [0-9.]+\), relative position t/L [0-9.]+ "
                     r"\(all [0-9.]+\), end tokens 0\.00 \(all 0\.00\)", printed)


def test_samples_are_scored_after_the_system_prompt_they_were_sampled_after(tiny_model_dir, tmp_path):
    """An evaluation run with --system-prompt samples each completion after that system message, and
    its samples.jsonl records hold the bare prompt: --samples scored them after no system message
    (other scores, silently). --system-prompt renders it: the page shows it in the prompt and every
    entropy is that of a float64 forward pass after it; --prompt samples after it too."""
    prompt, system = "what is 1 + 2 ?", "reply with one number"
    completions = ["the sum is 3", "3", "is 3"]
    samples = samples_file(tmp_path / "samples.jsonl", [{"prompt": prompt, "completion": c} for c in completions])
    page = tmp_path / "view.html"
    assert main(["inspect", "--model", str(tiny_model_dir), "--samples", str(samples), "--system-prompt", system,
                 "--temperature", "0.7", "--color", "entropy", "--html", str(page)]) == 0
    text = page.read_text()
    assert system in text.split("<div class='prompt'>")[1].split("</div>")[0]
    shown = [float(value) for value in re.findall(r"title='entropy=([0-9.]+)'", text)]
    tokenizer, probabilities = _plain_forward(tiny_model_dir)
    expected, without = [], []
    for completion in completions:
        ids = tokenizer.encode(completion, add_special_tokens=False)
        for values, given in ((expected, system), (without, None)):
            p = probabilities(prompt, ids, 0.7, system=given)
            values += (-(p * p.log()).sum(-1)).tolist()
    assert shown == pytest.approx(expected, abs=6e-5)
    assert max(abs(a - b) for a, b in zip(expected, without, strict=True)) > 1e-3  # the test can tell
    assert main(["inspect", "--model", str(tiny_model_dir), "--prompt", prompt, "--system-prompt", system,
                 "--n", "2", "--max-new-tokens", "4", "--html", str(page)]) == 0
    assert system in page.read_text().split("<div class='prompt'>")[1].split("</div>")[0]


def test_the_top_token_lists_count_each_token_id_once_whatever_its_position(tiny_model_dir, tmp_path, capsys):
    """A completion's first token is shown decoded with no token before it: under a decoder that
    joins words with spaces (the tiny model's WordPiece, as SentencePiece's Metaspace) '7' there and
    ' 7' after another token. The lists counted the shown strings, so one token id was listed twice
    ("'7' x3, ' 7' x2"); they count each id once, named as the trainer's lists name it (after a
    space). Reference: the ids of each completion (tokenizer.encode) against the page's ICT marks."""
    from collections import Counter

    from transformers import AutoTokenizer

    prompt = "what is 1 + 2 ?"
    completions = ["7 7 7 7 3", "7 7 3", "7 3 3 3", "3 7"]
    samples = samples_file(tmp_path / "samples.jsonl", [{"prompt": prompt, "completion": c} for c in completions])
    page = tmp_path / "view.html"
    assert main(["inspect", "--model", str(tiny_model_dir), "--samples", str(samples), "--html", str(page)]) == 0
    printed = capsys.readouterr().out
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    ids = [tokenizer.encode(completion, add_special_tokens=False) for completion in completions]
    marks = [["ict" in classes.split() for classes in re.findall(r"<span class='tok([^']*)'", block)]
             for block in page.read_text().split("<div class='prompt'>")[1:]]
    assert [len(row) for row in marks] == [len(row) for row in ids] == [5, 3, 4, 2]
    assert marks[0][0] is False or marks[2][0] is False  # some first token '7' is left out by ICT
    for line_start, chosen in (("ict selects most often: ", True), ("ict leaves out most often: ", False)):
        expected = Counter(" " + tokenizer.convert_ids_to_tokens(token) for row, flags in zip(ids, marks, strict=True)
                           for token, flag in zip(row, flags, strict=True) if flag is chosen)
        for text in (printed, html.unescape(page.read_text()).replace("<br>", "\n")):
            line = next(item for item in text.splitlines() if item.startswith(line_start))
            listed = re.findall(r"'([^']*)' x(\d+)", line)
            assert len(listed) == len(expected) and {token: int(count) for token, count in listed} == expected, line
