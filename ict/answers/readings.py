"""The readings of a completion that math-verify parses in turn (`completion_readings`).

math-verify reads ``\\boxed{}`` first; these rewrites box an answer it would otherwise miss or
misread (GSM8K's ``#### x``, ``<answer>x</answer>``, a last-line "The answer is X" in plain text),
unwrap a boxed number in a text wrapper and try a boxed percent two ways. Pure string functions;
`ict.answers.verify`'s worker parses each reading.
"""

from __future__ import annotations

import re

from ict.answers.boxes import boxed_power, drop_boxed_full_stop, unwrap_boxed_text_number
from ict.answers.extraction import (
    BOXED_COMMANDS,
    HEDGE_WORDS,
    LATEX_WRAPPER,
    PLAIN_NUMBER,
    _balanced_group,
    box_contents,
    expand_scientific,
    last_tag_span,
)
from ict.answers.wording import (
    arithmetic_in_words,
    odds,
    spell_minus,
    two_unit_amounts,
    two_unit_box_readings,
)

# what makes a "#### x" line a Markdown heading, not an answer: a first word ("Step 2: Revenue"), a
# numbered title ("2. Money made", "1) Eggs") or two plain words ("60 % of the students"); an
# answer may hold LaTeX (\frac{1}{2}: a \command is no word), one unit ("7.5 hours") or "x = 5"
_HEADING_WORD = re.compile(r"[^\W\d_]{2,}")
_NUMBERED_TITLE = re.compile(r"\d+\s*[.)]\s+\S")
_PLAIN_WORD = re.compile(r"(?<![\\\w])[^\W\d_]{2,}")
_BARE_DECIMAL_START = re.compile(r"\s*(?:\\?\$\s*)*\.\d")  # the ".5" of "#### .5", "#### $.5$"
_DIGIT_GROUP_COMMA = re.compile(r"(?<=\d),(?=\d{3})")  # the comma of 1,234 (see hash_answer_readings)
# a number grouped the Indian way, two digits to a group before the last three: 1,00,000 (100000),
# 12,34,567 (see hash_answer_readings)
_INDIAN_GROUPED = re.compile(r"(?<!\d)(?<!\d,)\d{1,2}(?:,\d{2})+,\d{3}(?!\d)")
_DECIMAL = r"[-+]?\d+(?:\.\d+)?"  # a signed decimal: 3, -2.5
_NUMBER = rf"{_DECIMAL}(?:/\d+)?"  # ... or a fraction of one: 1/2
# a number, a space, then a unit of two letters or more, or one in brackets: "18 dollars", "42 km/h",
# "18 (dollars)", "9.8 (m/s^2)"; not "1e5", "2:30", "5 x" (5x), "-2.5 %" (the percent readings
# handle it) or brackets holding math: "3 (4^{1})" is 12, "42 (27, 9)" two answers, not 3 or 42;
# a number joined to a later one by "or" or "and" is no reading alone (`_joined_to_a_number`): "3
# or maybe 4", "3 hours or 4 hours", "2 and 1/2 cups" (a hedge or a mixed number, not 3 or 2); a
# bare decimal too, ".5 dollars" (read as the text "0.5 dollars", wrong for a gold 0.5)
_NUMBER_AND_UNIT = re.compile(
    rf"({_NUMBER}|[-+]?\.\d+)\s+(?:[^\W\d_]{{2,}}|\(\s*[^\W\d_]+(?:\s*[/^]\s*\w+)*\s*\)).*")
_JOINED = re.compile(r"\b(?:or|and)\b")  # "or"/"and": joined to a later number when a digit follows it
# the last line's answer anchor: "The answer is X", "Final answer: X", "**Final Answer:** X", the "is"
# of "The answer isn't 5, it's 6" (X: "n't 5, it's 6", a rejected answer: `_NEGATED_ANSWER`)
_ANSWER_ANCHOR = re.compile(
    r"\b(?i:final\s+)?(?i:answer)\b\**\s*(?:(?i:is)(?:\b|(?=(?i:n)['\u2019](?i:t)\b))\s*:?|:)\**[ \t]*")
# an anchored plain number, an optional unit, then a condition holding math: "20 m/s for
# $v_{max}$", "5 when $x = 2$", "1/2 if $n$ is even" (math-verify read the rightmost formula, v_{max},
# x = 2 or n; see `anchor_answer_readings`); not arithmetic, "2 times $\pi$", "3 over $\sqrt{2}$",
# nor a condition that goes on past a comma or semicolon ("10 for each of $4$ boxes, so $40$"), nor
# odds, "1 in $6$" (read as 1/6: `ict.answers.wording.odds`), but a time, "2 in $10$ years" (read
# 10), is a condition; the condition
# may be in brackets that close the answer, "5 (when $n = 2$)" (math-verify read n = 2, right for a
# gold 2), after a comma, "5, when $x = 2$", or a reason, "3, since $x = 4$ fails", "3 because $3^2 =
# 9$" (read x = 4 and 3^2 = 9);
# group 1: the number and its unit, group 2: the number, group 3: the bracket
_CONDITION_WORDS = "for|when|if|where|at|with|given|on"  # what opens a condition: "5 when $x = 2$"
_ARITHMETIC_WORD = r"(?i:times|over|plus|minus|divided|multiplied|and|or|of|to|than|squared|cubed|root)\b"
_UNIT_WORD = rf"\s+(?!{_ARITHMETIC_WORD})[^\W\d_]+(?:[/^][^\W_]+)*"  # "m/s", "hours", "x^2"
_NUMBER_BEFORE_CONDITION = re.compile(
    rf"(({_NUMBER})(?:{_UNIT_WORD})?)"
    rf",?\s+(\(\s*)?(?i:{_CONDITION_WORDS}|since|because|as"
    r"|in(?!\s+(?:\$|\\\()\s*\d+\s*(?:\$|\\\))(?!\s*(?i:years?|months?|weeks?|days?|hours?|minutes?)\b)))\s"
    r"(?=[^,;]*$)(?=.*?(?:(?<!\\)\$|\\\())(?(3)(?=.*\)$))")
# a number before a condition in plain words, "12 if we count the ends" (boxed as a hedge only
# with a later piece: "12 if we count the ends and 14 otherwise"; see `anchor_answer_readings`)
_NUMBER_BEFORE_PLAIN_CONDITION = re.compile(
    rf"(({_NUMBER})(?:{_UNIT_WORD})?),?\s+(?:\(\s*)?(?i:{_CONDITION_WORDS})\s")
# a rejected answer before the answer, "not 5, it is 6", "not 5 but 6", "no longer 5 but 6", "not 5 —
# it's 6" (a dash: an em dash, a spaced en dash or "--"), the "n't" of "The answer isn't 5, it's 6"
# (what follows it is boxed: math-verify read 5)
_NEGATED_ANSWER = re.compile(
    r"^(?i:not|no\s+longer|n['\u2019]t)\s[^,;]*?(?:[,;]|(?<!\s)\s*\u2014(?!\d)|\s(?:\u2013|--)(?=\s)|\s(?i:but)\b)\s*"
    r"(?:(?i:but|rather|instead)\b,?\s*)?"
    r"(?:(?i:it\s+is|it['\u2019]s|it\s+equals)\b\s*)?(?=\S)")
# the answer after a rejected one in math delimiters, "not $5$, but $6$", "not $5$ but $6$ or $7$": a
# plain number's delimiters are dropped, a formula's when it is the whole answer (math-verify read
# the rejected $5$)
_MATH_NUMBER_SPAN = re.compile(rf"(?<!\\)\$\s*({_NUMBER})\s*(?<!\\)\$|\\\(\s*({_NUMBER})\s*\\\)")
_ONE_MATH_SPAN = re.compile(r"(?<!\\)\$([^$]+)(?<!\\)\$|\\\(((?:(?!\\[()]).)+)\\\)", re.S)
# ... or a number, an optional unit, a comma, then a reason or a condition in words, "not 5 but 6,
# since 5 fails" (the number is boxed: math-verify read 5)
_NUMBER_BEFORE_REASON = re.compile(
    rf"({_NUMBER})(?:{_UNIT_WORD})?,\s+(?i:{_CONDITION_WORDS}|since|because|as|so|which)\b")
# a time of day, "3:45 pm", "11:05 a.m", words after it, "10:30 a.m. on Monday" (its time is boxed as
# a ratio is; math-verify read 3 and 10)
_CLOCK_TIME = re.compile(r"(\d{1,2}\s*:\s*\d{2})\s*(?i:[ap]\.?\s?m)\.?")
_WORDS = re.compile(r"(?:[\s,]+[^\W\d_]+\.?)*")  # words with no digit: the " on Monday" after a time
# a box's content (its \text wrappers read as spaces) that is a time on the hour, "2:00", "2:00 pm",
# "2:00 \text{ PM}" (group 1: the hour; see `_on_the_hour_readings`)
_ON_THE_HOUR = re.compile(r"\s*(\d{1,2})\s*:\s*00(?:\s|\\[ ,;:]|~)*(?i:[ap]\.?\s?m\.?)?\s*")
# a box that may hold one (its content opens with the time), and the most characters that content
# is looked for in: each box of "\boxed{" * 3000 was looked for to 2,000 characters (1 s)
_BOXED_HOUR_OPEN = re.compile(r"\\boxed\s*\{(?=\s*\d{1,2}\s*:\s*00)")
_ON_THE_HOUR_CHARS = 200
# a plain number in math delimiters opening the answer, "$5$ when $n = 2$", "\\(5\\) for \\(x =
# 1\\)": read as the plain number before a condition is (math-verify read n = 2 and x = 1)
_MATH_NUMBER = re.compile(
    rf"^(?:(?<!\\)\$\s*({_NUMBER})\s*(?<!\\)\$|\\\(\s*({_NUMBER})\s*\\\))(?=[\s,])")
# what math-verify misreads in plain text: LaTeX markup, a tuple or an interval, a list, algebra (a
# one-letter symbol after a digit, or a letter next to + - = or a bracket: 2n-2, 6 - 5i, 2ab+1,
# f(x)=x+1, p - q, read as 2, 6, 2 or none; not "5 m", "20 m/s" or "2nd", read as the number; a
# plain word is refused below)
_LETTER = r"[^\W\d_](?![^\W\d_])"
_PLAIN_TEXT_MISREAD = re.compile(
    rf"[\\^_{{,]|^[(\[]|\d{_LETTER}|{_LETTER}\s*[-+=()]|[-+=()]\s*{_LETTER}|\d(?::|\s+:\s*)\d")
# ... and a ratio or a time, 2:30 or 2 : 30 (read as 2; not the colon of an explanation, "15: 3*5"
# and "7: 3 + 4", read as 15 and 7); a sign spaced from its number, "- 5" (read as 5), and
# a root in plain text, "2√3" and "2 sqrt(3)" (read as 2), are written out (-5, 2\sqrt{3}) and boxed
_SPACED_SIGN = re.compile(r"^[-\u2212]\s+(?=\d)")
_PLAIN_ROOT = re.compile(r"(?<![\\\w])sqrt\s*\(([^()]*)\)|\u221a\s*(\d+(?:\.\d+)?|[^\W\d_]\b)")
# alternatives: "3 or 4", "3, or 4", "3 \text{ or } 4" ("\lor" and "\vee" are spelt so first), a
# hedge "3 or maybe 4", "3 and/or 4"; a pair "3 and 4", "3, and 4", "3 \text{ and } 4" (math-verify
# reads \boxed{3 \text{ and } 4} as {3, 4})
# where a match that opens with spaces may start: not inside a run of them (a split or a search
# tried every start in a run of n spaces, and "\s*,?\s*" every way to share it: n^3 steps, 13 s
# for "3", 1,000 spaces, "4" after an anchor; past a worker's time bound at a few thousand)
_NOT_IN_A_SPACE_RUN = r"(?:(?<!\s)|(?!\s))"
_HEDGE_WORD = rf"(?:{HEDGE_WORDS})\b"
# a `$...$` span (see `_blank_math`)
_DOLLAR_SPAN = re.compile(r"(?<!\\)\$[^$]*(?<!\\)\$")
# a later piece joined to the condition's, a number with a condition of its own or "otherwise", or
# a hedged number: "1 if $n$ is odd and 0 if $n$ is even", "5 when $x = 2$ and 7 otherwise", "3 for
# $n = 1$ or maybe 5" (group 1 or 2: its number; a hedge, see `anchor_answer_readings`); not a number
# in the condition's words, "4 when $x$ is between 2 and 3", "4 when $x$ is 2 or 3", "10 for $n = 2$
# and 5", "4 when $a = 1$ and 2 more steps" (read 4; they were hedges, wrong for a gold 4)
_LATER_PIECE = re.compile(
    rf"\b(?:or|and)\s+(?:{_HEDGE_WORD}\s+({_NUMBER})(?![\w.])|({_NUMBER})(?:{_UNIT_WORD})?"
    rf"\s+(?:\(\s*)?(?:(?i:{_CONDITION_WORDS}|in)\s|(?i:otherwise|else)\b))")
_CONNECTIVE = rf"(?:and/or|or|and)\b(?:\s+{_HEDGE_WORD})?"
# ... and a hedge word after a comma: "3, maybe 4"
_ALTERNATIVE = re.compile(
    rf"{_NOT_IN_A_SPACE_RUN}\s*(?:(?:,\s*)?(?:(?<![\w\\]){_CONNECTIVE}|\\text\s*\{{\s*{_CONNECTIVE}\s*\}})"
    rf"|,\s*{_HEDGE_WORD})\s*")
# an alternative that is a number and one unit word, or a number and a "?": "3 hours", "4 cm", "3?"
# (its number: "3 hours or 4 hours" is {3, 4}; joined by "or", not "and": "2 hours and 30 minutes"
# is one quantity)
_NUMBER_WITH_UNIT = re.compile(rf"({_NUMBER}|[-+]?\.\d+)(?:\s+[^\W\d_]{{2,}}|\s*\?)")  # ".75 dollars" too
_PLAIN_AND = re.compile(r"(?<![\w\\/])and\b(?!/)")
# a decimal point with no digit after it that ends an alternative or its numerator, "3." or
# "-3./2": math-verify's LaTeX parser reads no number in it and drops it from a box of
# alternatives (\boxed{3. \text{ or } 4} was 4); not the "." of "4. 5 + 9 = 45", a sentence's
_BARE_POINT = re.compile(r"(?<=\d)\.(?=/|\s*$)")
# a hedge in brackets after the answer: "3 (or 4)", "3 (or possibly 4)" (the brackets dropped)
_BRACKETED_HEDGE = re.compile(r"\(\s*((?:and/or|or)\b[^()]*)\)$")
# a text wrapper in a box: \boxed{3 \text{ hours or } 4 \text{ hours}} (see
# _unpercent_boxed_alternatives)
_TEXT_WRAPPER = re.compile(r"\\text\s*\{([^{}]*)\}")
# a list holding a percent sign (a comma, not 1,000's, or an alternative's word between elements)
_PERCENT_LIST = re.compile(rf"{_ALTERNATIVE.pattern}|{_NOT_IN_A_SPACE_RUN}\s*,(?!\d{{3}}(?!\d))\s*")
# a percent sign: math-verify reads a list holding one as its last element (\boxed{62.5% \text{ or }
# 40%} is 40%), and it counts 40% equal to 40
_PERCENT_SIGN = re.compile(rf"{_NOT_IN_A_SPACE_RUN}\s*\\?%")
_LOGICAL_OR = re.compile(r"\\(?:lor|vee)(?![^\W\d_])")
_EITHER = re.compile(r"^(?i:either)\s+")  # "either 3 or 4": the alternatives 3 and 4
# a range, "between 3 and 4", "from 3 to 4", "3 to 4" or "3\u20134" (an en or em dash; math-verify read
# its first number, 3; see `_range`)
_RANGE_BOUND = rf"{_DECIMAL}|[-+]?\.\d+"  # ... a bare decimal too: ".5 to .75 dollars" (read as .5 and its unit)
_RANGE = re.compile(
    rf"(?i:between\s+({_RANGE_BOUND})\s+and|from\s+({_RANGE_BOUND})\s+to|({_RANGE_BOUND})\s+to)\s+({_RANGE_BOUND})"
    rf"|(\d+(?:\.\d+)?)\s*[\u2013\u2014]\s*(\d+(?:\.\d+)?)")
# what makes a dash no range's: an aside after the answer, "12 \u2014 3 more than 9", "4 \u2014 2 + 2", "6 \u2014 12
# divided by 2" (an operator or a word of arithmetic after its second number; see `_range`)
_DASH_ASIDE = re.compile(
    r"\s*(?:[-+*/=^\u00d7\u00f7\u2212]|(?i:more|less|fewer|times|divided|multiplied|plus|minus|over)\b)")
# the precision a number is given to, after "3.14 to 2": "decimal places", "significant figures",
# "sig figs", "d.p.", "s.f.", "places", "digits" (no range)
_PRECISION = re.compile(r"\s*(?i:decimal|significant|sig|places?|digits?|figures?|d\.?p|s\.?f)\b")
# a LaTeX environment's name is no plain word: \begin{pmatrix} ... \end{pmatrix}
_ENVIRONMENT = re.compile(r"\\(?:begin|end)\s*\{[^{}]*\}")
_MATH_DELIMITER = re.compile(r"(?<!\\)\$|\\\(|\\\[")
_BOXED_OPEN = re.compile(r"\\boxed\s*\{")
# a subscript in a text wrapper: v_{\text{max}}, v_\text{max}, \lambda_{\mathrm {red}} (see
# `plain_subscript_text`)
_SUBSCRIPT_TEXT = re.compile(rf"_\s*(\{{\s*)?{LATEX_WRAPPER}([^{{}}]*)\}}(?(1)\s*\}})")
# a subscripted E, e or I that is no piece of a word or a command (a digit may come before: 2E_2), or
# one in a font command's braces: E_{1}, e_n, I_{0}, \mathrm{E}_1, \mathcal{E}_{0} (see
# `plain_subscripted_constants`)
_SUBSCRIPTED_CONSTANT = re.compile(
    r"(?:\\(?:math(?:rm|it|bf|sf|tt|cal|bb|scr|frak)|text(?:rm|it|bf|sf)?|boldsymbol|bm)\s*\{\s*([EeI])\s*\}"
    r"|(?<!\\)(?<![^\W\d])([EeI]))(?=\s*_)")
# a run of whitespace longer than any window of math-verify's patterns (".{0,100}", then a space):
# its patterns are quadratic in a run after a number ("The answer is 42" and 19,000 spaces took 20
# s to parse: a "timeout"); cut to `_WHITESPACE_KEPT` characters (see `_shortened_whitespace`)
_WHITESPACE_KEPT = 128
_LONG_WHITESPACE = re.compile(rf"(?<!\s)\s{{{_WHITESPACE_KEPT + 1},}}")
# a percent sign inside a box (see _boxed_percent_readings)
_BOXED_PERCENT = re.compile(rf"(\\boxed\s*\{{[^{{}}]*?){_NOT_IN_A_SPACE_RUN}\s*\\?%\s*\}}")


def mark_hash_answer(completion: str) -> str:
    """GSM8K convention: a completion with no ``\\boxed`` whose last ``####`` is followed by an
    answer on the same line gets that answer boxed (``"... #### 72"`` -> ``"... \\boxed{72}"``; a
    bare decimal keeps its point, ``#### .5`` -> ``\\boxed{.5}``: it was 5),
    so that math-verify's boxed-first extraction picks it; the lines after it are kept. Other
    completions are returned as is, among them Markdown headings (``#### Step 2: Revenue``,
    ``#### 2. Money made``, ``#### 60 % of the students``: see ``_NUMBERED_TITLE``)."""
    return hash_answer_readings(completion)[0]


def tag_answer_readings(completion: str) -> list[str]:
    """A completion with no ``\\boxed`` whose last complete ``<answer>...</answer>`` pair holds an
    answer gets it boxed in the pair's place (``"... <answer>3</answer>"`` -> ``"... \\boxed{3}"``),
    as GSM8K's ``####`` is (`hash_answer_readings`, with its second reading for a number before a
    unit): math-verify reads no number right after a ``>``, so ``<answer>3</answer>``, the
    `format` reward's answer, had no answer. Other completions: ``[completion]``."""
    span = last_tag_span(completion)
    if span is None or any(command in completion for command in BOXED_COMMANDS):
        return [completion]
    start, end = span
    content = completion[start:end].strip()
    if not content:
        return [completion]
    return _boxed_in_place(completion[:start - len("<answer>")], content, completion[end + len("</answer>"):])


def _boxed_in_place(before: str, value: str, after: str) -> list[str]:
    """``before + \\boxed{value} + after``, and for a number before a unit (``18 dollars``) the
    same with the number alone; alternatives (``3 or 4``, ``3 or maybe 4``) are boxed together as
    `_alternatives` writes them, one reading (the number-and-unit reading read ``3 or 4`` as 3)."""
    if (alternatives := _alternatives(value)) is not None:
        return [f"{before}\\boxed{{{alternatives}}}{after}"]
    if (bounds := _range(value) or odds(value) or arithmetic_in_words(value)) is not None:  # "3 to 4": none
        return [f"{before}\\boxed{{{bounds}}}{after}"]
    values = two_unit_amounts(value) or [value]  # "3 hours and 30 minutes": 3.5 and 210 (read 3)
    number = _NUMBER_AND_UNIT.match(value) if len(values) == 1 else None
    if number is not None and not _joined_to_a_number(value, number.end(1)):
        values.append(number.group(1))
    return [f"{before}\\boxed{{{item}}}{after}" for item in values]


def hash_answer_readings(completion: str) -> list[str]:
    """`mark_hash_answer`'s reading, and for an answer with a unit after a number (``#### 18
    dollars``: math-verify knows cm or hours, not dollars) one more with the number alone boxed.
    Alternatives with units (``#### 3 apples or 4 apples``, `_alternatives`), arithmetic in words and a
    quantity in two units (`ict.answers.wording`) are no heading."""
    marker = completion.rfind("####")
    if marker < 0 or any(command in completion for command in BOXED_COMMANDS):
        return [completion]
    line, _, rest = completion[marker + 4 :].partition("\n")
    # a comma between digits dropped when three follow (1,234; 1,0000 as before) or in an Indian
    # grouping (1,00,000 is 100000, as before), no other: a tuple or list keeps its commas ("(2,4)",
    # "1,-2" and "3, 5" read "(24)", "1-2" and "3 5"), "3,5" is no 35 (a decimal comma or a list,
    # as in a box), "3, maybe 4" is a hedge
    line = _INDIAN_GROUPED.sub(lambda number: number[0].replace(",", ""), line)
    line = _DIGIT_GROUP_COMMA.sub("", line)
    value = line.strip().replace("\\$", "").strip("$ .")
    if _BARE_DECIMAL_START.match(line):  # a bare decimal keeps its point: "#### .5" is 0.5 (read 5)
        value = f".{value}"
    if (not value or _HEADING_WORD.match(value) or _NUMBERED_TITLE.match(value)
            or len(_PLAIN_WORD.findall(value)) >= 2 and _alternatives(value) is None
            and arithmetic_in_words(value) is None and two_unit_amounts(value) is None):
        return [completion]
    rest = f"\n{rest}" if rest.strip() else ""
    return _boxed_in_place(completion[:marker], value, rest)


def anchor_answer_readings(completion: str) -> list[str]:
    """A completion with no ``\\boxed`` whose last line ends in an anchored answer X ("The answer is
    X.", "Final answer: X") that is LaTeX with no math delimiters, a tuple, a list or algebra
    (``3\\sqrt{13}``, ``(2, 4)``, ``1, -2``, ``6 - 5i``, ``f(x)=x+1``) gets X boxed in its place, as
    GSM8K's ``####`` is (`hash_answer_readings`): math-verify reads such an X in plain text as its
    first number (``3``, ``1``, ``6``) or as none. One reading only: X has no word, so a
    parenthesis after a number is a product or a second answer (``3 (4^{1})``, ``42 (27, 9)``),
    not a unit whose number alone is a reading too. A plain number (``1,000``), a ``$...$``
    answer, any plain word (``1, since 2 - 1 = 1``; a ``\\command`` and an environment's name are
    none), a number and its unit (``5 m``, ``20 m/s``) and unbalanced braces are left alone:
    ``[completion]``. Alternatives with no word, X ``3 or 4``, ``3, or 4`` or ``3 \\text{ or } 4``,
    are boxed together as ``3 \\text{ or } 4`` (math-verify: {3, 4}; in plain text it read 3, a
    hedge rewarded), an ``either`` before them dropped; a range X ``between 3 and 4`` or ``from 3
    to 4`` (words after it too) is boxed as ``3 \\text{ to } 4`` (math-verify: the product
    ``3 to 4``, equal to no number; it read 3), odds ``1 in $6$`` as ``\\frac{1}{6}``
    (`ict.answers.wording.odds`; it read 6), arithmetic in words ``0.5 times 4`` as ``0.5 \\times 4``
    (it read 0.5) and a quantity in two units ``3 hours and 30 minutes`` in each (two readings,
    3.5 and 210; it read 3); an alternative must close its brackets
    (``3 (or 4`` is none; ``3 (or 4)`` is two); a comma left before X's end (``8,.``) is dropped.
    A plain number, an optional unit, then a condition holding math (X ``20 m/s for $v_{max}$``, ``5
    when $x = 2$``, ``5 (when $x = 2$)``, ``3, since $x = 4$ fails``, ``$5$ when $x = 2$``:
    `_NUMBER_BEFORE_CONDITION`, `_MATH_NUMBER`) has the number boxed: math-verify read the
    condition's formula (v_{max}; x = 2, right for a gold 2); a number and a "unit" that is boxed
    whole with no condition (``2 x^2 for $x > 0$``, ``The answer is 2 x^2``: 2x^2) are boxed whole;
    a later piece, "and" or "or" then a plain number with a condition of its own or "otherwise", or
    a hedge word before it (``1 if $n$ is odd and 0 if $n$ is even``, ``5 when $x = 2$ and 7
    otherwise``: `_LATER_PIECE`; not ``4 when $x$ is 2 or 3``), makes a hedge, boxed as alternatives
    are (``1 \\text{ or } 0``; the first number alone was right for a gold 1). A sign spaced from
    its number (``- 5``) and a plain-text root (``2√3``, ``2 sqrt(3)``) are written out and boxed
    (``-5``, ``2\\sqrt{3}``), as is a ratio or a time (``2:30``, ``2 : 30``, ``3:45 pm``: `_CLOCK_TIME`;
    not ``15: 3*5``, a colon opening an explanation): math-verify read 5, 2 and 2. A rejected answer
    before the answer (``not 5, it is 6``, ``not 5 but 6``: `_NEGATED_ANSWER`) is dropped and the
    answer after it boxed (of a number and its unit, or a number before a reason after a comma,
    ``6, since 5 fails``, the number; of ``$6$`` or ``$\\frac{1}{2}$``, the content: math-verify
    read 5); a number before a condition in words and a later piece (``12 if we count the ends and
    14 otherwise``: `_NUMBER_BEFORE_PLAIN_CONDITION`) is a hedge, as with a condition in math (read
    12)."""
    if any(command in completion for command in BOXED_COMMANDS):
        return [completion]
    text = completion.rstrip()
    anchors = list(_ANSWER_ANCHOR.finditer(text, text.rfind("\n") + 1))
    if not anchors:
        return [completion]
    # a comma left dangling before the end ("8,.") ends no list
    value = text[anchors[-1].end():].strip().strip("*").removesuffix(".").strip().rstrip(",").rstrip()
    # "not 5, it is 6": the answer after the rejected one, read as an answer is (a number and its
    # unit: the number, below, after the hedges: "not 5 but 6 or 7" is no 6)
    if (negated := _NEGATED_ANSWER.match(value)) is not None:
        value = value[negated.end():].strip("*").strip()  # "not **5**, but **6**": 6
        # "not $5$, but $6$", "not $5$ but $6$ apples", "... but $\frac{1}{2}$": read as in plain text
        value = _MATH_NUMBER_SPAN.sub(lambda math: math[1] or math[2], value)
        value = (math[1] or math[2]).strip() if (math := _ONE_MATH_SPAN.fullmatch(value)) is not None else value
    if (clock := _CLOCK_TIME.match(value)) is not None and _WORDS.fullmatch(value, clock.end()):
        value = clock[1]  # "3:45 pm", "10:30 a.m. on Monday"
    if (amounts := two_unit_amounts(value)) is not None:  # "3 hours and 30 minutes": 3.5 and 210 (read 3)
        return [f"{text[:anchors[-1].end()]}\\boxed{{{amount}}}{completion[len(text):]}" for amount in amounts]
    # "- 5", "2√3", "2 sqrt(3)": math-verify's misreadings (5, 2, 2) of a sign and a root, written out
    spelt = _PLAIN_ROOT.sub(lambda root: f"\\sqrt{{{root[1] or root[2]}}}", _SPACED_SIGN.sub("-", value))
    if spelt != value and not _has_word(spelt):
        value = spelt
    elif (alternatives := _alternatives(value)) is not None:
        value = alternatives  # the alternatives, not the first (3 or 4)
    elif (bounds := _range(value)) is not None:  # a range, not its first number
        value = bounds
    elif (worded := odds(value) or arithmetic_in_words(value)) is not None:  # "1 in $6$": 1/6, not 6
        value = worded  # ... "0.5 times 4 dollars": 0.5 \times 4, not 0.5
    elif (number := _NUMBER_BEFORE_CONDITION.match(
            _MATH_NUMBER.sub(lambda math: math[1] or math[2], value, count=1))) is not None:
        # a piecewise answer, "1 if $n$ is odd and 0 if $n$ is even", is a hedge: both numbers
        value = _piecewise(number, _LATER_PIECE.search(_blank_math(number.string), number.end(1)))
    elif ((number := _NUMBER_BEFORE_PLAIN_CONDITION.match(value)) is not None
            and (later := _LATER_PIECE.search(_blank_math(value), number.end(1))) is not None):
        value = _piecewise(number, later)  # "12 if we count the ends and 14 otherwise": a hedge too
    elif negated is not None and _has_word(value) and (
            unit := _NUMBER_AND_UNIT.fullmatch(value) or _NUMBER_BEFORE_REASON.match(value)) is not None:
        value = unit[1]  # "not 5 but 6 apples", "not 5 but 6, since 5 fails": 6 (math-verify read 5)
    elif (negated is None and (not _PLAIN_TEXT_MISREAD.search(value) or PLAIN_NUMBER.fullmatch(value))
            or not value or _has_word(value)):
        return [completion]
    return [f"{text[:anchors[-1].end()]}\\boxed{{{value}}}{completion[len(text):]}"]


def _blank_math(text: str) -> str:
    """``text`` with each math span, ``$...$`` or ``\\(...\\)``, written as as many spaces (one scan:
    a lazy ``\\(.*?\\)`` tried every unclosed ``\\(`` to the end)."""
    text = _DOLLAR_SPAN.sub(lambda span: " " * len(span[0]), text)
    pieces, done = [], 0
    while (start := text.find("\\(", done)) >= 0 and (end := text.find("\\)", start + 2)) >= 0:
        pieces += [text[done:start], " " * (end + 2 - start)]
        done = end + 2
    return "".join(pieces) + text[done:]


def _alternatives(value: str, separator: re.Pattern[str] = _ALTERNATIVE) -> str | None:
    """``value``'s alternatives (``3 or 4``, ``3, and 4``, ``3 \\text{ or } 4``, ``3 or maybe 4``;
    with ``separator=_PERCENT_LIST`` a list ``25\\%, 50\\%`` too) written as math-verify reads them
    together, ``3 \\text{ or } 4`` ({3, 4}), percent signs dropped (``62.5% or 40%`` is {62.5, 40}:
    math-verify read it as 40%, the last); None unless ``value`` holds two or more alternatives,
    none empty, with a word (`_has_word`) or with a bracket left open (`_balanced`); an ``either``
    before them is dropped. A hedge in brackets is one alternative (``3 (or 4)``); alternatives
    joined by "or" that are a number and one unit word or a ``?`` are their numbers (``3 hours or
    4 hours``, ``3 or 4 cm``, ``3? or 4``: {3, 4}; not ``2 hours and 30 minutes``); a digit's
    decimal point that ends an alternative or its numerator is dropped (``3. or 4``, ``-3./2 or
    4``: math-verify dropped ``3.`` and ``-3./2`` from the box and read 4 alone; `_BARE_POINT`)."""
    value = _BRACKETED_HEDGE.sub(r" \1", _EITHER.sub("", value, count=1))
    parts = separator.split(value)
    if separator is _ALTERNATIVE and not _PLAIN_AND.search(value):
        parts = [(found[1] if (found := _NUMBER_WITH_UNIT.fullmatch(part)) else part) for part in parts]
    if len(parts) < 2 or not all(part and not _has_word(part) and _balanced(part) for part in parts):
        return None
    return " \\text{ or } ".join(_BARE_POINT.sub("", _PERCENT_SIGN.sub("", part)) for part in parts)


def _range(value: str) -> str | None:
    """The range ``value`` opens with (`_RANGE`: ``between 3 and 4``, ``from 3 to 4``, ``3 to 4``,
    ``3\u20134``, words after it too) written ``3 \\text{ to } 4``, which math-verify reads as the product ``3 to
    4``, equal to no number; None for no range, and for ``2 to 1``, ``3 to 1.0`` (a ratio ``a:1``,
    which is ``a``: read as before), ``3.14 to 2 decimal places`` (a precision, `_PRECISION`: read
    as before). A range is a hedge; a ratio ``a:b`` is ``a/b``: neither is ``a`` unless ``b`` is
    1. A dash opens a range only up to a larger number with no arithmetic after it (`_DASH_ASIDE`):
    ``12 \u2014 3 more than 9``, ``4 \u2014 2 + 2 = 4`` are the answer and an aside (read 12 and 4, as
    before)."""
    bounds = _RANGE.match(value)
    if bounds is None or bounds[3] is not None and (
            float(bounds[4]) == 1 or _PRECISION.match(value, bounds.end())):
        return None
    if bounds[5] is not None and (float(bounds[5]) >= float(bounds[6]) or _DASH_ASIDE.match(value, bounds.end())):
        return None
    return f"{bounds[1] or bounds[2] or bounds[3] or bounds[5]} \\text{{ to }} {bounds[4] or bounds[6]}"


def _unpercent_boxed_alternatives(text: str) -> str:
    """``text`` with each box that holds alternatives or a list and a percent sign written as
    `_alternatives` writes them: math-verify reads ``\\boxed{62.5\\% \\text{ or } 40\\%}`` and
    ``\\boxed{25\\%, 50\\%}`` as no number and then, in the lenient extraction, as 40 (the last
    number); ``\\boxed{62.5 \\text{ or } 40}`` is {62.5, 40}, ``\\boxed{\\frac{1}{2} \\text{ or }
    40}`` {1/2, 40}. So is a box whose text wrappers hold "or" and units (``\\boxed{3 \\text{ hours
    or } 4 \\text{ hours}}`` is {3, 4}; math-verify read it as 3). A box that does not close
    (`_balanced_group`) is left as it is."""
    pieces, done = [], 0
    for found, content in box_contents(text, _BOXED_OPEN):
        if found.start() < done or content is None:
            continue
        if "%" in content:
            listed = _alternatives(content, _PERCENT_LIST)
        elif "\\text" in content and re.search(r"\bor\b", content):
            listed = _alternatives(_TEXT_WRAPPER.sub(r" \1 ", content).strip())
        else:
            continue
        if listed is not None:
            pieces += [text[done:found.end()], listed, "}"]
            done = found.end() + len(content) + 1
    return "".join(pieces) + text[done:]


def _joined_to_a_number(value: str, start: int) -> bool:
    """Whether, on its line, ``value[start:]`` holds an "or" or "and" followed by a digit (one scan:
    a lookahead ``.*(or|and).*[0-9]`` took seconds on 20k characters of "or ")."""
    line = value[start:].split("\n", 1)[0]
    joined = _JOINED.search(line)
    return joined is not None and re.search(r"\d", line[joined.end():]) is not None


def _balanced(value: str) -> bool:
    """Does ``value`` close as many brackets as it opens (``[1, 2)`` does; ``3 (`` of ``3 (or 4``
    does not: no alternative)?"""
    return value.count("(") + value.count("[") == value.count(")") + value.count("]")


def _has_word(value: str) -> bool:
    """Is ``value`` no answer to box whole: a plain word (a ``\\command`` and an environment's
    name are none), math delimiters or unbalanced braces?"""
    return bool(_MATH_DELIMITER.search(value) or value.count("{") != value.count("}")
                or _PLAIN_WORD.search(_ENVIRONMENT.sub(" ", value)))


def gold_reading(gold: str) -> str:
    """The normalised ``gold`` as the math worker parses it, read as a completion is: scientific
    notation written out (`expand_scientific`), ``\\lor`` spelt (`spell_logical_or`) and a list or
    alternatives holding a percent sign written as `_alternatives` writes them (``25\\%, 50\\%`` ->
    ``25 \\text{ or } 50``, {25, 50}: math-verify read it as its last element, 50), wrapped in
    ``$...$`` (a bare ``1 - \\sqrt{2}`` parses as 1)."""
    value = plain_subscripted_constants(plain_subscript_text(spell_logical_or(expand_scientific(gold))))
    listed = _alternatives(value, _PERCENT_LIST) if "%" in value else None
    return f"${value if listed is None else listed}$"


def spell_logical_or(text: str) -> str:
    """``text`` with ``\\lor`` and ``\\vee`` written ``\\text{ or }``: math-verify reads
    ``\\boxed{3 \\lor 4}`` as 4 (the last alternative) and ``\\boxed{3 \\text{ or } 4}`` as the
    alternatives {3, 4}, right for a gold ``3, 4`` only."""
    return _LOGICAL_OR.sub(r"\\text{ or }", text)


def plain_subscript_text(text: str) -> str:
    """``text`` with each subscript in a text wrapper written plain, its whitespace dropped:
    ``\\lambda_{\\text {red}}`` and ``E_\\mathrm{total}`` -> ``\\lambda_{red}``, ``E_{total}``, in the
    gold and the completion alike. math-verify strips a unit from ``\\text{`` to the end of an
    answer, so ``\\boxed{v_{\\text{total}} = \\frac{1}{2}}`` read as ``v_{`` (wrong for the gold
    1/2; math-verify parses ``E_{total} = \\frac{1}{2}`` as nothing), and Minerva's gold
    ``\\lambda_{\\text {red}} / \\sqrt{2}`` matched no rendering but itself."""
    return _SUBSCRIPT_TEXT.sub(lambda match: "_{" + "".join(match[2].split()) + "}", text)


def plain_subscripted_constants(text: str) -> str:
    """``text`` with each subscripted ``E``, ``e`` or ``I``, bare or in a font command
    (`_SUBSCRIPTED_CONSTANT`), written ``\\mathsf{E}_{1}``, a symbol, in the gold and the completion
    alike: math-verify's LaTeX parser reads ``E`` and ``e`` as Euler's number and fails on ``E_{1}`` (Minerva's gold ``\\frac{1}{3}
    E_{1}+\\frac{2}{3} E_{2}`` matched no rendering but itself, and its gold with ``E_{0}^{2}``
    parsed as a stray 2 that any 2 matched), and reads ``I`` as the imaginary unit, its subscript
    dropped (``I_{1}`` equalled ``I_{0}`` and ``i``). Not ``\\mathrm``: math-verify writes it
    ``\\text`` and strips a "unit" from there to the end. The parser writes every symbol in lower case
    (``X_1`` is ``x_1``), so ``E_1`` and ``e_1`` are one symbol, as are ``\\mathsf{E}_1`` and
    ``\\mathcal{E}_1``."""
    return _SUBSCRIPTED_CONSTANT.sub(lambda match: f"\\mathsf{{{match[1] or match[2]}}}", text)


def _piecewise(number: re.Match[str], later: re.Match[str] | None) -> str:
    """The answer read from a number before a condition (``number``: `_NUMBER_BEFORE_CONDITION`'s or
    `_NUMBER_BEFORE_PLAIN_CONDITION`'s match) and the later piece after it (`_LATER_PIECE`'s, or
    None): the number, not the condition's formula (a "unit" read as algebra, "2 x^2", stays with
    it, as in "The answer is 2 x^2."); with a later piece the hedge of both, ``1 \\text{ or } 0``."""
    first = number[1] if _PLAIN_TEXT_MISREAD.search(number[1]) else number[2]
    return first if later is None else f"{first} \\text{{ or }} {later[1] or later[2]}"


def _boxed_percent_readings(text: str) -> list[str]:
    """The readings of a completion to try in turn: ``text`` itself, or, with a percent sign inside
    a box, the box with a plain ``%`` (``\\boxed{62.5\\%}`` -> ``\\boxed{62.5%}``: math-verify matches
    it to a gold "62.5%") and then with the sign moved out (``\\boxed{62.5}\\%``: read as 62.5, a
    gold such as GSM8K's 60 for "what percentage"), where math-verify reads ``\\boxed{60\\%}`` as
    no number."""
    if not _BOXED_PERCENT.search(text):
        return [text]
    return [_BOXED_PERCENT.sub(r"\1%}", text), _BOXED_PERCENT.sub(r"\1}\\%", text)]


def _on_the_hour_readings(text: str) -> list[str]:
    """``text``, and with a box that holds a time on the hour (`_ON_THE_HOUR`: ``\\boxed{2:00}``,
    ``\\boxed{2:00 \\text{ PM}}``) a second reading with the hour alone boxed (``\\boxed{2}``):
    GSM8K's gold for "the latest time ... to start" is 2, and math-verify reads ``2:00`` as no number
    equal to it (a ratio over 0); a gold ``2:00`` still matches the first reading."""
    pieces, done = [], 0
    for found in _BOXED_HOUR_OPEN.finditer(text):
        content = _balanced_group(text, found.end() - 1, _ON_THE_HOUR_CHARS) if found.start() >= done else None
        hour = _ON_THE_HOUR.fullmatch(_TEXT_WRAPPER.sub(r" \1 ", content)) if content is not None else None
        if hour is not None:
            pieces += [text[done:found.end()], hour[1], "}"]
            done = found.end() + len(content) + 1  # type: ignore[arg-type]
    return [text, "".join(pieces) + text[done:]] if pieces else [text]


def _shortened_whitespace(text: str) -> str:
    """``text`` with each run of more than `_WHITESPACE_KEPT` whitespace characters cut to its first
    `_WHITESPACE_KEPT`, the last a newline if the run holds one: math-verify's patterns read the
    cut run as the long one (their bounded windows, at most 100 characters and a space, cross
    neither; ``.`` and an inline ``$...$`` cross no newline, and one is kept), in time linear in
    the text, not quadratic (about 0.3 s on 20,000 characters of runs of 128 after numbers)."""
    return _LONG_WHITESPACE.sub(
        lambda run: run[0][:_WHITESPACE_KEPT - 1] + ("\n" if "\n" in run[0] else run[0][-1]), text)


def completion_readings(completion: str) -> list[str]:
    """The readings of ``completion`` for math-verify to parse in turn (the first that matches the
    gold wins), a minus typed as a dash written ``-`` (`ict.answers.wording.spell_minus`), ``\\lor``
    and ``\\vee`` spelt out (`spell_logical_or`), subscripts in text wrappers
    written plain (`plain_subscript_text`), a subscripted E, e or I a symbol
    (`plain_subscripted_constants`) and a boxed hedge's or list's percent
    signs dropped (`_unpercent_boxed_alternatives`): the ``<answer>`` tag's
    (`tag_answer_readings`), then the ``####`` line's
    (`hash_answer_readings`), scientific notation expanded, the anchored plain-text answer's
    (`anchor_answer_readings`), a box's quantity in two units in each (`two_unit_box_readings`), a
    power after a box moved into it (`boxed_power`), a box's closing
    full stop dropped (`drop_boxed_full_stop`), a
    boxed number in a text wrapper unwrapped, and the boxed
    percent's (`_boxed_percent_readings`); in each, long runs of whitespace are cut
    (`_shortened_whitespace`), and a boxed time on the hour is read as its hour too
    (`_on_the_hour_readings`)."""
    spelt = _unpercent_boxed_alternatives(
        plain_subscripted_constants(plain_subscript_text(spell_logical_or(spell_minus(completion)))))
    return [hour for tagged in tag_answer_readings(spelt)
            for marked in hash_answer_readings(tagged)
            for anchored in anchor_answer_readings(expand_scientific(marked))
            for amount in two_unit_box_readings(anchored)
            for percent in map(_shortened_whitespace,
                               _boxed_percent_readings(
                                   unwrap_boxed_text_number(drop_boxed_full_stop(boxed_power(amount)))))
            for hour in _on_the_hour_readings(percent)]
