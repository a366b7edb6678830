"""Token view: every completion token coloured by a score (JS, entropy, Renyi-2), marked where
ICT (top 10% of each response by JS) and 20-Entropy (top 20% of the batch by entropy) would
select it and where STAPO
would silence it; terminal (rich) and one
self-contained HTML page (inline CSS, no scripts, no network fetches). Both views also give the
anatomy of each selection (``ict.core.diagnostics.selection_anatomy``): where in the responses
the selected tokens lie, against all response tokens; and the paper's figures of each selection
(``ict.core.diagnostics.paper_figures``: p(a*) mean +- std, the high:low entropy ratio, the share
with p(a*) > beta; once for the batch, the knee of the sorted ICT score per response), next to
the paper's values, with the tokens ICT leaves out most often."""

from __future__ import annotations

import html
import json
import unicodedata
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from ict.core.diagnostics import ANATOMY_FIGURES, PAPER_FIGURES
from ict.core.errors import (
    UsageError,
    check_option_text,
    check_output_file,
    check_path_given,
    encodes_as_utf8,
    jsonl_records,
)
from ict.core.options import check_choices, default_of, option
from ict.core.seeding import RUN_SEED_LIMIT
from ict.core.selectors import ICT_DEFAULT_REFERENCE
from ict.core.stats import JS_REFERENCES, MIN_TEMPERATURE
from ict.models.loading import OFFLINE_DEFAULT_MODEL
from ict.models.rollout import ROLLOUT_TEMPERATURE, Rollout
from ict.models.tokens import token_strings, token_text

COLOR_SCORES = ("js", "entropy", "renyi2")
NEWLINE_MARK = "\u21b5"
"""shown before each line break of a token, on the page and in the terminal (a newline token is
otherwise invisible)"""
EMPTY_MARK = "\u25cc"
"""a token shown as '' (`token_strings`: a character's first bytes) in the terminal, where it
would have no width, so neither its colour nor its ICT underline would show; also the base shown
before a token that starts with a combining mark (`_token_shown`), in the terminal and on the page"""
EMPTY_COMPLETION = "(empty completion: no token to score)"
"""shown for a completion with no token (a samples file's empty text not marked finished), which
showed as nothing after its label"""
BIDI_CONTROLS = frozenset("\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")
"""Unicode's Bidi_Control characters (marks, embeddings, overrides, isolates): invisible, and they
reorder the text after them"""
SILENCED = "stapo_silenced"
"""the mark of the tokens STAPO silences (it updates all the others)"""
SELECTIONS = (("ict", "ict", {}), ("entropy20", "entropy", {}), ("stapo", "stapo", {}))
"""(mark, selector, options): each selector with the registry's defaults"""
JS_COLOUR_REFERENCES = tuple(name for name in JS_REFERENCES if name != "ref")
"""every JS reference but 'ref' (the inspect view loads no reference model)"""


@dataclass
class InspectConfig:
    """Every option of `ict inspect` (the CLI options are generated from these fields)."""

    model: str = option(OFFLINE_DEFAULT_MODEL, "model id or directory (a LoRA checkpoint: its base with the "
                        "adapter merged, as ict eval loads it)")
    prompt: str | None = option(None, "sample --n completions of this prompt (or give --samples)")
    samples: str | None = option(None, "JSONL of {prompt, completion} records, e.g. an evaluation's "
                                 "samples.jsonl (or give --prompt)")
    num_prompts: int | None = option(None, "with --samples: only the file's first K prompts; "
                                     "None = all")
    num_samples: int = option(4, "completions per prompt (>= 2: JS scores compare completions)")
    max_new_tokens: int = option(64, "maximum completion length in tokens")
    temperature: float = option(ROLLOUT_TEMPERATURE, "sampling temperature, also the "
                                "statistics' (ict train's default)")
    seed: int = option(0, "sampling seed")
    system_prompt: str | None = option(None, "system message before each prompt, as the model saw it: "
                                       "with --samples, the evaluation's --system-prompt")
    color: str = option("js", "what colours the tokens", COLOR_SCORES)
    reference: str = option(ICT_DEFAULT_REFERENCE, "JS reference of the js colour (ICT's marks "
                            "always use ICT's default)", JS_COLOUR_REFERENCES)
    html: str | None = option(None, "write the self-contained HTML page here")

    def validate(self) -> InspectConfig:
        """One-line UsageError for a bad combination (sampling options other than their defaults
        with --samples, which they do not change)."""
        # a blank path: --html " " wrote a page named " " into the working directory
        check_path_given("--samples", self.samples, "give a JSONL file of {prompt, completion} records")
        check_path_given("--html", self.html, "give the page's file (FILE.html), or leave it out")
        if (self.prompt is None) == (self.samples is None):
            raise UsageError("give exactly one of --prompt and --samples")
        if self.prompt is not None and not self.prompt.strip():
            raise UsageError("--prompt is empty: give the text to sample completions of")
        check_option_text("--prompt", self.prompt)
        check_option_text("--system-prompt", self.system_prompt)
        if self.samples is not None:
            sampling = {"num_samples": "--n", "max_new_tokens": "--max-new-tokens", "seed": "--seed"}
            given = [flag for name, flag in sampling.items()
                     if getattr(self, name) != default_of(InspectConfig.__dataclass_fields__[name])]
            if given:
                raise UsageError(f"{', '.join(given)} sample completions of --prompt; with --samples the "
                                 "file's completions are scored (drop them)")
        if self.num_prompts is not None and (self.samples is None or self.num_prompts < 1):
            raise UsageError("--num-prompts needs --samples and must be >= 1")
        if self.color != "js" and self.reference != ICT_DEFAULT_REFERENCE:
            raise UsageError(f"--reference is the js colour's reference; with --color {self.color} it changes "
                             "nothing (drop it, or colour by js)")
        if self.num_samples < 2:
            raise UsageError("--n must be >= 2 (JS scores compare completions)")
        if self.max_new_tokens < 1 or not self.temperature > 0:
            raise UsageError("--max-new-tokens must be >= 1 and --temperature > 0")
        if not self.temperature >= MIN_TEMPERATURE:  # the statistics' floor (1e-9 failed after the model had loaded)
            raise UsageError(f"--temperature must be >= {MIN_TEMPERATURE:g} (the statistics' temperature), "
                             f"got {self.temperature:g}")
        if not 0 <= self.seed < RUN_SEED_LIMIT:  # as ict eval's; 10**30 failed once the model had loaded
            raise UsageError(f"--seed must lie in [0, 2^32), got {self.seed}")
        if self.samples is not None and not Path(self.samples).expanduser().is_file():
            raise UsageError(f"--samples {self.samples} is not a file")
        if self.html is not None:
            check_output_file("--html", self.html)
            html_path = Path(self.html).expanduser()
            if self.samples is not None and html_path.exists() and html_path.samefile(Path(self.samples).expanduser()):
                raise UsageError(f"--html {self.html} is the --samples file: the page would replace its records; "
                                 "give another file (FILE.html)")
        if self.html is not None and not Path(self.html).expanduser().parent.is_dir():
            raise UsageError(f"--html {self.html}: no directory {Path(self.html).parent} (it was written after "
                             "the model had scored every token)")
        check_choices(self)
        return self

    def source(self) -> str:
        """One line naming the model and where the completions came from (the page's subtitle)."""
        if self.samples:
            completions = f"completions: {self.samples}"
            if self.num_prompts:
                completions += f" (first {self.num_prompts} prompts)"
        else:
            completions = (f"{self.num_samples} completions sampled at temperature "
                           f"{self.temperature}, seed {self.seed}")
        return f"model: {self.model}; {completions}; statistics at temperature {self.temperature}"


@dataclass
class TokenView:
    """Per completion: token strings, scores and selection flags (lists of equal length)."""

    prompts: list[str]
    tokens: list[list[str]]
    scores: list[list[float]]
    selected: dict[str, list[list[bool]]]
    score_name: str
    jaccard_ict_entropy20: float
    top_tokens: dict[str, list[tuple[str, int]]]
    """per mark (ict, entropy20, stapo_silenced): its 10 most frequent tokens (string, count), counted
    by token id (`ict.core.diagnostics.top_token_counts`: by count, then id)"""
    anatomy: dict[str, dict[str, float]]
    """per selection (ict, entropy20, stapo: the tokens each updates): ``ANATOMY_KEYS`` -> value"""
    figures: dict[str, dict[str, float]] = field(default_factory=dict)
    """per selection (as ``anatomy``): ``PAPER_FIGURE_KEYS`` -> value"""
    top_unselected: dict[str, list[tuple[str, int]]] = field(default_factory=dict)
    """per selection: its most frequent unselected response tokens (string, count), counted by
    token id and named as the trainer's top-token lists (`token_text`), as ``top_tokens``"""
    reference: str = ""
    """the JS reference of the ``js`` colour ('' for the entropies)"""
    seeds: list[int] = field(default_factory=list)
    """per completion, the sampling seed of its draw (``SamplesRollout``; empty: one draw)"""
    group_size: int = 0
    """completions per group (the rollout's ``num_samples``; 0: the consecutive completions of
    one prompt are one group)"""


@dataclass
class SamplesRollout(Rollout):
    """A rollout read from a samples file (`rollout_from_samples`): ``seeds``, each group's
    sampling seed (an evaluation's --seeds draws each seed's n completions of a problem)."""

    seeds: list[int] = field(default_factory=list)


def completion_labels(view: TokenView) -> list[str]:
    """Per completion, ``#index``, with its seed where the view holds several seeds' draws (each
    seed's completions of a problem are a group of their own, scored apart: JS to that group)."""
    several = len(set(view.seeds)) > 1
    return [f"#{index} (seed {view.seeds[index]})" if several else f"#{index}"
            for index in range(len(view.tokens))]


def group_starts(view: TokenView) -> list[bool]:
    """Per completion, whether it is the first of its group, the one its prompt is shown above:
    every ``group_size``-th, or (``group_size`` 0) where the prompt changes. Another seed's draw of
    a prompt, or another problem of the same prompt (a reasoning-gym repeat), is a group of its own."""
    return [index % view.group_size == 0 if view.group_size
            else index == 0 or view.prompts[index - 1] != prompt
            for index, prompt in enumerate(view.prompts)]


def anatomy_lines(view: TokenView) -> list[str]:
    """One plain-text line per selection: its anatomy figures, the all-token value in brackets."""
    lines = []
    for label, figures in view.anatomy.items():
        cells = []
        for title, _, selected, everything in ANATOMY_FIGURES:
            cell = f"{title} {figures[selected]:.2f}"
            cells.append(cell + (f" (all {figures[everything]:.2f})" if everything else ""))
        lines.append(f"{label}: " + ", ".join(cells))
    return lines


def _is_batch_figure(key: str) -> bool:
    """Figures of the batch's score curves, the same for every selection (the knee)."""
    return key.startswith("score_knee")


def figure_lines(view: TokenView) -> list[str]:
    """Plain-text lines of the paper's figures: one per selection (the all-token value in
    brackets), one for the batch (the knee of the sorted ICT score per response), the paper's."""
    lines = []
    batch: dict[str, float] = {}
    for label, figures in view.figures.items():
        cells = []
        for title, _, selected, everything, _ in PAPER_FIGURES:
            if _is_batch_figure(selected):
                batch[title] = figures[selected]
                continue
            cell = f"{title} {figures[selected]:.2f}"
            cells.append(cell + (f" (all {figures[everything]:.2f})" if everything else ""))
        lines.append(f"{label}: " + ", ".join(cells))
    if batch:
        lines.append("sorted ICT score per response: " + ", ".join(f"{title} {value:.2f}"
                                                                   for title, value in batch.items()))
    if view.figures:
        lines.append("the paper: " + ", ".join(f"{title} {paper}" for title, _, _, _, paper in PAPER_FIGURES
                                               if paper))
    return lines


def build_view(model: Any, tokenizer: Any, rollout: Any, *, temperature: float, color: str = "js",
               reference: str | None = None) -> TokenView:
    """Token statistics (`ict.core.stats.token_statistics`) and selections of a rollout, at the
    rollout's sampling `temperature` (the statistics' temperature). The view has no rewards:
    every completion counts as rewarded (advantage +1), so STAPO's marks are the tokens it would
    silence in a correct completion (it silences none of negative or zero advantage)."""
    from ict.core.diagnostics import paper_figures, selection_anatomy, top_token_counts
    from ict.core.selectors import SelectionInputs, required_js_references, select
    from ict.core.stats import token_statistics
    from ict.models.forward import response_logits
    from ict.models.rollout import pack_rollout

    if color not in COLOR_SCORES:
        raise ValueError(f"--color must be one of {', '.join(COLOR_SCORES)}")
    batch = pack_rollout(rollout, tokenizer.pad_token_id)
    group_ids = torch.arange(batch.response_ids.shape[0]) // max(1, rollout.num_samples)
    reference = reference or required_js_references("ict")[0]  # the colour: ICT's default score
    references = tuple(dict.fromkeys((reference, *required_js_references("ict"))))  # ICT's marks: its default
    # which completions ended by themselves: the absorbing references' point masses (inferring it
    # from the padding would count a --samples completion cut short of the longest as finished)
    finished = torch.tensor([done for group in rollout.finished for done in group], dtype=torch.bool)
    with torch.no_grad():
        logits = response_logits(model, batch)
        stats = token_statistics(logits, batch.response_ids, batch.response_mask,
                                 temperature=temperature, js_references=references,
                                 group_ids=group_ids, finished=finished)
    inputs = SelectionInputs(stats=stats, response_mask=batch.response_mask,
                             token_ids=batch.response_ids,
                             advantages=torch.ones(batch.response_ids.shape[0]), group_ids=group_ids)
    masks, anatomy, figures = {}, {}, {}
    for label, name, options in SELECTIONS:
        selection = select(name, inputs, **options)
        masks[label] = selection.mask
        anatomy[label] = selection_anatomy(selection.mask, batch.response_mask, group_ids, finished,
                                           selection.tie_decided)
        figures[label] = paper_figures(stats, batch.response_mask, selection.mask)  # knee: ICT's default
    # the tokens each selection leaves out (STAPO's are its silenced ones, shown below anyway)
    left_out = [label for label in masks if label != "stapo"]
    # STAPO updates every token but the spurious ones: show the ones it silences
    masks[SILENCED] = batch.response_mask.bool() & ~masks.pop("stapo")
    score = {"js": stats.js_scores[reference], "entropy": stats.entropy,
             "renyi2": stats.renyi2}[color]
    tokens, scores = [], []
    selected: dict[str, list[list[bool]]] = {label: [] for label in masks}
    for row in range(batch.response_ids.shape[0]):
        length = int(batch.response_mask[row].sum())
        tokens.append(token_strings(tokenizer, batch.response_ids[row, :length].tolist()))
        scores.append(score[row, :length].tolist())
        for label, mask in masks.items():
            selected[label].append(mask[row, :length].tolist())
    # counted by token id, as the trainer's top-token lists (`top_token_counts`, `token_text`): by the
    # string shown, a completion's first token, decoded with no token before it, lost its word-start
    # space under a SentencePiece-style decoder, so one token was listed twice ('1' x2, ' 1' x2)
    top = {label: top_token_counts(batch.response_ids, batch.response_mask, mask) for label, mask in masks.items()}
    a, b = masks["ict"], masks["entropy20"]
    union = int((a | b).sum())
    jaccard = int((a & b).sum()) / union if union else float("nan")
    prompts = [text for text in rollout.prompt_texts for _ in range(rollout.num_samples)]
    seeds = [seed for seed in (rollout.seeds if isinstance(rollout, SamplesRollout) else [])
             for _ in range(rollout.num_samples)]
    return TokenView(prompts, tokens, scores, selected, color, jaccard,
                     {label: _named(tokenizer, counts["selected"]) for label, counts in top.items()}, anatomy,
                     figures, {label: _named(tokenizer, top[label]["unselected"]) for label in left_out},
                     reference if color == "js" else "", seeds, rollout.num_samples)


def _named(tokenizer: Any, counts: list[tuple[int, int]]) -> list[tuple[str, int]]:
    """``(token id, count)`` pairs as ``(string, count)``: each id's string as the trainer's
    top-token lists name it (`token_text`)."""
    return [(token_text(tokenizer, token), count) for token, count in counts]


def _range(view: TokenView) -> tuple[float, float]:
    values = [value for row in view.scores for value in row]
    return (min(values), max(values)) if values else (0.0, 1.0)


def colour_legend(view: TokenView) -> str:
    """What the colour and the marks mean, in one sentence (the page's and the terminal's)."""
    low, high = _range(view)
    score = {"js": f"JS to the {view.reference or ICT_DEFAULT_REFERENCE} reference", "entropy": "Shannon entropy",
             "renyi2": "Renyi-2 entropy"}.get(view.score_name, view.score_name)
    return (f"Colour: {score}, white ({low:.3f}) to red ({high:.3f} nats), the batch's range. ICT: the "
            f"top 10% of each response (at least one token) by JS to {ICT_DEFAULT_REFERENCE}; 20-Entropy: the "
            "top 20% of the batch by entropy; STAPO: the tokens it silences (its spurious ones, were the "
            "completion rewarded).")


def _shade(value: float, low: float, high: float) -> tuple[int, int, int]:
    """White (the batch minimum) -> red (the batch maximum), linear in the score."""
    level = 0.0 if high <= low else max(0.0, min(1.0, (value - low) / (high - low)))
    return 255, int(255 - 200 * level), int(255 - 200 * level)


def render_html(view: TokenView, source: str = "") -> str:
    """One self-contained page: a coloured <span class="tok"> per token with its score in the
    title (the tooltip) and its selections as classes: ICT-selected tokens underlined, 20-Entropy
    boxed, STAPO's silenced tokens struck; a token shown as '' (:func:`token_strings`) as an empty
    box, its colour and marks visible; each token a bidi isolate (the tokens in generation order,
    whatever their direction); lines broken inside words where a word is wider than the page (a
    long token, tokens with no space between them); a line break inside a token shown as NEWLINE_MARK, and
    its other control characters as ``\\xNN`` and its format characters (bidirectional controls,
    zero-width ones) as ``\\uNNNN``
    (`_visible`: an HTML parser turns a carriage return into a line break and drops a NUL; a
    right-to-left override mirrors the text after it).
    `source` (e.g. the model and the samples file) is printed under the heading; each prompt is
    printed once, whole and as the model saw it (chat template, system prompt and line breaks
    included; its control characters shown as a token's), above the first completion of each of
    its groups (`completion_labels` names the seeds); a completion with no token as EMPTY_COMPLETION."""
    low, high = _range(view)
    heading = f"{view.score_name} to {view.reference}" if view.reference else view.score_name
    parts = ["<!doctype html><html><head><meta charset='utf-8'><title>ict inspect</title>",
             # overflow-wrap: a line may break inside a word; a long token, a run of tokens with no space
             # between them or a long prompt word ran off the right of the page (23,544 px wide for a
             # 3,000-character token: the reader scrolled sideways through every line)
             "<style>body{font-family:monospace;max-width:1100px;margin:1em auto;overflow-wrap:anywhere}"
             # line-height: room below each line for the ICT border; at the normal height the next line's
             # backgrounds covered it, so only a completion's last line showed ICT's marks. unicode-bidi:
             # each token a bidi isolate, shown in generation order (after a Hebrew token, " 12 + 34 = 46"
             # joined its right-to-left run and showed as "46 = 34 + 12")
             ".tok{white-space:pre-wrap;padding:1px 0;margin-right:3px;line-height:2;unicode-bidi:isolate}"
             # a token shown as '' (the first bytes of a character, `token_strings`) had no width: its colour
             # and marks were invisible; a narrow box shows them
             ".tok:empty{padding:1px 3px}.ict{border-bottom:3px solid #1f4fd1}"
             f".entropy20{{outline:1px solid #1a8a1a}}.{SILENCED}{{text-decoration:line-through}}"
             ".prompt{color:#555;margin-top:1.2em;white-space:pre-wrap}.stats{background:#f4f4f4;padding:.5em}"
             "</style></head><body>",
             f"<h1>Token view ({html.escape(heading)})</h1>",
             f"<p>{html.escape(source)}</p>" if source else "",
             f"<p>{html.escape(colour_legend(view))} Underlined blue: ICT; green box: 20-Entropy; "
             f"struck: silenced by STAPO. {NEWLINE_MARK} marks a line break inside a token; an empty box, "
             "a token of a character's first bytes (the character shows on its last token); the score "
             "is in each token's tooltip.</p>",
             f"<div class='stats'>Jaccard(ICT, 20-Entropy) = {view.jaccard_ict_entropy20:.3f}"]
    for label, items in view.top_tokens.items():
        listed = ", ".join(f"{html.escape(repr(token))} x{count}" for token, count in items)
        listed = listed or "(none in this batch)"
        parts.append(f"<br>{label} {_verb(label)} most often: {listed}")
    parts.append("<br>Where each selection lies (all response tokens in parentheses):<br>")
    parts.append("<br>".join(html.escape(line) for line in anatomy_lines(view)))
    parts.append("<br>The paper's figures of each selection (all response tokens in parentheses):<br>")
    parts.append("<br>".join(html.escape(line) for line in figure_lines(view)))
    for label, items in view.top_unselected.items():
        listed = ", ".join(f"{html.escape(repr(token))} x{count}" for token, count in items)
        parts.append(f"<br>{label} leaves out most often: {listed or '(none in this batch)'}")
    parts.append("</div>")
    labels, starts = completion_labels(view), group_starts(view)
    for index, (prompt, tokens, scores) in enumerate(zip(view.prompts, view.tokens, view.scores,
                                                         strict=True)):
        shown = prompt if starts[index] else "(same prompt)"
        parts.append(f"<div class='prompt'>{labels[index]}: {html.escape(_visible(shown))}</div><p>")
        for position, (token, value) in enumerate(zip(tokens, scores, strict=True)):
            classes = ["tok", *(label for label in view.selected
                                if view.selected[label][index][position])]
            red, green, blue = _shade(value, low, high)
            parts.append(f"<span class='{' '.join(classes)}' style='background:rgb({red},"
                         f"{green},{blue})' title='{view.score_name}={value:.4f}'>"
                         f"{html.escape(_token_shown(token)).replace(chr(10), NEWLINE_MARK + chr(10))}</span>")
        parts.append("</p>" if tokens else f"<em>{EMPTY_COMPLETION}</em></p>")
    parts.append("</body></html>")
    return "".join(parts)


def _verb(label: str) -> str:
    return "silences" if label == SILENCED else "selects"


def _visible(text: str) -> str:
    """`text` for a terminal or the page: control characters but newline and tab as ``\\xNN`` (a
    completion's ESC would otherwise reach the terminal as an escape sequence) and the invisible
    format characters (Unicode's category Cf) as ``\\uNNNN`` (``\\UNNNNNNNN`` above U+FFFF): the
    bidirectional controls (:data:`BIDI_CONTROLS`; a right-to-left override token showed the rest of
    its completion mirrored: " 12 + 34 = 46" as "64 = 43 + 21") and the zero-width ones (a token
    U+200B, zero-width space, had no width: its colour and ICT's mark were invisible)."""
    return "".join(f"\\x{ord(char):02x}" if unicodedata.category(char) == "Cc" and char not in "\n\t"
                   else _escape(char) if char in BIDI_CONTROLS or unicodedata.category(char) == "Cf" else char
                   for char in text)


def _token_shown(token: str) -> str:
    """A token as the terminal and the page show it: `_visible`, with EMPTY_MARK (U+25CC, Unicode's
    base for a mark shown alone) before a first character that is a combining mark (categories Mn,
    Me: a token U+0301 of decomposed text had no width and joined the previous token's last
    letter, so its colour and ICT's underline were nowhere)."""
    shown = _visible(token)
    return EMPTY_MARK + shown if shown and unicodedata.category(shown[0]) in ("Mn", "Me") else shown


def _escape(char: str) -> str:
    """``\\uNNNN`` (``\\UNNNNNNNN`` above U+FFFF, as Python writes it)."""
    return f"\\u{ord(char):04x}" if ord(char) <= 0xFFFF else f"\\U{ord(char):08x}"


def print_view(view: TokenView, console: Any = None) -> None:
    """Terminal rendering with rich: background colour by score, ICT tokens underlined, a token
    shown as '' as EMPTY_MARK, a line break inside a token after NEWLINE_MARK, each completion labelled by `completion_labels`, each group's
    prompt (as the model saw it) above its first completion (`group_starts`), a completion with no
    token as EMPTY_COMPLETION, as on the page."""
    from rich.console import Console
    from rich.text import Text

    console = console or Console()
    low, high = _range(view)
    empty = any(token == "" for tokens in view.tokens for token in tokens)
    breaks = any("\n" in token for tokens in view.tokens for token in tokens)
    console.print(colour_legend(view) + " Underlined: ICT." + (
        f" {EMPTY_MARK}: a token of a character's first bytes (the character shows on its last token)."
        if empty else "") + (f" {NEWLINE_MARK}: a line break inside a token." if breaks else ""),
        markup=False, highlight=False, soft_wrap=True)
    labels, starts = completion_labels(view), group_starts(view)
    for index, (prompt, tokens, scores) in enumerate(zip(view.prompts, view.tokens, view.scores,
                                                         strict=True)):
        if starts[index]:
            console.print(f"prompt: {_visible(prompt)}", markup=False, highlight=False, soft_wrap=True)
        text = Text(f"{labels[index]}: ")
        for position, (token, value) in enumerate(zip(tokens, scores, strict=True)):
            red, green, blue = _shade(value, low, high)
            style = f"black on rgb({red},{green},{blue})"
            if view.selected["ict"][index][position]:
                style += " underline bold"
            # a line break as NEWLINE_MARK before it, as on the page: a line break has no cell to colour or
            # underline, so a selected newline token (frequent in reasoning text) left no trace
            text.append((_token_shown(token) or EMPTY_MARK).replace("\n", NEWLINE_MARK + "\n"), style=style)
        console.print(text if tokens else text.append(EMPTY_COMPLETION))
    # soft_wrap: a line of the figures wraps as the terminal wraps it (rich's hard wrap at the console
    # width split a listed token from its count: "'a b' \nx3")
    console.print(f"Jaccard(ICT, 20-Entropy) = {view.jaccard_ict_entropy20:.3f}", soft_wrap=True)
    for label, items in view.top_tokens.items():
        listed = ", ".join(f"{token!r} x{count}" for token, count in items)
        console.print(f"{label} {_verb(label)} most often: {listed or '(none in this batch)'}", markup=False,
                      highlight=False, soft_wrap=True)
    console.print("Where each selection lies (all response tokens in parentheses):", soft_wrap=True)
    for line in anatomy_lines(view):
        console.print(f"  {line}", markup=False, highlight=False, soft_wrap=True)
    console.print("The paper's figures of each selection (all response tokens in parentheses):", soft_wrap=True)
    for line in figure_lines(view):
        console.print(f"  {line}", markup=False, highlight=False, soft_wrap=True)
    for label, items in view.top_unselected.items():
        listed = ", ".join(f"{token!r} x{count}" for token, count in items)
        console.print(f"{label} leaves out most often: {listed or '(none in this batch)'}",
                      markup=False, highlight=False, soft_wrap=True)


def rollout_from_samples(tokenizer: Any, path: Path, num_prompts: int | None = None,
                         system_prompt: str | None = None) -> SamplesRollout:
    """Rollout (each group's seed in ``seeds``) from a JSONL of {"prompt", "completion", optional
    "finished"} records (an evaluation's samples.jsonl is one), grouped by prompt and sampling seed
    (`sampling_seed`: an evaluation's --seeds draws each seed's n completions of a problem, one
    group, as sampled; one group of the seeds together mixed their draws in its JS reference) in
    file order, a prompt repeated under another benchmark or problem index (a reasoning-gym draw) a
    problem of its own, a record repeated (same problem, seed and sample, equal in every field but
    the grading ones: `same_draw`) counted once; the first `num_prompts` problems (all when None,
    each with all its seeds' groups), each group with the same number of completions, each prompt
    rendered with `system_prompt` (an evaluation's records do not hold it; without it, completions
    sampled after a system message would be scored after none). A finished completion (it ended on
    EOS, as a rollout's does) gets the tokenizer's EOS token after its text's tokens; a record
    without "finished" counts as cut by the length cap. An evaluation's greedy records are left out
    (they are not of the sampled group), and so are records whose seed is no integer (``true`` too,
    as ``ict eval`` leaves them out), and a torn last line (`jsonl_records`, as `ict eval` and
    `ict compare` read it); one completion per prompt is a UsageError, as ``--n 1`` is. The
    text is re-tokenized, so a sample whose sampled ids were not the canonical tokenization
    differs."""
    from ict.models.rollout import encode_prompt, render_prompt
    from ict.runs.samples import same_draw, sampling_seed

    groups: dict[tuple[tuple[str, str], int | None], list[tuple[str, bool]]] = {}
    prompts: set[tuple[str, str]] = set()
    seen: dict[tuple[tuple[str, str], int | None, int], dict[str, Any]] = {}
    for number, record in jsonl_records(path, "a {prompt, completion} JSON record"):
        try:
            prompt, completion = record["prompt"], record["completion"]
        except (KeyError, TypeError) as error:
            raise UsageError(f"{path}:{number}: not a {{prompt, completion}} JSON record ({error})") from None
        if not (isinstance(prompt, str) and isinstance(completion, str)):
            raise UsageError(f"{path}:{number}: prompt and completion must be text, got "
                             f"{type(prompt).__name__} and {type(completion).__name__}")
        for name, text in (("prompt", prompt), ("completion", completion)):
            if not encodes_as_utf8(text):  # JSON's \ud800 escapes a lone surrogate, which no tokenizer encodes
                raise UsageError(f"{path}:{number}: the {name} is not valid text (a lone surrogate, as \\ud800)")
        if not isinstance(record.get("finished", False), bool):  # "false" would read as finished
            raise UsageError(f"{path}:{number}: finished must be true or false, got {record['finished']!r}")
        if record.get("greedy"):  # an evaluation's greedy completion: not one of the sampled group
            continue
        if (seed := sampling_seed(record)) is None:  # a seed that is no integer (true too): left out, as ict eval
            continue
        # a problem: its prompt and, in an evaluation's records, its benchmark and index (reasoning-gym
        # draws repeat a prompt: each repeat is sampled, and scored, as a group of its own)
        problem = (prompt, json.dumps([record.get("benchmark"), record.get("index")], default=str))
        if isinstance(sample := record.get("sample"), int) and not isinstance(sample, bool):
            first = seen.setdefault((problem, seed, sample), record)
            if first is not record and same_draw(first, record):
                continue  # one draw written again (a retried write, a re-grade): once, as in ict eval
        if problem not in prompts and num_prompts is not None and len(prompts) == num_prompts:
            continue
        prompts.add(problem)
        groups.setdefault((problem, seed), []).append((completion, bool(record.get("finished", False))))
    if not groups:
        raise UsageError(f"{path}: no {{prompt, completion}} records")
    sizes = {len(group) for group in groups.values()}
    if len(sizes) != 1:
        raise UsageError(f"{path}: every prompt needs the same number of completions (of each seed) "
                         f"(found {', '.join(map(str, sorted(sizes)))})")
    if sizes == {1}:
        raise UsageError(f"{path}: one completion per prompt; JS scores compare completions (>= 2 each)")
    texts = [render_prompt(tokenizer, prompt, system_prompt) for (prompt, _), _ in groups]
    eos = [tokenizer.eos_token_id] if tokenizer.eos_token_id is not None else []
    ids = [[tokenizer.encode(completion, add_special_tokens=False) + (eos if finished else [])
            for completion, finished in group] for group in groups.values()]
    if not any(tokens for group in ids for tokens in group):
        raise UsageError(f"{path}: every completion is empty (no token to score)")
    return SamplesRollout(texts, [encode_prompt(tokenizer, text) for text in texts],
                          [[completion for completion, _ in group] for group in groups.values()], ids,
                          [[finished for _, finished in group] for group in groups.values()],
                          seeds=[seed for _, seed in groups])
