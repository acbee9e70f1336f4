"""MCQ parsing: the ways real VLMs break the requested layout."""

from __future__ import annotations

import pytest

from tests.support.paths import FIXTURES
from vlrl.methods.caprl.mcq import MCQError, normalize_mcq, parse_letter, present, seeded_rng
from vlrl.methods.caprl.mcq_parse import parse_mcqs

GOOD = """Question 1: What colour is the car?
A. Red
B. Blue
C. Green
D. Black
Answer: B

Question 2: How many people are visible?
A. One
B. Two
C. Three
D. Four
Answer: D"""


def reasons(text):
    return [d["reason"] for d in parse_mcqs(text).dropped]


def test_well_formed():
    r = parse_mcqs(GOOD)
    assert [q.question for q in r.questions] == ["What colour is the car?", "How many people are visible?"]
    assert r.questions[0].options == ["Red", "Blue", "Green", "Black"] and r.questions[0].answer_letter == "B"
    assert r.questions[1].answer_text == "Four" and not r.dropped


def test_chatter_markdown_numbering_and_explanations():
    text = """Sure! Here are the questions you asked for.

**1. What is written on the sign?**
(A) STOP
(B) YIELD
(C) EXIT
**Answer:** (A)
Explanation: the sign is red and octagonal.

2) Which animal is on the left?
A) cat
B) dog
C) horse
D) cow
Correct answer: B) dog

I hope these help!"""
    r = parse_mcqs(text)
    assert [q.answer_text for q in r.questions] == ["STOP", "dog"]
    assert r.questions[0].question == "What is written on the sign?"
    assert r.dropped == []


def test_missing_answer_line():
    text = GOOD.replace("Answer: B\n", "")
    r = parse_mcqs(text)
    assert [q.question for q in r.questions] == ["How many people are visible?"]
    assert reasons(text) == ["missing_answer"]


def test_answer_letter_not_among_options():
    text = "Question 1: Colour of the sky?\nA. blue\nB. green\nC. red\nAnswer: E"
    assert parse_mcqs(text).questions == []
    assert reasons(text) == ["answer_not_in_options"]
    assert reasons("Question 1: Sky?\nA. blue\nB. green\nC. red\nAnswer: purple") == ["answer_not_in_options"]


def test_duplicate_options_and_letters():
    assert reasons("Question 1: Sky?\nA. blue\nB. Blue\nC. red\nAnswer: A") == ["duplicate_options"]
    assert reasons("Question 1: Sky?\nA. blue\nA. green\nC. red\nAnswer: A") == ["duplicate_option_letters"]


def test_fewer_than_three_options():
    assert reasons("Question 1: Is it day?\nA. yes\nB. no\nAnswer: A") == ["too_few_options"]
    assert reasons("Question 1: Is it day?\nAnswer: yes") == ["too_few_options"]


def test_answer_given_as_text_and_inline_options():
    r = parse_mcqs("Question 1: Colour?\nA. red B. blue C. green D. pink\nAnswer: green")
    assert r.questions[0].options == ["red", "blue", "green", "pink"] and r.questions[0].answer_letter == "C"


def test_unlabelled_question_and_multiline_question():
    r = parse_mcqs("What is the man holding\nin his right hand?\nA. a cup\nB. a phone\nC. a book\nAnswer: B")
    assert r.questions[0].question == "What is the man holding in his right hand?"
    assert r.questions[0].answer_text == "a phone"


def test_question_label_without_text():
    assert reasons("Question 1:\nA. a\nB. b\nC. c\nAnswer: A") == ["no_question"]


def test_json_output_repaired():
    text = '```json\n[{"question": "Colour?", "options": ["red", "blue", "green"], "answer": "B"},\n' \
           ' {"question": "Count?", "options": ["1", "2"], "answer": "A"},\n' \
           ' {"question": "Shape?", "options": ["A. star", "B. moon", "C. sun"], "answer": "D"}\n```'
    r = parse_mcqs(text)
    assert [q.answer_text for q in r.questions] == ["blue"]
    assert sorted(d["reason"] for d in r.dropped) == ["answer_not_in_options", "too_few_options"]
    broken = '[{"question": "Colour?", "options": ["red", "blue", "green"], "answer": "C"'
    assert [q.answer_text for q in parse_mcqs(broken).questions] == ["green"]


@pytest.mark.parametrize("junk", ["", "   ", "I cannot see the image.", "A. B. C.", "Answer: A", "\x00\x01", "[1, 2"])
def test_junk_never_raises(junk):
    r = parse_mcqs(junk)
    assert r.questions == []


def test_normalize_shapes_and_errors():
    assert normalize_mcq({"question": "q", "options": ["A. x", "B. y"], "answer": "B. y"}).answer_index == 1
    assert normalize_mcq({"question": "q", "options": ["x", "y"], "answer": 0}).answer_index == 0
    assert normalize_mcq('{"question": "q", "choices": ["x", "y"], "answer": "y"}').answer_index == 1
    with pytest.raises(MCQError, match="answer letter C"):
        normalize_mcq({"question": "q", "options": ["x", "y"], "answer": "C"})
    with pytest.raises(MCQError, match="missing question"):
        normalize_mcq({"options": ["x", "y"], "answer": "A"})


def test_present_and_parse_letter():
    m = normalize_mcq({"question": "q", "options": ["x", "y", "z"], "answer": "C"})
    p = present(m, seeded_rng(1), "None of the above")
    assert p.options[-1] == "None of the above" and p.options[int("ABCD".index(p.gold))] == "z"
    assert parse_letter(" B.", "ABCD") == "B"
    assert parse_letter("The answer is (C)", "ABCD") == "C"
    assert parse_letter("I think D", "ABCD") == "D"
    assert parse_letter("Blue", "ABCD") == "B"  # first valid capital, as the public code
    assert parse_letter("no idea", "ABCD") is None


# -- adversarial corpus of layouts (tests/fixtures/mcq_layouts.json) ---------------------------------


def _layouts():
    """The layouts corpus, and Chinese / full-width punctuation layouts and several questions with
    options on the question line (written before the parser read them), and answer lines whose
    letter is followed by Chinese punctuation ("答案：B。", "答案：B、蓝色")."""
    import json

    return [c for name in ("mcq_layouts.json", "mcq_layouts_cjk_inline.json", "mcq_layouts_answer_punct.json")
            for c in json.loads((FIXTURES / name).read_text(encoding="utf-8"))]


@pytest.mark.parametrize("case", _layouts(), ids=lambda c: c["name"])
def test_layout_corpus(case):
    r = parse_mcqs(case["text"])
    assert [{"question": q.question, "options": list(q.options), "answer": q.answer_letter} for q in r.questions] == case["questions"]
    assert [d["reason"] for d in r.dropped] == case["dropped"]


def test_abstain_text_is_never_read_as_a_letter():
    letters = "ABCDE"
    for text in (" Cannot answer based on the caption", "cannot be determined", "None of the above.",
                 "Not mentioned in the description", "Can't tell"):
        assert parse_letter(text, letters) is None
        assert parse_letter(text, letters, abstain="E") == "E"
    assert parse_letter(" C) Cannot answer", letters, abstain="E") == "C"  # a named letter still wins
    # the public code's rule, for reproducing its numbers: the first capital A-I anywhere
    assert parse_letter("Answer: C", letters, rule="first_capital") == "A"
    assert parse_letter("Answer: C", letters) == "C"


def test_no_second_abstain_option_and_abstain_gold_rejected():
    mcq = normalize_mcq({"question": "Brand?", "options": ["Nike", "Adidas", "Cannot be determined"], "answer": "A"})
    pres = present(mcq, seeded_rng(1))
    assert len(pres.options) == 3 and pres.options[ord(pres.abstain) - 65] == "Cannot be determined"
    with pytest.raises(MCQError, match="abstain"):
        normalize_mcq({"question": "Price?", "options": ["$1", "$2", "None of the above"], "answer": "C"})
