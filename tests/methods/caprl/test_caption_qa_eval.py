"""Caption-QA evaluation (every question, every option rotation, argmax verdict, three outcomes).

The judges are Python reply functions plugged in through the ``py:`` backend spec: a *reader* that
picks the option its caption names (else "cannot answer"), and a *position-biased* judge that
always says A. Expected rates follow from the captions by construction.
"""

from __future__ import annotations

import random
import re

import pytest

from vlrl.methods.caprl.evaluate import caption_qa_eval, rotations
from vlrl.methods.caprl.mcq import normalize_mcq

HERE = __name__


def _parse(messages):
    text = messages[0]["content"]
    caption = re.search(r"<description>\n(.*?)\n</description>", text, re.S).group(1)
    options = dict(re.findall(r"^([A-Z])\. (.+)$", text, re.M))
    return caption, options


def reader():
    def reply(messages, sampling):
        caption, options = _parse(messages)
        named = [L for L, o in options.items() if o in caption.split()]
        cannot = next(L for L, o in options.items() if o.startswith("Cannot answer"))
        if "broken" in caption:
            raise RuntimeError("judge down")
        return f" {named[0] if len(named) == 1 else cannot}"

    return reply


def always_a():
    return lambda messages, sampling: " A"


COLOURS = ["red", "blue", "green", "yellow"]


def _world(n=40, seed=0):
    """Captions that state the truth, a falsehood, or nothing, with known counts of each."""
    rng = random.Random(seed)
    caps, qss, truth = [], [], {"right": 0, "wrong": 0, "omitted": 0}
    for _ in range(n):
        gold = rng.choice(COLOURS)
        other = rng.choice([c for c in COLOURS if c != gold])
        fate = rng.choice(["right", "wrong", "omitted"])
        caps.append({"right": f"a {gold} ball", "wrong": f"a {other} ball", "omitted": "a ball"}[fate])
        opts = [gold, other]
        rng.shuffle(opts)
        qss.append([{"question": "what colour is the ball?", "options": opts, "answer": gold}])
        truth[fate] += 1
    return caps, qss, truth


def test_rates_follow_what_the_captions_state():
    caps, qss, truth = _world()
    res = caption_qa_eval(f"py:{HERE}:reader", caps, qss)
    n = len(caps)
    assert res.asks == 2 * n and res.errors == 0  # two options: both orders
    assert res.acc == pytest.approx(truth["right"] / n)
    assert res.hallucination_rate == pytest.approx(truth["wrong"] / n)
    assert res.cannot_answer_rate == pytest.approx(truth["omitted"] / n)
    assert res.per_caption == [1.0 if c.split()[1] == q[0]["answer"] else 0.0 for c, q in zip(caps, qss, strict=True)]


def test_rotations_cancel_a_position_bias():
    caps, qss, _ = _world(seed=3)
    res = caption_qa_eval(f"py:{HERE}:always_a", caps, qss)
    # A is the gold option in exactly one of the two rotations of every question
    assert res.acc == pytest.approx(0.5) and res.hallucination_rate == pytest.approx(0.5)
    three = [[{"question": "q?", "options": ["x", "y", "z"], "answer": "y"}]]
    assert caption_qa_eval(f"py:{HERE}:always_a", ["cap"], three).acc == pytest.approx(1 / 3)


def test_rotations_keep_the_answer():
    mcq = normalize_mcq({"question": "q?", "options": ["a", "b", "c"], "answer": "c"})
    rots = rotations(mcq)
    assert [r.options[0] for r in rots] == ["a", "b", "c"]
    assert all(r.answer_text == "c" for r in rots)
    assert sorted(r.answer_index for r in rots) == [0, 1, 2]


def test_failed_and_unusable_questions_are_counted_not_crashing():
    caps = ["a red ball", "a broken ball", "a blue ball"]
    qss = [[{"question": "what colour?", "options": ["red", "blue"], "answer": "red"}],
           [{"question": "what colour?", "options": ["red", "blue"], "answer": "red"}],
           [{"question": "what colour?", "options": ["red", "red"], "answer": "red"}]]  # duplicate options
    res = caption_qa_eval(f"py:{HERE}:reader", caps, qss)
    assert res.errors == 2 and res.asks == 4
    assert res.per_caption[0] == 1.0 and res.per_caption[1] == 0.0 and res.per_caption[2] is None
    assert res.acc == pytest.approx(0.5)
    with pytest.raises(ValueError, match="captions but"):
        caption_qa_eval(f"py:{HERE}:reader", caps, qss[:2])
