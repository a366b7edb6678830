"""The token view's text (ict.analysis.token_view's page and terminal rendering) on hand-made
views, no model: what a token's or a prompt's odd characters show as (control characters,
line breaks, bidirectional controls), markup kept as text, the heading's reference and the
terminal's ICT underline."""

from __future__ import annotations

import functools
import html
import re

from hypothesis import example, given
from hypothesis import strategies as st


def test_the_terminal_view_shows_control_characters_instead_of_sending_them():
    """A completion's ESC reached the terminal raw (rich strips BEL, not ESC): an escape sequence
    that clears the screen or sets the window title."""
    import io

    from rich.console import Console

    from ict.analysis.token_view import TokenView, print_view

    view = TokenView(["p", "p"], [["\x1b[2J", "\x1b]0;pwned\x07"], ["a\n", "\tb"]], [[0.1, 0.2], [0.3, 0.4]],
                     {"ict": [[True, False], [False, False]]}, "js", 0.0, {}, {})
    buffer = io.StringIO()
    print_view(view, Console(file=buffer, force_terminal=False, width=200))
    out = buffer.getvalue()
    assert "\x1b" not in out and "\x07" not in out and "\\x09" not in out  # a tab is no control sequence
    assert "#0: \\x1b[2J\\x1b]0;pwned\\x07\n" in out and "#1: a\u21b5\n" in out  # newline (and tab) kept, after its mark


def test_the_page_shows_carriage_returns_and_other_control_characters_as_the_terminal_does():
    """A token's control characters reached the page raw: an HTML parser turns "\\r" into a line
    break (a token "a\\r" showed as "a" and a line break with no mark; "\\r\\n" as two line breaks
    around the mark) and drops a NUL ("\\x00b" showed as "b"). They show as \\xNN, as in the terminal."""
    from ict.analysis.token_view import TokenView, render_html

    view = TokenView(["p"], [["a\r", "\r\n", "\x00b", "c\x1b", "\td"]], [[0.1, 0.2, 0.3, 0.4, 0.5]],
                     {"ict": [[True, False, False, False, False]]}, "js", 0.0, {}, {})
    page = render_html(view)
    shown = [html.unescape(text) for text in re.findall(r"<span class='tok[^']*'[^>]*>([^<]*)</span>", page)]
    assert shown == ["a\\x0d", "\\x0d\u21b5\n", "\\x00b", "c\\x1b", "\td"]
    assert not any(char in page for char in "\r\x00\x1b")


def test_bidirectional_controls_show_as_escapes_instead_of_reordering_the_view():
    """A token holding U+202E (right-to-left override; one token of byte-level vocabularies) was
    written raw: invisible itself, it made a browser show the rest of its completion mirrored
    (" 12 + 34 = 46" as "64 = 43 + 21"), and a prompt's did the same to the prompt. Every Unicode
    Bidi_Control character shows as \\uNNNN, on the page (tokens and prompts) and in the terminal."""
    import io

    from rich.console import Console

    from ict.analysis.token_view import TokenView, print_view, render_html

    controls = "\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"
    tokens = [" is", "\u202e", " 12", " +", " 34", " = 46\u2067"]
    view = TokenView(["say\u202e 12 + 34\r"], [tokens], [[0.1, 0.2, 0.3, 0.4, 0.5, 0.6]],
                     {"ict": [[False, True, False, False, False, False]]}, "js", 0.0, {}, {})
    page = render_html(view)
    assert not any(char in page for char in controls + "\r")
    shown = [html.unescape(text) for text in re.findall(r"<span class='tok[^']*'[^>]*>([^<]*)</span>", page)]
    assert shown == [" is", "\\u202e", " 12", " +", " 34", " = 46\\u2067"]
    assert "#0: say\\u202e 12 + 34\\x0d</div>" in page
    buffer = io.StringIO()
    print_view(view, Console(file=buffer, force_terminal=False, width=200))
    out = buffer.getvalue()
    assert not any(char in out for char in controls)
    assert "#0:  is\\u202e 12 + 34 = 46\\u2067\n" in out
    every = TokenView(["p"], [list(controls)], [[0.0] * len(controls)], {"ict": [[False] * len(controls)]},
                      "js", 0.0, {}, {})
    assert not any(char in render_html(every) for char in controls)


def test_the_terminal_view_underlines_exactly_the_ict_tokens():
    """The terminal marks ICT's tokens underlined and bold ("Underlined: ICT." in its legend), on
    the score's background; the others carry the background only."""
    import io

    from rich.console import Console

    from ict.analysis.token_view import TokenView, print_view

    view = TokenView(["p"], [["alpha", "beta", "gamma"]], [[0.1, 0.5, 0.9]],
                     {"ict": [[False, True, False]]}, "js", 0.0, {}, {})
    buffer = io.StringIO()
    print_view(view, Console(file=buffer, force_terminal=True, color_system="truecolor", width=200))
    styles = dict((token, set(codes.split(";")))
                  for codes, token in re.findall(r"\x1b\[([0-9;]*)m(alpha|beta|gamma)", buffer.getvalue()))
    assert {"1", "4"} <= styles["beta"]
    assert not {"1", "4"} & styles["alpha"] and not {"1", "4"} & styles["gamma"]
    assert all({"30", "48"} <= codes for codes in styles.values())  # black on an rgb background


def test_the_page_names_the_colours_reference_and_shows_line_breaks():
    """The heading said "Token view (js)" whatever --reference coloured it, and the legend "ICT
    (top 10% JS)" (ICT ranks each response by JS to group_mean_absorbing); a newline token was an
    empty box. Markup in a prompt or a token is text, never markup."""
    import io

    from rich.console import Console

    from ict.analysis.token_view import TokenView, print_view, render_html

    view = TokenView(["say </script><b>&", "say </script><b>&"], [["a\n", "</script>"], ["&", "\n\n"]],
                     [[0.1, 0.4], [0.2, 0.3]], {"ict": [[True, False], [False, True]]}, "js", 0.0, {}, {},
                     reference="group_mean_loo")
    page = render_html(view)
    assert "<h1>Token view (js to group_mean_loo)</h1>" in page
    legend = ("Colour: JS to the group_mean_loo reference, white (0.100) to red (0.400 nats), the batch's range. "
              "ICT: the top 10% of each response (at least one token) by JS to group_mean_absorbing; 20-Entropy: "
              "the top 20% of the batch by entropy")
    assert html.escape(legend) in page
    assert ">a\u21b5\n</span>" in page and ">\u21b5\n\u21b5\n</span>" in page
    assert "<script" not in page and "<b>" not in page and "&lt;/script&gt;&lt;b&gt;&amp;" in page
    buffer = io.StringIO()
    print_view(view, Console(file=buffer, force_terminal=False, width=400))
    assert legend in buffer.getvalue()


def test_the_lines_of_a_completion_leave_room_for_the_ict_border_below_them():
    """At the normal line height (about 1.2 em) the ICT border (3px below a 1px padding) reached
    into the next line, whose tokens' backgrounds (every token has one, white included) painted
    over it: a completion wrapping over several lines showed ICT's marks on its last line only
    (as headless Chromium draws it). The gap between two lines' glyph boxes, (line-height
    - content height) x font size, must hold this line's padding and border and the next line's
    padding and 20-Entropy outline: with Chromium's default monospace size (13px) and a content
    height of at most 1.2 em (DejaVu Sans Mono 1.16, Liberation Mono 1.13)."""
    from ict.analysis.token_view import TokenView, render_html

    view = TokenView(["p"], [["a"]], [[0.1]], {"ict": [[True]]}, "js", 0.0, {}, {})
    page = render_html(view)
    rules = dict(re.findall(r"\.([\w-]+)\{([^}]*)\}", page))
    tok = dict(item.split(":", 1) for item in rules["tok"].split(";"))
    padding = [float(value.removesuffix("px")) for value in tok["padding"].split()]
    border = float(re.search(r"border-bottom:(\d+)px", rules["ict"]).group(1))
    outline = float(re.search(r"outline:(\d+)px", rules["entropy20"]).group(1))
    needed = padding[0] + border + padding[0] + outline  # padding: "1px 0" (top and bottom alike)
    assert (float(tok.get("line-height", "1.2")) - 1.2) * 13 >= needed


def test_a_token_shown_as_nothing_keeps_a_visible_box_for_its_colour_and_marks():
    """token_strings shows the first byte tokens of a character split over several (SmolLM2's
    ' 😀' is 2 tokens, ' 日' 3) as '': an empty span had no width, so its colour and ICT's border
    were invisible (only 20-Entropy's 1px outline showed) although ICT selects such tokens. The
    page gives an empty token (CSS :empty, the span has no text at all) a box 6px wide."""
    from ict.analysis.token_view import TokenView, render_html

    view = TokenView(["p"], [[" 7", "", " 😀"]], [[0.1, 0.9, 0.2]], {"ict": [[False, True, False]]}, "js", 0.0,
                     {}, {})
    page = render_html(view)
    spans = re.findall(r"<span class='(tok[^']*)'[^>]*>([^<]*)</span>", page)
    assert spans == [("tok", " 7"), ("tok ict", ""), ("tok", " 😀")]
    (rule,) = re.findall(r"\.tok:empty\{padding:(\d+)px (\d+)px\}", page)
    assert 2 * int(rule[1]) >= 6  # left and right padding
    assert "an empty box" in page  # the legend says what it is


def test_the_terminal_shows_a_token_shown_as_nothing_as_a_mark_with_its_colour_and_underline():
    """The terminal appended a token shown as '' (a character's first bytes, `token_strings`) as
    no text: ICT's reddest, underlined token left no trace on the line. It shows as U+25CC (a
    dotted circle, Unicode's placeholder of a missing character) on its colour, ICT's underline
    and bold on it, and the legend says what it is (only where such a token is shown)."""
    import io

    from rich.console import Console

    from ict.analysis.token_view import TokenView, print_view

    view = TokenView(["p"], [[" 7", "", " x"]], [[0.1, 0.9, 0.2]], {"ict": [[False, True, False]]}, "js", 0.0,
                     {}, {})
    buffer = io.StringIO()
    print_view(view, Console(file=buffer, force_terminal=True, color_system="truecolor", width=300))
    styles = re.findall(r"\x1b\[([0-9;]*)m( 7|\u25cc| x)\x1b\[0m", buffer.getvalue())
    # the batch's maximum (0.9) is the reddest: rgb(255, 255 - 200, 255 - 200); bold (1), underline (4)
    assert styles == [("30;48;2;255;255;255", " 7"), ("1;4;30;48;2;255;55;55", "\u25cc"),
                      ("30;48;2;255;230;230", " x")]
    plain = io.StringIO()
    print_view(view, Console(file=plain, force_terminal=False, width=300))
    assert "#0:  7\u25cc x\n" in plain.getvalue()
    note = "\u25cc: a token of a character's first bytes (the character shows on its last token)."
    assert note in plain.getvalue()
    plain = io.StringIO()
    print_view(TokenView(["p"], [[" 7", " x"]], [[0.1, 0.2]], {"ict": [[False, True]]}, "js", 0.0, {}, {}),
               Console(file=plain, force_terminal=False, width=300))
    assert "\u25cc" not in plain.getvalue() and "#0:  7 x\n" in plain.getvalue()


def test_the_terminal_keeps_each_listed_token_with_its_count_on_a_narrow_terminal():
    """At the console's width rich broke the lines of the most-selected tokens, the Jaccard line and
    the figures' headings at a space, also inside a token's repr or between a token and its count
    ("'a b' " / "x3"); each is one line now, wrapped (if at all) by the terminal, as the anatomy and
    left-out lines already were."""
    import io

    from rich.console import Console

    from ict.analysis.token_view import TokenView, print_view

    view = TokenView(["p"], [["a b", " "]], [[0.1, 0.2]], {"ict": [[True, False]]}, "js", 0.5,
                     {"ict": [("a b", 3), (" ", 2), ("long token here", 1)]}, {})
    buffer = io.StringIO()
    print_view(view, Console(file=buffer, force_terminal=False, width=30))
    lines = buffer.getvalue().splitlines()
    assert "ict selects most often: 'a b' x3, ' ' x2, 'long token here' x1" in lines
    assert "Jaccard(ICT, 20-Entropy) = 0.500" in lines
    assert "Where each selection lies (all response tokens in parentheses):" in lines
    assert "The paper's figures of each selection (all response tokens in parentheses):" in lines


def _headings(page: str) -> list[str]:
    return [html.unescape(text) for text in re.findall(r"<div class='prompt'>([^<]*)</div>", page)]


def _lines(view) -> list[str]:
    """The terminal's completion lines of ``view``."""
    import io

    from rich.console import Console

    from ict.analysis.token_view import print_view

    buffer = io.StringIO()
    print_view(view, Console(file=buffer, force_terminal=False, width=300))
    return [line for line in buffer.getvalue().splitlines() if line.startswith("#")]


def test_each_group_shows_its_prompt_and_several_seeds_are_named():
    """An evaluation's samples with --seeds 0 1: each seed's n completions of a problem are a group
    of their own (each token's JS is to its own group), but the page put "(same prompt)" over
    every completion after the prompt's first, and neither view named a seed: seed 0's pair and
    seed 1's read as one group of four. A reasoning-gym prompt drawn twice (two problems, scored
    apart) likewise. Each group's first completion now shows its prompt, and where the view holds
    several seeds each completion is labelled with its own; one seed, or none known, no label."""
    from ict.analysis.token_view import TokenView, render_html

    def view(seeds, group_size):
        return TokenView(["A", "A", "A", "A"], [["a"], ["b"], ["c"], ["d"]], [[0.1], [0.2], [0.3], [0.4]],
                         {"ict": [[True]] * 4}, "js", 0.0, {}, {}, seeds=seeds, group_size=group_size)

    assert _headings(render_html(view([0, 0, 1, 1], 2))) == [
        "#0 (seed 0): A", "#1 (seed 0): (same prompt)", "#2 (seed 1): A", "#3 (seed 1): (same prompt)"]
    assert _lines(view([0, 0, 1, 1], 2)) == ["#0 (seed 0): a", "#1 (seed 0): b", "#2 (seed 1): c",
                                             "#3 (seed 1): d"]
    assert _headings(render_html(view([5, 5, 5, 5], 2))) == [  # one seed: two problems of one prompt
        "#0: A", "#1: (same prompt)", "#2: A", "#3: (same prompt)"]
    assert _lines(view([5, 5, 5, 5], 2)) == ["#0: a", "#1: b", "#2: c", "#3: d"]
    assert _headings(render_html(view([], 4))) == [  # --prompt: one group
        "#0: A", "#1: (same prompt)", "#2: (same prompt)", "#3: (same prompt)"]
    assert _headings(render_html(view([], 0))) == _headings(render_html(view([], 4)))  # group size unknown


def test_each_token_is_a_bidi_isolate_so_the_page_keeps_generation_order():
    """Right-to-left letters (not only the Bidi_Control characters, shown as escapes) reorder the
    text around them: after the tokens " שלום", " עולם" the tokens " 12", " +", " 34", " =", " 46"
    joined their right-to-left run (numbers and the neutrals between act as R) and headless Chromium
    showed "46 = 34 + 12". Each token is now a bidi isolate (CSS
    unicode-bidi: isolate): a neutral to its neighbours, so the tokens keep generation order, left
    to right, and a Hebrew token still reads right to left inside its box."""
    from ict.analysis.token_view import TokenView, render_html

    tokens = [" the", " שלום", " 12", " +", " 34"]
    view = TokenView(["p"], [tokens], [[0.1] * 5], {"ict": [[False] * 5]}, "js", 0.0, {}, {})
    page = render_html(view)
    rules = dict(re.findall(r"\.([\w-]+)\{([^}]*)\}", page))
    tok = dict(item.split(":", 1) for item in rules["tok"].split(";"))
    assert tok["unicode-bidi"] == "isolate" and "direction" not in tok  # the page's left-to-right order
    shown = [html.unescape(text) for text in re.findall(r"<span class='tok[^']*'[^>]*>([^<]*)</span>", page)]
    assert shown == tokens  # in generation order in the source, as the isolates show them



def test_a_long_token_or_prompt_wraps_inside_the_page_in_headless_chromium(tmp_path):
    """A word wider than the page has no place to break: a 3,000-character token, 600 tokens with
    no space between them (each a span, with no break between spans) or a 3,000-character prompt
    word ran off the right of the 1,100px body (Chromium's document 23,544 px wide at a 1,200px
    window): the reader scrolled sideways through every line. With overflow-wrap: anywhere the
    document is no wider than the window. Measured by a probe script added to a copy of the page
    (the page itself has none), read back through --dump-dom."""
    import shutil
    import subprocess
    import tempfile

    import pytest

    from ict.analysis.token_view import TokenView, render_html

    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        pytest.skip("chromium is not installed (apt-get install chromium)")
    probe = ("<script>document.addEventListener('DOMContentLoaded',()=>{document.title='width '"
             "+document.documentElement.scrollWidth})</script>")
    cases = {"token": (["p"], [["a", "x" * 3000, " b"]]), "no spaces": (["p"], [["ab"] * 600]),
             "prompt": (["q" * 3000], [["a", " b"]])}
    for name, (prompts, tokens) in cases.items():
        view = TokenView(prompts, tokens, [[0.1] * len(row) for row in tokens],
                         {"ict": [[False] * len(row) for row in tokens]}, "js", 0.0, {}, {})
        page = tmp_path / f"{name}.html"
        page.write_text(render_html(view).replace("</body>", probe + "</body>"), encoding="utf-8")
        dom = subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                              "--disable-background-networking", "--disable-component-update",
                              "--disable-sync", f"--user-data-dir={tempfile.mkdtemp()}",
                              "--window-size=1200,900", "--dump-dom", page.as_uri()],
                             check=True, timeout=120, capture_output=True, text=True).stdout
        width = int(re.search(r"<title>width (\d+)</title>", dom).group(1))
        assert width <= 1200, (name, width)

def _llama_style_tokenizer():
    """A SentencePiece-style vocabulary with Llama's (and Mistral's) decoder, built from code: '▁' is a
    space, and a decode's first space is dropped."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"<unk>": 0, "▁the": 1, "▁sum": 2, "▁is": 3, "▁7": 4, "7": 5, ".": 6, "▁": 7, "\n": 8, "s": 9}
    backend = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always")
    backend.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(),
                                         decoders.Strip(" ", 1, 0)])
    return PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="<unk>")


class _BytePieces:
    """A byte-level vocabulary: token i is the bytes PIECES[i], decoded joined as UTF-8 with
    replacement (as a byte-level BPE tokenizer decodes); pieces cut characters anywhere."""

    PIECES = [b"a", b" ", "日".encode()[:1], "日".encode()[1:], "😀".encode()[:2], "😀".encode()[2:], b"\n", b"!",
              "é".encode(), "é".encode()[:1], b" 7"]

    def decode(self, ids: list[int]) -> str:
        return b"".join(self.PIECES[i] for i in ids).decode("utf-8", errors="replace")


def test_a_sentencepiece_tokens_text_keeps_its_leading_space():
    """Regression: each token was decoded alone, and Llama's decoder drops a decode's first space,
    so the view showed 'the sum is 7.' as the tokens 'the', 'sum', 'is', '7', '.' (run together
    in the terminal as 'thesumis7.')."""
    from ict.models.tokens import token_strings

    assert token_strings(_llama_style_tokenizer(), [1, 2, 3, 4, 6]) == ["the", " sum", " is", " 7", "."]


class _Ligatures:
    """Tokens 'a', 'b', 'c'; decoding joins them, and writes 'ab' as 'X' (a decoder that changes the
    text before a token)."""

    def decode(self, ids: list[int]) -> str:
        return "".join("abc"[i] for i in ids).replace("ab", "X")


def test_a_token_that_changes_the_text_before_it_shows_as_decoded_alone():
    """Where the text of the tokens before is no prefix of the text with the token after ('a', then
    'X' for 'ab'), the token's text is the token decoded alone, not a cut of the other text."""
    from ict.models.tokens import token_strings

    assert token_strings(_Ligatures(), [0, 1, 2]) == ["a", "b", "c"]


@functools.cache
def _tokenizer(name: str):
    from conftest import build_tiny_tokenizer

    return {"wordpiece": build_tiny_tokenizer, "sentencepiece": _llama_style_tokenizer, "bytes": _BytePieces}[name]()


@given(name=st.sampled_from(["wordpiece", "sentencepiece", "bytes"]), ids=st.lists(st.integers(0, 40), max_size=12))
@example(name="sentencepiece", ids=[1, 2, 3, 4, 6])
@example(name="bytes", ids=[0, 2, 3, 1, 4, 5, 9, 7, 2])
def test_the_tokens_texts_put_together_are_the_decoded_completion(name, ids):
    """Property: for any token ids (a WordPiece, a SentencePiece and a byte-level vocabulary; byte
    tokens that cut a character anywhere, or leave it cut), token_strings gives one text a token and
    the texts joined are the decoded ids."""
    from ict.models.tokens import token_strings

    tokenizer = _tokenizer(name)
    ids = [token % (len(_BytePieces.PIECES) if name == "bytes" else len(tokenizer)) for token in ids]
    strings = token_strings(tokenizer, ids)
    assert len(strings) == len(ids) and "".join(strings) == tokenizer.decode(ids)


def test_the_terminal_view_shows_each_groups_prompt_above_its_first_completion():
    """The terminal listed the completions of every prompt as #0, #1, ... with no prompt at all
    (`ict inspect --samples ... --num-prompts 4 > view.txt`: 32 completions, no telling whose
    they were), where docs/evaluation.md says each group is "shown under their prompt", as the
    page shows it. Each group's prompt is printed once above its first completion: a new
    prompt, or another seed's draw of the same prompt (a group of its own, `group_size` 2)."""
    import io

    from rich.console import Console

    from ict.analysis.token_view import TokenView, print_view

    def shown(view: TokenView) -> list[str]:
        buffer = io.StringIO()
        print_view(view, Console(file=buffer, force_terminal=False, width=200))
        return [line for line in buffer.getvalue().splitlines() if line.startswith(("prompt:", "#"))]

    tokens, scores, marks = [["a"]] * 4, [[0.5]] * 4, {"ict": [[True]] * 4}
    by_prompt = TokenView(["P one\x1b", "P one\x1b", "P two", "P two"], tokens, scores, marks, "js", 0.0, {}, {})
    assert shown(by_prompt) == ["prompt: P one\\x1b", "#0: a", "#1: a", "prompt: P two", "#2: a", "#3: a"]
    by_seed = TokenView(["P"] * 4, tokens, scores, marks, "js", 0.0, {}, {}, seeds=[0, 0, 1, 1], group_size=2)
    assert shown(by_seed) == ["prompt: P", "#0 (seed 0): a", "#1 (seed 0): a",
                              "prompt: P", "#2 (seed 1): a", "#3 (seed 1): a"]


def test_a_completion_without_a_token_says_so_on_the_page_and_in_the_terminal():
    """A samples file's empty completion not marked finished has no token: the page showed its
    label and then nothing ("<p></p>"), the terminal "#1: ", as if the view had lost it. Both now
    say it is empty; a completion with tokens shows no such note."""
    import io

    from rich.console import Console

    from ict.analysis.token_view import TokenView, print_view, render_html

    view = TokenView(["p", "p"], [["a", "b"], []], [[0.1, 0.2], []], {"ict": [[True, False], []]}, "js", 0.0,
                     {}, {})
    page = render_html(view)
    assert page.count("(empty completion: no token to score)") == 1
    assert ("<div class='prompt'>#1: (same prompt)</div><p><em>(empty completion: no token to score)</em></p>"
            in page)
    assert _lines(view) == ["#0: ab", "#1: (empty completion: no token to score)"]
    buffer = io.StringIO()  # the note is plain text, no token's colour
    print_view(view, Console(file=buffer, force_terminal=True, color_system="truecolor", width=300))
    assert "#1: (empty completion: no token to score)\n" in buffer.getvalue()


def test_zero_width_format_characters_show_as_escapes_so_their_token_is_seen():
    """A token of a zero-width format character (Unicode category Cf: U+200B zero-width space, U+200D
    joiner, U+2060 word joiner, U+FEFF; tokens of byte-level vocabularies) was written raw: its span
    had no width, so its colour and ICT's underline were invisible on the page (it is not CSS :empty)
    and it took no cell in the terminal, although ICT had selected it. Like the bidirectional
    controls (also Cf) they show as \\uNNNN (\\UNNNNNNNN above U+FFFF), on the page and in the
    terminal; other characters are kept."""
    import io

    from rich.console import Console

    from ict.analysis.token_view import TokenView, print_view, render_html

    tokens = [" 7", "\u200b", " x\u00ad", "\u2060\ufeff", "\u200d", " \U000e0067", " é"]
    expected = [" 7", "\\u200b", " x\\u00ad", "\\u2060\\ufeff", "\\u200d", " \\U000e0067", " é"]
    view = TokenView(["p\u200b"], [tokens], [[0.1, 0.9, 0.2, 0.3, 0.4, 0.5, 0.6]],
                     {"ict": [[False, True, False, False, False, False, False]]}, "js", 0.0, {}, {})
    page = render_html(view)
    shown = [html.unescape(text) for text in re.findall(r"<span class='tok[^']*'[^>]*>([^<]*)</span>", page)]
    assert shown == expected
    assert not any(char in page for char in "\u200b\u00ad\u2060\ufeff\u200d\U000e0067")
    assert "#0: p\\u200b</div>" in page
    plain = io.StringIO()
    print_view(view, Console(file=plain, force_terminal=False, width=300))
    assert "#0: " + "".join(expected) + "\n" in plain.getvalue()
    assert "prompt: p\\u200b\n" in plain.getvalue()


def test_the_terminal_marks_a_line_break_inside_a_token_as_the_page_does():
    """A token holding a line break was appended as it is: a line break has no cell, so ICT's
    underline and the token's colour left no trace (a selected "\\n\\n" token, frequent in reasoning
    text, showed as an empty line). As on the page, U+21B5 stands before each line break, on the
    token's colour with ICT's underline and bold, and the legend says so (only where one is shown)."""
    import io

    from rich.console import Console

    from ict.analysis.token_view import TokenView, print_view

    view = TokenView(["p"], [[" 7", "\n\n", " x"]], [[0.1, 0.9, 0.2]], {"ict": [[False, True, False]]}, "js", 0.0,
                     {}, {})
    buffer = io.StringIO()
    print_view(view, Console(file=buffer, force_terminal=True, color_system="truecolor", width=300))
    # the batch's maximum (0.9) is the reddest: rgb(255, 255 - 200, 255 - 200); bold (1), underline (4)
    marks = re.findall(r"\x1b\[([0-9;]*)m\u21b5", buffer.getvalue())
    assert marks == ["1;4;30;48;2;255;55;55", "1;4;30;48;2;255;55;55"]
    plain = io.StringIO()
    print_view(view, Console(file=plain, force_terminal=False, width=300))
    assert "#0:  7\u21b5\n\u21b5\n x\n" in plain.getvalue()
    assert "\u21b5: a line break inside a token." in plain.getvalue()
    plain = io.StringIO()
    print_view(TokenView(["p"], [[" 7", " x"]], [[0.1, 0.2]], {"ict": [[False, True]]}, "js", 0.0, {}, {}),
               Console(file=plain, force_terminal=False, width=300))
    assert "\u21b5" not in plain.getvalue()


def test_a_token_that_starts_with_a_combining_mark_shows_on_a_dotted_circle():
    """A token U+0301 (combining acute, a token of decomposed text) had no cell in the terminal: it
    joined the previous token's last letter, and ICT's underline and its colour were nowhere. It
    shows on U+25CC, Unicode's base for a mark shown alone, in the terminal and on the page; a
    mark after a base in one token (" e\\u0301") and a spacing mark are kept as they are."""
    import io

    from rich.cells import cell_len
    from rich.console import Console

    from ict.analysis.token_view import TokenView, print_view, render_html

    tokens = [" cafe", "\u0301", " e\u0301", "\u20dd"]
    view = TokenView(["p"], [tokens], [[0.1, 0.9, 0.2, 0.3]], {"ict": [[False, True, False, False]]},
                     "js", 0.0, {}, {})
    expected = [" cafe", "\u25cc\u0301", " e\u0301", "\u25cc\u20dd"]
    page = render_html(view)
    shown = [html.unescape(text) for text in re.findall(r"<span class='tok[^']*'[^>]*>([^<]*)</span>", page)]
    assert shown == expected
    buffer = io.StringIO()
    print_view(view, Console(file=buffer, force_terminal=True, color_system="truecolor", width=300))
    line = next(line for line in buffer.getvalue().splitlines() if line.startswith("#0: "))
    # the selected token: bold, underlined, the batch maximum's red, on a cell of its own
    assert "\x1b[1;4;30;48;2;255;55;55m\u25cc\u0301\x1b[0m" in line
    plain = re.sub(r"\x1b\[[0-9;]*m", "", line)
    assert plain == "#0: " + "".join(expected) and cell_len(plain) == len("#0:  cafe") + 1 + 2 + 1
