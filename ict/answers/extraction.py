"""Answer extraction from untrusted model output: ``\\boxed{}``, option letters, ``<answer>`` tags,
the last number.

Every function does bounded work: at most `MAX_SCAN_CHARS` characters (the completion's tail)
are scanned and no regular expression with nested quantifiers runs over the whole text.
`ict.answers.grading` picks which extraction a problem uses; math answers are extracted by math-verify
inside `ict.answers.verify`'s worker process.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from decimal import Decimal
from fractions import Fraction

from ict.core.errors import encodes_as_utf8
from ict.core.problems import OPTION_LETTERS

MAX_SCAN_CHARS = 20_000
"""Only the last this-many characters of a completion are scanned or sent to math-verify."""
MAX_BOXED_CHARS = 2_000
"""A ``\\boxed{...}`` whose content is longer than this is treated as not closed."""
MAX_BOXED_TRIES = 8
"""How many ``\\boxed`` occurrences, from the last backwards, are tried before giving up."""

# --------------------------------------------------------------------------------------------
# Text hygiene and bounded extraction
# --------------------------------------------------------------------------------------------


def sanitize_text(text: str | bytes | None) -> str:
    """Return valid UTF-8-encodable text: bytes are decoded with U+FFFD for invalid sequences,
    lone surrogates and NUL characters are replaced. ``None`` becomes ``""``."""
    if text is None:
        return ""
    if isinstance(text, (bytes, bytearray)):
        text = bytes(text).decode("utf-8", errors="replace")
    elif not isinstance(text, str):
        text = str(text)
    if not encodes_as_utf8(text):
        text = text.encode("utf-8", errors="replace").decode("utf-8")
    return text.replace("\x00", "\ufffd")


def tail(text: str, limit: int = MAX_SCAN_CHARS) -> str:
    return text if len(text) <= limit else text[-limit:]


def _balanced_group(text: str, open_index: int, limit: int = MAX_BOXED_CHARS) -> str | None:
    """Content of the brace group opening at ``text[open_index] == '{'``; ``None`` if it does not
    close within ``limit`` characters. ``\\{`` and ``\\}`` are literal braces and do not count."""
    depth = 0
    index = open_index
    end = min(len(text), open_index + limit + 2)
    while index < end:
        char = text[index]
        if char == "\\":
            index += 2
            continue
        if char == "{":
            depth += 1
        elif char == "}":
            depth -= 1
            if depth == 0:
                return text[open_index + 1 : index]
        index += 1
    return None


def closing_braces(text: str) -> dict[int, int]:
    """The index of the ``}`` that closes each ``{`` of ``text`` that closes, in one pass (a stack):
    ``_balanced_group(text, i)`` is ``text[i + 1 : closes[i]]`` when ``closes[i] - i - 1`` is at most
    its limit, else None. ``\\{`` and ``\\}`` are literal braces, as there (a ``{`` after a
    backslash is reached as part of a pair by both scans, so they agree on every group that opens
    with an unescaped brace). Many boxes that do not close cost O(n), not O(n * limit) (2,857
    unclosed ``\\boxed{`` took 1.2 s, each scanned to 2,000 characters)."""
    closes: dict[int, int] = {}
    opened: list[int] = []
    index, size = 0, len(text)
    while index < size:
        char = text[index]
        if char == "\\":
            index += 2
            continue
        if char == "{":
            opened.append(index)
        elif char == "}" and opened:
            closes[opened.pop()] = index
        index += 1
    return closes


def box_contents(text: str, opens: re.Pattern[str],
                 limit: int = MAX_BOXED_CHARS) -> Iterator[tuple[re.Match[str], str | None]]:
    """``(match, content)`` for each match of ``opens`` (a pattern ending in the box's ``{``) in
    ``text``, ``content`` as `_balanced_group` reads it (None: no close within ``limit``
    characters), found in one pass over ``text`` (`closing_braces`)."""
    closes = closing_braces(text)
    for found in opens.finditer(text):
        open_index = found.end() - 1
        close = closes.get(open_index)
        fits = close is not None and close - open_index - 1 <= limit
        yield found, text[open_index + 1 : close] if fits else None


BOXED_COMMANDS = ("\\boxed", "\\fbox", "\\framebox")


def extract_boxed_answer(text: str | bytes | None) -> str | None:
    """Content of the last complete ``\\boxed{...}`` (or ``\\fbox{...}``, ``\\framebox{...}``).

    Rule: find the last occurrence of one of the commands; after optional spaces it must be followed
    by a brace group that closes within `MAX_BOXED_CHARS` characters (``\\{``/``\\}`` are literal),
    or by ``\\boxed <token>`` (space form, the token runs to the next whitespace or ``$``). If the
    last occurrence is unclosed or empty (``\\boxed{}``, a model echoing the instruction), earlier
    ones are tried (at most `MAX_BOXED_TRIES`). Only the last `MAX_SCAN_CHARS` characters are
    looked at. Returns the stripped content, or ``None``.
    """
    text = tail(sanitize_text(text))
    candidates: list[tuple[int, str]] = []
    for command in BOXED_COMMANDS:
        start = len(text)
        for _ in range(MAX_BOXED_TRIES):
            position = text.rfind(command, 0, start)
            if position < 0:
                break
            candidates.append((position, command))
            start = position
    candidates.sort(reverse=True)
    for position, command in candidates[:MAX_BOXED_TRIES]:
        after = position + len(command)
        if after < len(text) and text[after].isalpha():
            continue  # e.g. \boxedA is another macro
        index = after
        while index < len(text) and text[index] in " \t":
            index += 1
        if index < len(text) and text[index] == "{":
            content = _balanced_group(text, index)
            if content is not None and content.strip():
                return content.strip()
            continue
        if command == "\\boxed" and index > after and index < len(text):
            match = re.match(r"[^\s$]{1,100}", text[index : index + 101])
            if match:
                return match.group(0)
    return None




_REASON = r"\b(?i:because|since|(?<!well\s)as(?!\s+well\b)|than|rather|instead|not|but|while|whereas|unlike|so)\b"
"""A word that opens a reason or a contrast: "(A) because (B) is too large" lists no options ("as
well as" adds one: "(A) 1 as well as (B) 2" lists two)."""
_CLAUSE = re.compile(rf"(?:(?!{_REASON})(?:[^\n,;:!?.\u2013\u2014]|[,;:!?.](?!\s|$)|(?<=\b[A-Z])\.))*")
"""The rest of a clause: up to a newline, a dash (\u2013, \u2014), a , ; : ! ? or . before a space
or the end (the ``.`` of an option marker ``B.`` excepted), or a word of `_REASON`."""
_OPENING_REASON = re.compile(
    rf"([).:]?)\s*,?\s*{_REASON}(?:[^\n.;!?]|[.;!?](?!\s|$)|(?<=\b[A-Z])\.)*")
"""A reason right after a box's option marker, to the end of its sentence: ``) since (C) fails``
(group 1: the marker's close)."""
HEDGE_WORDS = "maybe|possibly|perhaps|probably"
"""The words that make a second answer a hedge ("A, or maybe B"; "3 or maybe 4"), as a regex
alternation: the choice letters' (`_HEDGE`) and the math readings' (`ict.answers.readings`)."""
_HEDGE = rf"(?i:{HEDGE_WORDS})\b"
"""A word that makes a second option a hedge: "the answer is A, or maybe B" commits to none."""
_JOINED_BOX = re.compile(
    rf"\\boxed\s*\{{((?:[^{{}}]|\{{[^{{}}]*\}})*)\}}\s*(?:,\s*(?:(?i:or|and)\s+)?|(?i:and/or|or|and)\s+|[/&]\s*)"
    rf"(?:{_HEDGE}\s+)?$")
"""A box (group 1: its content, one level of braces in it: ``\\text{A}``) and what joins it to the
text's end, a box that follows: ``\\boxed{A} or ``, ``\\boxed{A}, ``, ``\\boxed{A}, or perhaps ``."""
_NAMED_TOGETHER = r"\s*(?:,\s*(?:(?i:and|or)\s+)?|(?i:and|or|nor)\s+|[&/]\s*)"
"""What joins options named together after a marker: ``(C) and (D)``, ``(C), (D), or (E)``,
``C)/D)``."""

LATEX_WRAPPER = r"\\(?:text|textbf|mathrm|mathbf)\s*\{"  # opens \text{, \textbf{, \mathrm{, \mathbf{
_LETTER_OPEN = rf"(?:(?:\\\(|\$)\s*)?(?:{LATEX_WRAPPER}\s*)?(?:(?:\\?\(|\[)\s*)?"
"""What may open an answer's letter after "the answer is" (each optional, in this order): math
delimiters ``$``, ``\\(``; a text wrapper ``\\textbf{``; a bracket ``(``, ``[``: ``$(C)$``,
``$\\textbf{(C)}$``, ``\\(C\\)``, ``(C)``; each with the spaces after it (no two ``\\s*`` meet:
"answer is" and 400 spaces took 36 s, the ways to share a run among them, n^4)."""
_LETTER_CLOSE = r"(?:\\?\)|\]|\}|\$)(?:\s*(?:\\?\)|\]|\}|\$)){0,3}"
"""What closes it: ``)$``, ``)}$``, ``\\)``, ``]``."""
_OPERATOR_AFTER = re.compile(
    r"[ \t]*(?:\\(?:cup|cap|setminus|times|cdot|oplus|otimes|vee|wedge|circ|subseteq|subset|supseteq|supset"
    r"|to|rightarrow|Rightarrow|implies|iff|in|notin|leq?|geq?|neq?|equiv|cong|sim|approx|lor|land)(?![^\W\d_])"
    r"|[\^\u222a\u2229\u2216\u00d7\u22c5\u2282\u2286\u2283\u2287\u2208\u2264\u2265\u2260]"
    r"|\u2192(?=[ \t]*[^\W\d_](?![\w']))"
    r"|\\text\s*\{\s*(?i:or|and|and/or)\s*\})")
"""An operator or a relation right after an answer's letter, on its line, which makes the letter a
piece of a formula, no option: ``C \\cup D``, ``A \u222a B``, ``A \\times B``, ``A^T A``, ``A \\subset B``,
``A \\to B``, ``A \u2192 B`` (a plain arrow before a letter only: ``B \u2192 42``, ``B \u2192 correct``
point to the option's text); or a hedge in LaTeX, ``B \\lor C``, ``B \\text{ or } C`` (as "B or C":
none). A line break ends the letter's formula: ``B``, then a line ``\u2192 because ...``, is B."""
_MATH_OPERATOR_AFTER = re.compile(r"\s*[-+*/=<>]")
"""... and in math delimiters also an arithmetic sign or a comparison: ``$B - A$``, ``$A = B$`` (not
the ``-`` of plain text, "C - the third option")."""
_NEGATED_BOX = re.compile(r"\b(?i:not|rather\s+than|instead\s+of)\s*(?:\$\s*)?$")
"""What makes the box after it no answer: ``\\boxed{B}, not \\boxed{C}`` commits to B."""


def _choice_pattern(letters: str) -> str:
    return f"[{letters}]"


def extract_choice_letter(completion: str | bytes | None, num_choices: int) -> str | None:
    """The option letter a completion commits to, or ``None``. Strict rule, first that applies:

    1. the content of the last ``\\boxed{}`` (with no box: of the last complete
       ``<answer>...</answer>`` pair, if it holds a letter so; else rule 2) is a single valid
       letter, optionally wrapped as
       ``(B)``, ``B)``, ``B.``, ``\\text{B}``, ``\\textbf{(B)}``, or starts with such a letter
       followed by ``)``/``.``/``:``, a space (LaTeX's ``\\ ``, ``~``, ``\\,``, ``\\quad`` too) and the
       option text (``\\boxed{B) 42}``, ``\\boxed{(B)\\ 42}``, ``\\boxed{\\text{(B) } 42}``, or in a
       wrapper that opens with a space: ``\\boxed{(B)\\text{ 42}}``), unless more letters follow it
       as in rule 2 (``\\boxed{(A) or (B)}``, ``\\boxed{A/C}``: none), or the box lists options in
       order or names every option (``\\boxed{A) 3 B) 4}``, ``\\boxed{(A) 3 (C) 5}``,
       ``\\boxed{A. 3 B. 4}``, ``\\boxed{(D) 6 (C) 5 (B) 4 (A) 3}``: none; ``\\boxed{(D) Both (A)
       and (B)}`` is D; `_lists_options`); a reason right after the marker that marks at most
       one option (options named together count once: ``(C) and (D)``), to the end of its
       sentence, lists none (``\\boxed{(B) since (C) fails}`` and ``\\boxed{(B) because (C) and
       (D) fail}`` are B; `_OPENING_REASON`); a box joined to the one before as rule 2's letters
       are, that marks another letter, commits to none (``\\boxed{A} or \\boxed{C}``: `_JOINED_BOX`);
       a last box after "not", "rather than" or "instead of" is no answer, the text before that
       word is read (``\\boxed{B}, not \\boxed{C}`` is B: `_NEGATED_BOX`);
    2. otherwise the last phrase "answer is", "answer:", "Answer -" (case-insensitive, optionally
       "final"/"correct", optionally a rejected letter, "not A but", "isn't A, it's", "no longer A but",
       "not A — it is", optionally
       "option"/"choice", optionally bold ``**``) followed by a valid
       letter as a whole word, in optional parentheses, brackets, ``\\(...\\)``, ``$...$`` or
       both, in a text wrapper or not (``$(C)$``, ``$\\textbf{(C)}$``: `_LETTER_OPEN`), and not by a list of more
       letters ("A or B", "A, B and C", "C/D", "**A** or **B**") or a hedge ("A, or maybe B", "A
       and/or B", "A (or B)": `_HEDGE`) or, to the end of its clause (`_CLAUSE`: a reason ends
       it, "(A) because (B) is too large" is A), options listed as rule 1 reads them ("the answer
       is (A) 3 (B) 4.", and with the math markup read as spaces, "$(A)$ 3 $(B)$ 4": `_MATH_MARKUP`),
       nor by an operator or a relation that makes the letter a piece of a formula ("$C \\cup D$",
       "A ∪ B", "$A^T A$", "A \\subset B", "A \\to B", and in math delimiters "$B - A$", "$A = B$")
       or a hedge in LaTeX ("B \\lor C", "B \\text{ or } C"): `_OPERATOR_AFTER`, `_MATH_OPERATOR_AFTER`;
    3. otherwise the whole completion, stripped of whitespace, ``*`` and a trailing period, is one
       valid letter, optionally in parentheses or followed by ``)`` / ``.`` / ``:`` and option text
       on the same line (``B) 42``; ``A. 3 B. 4`` lists options as rule 1 reads them: none).

    Valid letters are the first ``num_choices`` of A-Z, upper case only (a lone "a" is an article).
    Anything else (a letter mentioned mid-sentence, several letters) gives ``None``.
    """
    if not 1 <= num_choices <= len(OPTION_LETTERS):
        raise ValueError(f"num_choices must be in 1..26, got {num_choices}")
    letters = OPTION_LETTERS[:num_choices]
    text = tail(sanitize_text(completion))
    letter = _choice_pattern(letters)

    boxed = extract_boxed_answer(text)
    for _ in range(MAX_BOXED_TRIES):  # "\boxed{B}, not \boxed{C}": the text before "not" is read
        last_box = max(text.rfind(command) for command in BOXED_COMMANDS)
        negated = _NEGATED_BOX.search(text, 0, last_box) if boxed is not None else None
        if negated is None:
            break
        text = text[:negated.start()]
        boxed = extract_boxed_answer(text)
    if boxed is not None:
        found = _marked_letter(boxed, letter)
        # "\boxed{A} or \boxed{C}", "\boxed{A}, \boxed{C}": boxes joined as rule 2's letters are
        # (math-verify reads \boxed{3} or \boxed{4} as both); another letter in them commits to none
        joined = _JOINED_BOX.search(text[:text.rfind("\\boxed")]) if found else None
        if joined is not None and _marked_letter(joined[1], letter) not in (None, found):
            return None
        return found
    tagged = _last_tag_content(text)  # the format reward's answer, read as a box is
    if tagged is not None and (found := _marked_letter(tagged, letter)) is not None:
        return found

    # "the answer is not A but B", "isn't A, it's B": a rejected letter before the answer's
    # ... "no longer A but B", "not A — it is B" (a dash: an em dash, a spaced en dash or "--")
    rejected = (rf"(?:(?:not|no\s+longer|n['\u2019]t)\s+(?:\*+\s*)?{_LETTER_OPEN}{letter}(?![\w'])(?:{_LETTER_CLOSE})?\**"
                rf"(?:\s*[,;]\s+|\s*\u2014\s*|\s+(?:\u2013|--)\s+|\s+)"
                rf"(?:but\s+(?:rather,?\s+)?|rather,?\s+|instead,?\s+|it\s+is\s+|it['\u2019]s\s+))?")
    phrase = re.compile(
        rf"(?:final\s+|correct\s+)?answer\s*(?:is\s*(?::\s*)?|[:-]\s*){rejected}(?:(?:option|choice)\s+)?(?:\*+\s*)?"
        rf"{_LETTER_OPEN}({letter})\b(?![\w'])",
        flags=re.IGNORECASE,
    )
    last = None
    for match in phrase.finditer(text):
        if match.group(1) in letters:  # IGNORECASE widened the class; keep upper case only
            last = match
    if last is not None:
        close = rf"(?:{_LETTER_CLOSE})"
        # "the answer is A or B", "A, B and C", "(A) or (D)": several letters commit to none
        # ... and a hedge: "A, or maybe B", "A or possibly B", "A and/or B", "A (or B)", "**A** (or B)",
        # "**A** or **B**", "**(A)**/**(B)**"
        more = re.match(rf"{close}?\**\s*(?:\(\s*)?(?:[,/&]\s*(?:(?:or|and)\s+)?|(?:and/or|or|and)\s+)"
                        rf"(?:{_HEDGE}\s+)?(?:\*+\s*)?(?:(?i:option|choice)\s+)?{_LETTER_OPEN}{letter}(?:\s*{close})?\**"
                        rf"(?=\s*(?:$|[.,;:!?/&)]|(?:or|and)\b))", text[last.end():])
        # "The answer is (A) 3 (B) 4.": options listed after it, to the end of its clause (a
        # newline, or , ; ! ? . before a space that is no marker's "B.", or "because", "than", ...:
        # "(A) because (B) is too large" is A), commit to none as a box does
        clause = _CLAUSE.match(text, last.end()).group(0)  # type: ignore[union-attr]
        if _MATH_OPENED.search(last.group(0)):  # "$(B)$ 42 $(C)$ 43" lists as "(B) 42 (C) 43" does
            clause = _MATH_MARKUP.sub(" ", clause)
        # "$C \cup D$", "A ∪ B", "$B - A$": a set or an expression named by letters, no option
        formula = _OPERATOR_AFTER.match(text, last.end()) or (
            _MATH_OPENED.search(last.group(0)) and _MATH_OPERATOR_AFTER.match(text, last.end()))
        return None if more or formula or _lists_options(last.group(1), clause, letter) else last.group(1)

    stripped = text.strip().strip("*").strip()
    match = re.fullmatch(rf"\(?({letter})\)?\.?", stripped)
    if match:
        return match.group(1)
    match = re.match(rf"\(?({letter})(?:\)|\.|:)[ \t]([^\n]*)$", stripped)
    # "B) 42" commits to B; "(A) (B) (C) (D)", "A. 3 B. 4" list options and commit to none
    if (match and not re.search(rf"(?:^|\s)\(?({letter})\)", match.group(2))
            and not _lists_options(match.group(1), stripped[match.end(1):], letter)):
        return match.group(1)
    return None


_LATEX_SPACE_COMMAND = r"~|\\[ ,;:]|\\q?quad\b"  # a LaTeX space other than whitespace: ~ \  \, \; \: \quad \qquad
_MATH_OPENED = re.compile(rf"\$|\\\(|{LATEX_WRAPPER}")
"""Math delimiters or a text wrapper before rule 2's letter (``$(B)$``, ``$\\textbf{(B)}$``)."""
_MATH_MARKUP = re.compile(rf"\$|\\[()]|{LATEX_WRAPPER}|\}}|{_LATEX_SPACE_COMMAND}")
"""What such a letter's clause is read without, as spaces, for the options it may list: ``)$ 42
$(C)$ 43`` is ``) 42 (C) 43``, ``)}\\ 42 \\qquad \\textbf{(C)}\\ 43`` is ``) 42 (C) 43``."""


def _marked_letter(content: str, letter: str) -> str | None:
    """The option letter of a box's (or answer tag's) content, by rule 1 of
    `extract_choice_letter`, or None; ``letter``: the pattern of the valid letters."""
    inner = content.strip()
    for _ in range(3):  # peel \text{...}, \textbf{...}, \mathrm{...}
        match = re.fullmatch(rf"{LATEX_WRAPPER}(.*)\}}", inner, flags=re.S)
        if not match:
            break
        inner = match.group(1).strip()
    # "B) 42", and with LaTeX's spaces ("(B)\ 42", "(B)~42", "B.\quad 42"), the letter alone
    # in a wrapper ("\text{(B) } 42") or the option text in one that opens with a space
    # ("(B)\text{ 42}"; not "(B)\text{42}", as not "(B)42")
    wrapper = rf"(?:{LATEX_WRAPPER}\s*)"
    space = rf"(?:\s|{_LATEX_SPACE_COMMAND})"
    match = re.fullmatch(rf"\(?({letter})\)?\.?", inner) or re.match(
        rf"{wrapper}?\(?({letter})(?:\)|\.|:)(?:\s*\}})?(?:{LATEX_WRAPPER})?{space}",
        inner + " ")
    if match is None:
        return None
    # "(A) or (B)", "A. and B.", "(A)\ \text{or}\ (B)": several letters commit to none (as rule 2's
    # "the answer is A or B"); a letter inside the option text ("(D) Both A and B") is kept
    rest = re.sub(rf"{LATEX_WRAPPER}|\}}", "", inner[match.end(1):])
    rest = re.sub(_LATEX_SPACE_COMMAND, " ", rest)
    if re.match(rf"[).:]?\s*(?:[,/&]\s*(?:(?i:or|and)\s+)?|(?i:or|and)\s+)\(?{letter}(?![\w'])", rest):
        return None
    # "(B) since (C) fails": a reason right after the marker names no option, as after rule 2's
    # "the answer is (B)", unless it marks two or more (an echo of the options whose first
    # text opens with "not", "because" or "As": "(A) not x (B) y (C) z" lists); options it names
    # together ("(C) and (D)", "(C), (D) or (E)": no listed option's text is "and") are one; the
    # sentences after it still may list ("(A) because x. (B) because y." lists)
    reason = _OPENING_REASON.match(rest)
    if reason is not None and len(_later_option_markers(
            re.sub(rf"\(?{letter}\){_NAMED_TOGETHER}(?=\(?{letter}\))", "",
                   reason.group(0)[len(reason.group(1)):]), letter,
            match.group(1) if reason.group(1) == "." else None)) <= 1:
        rest = reason.group(1) + rest[reason.end():]
    if _lists_options(match.group(1), rest, letter):
        return None
    return match.group(1)


def _lists_options(first: str, rest: str, letter: str) -> bool:
    """Does an answer that opens with option ``first``'s marker, ``rest`` following its letter
    (``") 3 (B) 4"``), list options rather than commit to ``first``? Yes when its markers
    (`_later_option_markers`) name later options in order (``A) 3 B) 4``, ``(A) 3 (C) 5``,
    ``A. 3 B. 4``) or name every option (``(D) 6 (C) 5 (B) 4 (A) 3``); the earlier options an
    option's text names are kept (``(D) Both (A) and (B)``, ``(B) Use the method in (A)``).
    ``letter``: the pattern of the valid letters (`_choice_pattern`)."""
    dotted = first if rest[:1] == "." else None
    markers = [first, *_later_option_markers(rest[1:] if rest[:1] in ").:" else rest, letter, dotted)]
    return len(markers) > 1 and (markers == sorted(set(markers)) or set(markers) == set(letter[1:-1]))


def _later_option_markers(text: str, letter: str, dotted_after: str | None = None) -> list[str]:
    """The letters ``text`` (an option's text, after its marker) marks as further options, in
    order: ``(B)`` or ``B)`` after a space or a LaTeX line break ``\\\\`` (or at the start) and
    before a space, a letter or a digit (``(B)4``), or at the end; after a first
    option marked ``A.`` (``dotted_after``: its letter) also ``B.`` before a space, when it marks
    the option after the previous one and follows that option's text (``A. 3 B. 4``; not the
    ``E.`` of ``A. bacteria such as E. coli``, nor the ``B.`` of ``A. B. subtilis`` or of ``A.
    Option B. is wrong``). No marker: a ``B)`` that closes a parenthesis of ``text`` (``P(A and B) = ...``), an
    option after "not" (``(B) 4, not (C)`` rejects C)."""
    markers: list[str] = []
    option_text_start = 0  # where the text of the option last marked starts
    for found in re.finditer(rf"(?:(?<!\S)|(?<=\\\\))(\()?({letter})([).])(?=(.?))", text, flags=re.S):
        opened, marker, close, after = found.groups()
        previous = markers[-1] if markers else dotted_after
        if close == ".":  # and the previous option has a text ("A. B. subtilis": A's "." ends a
            # sentence), and no "option" names it ("A. Option B. is wrong" names B)
            keep = (dotted_after is not None and previous is not None and not opened
                    and after.isspace() and ord(marker) == ord(previous) + 1
                    and bool(text[option_text_start:found.start()].strip())
                    and not re.search(r"(?i:\b(?:option|choice))\s*$", text[option_text_start:found.start()]))
        else:
            keep = (not after or after.isspace() or after.isalnum()) and bool(
                opened or text.count("(", 0, found.start()) <= text.count(")", 0, found.start()))
        if keep and not re.search(r"\bnot\s*$", text[max(0, found.start() - 8):found.start()]):
            markers.append(marker)
            option_text_start = found.end()
    return markers


def extract_tagged_answer(completion: str | bytes | None, tag_name: str = "answer") -> str | None:
    """Strict answer extraction for reasoning-gym style tasks.

    Rule: the content of the last complete ``<answer>...</answer>`` pair; if there is none, the
    content of the last ``\\boxed{}`` (`extract_boxed_answer`); else ``None``. No fallback to "the
    last number in the text": reasoning-gym scorers give partial credit to verbose answers, so only
    an explicitly marked answer is scored. Content is stripped; an empty answer gives ``None``.
    """
    text = tail(sanitize_text(completion))
    span = last_tag_span(text, tag_name)
    if span is not None:
        return text[span[0] : span[1]].strip() or None
    boxed = extract_boxed_answer(text)
    return boxed or None


def last_tag_span(text: str, tag_name: str = "answer") -> tuple[int, int] | None:
    """``(start, end)`` of the content of the last complete ``<tag>...</tag>`` pair of ``text``
    (``text[start:end]``, tags excluded), or None when there is no such pair."""
    end = text.rfind(f"</{tag_name}>")
    start = text.rfind(f"<{tag_name}>", 0, end) if end >= 0 else -1
    return None if start < 0 else (start + len(tag_name) + 2, end)


def _last_tag_content(text: str, tag_name: str = "answer") -> str | None:
    """The stripped content of the last complete ``<tag>...</tag>`` pair of ``text``, or None
    (no pair, or an empty one)."""
    span = last_tag_span(text, tag_name)
    return None if span is None else text[span[0] : span[1]].strip() or None


MINUS_SIGNS = "-\u2212\u2013"
"""What writes a minus: ASCII ``-``, the minus sign U+2212 and the en dash U+2013 (``\u20135``)."""
_SIGN = rf"(?:(?<![\w)\]}}])[{MINUS_SIGNS}])"
"""A minus sign that is no subtraction's or range's: not after a digit, a letter or a closing bracket
(``10-2`` and ``3\u20135`` end in 2 and 5, not -2 and -5)."""
_SIGN_AT = re.compile(_SIGN)
# a sign (`_SIGN`), then digits with commas only between groups of three (1,234.5), plain digits,
# or a bare decimal (.5; not the .1 of 1.1.1)
PLAIN_NUMBER = re.compile(_SIGN + r"?(?:(?:\d{1,3}(?:,\d{3})+(?!\d)|\d+)(?:\.\d+)?|(?<![\d.])\.\d+)")

_LATEX_SPACE = r"(?:\s|\\[,;: ]|~)*"
# a fraction of two integers: a/b, \frac{a}{b}, \dfrac{a}{b}, \tfrac{a}{b} (a sign before it or on a)
_INTEGER_FRACTION = re.compile(r"([-\u2212]?)(?:([-\u2212]?\d+)/(\d+)|\\[dt]?frac\{([-\u2212]?\d+)\}\{(\d+)\})")


def number_value(text: str | None) -> Fraction | None:
    """The exact value of an answer written as a plain number: ``PLAIN_NUMBER`` (``-1,000.50``) or
    a fraction of two integers (``37/2``, ``\\frac{37}{2}``, ``-\\frac{3}{4}``, ``\\frac{-3}{4}``);
    ``None`` for anything else (``x=3``, ``(1,2)``, ``\\sqrt{2}``, a zero denominator)."""
    text = "".join((text or "").split())
    if PLAIN_NUMBER.fullmatch(text):
        return Fraction(re.sub(f"[{MINUS_SIGNS}]", "-", text.replace(",", "")))
    match = _INTEGER_FRACTION.fullmatch(text)
    if match is None:
        return None
    sign, numerator, denominator = match[1], match[2] or match[4], match[3] or match[5]
    if int(denominator) == 0:
        return None
    value = Fraction(int(numerator.replace("\u2212", "-")), int(denominator))
    return -value if sign else value

SCIENTIFIC = re.compile(
    # the mantissa is no piece of a word, a number, an exponent, a subscript or a divisor
    # (x^2 \cdot 10^3 and 1/2 \times 10^3 are left alone)
    r"(?<![\w.^_/\\])(?<![\^_]\{)(\d+(?:\.\d+)?)"
    # 4.5e33, 4.5E+33 (not 1e5x, 1e5.5 or 1e1234)
    r"(?:[eE]([-+\u2212]?\d{1,3})(?![\w^!]|\.\d)"
    # 1.2\times 10^{-5}, 1.2 \cdot 10^{5}, 3 × 10^8 (× U+00D7, ⋅ U+22C5, · U+00B7)
    rf"|{_LATEX_SPACE}(?:\\times|\\cdot|\u00d7|\u22c5|\u00b7){_LATEX_SPACE}10\s*\^\s*"
    r"(?:\{\s*([-+\u2212]?\d{1,3})\s*\}(?![\^!])|([-+\u2212]?\d{1,3})(?![\d^!{]|\.\d)))"
)
"""A number in scientific notation: groups (mantissa, e-exponent, braced exponent, bare exponent)."""


def scientific_value(match: re.Match[str]) -> str:
    """The exact decimal of a `SCIENTIFIC` match, ``m * 10**e``: ``4.5e33`` ->
    ``"4500000000000000000000000000000000"``, ``1.2\\times 10^{-5}`` -> ``"0.000012"`` (no
    exponent, trailing fractional zeros dropped)."""
    mantissa = match.group(1)
    exponent = next(group for group in match.groups()[1:] if group is not None)
    value = Decimal(f"{mantissa}E{exponent.replace(chr(0x2212), '-')}")
    text = format(value, "f")
    return text.rstrip("0").rstrip(".") if "." in text else text


def expand_scientific(text: str) -> str:
    """``text`` with every number in scientific notation (`SCIENTIFIC`; its exponent has at most 3
    digits, so at most ~1000 digits each) written out as its exact decimal (`scientific_value`), in
    place: plain digits read the same in text, ``$...$`` and ``\\boxed{}``, where math-verify
    reads ``4.5e33`` or ``1.5e120`` in plain text as its mantissa and ``1 \\times 10^{-5}`` as
    1, and sympy's LaTeX parser ``4.5e33`` as ``4.5*e*33``. A sign before it stays where it is."""
    return SCIENTIFIC.sub(scientific_value, text)


def extract_last_number(text: str) -> str | None:
    """The last number in `text`: thousands commas removed (``1,234`` is 1234; ``(2,3)`` ends in
    3), a minus (`_SIGN`: ``-``, U+2212 or an en dash, not after a digit, a letter or a closing bracket:
    ``10-2`` ends in 2) kept as ``-``, a bare decimal given its 0 (``.5`` is ``0.5``), a
    trailing ``.0..`` stripped. A number in scientific notation (`SCIENTIFIC`: ``4.5e33``,
    ``1.2\\times 10^{-5}``, ``3 × 10^8``) is one number, written out (`scientific_value`:
    ``4.5e33`` is ``4500000000000000000000000000000000``, not 33)."""
    text = tail(sanitize_text(text))
    matches = list(PLAIN_NUMBER.finditer(text))
    if not matches:
        return None
    last = matches[-1]
    scientific = next(reversed(list(SCIENTIFIC.finditer(text))), None)
    if scientific is not None and last.start() < scientific.end():  # the last number is its exponent
        value = scientific_value(scientific)
        negative = scientific.start() > 0 and _SIGN_AT.match(text, scientific.start() - 1) and value != "0"
        return f"-{value}" if negative else value
    number = re.sub(f"[{MINUS_SIGNS}]", "-", last.group(0).replace(",", ""))
    if number.lstrip("-").startswith("."):  # a bare decimal: .5 -> 0.5, -.5 -> -0.5
        number = number.replace(".", "0.", 1)
    if "." in number and set(number.split(".", 1)[1]) == {"0"}:
        number = number.split(".", 1)[0]
    return number
