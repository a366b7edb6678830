"""Boundaries of the answer rules that the example tables in test_verify.py, test_rewards.py and
test_gold.py left open (each case was a surviving hand mutant of ict/answers). Expected values are
written by hand from the rules in the functions' docstrings, never computed by the code under test."""

from __future__ import annotations

import time
from types import SimpleNamespace

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from ict.answers import verify
from ict.answers.extraction import (
    MAX_BOXED_CHARS,
    MAX_BOXED_TRIES,
    extract_boxed_answer,
    extract_choice_letter,
    extract_last_number,
    sanitize_text,
)
from ict.answers.gold import (
    gold_from_boxed_solution,
    gold_from_gsm8k,
    gold_from_list,
    gold_from_number,
    normalize_gold,
)
from ict.answers.grading import grade_choice, grade_number
from ict.answers.rewards import build_reward, format_reward
from ict.answers.verify import MathVerifier
from ict.core.problems import Problem

# ------------------------------------------------------------------------ \boxed{} extraction


def test_an_unbalanced_escaped_brace_does_not_count():
    """``\\{`` and ``\\}`` are literal: a box holding ``\\left\\{ ... \\right.`` (one escaped opening
    brace, no escaped closing one) closes at its own ``}``. Balanced escaped pairs, as in
    test_verify.py, cannot tell a rule that counts them from one that does not."""
    assert extract_boxed_answer(r"so \boxed{\left\{ x \right.}") == r"\left\{ x \right."
    assert extract_boxed_answer(r"\boxed{a\}b}") == r"a\}b"


def test_a_box_of_exactly_max_boxed_chars_is_closed_one_more_is_not():
    """`MAX_BOXED_CHARS` is the longest content read as closed (the docstring: "longer than this
    is treated as not closed"); an earlier complete box is then the answer."""
    content = "1" * MAX_BOXED_CHARS
    assert extract_boxed_answer(r"\boxed{" + content + "}") == content
    assert extract_boxed_answer(r"\boxed{" + content + "2}") is None
    assert extract_boxed_answer(r"\boxed{5} and \boxed{" + content + "2}") == "5"


def test_at_most_max_boxed_tries_boxes_are_tried_over_all_three_commands():
    """The docstring's bound: from the last box backwards, `MAX_BOXED_TRIES` (8) occurrences of
    any of the commands are tried; eight empty ``\\fbox{}`` after the answer hide it, seven do not."""
    assert MAX_BOXED_TRIES == 8
    assert extract_boxed_answer(r"\boxed{3}" + r" \fbox{}" * 7) == "3"
    assert extract_boxed_answer(r"\boxed{3}" + r" \fbox{}" * 8) is None
    assert extract_boxed_answer(r"\boxed{3}" + r" \framebox{}" * 4 + r" \boxed{}" * 4) is None


def test_the_space_form_needs_a_space():
    """``\\boxed <token>`` is the space form; ``\\boxed`` followed at once by punctuation (a mention
    of the command) is no answer, so the earlier complete box is."""
    assert extract_boxed_answer(r"The sum is \boxed{7}; I wrote it in \boxed.") == "7"
    assert extract_boxed_answer(r"put it in \boxed.") is None
    assert extract_boxed_answer(r"\boxed 8.") == "8."


def test_the_space_form_stops_at_a_dollar_and_a_tab_may_precede_the_brace():
    """The docstring's rule: after the command, optional spaces (a tab is one) then a brace group;
    the space form's token runs to the next whitespace or ``$``."""
    assert extract_boxed_answer("so $\\boxed 8$.") == "8"
    assert extract_boxed_answer("so \\boxed\t{9}") == "9"


# ------------------------------------------------------------------------ option letters


@pytest.mark.parametrize(("text", "expected"), [
    ("**B**", "B"),          # rule 3: the completion stripped of whitespace and `*` is one letter
    ("  **(C).**  ", "C"),
    ("**B) 42**", "B"),
])
def test_a_bold_bare_letter_commits(text, expected):
    assert extract_choice_letter(text, 4) == expected


def test_a_listed_option_after_the_letter_commits_to_none():
    """Rule 3: ``B) 42`` commits to B, but a line listing several options, ``(A) x (B) y``,
    commits to none."""
    assert extract_choice_letter("(A) 12 (B) 13", 4) is None
    assert extract_choice_letter("A) 12 B) 13", 4) is None
    assert extract_choice_letter("A) 12 and 13", 4) == "A"


@pytest.mark.parametrize(("text", "expected"), [
    (r"\boxed{B: 42}", "B"),                       # rule 1: a letter then ":" and the option text
    (r"\boxed{\textbf{\text{(C)}}}", "C"),         # rule 1: wrappers peeled, nested too
    (r"\boxed{\textbf{\text{C}}}", "C"),           # (a bare letter in two wrappers)
    ("The answer is B. So \\boxed{42}", None),     # rule 1 applies (a box), its content no letter
    ("The correct answer is option C.", "C"),       # rule 2: "answer is option C"
    ("Answer - D", "D"),                            # rule 2: "Answer -"
    (r"\boxed{(B)\ 42}", "B"),                       # rule 1 with LaTeX's spaces (each was None)
    (r"\boxed{(B)~42}", "B"),
    (r"\boxed{C.\quad 42}", "C"),
    (r"\boxed{D:\,x = 2}", "D"),
    (r"\boxed{\text{(B) } 42}", "B"),                # the letter alone in a wrapper, then the text
    (r"\boxed{\textbf{A.} the cell}", "A"),
    (r"\boxed{\text{A} + 3}", None),                 # a letter with no ")", "." or ":" commits to none
    (r"\boxed{(B)\42}", None),                      # a command, not a space
    # the option text in a wrapper that opens with a space (each was None); a letter with no
    # ")", "." or ":" still commits to none, as "(B)" glued to its text does
    (r"\boxed{(B)\text{ 42}}", "B"),
    (r"\boxed{B.\textbf{ the cell}}", "B"),
    (r"\boxed{\text{(C)}\mathrm{~x = 2}}", "C"),
    (r"\boxed{A\text{ and }B}", None),
    (r"\boxed{(B)\text{42}}", None),
])
def test_the_box_and_phrase_rules_of_the_docstring(text, expected):
    assert extract_choice_letter(text, 4) == expected


@pytest.mark.parametrize(("text", "expected"), [
    (r"\boxed{(A) or (B)}", None),                  # each read A: a hedge rewarded as A
    (r"\boxed{A. and B.}", None),
    (r"\boxed{(A)\ \text{or}\ (C)}", None),
    (r"\boxed{\text{(A) and (D)}}", None),
    ("<answer>(B) or (C)</answer>", None),            # the answer tag is read as a box is
    (r"\boxed{(D) Both A and B}", "D"),              # letters inside the option text are kept
    (r"\boxed{(B) or a}", "B"),                      # lower case is no option letter
    (r"\boxed{(A) or (E)}", "A"),                    # E is no option of four
])
def test_a_box_with_several_letters_commits_to_none(text, expected):
    """Rule 1 ends as rule 2 does: "(A) or (B)" in a box commits to no letter (rule 2 gives
    "The answer is A or B." none); before, the box gave its first letter."""
    assert extract_choice_letter(text, 4) == expected


@pytest.mark.parametrize(("text", "expected"), [
    (r"\boxed{A) 3 B) 4}", None),                     # each read A: a listing rewarded as A
    (r"\boxed{(A) 3 (B) 4 (C) 5 (D) 6}", None),
    (r"\boxed{(A) 3 (C) 5}", None),
    (r"\boxed{\text{(A) 3} \text{(B) 4}}", None),
    (r"\boxed{(A)\ 3\quad (B)\ 4}", None),
    ("<answer>A) 3 B) 4</answer>", None),
    # earlier options an option's text names (MMLU-STEM's own option texts) are kept
    (r"\boxed{(C) (A) and (B) both in the same way.}", "C"),
    (r"\boxed{(B) Use the method in (A), but hotter}", "B"),
    (r"\boxed{(B) 4, that is (B)}", "B"),               # the same option named again
    # no marker: "B)" closing a parenthesis, "(B)" in a word or with no space after it, E of four
    (r"\boxed{A) P(A and B) = P(A) \cdot P(B)}", "A"),
    (r"\boxed{(A) f(B) = 2}", "A"),
    (r"\boxed{(A) the (B)-isomer}", "A"),
    (r"\boxed{(A) 3 (E) 5}", "A"),
])
def test_a_box_listing_options_in_order_commits_to_none(text, expected):
    """Rule 1: a box that lists options in order commits to none, as rule 3's bare ``A) 12 B)
    13`` does; before, the box gave its first letter."""
    assert extract_choice_letter(text, 4) == expected


@pytest.mark.parametrize(("text", "expected"), [
    # each read A (D for the reversed box): a listing of options rewarded as its first
    (r"\boxed{A. 3 B. 4}", None),                     # options marked "A.", "B."
    ("A. 3 B. 4", None),
    ("The answer is A. 3 B. 4", None),
    (r"\boxed{(A) 3\\(B) 4}", None),                # a LaTeX line break before the next option
    (r"(A) 3\\(B) 4", None),
    (r"\boxed{(A) 3 (B)4}", None),                    # "(B)" glued to its option text
    ("The answer is (A) 3 (B) 4.", None),             # a listing after "the answer is"
    ("The answer is (A) 3 (B) 4 (C) 5 (D) 6.", None),
    (r"\boxed{(D) 6 (C) 5 (B) 4 (A) 3}", None),       # every option, in reverse order
    # read none: an option rejected after "not" is no listed option
    (r"\boxed{(B) 4, not (C)}", "B"),
    # commitments kept: a clause ends at , ; ! ? or ". "; an option's text names earlier ones;
    # "E." is a marker only right after "D."; "A." at the end or "(B)-" is none
    ("The answer is (A). (B) is wrong.", "A"),
    ("The answer is (A) 3, because (B) is 4.", "A"),
    ("The answer is (A) and not (B).", "A"),
    ("The answer is (D) Both (A) and (B).", "D"),
    (r"\boxed{(B) 4 (A) 3}", "B"),                    # an earlier option named, not every option
    ("The answer is (B) Use the method in (A), but hotter.", "B"),
    ("The answer is C. 1500 A.", "C"),
    (r"\boxed{A. 3 C. 5}", "A"),
    ("The final answer is B.\n(C) is wrong.", "B"),
    ("The answer is (A) vitamin B. It is water-soluble.", "A"),  # "B." after "(A)": no marker
])
def test_other_listings_of_options_commit_to_none(text, expected):
    """Rules 1-3: options marked ``A.``, after a LaTeX line break, glued to their text, listed
    after "the answer is" (to the end of its clause) or in a box naming every option in any order
    commit to none (each read its first letter before); ``not (C)`` names no listed option."""
    assert extract_choice_letter(text, 4) == expected


@pytest.mark.parametrize(("text", "expected"), [
    # each read none (GRADING_RULES_VERSION 4): a reason or contrast that names later options
    ("The answer is (A) because (B) is too large.", "A"),
    ("The answer is (B) since (C) and (D) fail.", "B"),
    ("The answer is (A) rather than (B).", "A"),
    ("The answer is (A) as (B) gives 4.", "A"),
    ("The correct answer is (A) since it beats (B), (C) and (D).", "A"),
    ("The answer is (A) because (B) (C) (D) are all wrong.", "A"),
    ("The answer is (D) 6 because (C) 5 (B) 4 (A) 3 are too small.", "D"),  # every option named
    ("Answer: B) 4 because C) 5 is too big", "B"),
    ("The answer is A. Because B. is wrong", "A"),
    ("The answer is (B) \u2014 (C) fails.", "B"),     # a dash ends the clause
    ("The answer is (D): (A) (B) (C) fail.", "D"),     # so does a colon before a space
    # still listings: option text with no such word
    ("The answer is (A) 3 (B) 4 (C) 5 (D) 6.", None),
    ("The answer is (A) x (B) y.", None),
    ("The answer is (A) gas (B) liquid.", None),       # "as" inside a word opens no reason
    ("The answer is (A) 1 as well as (B) 2.", None),   # nor "as well as": it adds an option
    ("So the answer is (A) as opposed to (B).", "A"),
    ("The answer is (A) sodium (B) potassium.", None),  # nor "so" opening one
    ("The answer is (A) 3:4 (B) 4:3.", None),          # a colon before no space ends no clause
])
def test_a_reason_after_the_answer_lists_no_options(text, expected):
    """Rule 2: the clause of options listed after "the answer is" ends at a word that opens a
    reason or a contrast ("because", "since", "as", "than", ...), a dash or ": "; the options the
    reason names are no listing (the listing rule had read each of these as none)."""
    assert extract_choice_letter(text, 4) == expected


@pytest.mark.parametrize(("text", "expected"), [
    # a set or an expression named by letters is no option (each read its first letter)
    ("The answer is $C \\cup D$.", None),
    ("The answer is C \\cup D.", None),
    ("The answer is \\(A \\cap B\\).", None),
    ("The answer is A \u222a B.", None),
    ("The answer is $A \\times B$.", None),
    ("The answer is $A^T A$.", None),
    ("The answer is $B - A$.", None),
    # as before: a letter closed before the operator, a dash in plain text, another command
    ("The answer is $(C)$ - 42.", "C"),
    ("Answer: $\\textbf{(C)}\\ 42$", "C"),
    ("The answer is C - the third option.", "C"),
    ("The answer is $C$ ^2", "C"),
    ("The answer is C \\cupcake.", "C"),
])
def test_a_letter_in_a_formula_is_no_option(text, expected):
    """Rule 2: an operator right after the letter makes it a piece of a formula (MMLU's set
    questions: "$C \\cup D$" is no option C)."""
    assert extract_choice_letter(text, 4) == expected


@pytest.mark.parametrize(("text", "expected"), [
    # a relation names no option either, nor does a hedge in LaTeX (each read its first letter)
    ("The answer is $A \\subset B$.", None),
    ("The answer is A \u2282 B.", None),
    ("The answer is A \\to B.", None),
    ("The answer is $A = B$.", None),
    ("The answer is $B \\text{ or } C$.", None),
    ("The answer is B \\lor C.", None),
    # as before: an "=" in plain text, a command that only starts so, a letter closed before "="
    ("The answer is A = 5.", "A"),
    ("The answer is B \\lorem.", "B"),
    ("The answer is $C \\infty$.", "C"),
    ("The answer is $(C)$ = 42.", "C"),
])
def test_a_letter_in_a_relation_or_a_latex_hedge_is_no_option(text, expected):
    assert extract_choice_letter(text, 4) == expected


@pytest.mark.parametrize(("text", "expected"), [
    # a plain arrow that points to the option's text, and an operator on a later line, leave the
    # letter an answer (each read none under rules 10, the letter under rules 9)
    ("The answer is C \u2192 42.", "C"),
    ("Answer: B \u2192 correct", "B"),
    ("The answer is B\n\n\u2192 because 42 is the mass.", "B"),
    ("The answer is B\n\\in any case", "B"),
    ("The answer is D\n\n\u00d7 A: wrong sign", "D"),
    # a formula still commits to none: an arrow to a letter, an operator on the letter's line
    ("The answer is A \u2192 B.", None),
    ("The answer is A \u2192 b", None),
    ("The answer is A \t\\to B.", None),
    ("The answer is C \u00d7 D", None),
])
def test_a_letter_before_an_arrow_to_its_text_or_a_line_break_is_an_option(text, expected):
    assert extract_choice_letter(text, 4) == expected


@pytest.mark.parametrize(("text", "expected"), [
    # a rejected letter before the answer's: "not A but B" commits to B (read as none)
    ("The answer is not A but B.", "B"),
    ("The answer is not (A), it is (C).", "C"),
    ("The answer isn't A, it's C.", "C"),
    ("The answer isn\u2019t A, it\u2019s C.", "C"),
    ("The answer is not A; rather, D.", "D"),
    ("The answer is not **A** but **B**.", "B"),
    ("The answer is not $(A)$ but $(D)$.", "D"),
    # ... and what follows it is read as an answer is: a hedge, a listing
    ("The answer is not A but B or C.", None),
    ("The answer is not A but B) 42 C) 43", None),
    # as before: no answer after the rejected letter, a word, the answer first
    ("The answer is not A.", None),
    ("The answer is not a prime, but B.", None),
    ("The answer is B, not A.", "B"),
])
def test_a_rejected_letter_before_the_answer_is_dropped(text, expected):
    assert extract_choice_letter(text, 4) == expected


@pytest.mark.parametrize(("text", "expected"), [
    # each read none: the reason's option was taken for a listed one
    ("<answer>(B) since (C) fails</answer>", "B"),
    (r"\boxed{(B) because (C) is too large}", "B"),
    (r"\boxed{\text{(A) rather than (B)}}", "A"),
    ("<answer>B) because C) is too large</answer>", "B"),
    ("<answer>A. Because B. is wrong</answer>", "A"),
    ("<answer>(D) not (A)</answer>", "D"),
    # ... and options the reason names together, joined by "and", "or", a comma or "/" (read as
    # a listing of two options: no listed option's text is "and")
    (r"\boxed{(B) because (C) and (D) are too large}", "B"),
    ("<answer>(B) since (C), (D), or (E) fail</answer>", "B"),
    ("<answer>B) because C) and D) fail</answer>", "B"),
    (r"\boxed{(B) since (C) or (D) fails}", "B"),
    (r"\boxed{(A) because (B) & (C) fail}", "A"),
    # still listings: the reason marks two options or more (an echo of the options, its first
    # text opening with "not", "because" or "As"), a sentence after it lists, text before it
    (r"\boxed{(A) not anti-symmetric (B) transitive (C) reflexive (D) symmetric}", None),
    ("<answer>A. As B. P C. Sb D. B</answer>", None),
    ("<answer>(A) because x. (B) because y. (C) because z.</answer>", None),
    ("<answer>A. because x. B. 3 C. 4</answer>", None),  # "B." after A's text: a marker
    ("<answer>(B) since (C) fails. (C) 5 (D) 6</answer>", None),
    ("<answer>(B) 4 since (C) 5 fails</answer>", None),
    ("<answer>(A) or (B) since both fail</answer>", None),
    # two options marked apart in the reason read as a listing, as before (an echo of three
    # options whose first opens with "not" is not told from it)
    (r"\boxed{(B) because (C) is too large and (D) too small}", None),
    (r"\boxed{(A) because (B) (C) (D)}", None),
    (r"\boxed{(A) not x (B) and y (C) z}", None),  # B's text opens with "and": no joined options
])
def test_a_reason_right_after_a_boxed_or_tagged_option_lists_no_options(text, expected):
    """Rule 1: a reason right after the option's marker in a box or ``<answer>`` tag ends its
    clause as after rule 2's "the answer is", unless it marks two options or more (those it names
    together, "(C) and (D)", are one); the sentences
    after it may still list options. Five of options, so a box naming every option is no trigger."""
    assert extract_choice_letter(text, 5) == expected


def test_a_dotted_marker_follows_the_previous_option():
    """``E.`` after ``A.`` is the E of "E. coli" (ten options), not a listed option; after
    ``D.`` it is the next option."""
    assert extract_choice_letter("A. bacteria such as E. coli", 10) == "A"
    assert extract_choice_letter("The answer is A. bacteria such as E. coli", 10) == "A"
    assert extract_choice_letter(r"\boxed{D. 6 E. 7}", 10) is None


@pytest.mark.parametrize(("text", "expected"), [
    # the answer's "A." ends its sentence: a "B." right after it, or one "option" names, is no
    # listed option (read as none since the listing rule, A or B at 6d0e2c0 and again now)
    ("The answer is A. B. is wrong.", "A"),
    ("The answer is A. Option B. is wrong.", "A"),
    ("The answer is A. Choice B. fails.", "A"),
    ("Answer: A. B. subtilis is not involved.", "A"),
    ("The answer is B. C. elegans is a worm.", "B"),
    ("A. B. subtilis", "A"),
    # listings still: each option has a text
    ("A. 3 B. 4", None),
    ("The answer is A. 3 B. 4 C. 5 D. 6", None),
    (r"\boxed{A. 3 B. 4}", None),
])
def test_a_dotted_marker_needs_the_previous_options_text(text, expected):
    """A dotted ``B.`` counts as a listed option only after the previous option's text: "A. B.
    subtilis" and "A. Option B. is wrong" commit to A (each read as none after the listing rule
    came, a justified answer graded wrong); "A. 3 B. 4" lists options."""
    assert extract_choice_letter(text, 4) == expected


def test_twenty_six_options_reach_z_and_a_nul_is_replaced():
    """Valid letters are the first ``num_choices`` of A-Z (26 allowed); `sanitize_text` replaces
    NUL characters (U+FFFD)."""
    assert extract_choice_letter("The answer is Z.", 26) == "Z"
    assert sanitize_text("a\x00b") == "a\ufffdb"


def test_the_last_number_keeps_a_nonzero_decimal():
    """Only a trailing ``.0..`` is stripped: 7.5 stays 7.5, 7.00 becomes 7."""
    assert extract_last_number("so it is 7.5") == "7.5"
    assert extract_last_number("so it is 7.00") == "7"


# ------------------------------------------------------------------------ verdict status


def test_a_choice_or_number_without_an_answer_is_status_no_answer():
    """`Verdict.status` (counted per benchmark in results.json): ``no_answer`` when nothing was
    extracted, ``ok`` when an answer was extracted, right or wrong."""
    choice = Problem(prompt="q", answer="C", kind="choice", choices=["1", "2", "3", "4"])
    number = Problem(prompt="q", answer="12", kind="math")
    assert (grade_choice(choice, "I am not sure.").status, grade_choice(choice, "B").status,
            grade_choice(choice, "C").status) == ("no_answer", "ok", "ok")
    assert (grade_number(number, "no digits here").status, grade_number(number, "it is 11").status,
            grade_number(number, "it is 12").status) == ("no_answer", "ok", "ok")
    assert grade_choice(choice, "I am not sure.").extracted is None


@pytest.mark.parametrize(("gold", "completion", "correct"), [
    ("0", "it is 0.0005", False), ("0.001", "it is 0.0015", False), ("-0.002", "so -0.001", False),
    ("0.1", "it is 0.1000000000001", True),  # float noise (1e-12 relative) is no other number
    ("1234", "it is 1,234", True),
])
def test_the_last_number_rule_tells_small_numbers_apart(gold, completion, correct):
    """`grade_number` compares within 1e-9 relative; 0.0005 is not 0. Hand values."""
    assert grade_number(Problem(prompt="q", answer=gold, kind="math"), completion).correct is correct


@pytest.mark.parametrize(("gold", "completion", "correct"), [
    ("999999999", "so it is 1000000000", False), ("12345678901", "it is 12345678902", False),
    ("12345678901234567890", "it is 12345678901234567891", False),  # beyond 2**53: float() rounds both alike
    ("12345678901234567890", "it is 12,345,678,901,234,567,890", True), ("1000000000", "it is 1000000000.00", True),
    ("7", "it is 7.000000000001", True),  # an integer and a decimal: within 1e-9, as before
])
def test_the_last_number_rule_tells_big_integers_apart(gold, completion, correct):
    """Two integers are one number only when equal: within 1e-9 relative, 1000000000 was 999999999
    (--reward last_number paid an off-by-one sum of ten digits). Hand values."""
    assert grade_number(Problem(prompt="q", answer=gold, kind="number"), completion).correct is correct


@given(gold=st.integers(-10**30, 10**30), offset=st.integers(-3, 3),
       before=st.sampled_from(["", "so the answer is ", "Answer: ", "= ", "\n"]),
       after=st.sampled_from(["", ".", " apples.", "!", "\n"]), commas=st.booleans())
@example(gold=999999999, offset=1, before="", after="", commas=False)
def test_the_last_number_rule_grades_an_integer_right_exactly_when_it_is_the_gold(gold, offset, before, after,
                                                                                   commas):
    """Property: a completion whose last number is the integer ``gold + offset`` (plain or with
    thousands commas, any prose around it) is correct exactly when ``offset`` is 0."""
    answer = f"{gold + offset:,}" if commas else str(gold + offset)
    verdict = grade_number(Problem(prompt="q", answer=str(gold), kind="number"), f"{before}{answer}{after}")
    assert verdict.correct is (offset == 0)


# ------------------------------------------------------------------------ rewards and golds


def test_a_whitespace_only_answer_tag_earns_no_format_reward():
    """`format`: exactly one *non-empty* ``<answer>`` pair; blank content is empty."""
    problem = Problem(prompt="q", answer="7", kind="math")
    assert [format_reward(text, problem) for text in
            ("<answer> </answer>", "<answer>\n\t</answer>", "<answer> 7 </answer>")] == [0.0, 0.0, 1.0]


def test_format_weight_reweighs_a_format_reward_named_in_the_spec():
    """`build_reward`: ``format`` in the spec takes ``format_weight`` (not weight 1, not a second
    copy); totals are 1 x task + 0.5 x format."""
    reward = build_reward("last_number,format", "math", format_weight=0.5)
    assert (reward.names, reward.weights) == (["last_number", "format"], [1.0, 0.5])
    problem = Problem(prompt="q", answer="7", kind="math")
    totals, task = reward.score(["<answer>7</answer>", "<answer>3</answer>", "7"], [problem] * 3)
    assert (totals, task) == ([1.5, 0.5, 1.0], [1.0, 0.0, 1.0])


def test_the_gsm8k_gold_is_the_text_after_the_last_marker():
    assert gold_from_gsm8k("step #### not this\nso #### 1,234") == "1234"
    assert gold_from_gsm8k("#### $5") == "5"


@pytest.mark.parametrize(("raw", "expected"), [
    (27000.0, "27000"), ("1,234.0", "1234"), (10.0 ** 14, "100000000000000"), (-3.0, "-3"),
    (4.25, "4.25"), (1e20, "1e+20"),  # beyond 1e15 the repr is kept (no int rounding artefacts)
])
def test_integral_number_golds_lose_their_decimal_point(raw, expected):
    assert gold_from_number(raw) == expected


def test_a_huge_integer_gold_stays_exact_and_an_empty_list_item_is_dropped():
    """`gold_from_number` writes an int as it is (through float(), 10**400 raised OverflowError);
    `gold_from_list` drops an item that is empty once its ``$`` are gone (``"2, "`` was a gold),
    and a list of nothing but empty items is refused."""
    assert gold_from_number(10**400) == "1" + "0" * 400
    assert gold_from_list(["$2$", "$ $", ""]) == "2"
    with pytest.raises(ValueError, match="empty gold answer list"):
        gold_from_list(["$$", " "])


def test_two_dollar_formulas_are_not_one():
    """``"$a$, $b$"`` is two formulas: its outer ``$`` are not one pair of delimiters, so the gold
    stays as written; ``"$a, b$"`` is one formula and loses them."""
    assert normalize_gold("$1$, $2$", "latex") == "$1$, $2$"
    assert normalize_gold("$1, 2$", "latex") == "1, 2"


def test_an_empty_formula_is_an_empty_gold():
    """`_strip_math_delimiters`: ``$$`` and ``\\(\\)`` hold nothing, so the gold is empty (which
    the loaders refuse), not the delimiters themselves."""
    assert normalize_gold("$$", "latex") == ""
    assert normalize_gold("\\(\\)", "latex") == ""


def test_a_dollar_inside_a_solutions_box_is_a_space():
    """`gold_from_boxed_solution`: a ``$`` inside the box is a typesetting slip, read as a space."""
    assert gold_from_boxed_solution(r"so $s = \boxed{4.5 $\times$ 10^{33}}$") == r"4.5  \times  10^{33}"


@pytest.mark.parametrize(("raw", "expected"), [
    ("27.0", "27"), ("27.00", "27"), ("-3.000", "-3"), ("$+5.0$", "+5"), ("2.50", "2.50"), ("10", "10"),
])
def test_a_latex_gold_drops_any_run_of_trailing_zero_decimals(raw, expected):
    assert normalize_gold(raw, "latex") == expected


# ------------------------------------------------------------------------ the math check's bound


def test_a_math_check_is_cut_at_its_bound(monkeypatch):
    """A check still running ``timeout_seconds`` after it was sent is judged incorrect with status
    ``timeout`` at its bound, not at a multiple of it, and the restarted worker then checks as
    before. No wall clock: the verifier's clock is a counter that each reading moves by 1 ms, and
    the worker never answers (its select reports nothing and moves the clock by the wait)."""
    verifier = MathVerifier(num_workers=1)
    try:
        assert verifier.check("\\boxed{12}", "12", timeout_seconds=60.0).correct is True  # worker up
        clock = [0.0]

        def monotonic() -> float:
            clock[0] += 0.001
            return clock[0]

        def silent_select(readers: list, writers: list, errors: list, wait: float) -> tuple:
            clock[0] += wait
            return [], [], []

        monkeypatch.setattr(verify, "time", SimpleNamespace(monotonic=monotonic, sleep=time.sleep))
        monkeypatch.setattr(verify, "select", SimpleNamespace(select=silent_select))
        verdict = verifier.check("\\boxed{7}", "12", timeout_seconds=1.5)
        monkeypatch.undo()
        assert (verdict.correct, verdict.status) == (False, "timeout")
        assert 1.5 <= verdict.seconds < 1.51, verdict.seconds  # counter time: 1.5 s and a few readings
        assert verifier.restarts == 1
        assert verifier.check("\\boxed{12}", "12", timeout_seconds=60.0).correct is True
    finally:
        verifier.close()


@pytest.mark.parametrize(("completion", "expected"), [
    ("Reasoning ... <answer>B</answer>", "B"),
    ("<answer>(C)</answer>", "C"),
    ("<answer>B) 42</answer>", "B"),
    ("<answer>\\text{D}</answer>", "D"),
    ("<answer>A</answer> then <answer>C</answer>", "C"),  # the last pair
    ("<answer>A</answer> \\boxed{B}", "B"),  # a box wins
    ("<answer>E</answer>", None),  # not among 4 options
    ("<answer>the answer is D</answer>", "D"),  # no letter alone: rule 2 reads it
    ("<answer></answer> The answer is C.", "C"),
    ("<answer>B", None),  # unclosed
])
def test_a_choice_in_the_last_answer_tag_counts_when_nothing_is_boxed(completion, expected):
    """`<answer>B</answer>`, the answer the `format` reward asks for, committed to no option
    (`--reward choice,format` paid the tag and never the answer); with no box, the last complete
    pair is read as a box is, and a pair holding no letter so leaves the other rules to decide."""
    assert extract_choice_letter(completion, 4) == expected
    problem = Problem(prompt="q", answer="B", kind="choice", choices=["1", "2", "3", "4"])
    assert grade_choice(problem, completion).correct is (expected == "B")


@pytest.mark.parametrize("text", [
    "The answer is" + " " * 400 + "x",  # 36 s: four \s* shared the run (n^4)
    "The answer is" + " " * 20_000 + "x",
    "The answer is:" + " " * 20_000 + "x",
    "The answer is $" + " " * 20_000 + "x",
    "The answer is **" + " " * 20_000 + "x",
    "The answer is A" + " " * 20_000 + "x",
    "The answer is A or" + " " * 20_000 + "x",
    "The answer is not" + " " * 20_000 + "x",
    "The answer is not 5," + " " * 20_000 + "x",
    "\\boxed{A} not" + " " * 20_000 + "\\boxed{B}",
])
def test_a_run_of_spaces_after_an_answer_anchor_is_read_in_linear_time(text):
    """The choice letter and the math readings of a completion with a long run of spaces after "the
    answer is" take well under a second (each whitespace run is matched one way only)."""
    from ict.answers.readings import completion_readings

    start = time.perf_counter()
    extract_choice_letter(text, 4)
    completion_readings(text)
    assert time.perf_counter() - start < 2.0
