"""Prompt rendering (`ict.core.problems`): the templates are filled literally, and the options of a
multiple-choice problem are written ``A) text`` one a line, the same in training and evaluation."""

from __future__ import annotations

from ict.core.problems import (
    CHOICE_TEMPLATE,
    MATH_TEMPLATE,
    choice_prompt,
    render_options,
    render_template,
)

INSTRUCTION = ("Answer with the letter of the correct option. Please reason step by step, and put the letter "
               "of your final answer within \\boxed{}.")


def test_a_choice_prompt_by_hand():
    prompt = choice_prompt("  Which is prime?\n", [" 4 ", "5\n", "\\frac{1}{2}"])
    assert prompt == f"Which is prime?\n\nA) 4\nB) 5\nC) \\frac{{1}}{{2}}\n\n{INSTRUCTION}"


def test_placeholders_inside_the_question_or_an_option_are_kept_as_written():
    """The options were filled in first and the question second, so an option holding the text
    ``{question}`` (code, a template question) had the whole question pasted into it."""
    prompt = choice_prompt("What does f({options}) print?", ["{question}", "x = {options}"])
    assert prompt == f"What does f({{options}}) print?\n\nA) {{question}}\nB) x = {{options}}\n\n{INSTRUCTION}"
    assert render_template(MATH_TEMPLATE, "Is {question} a set?") == (
        "Is {question} a set?\nPlease reason step by step, and put your final answer within \\boxed{}.")
    assert render_template("{options}|{question}|{options}", "q", "o") == "o|q|o"
    assert render_template(CHOICE_TEMPLATE, "q") == f"q\n\n\n\n{INSTRUCTION}"


def test_options_are_lettered_in_order():
    letters = render_options([str(index) for index in range(26)]).splitlines()
    assert letters[0] == "A) 0" and letters[1] == "B) 1" and letters[25] == "Z) 25"
