"""``vlrl bench reward`` on rows and settings of the user's choosing (``--qa``, ``--set``): the
captions and prompt a trained answerer reads, so the spread and the exact/sample gap mean
something. A reader whose choice follows the caption (a one-hot distribution in exact mode, the
same letter when sampled) must give both modes the same per-caption means, a letter mass of 1,
and the captions' own accuracies."""

from __future__ import annotations

import re

import pytest

from tests.support.scripted import Scripted
from vlrl.core.backends import ChoiceResult

ROWS = [{"caption": "A red circle.", "questions": [
            {"question": "What colour is the shape?", "options": ["red", "blue"], "answer": "red"},
            {"question": "What shape is it?", "options": ["circle", "square"], "answer": "circle"}]},
        {"caption": "A shape.", "questions": [
            {"question": "What colour is the shape?", "options": ["red", "blue"], "answer": "blue"}]}]


def _pick(text: str) -> tuple[str, list[str]]:
    caption = re.search(r"<description>\n(.*?)\n</description>", text, re.S).group(1).lower()
    opts = re.findall(r"^([A-Z])\. (.*)$", text, re.M)
    named = [letter for letter, o in opts if re.search(rf"\b{re.escape(o.lower())}\b", caption)]
    abstain = [letter for letter, o in opts if o.lower().startswith("cannot answer")]
    return (named or abstain)[0], [letter for letter, _ in opts]


def _reader() -> Scripted:
    def answer(r):
        return f" {_pick(r.messages[0]['content'])[0]}."

    def choose(r):
        letter, letters = _pick(r.messages[0]["content"])
        return ChoiceResult(probs={f" {x}": float(x == letter) for x in letters}, method="logits", mass=1.0)

    return Scripted("reader", answer=answer, choose=choose)


def test_rows_and_settings_replace_the_synthetic_captions():
    from vlrl.bench.reward import bench_reward

    reader = _reader()
    res = bench_reward(reader, n_captions=5, repeats=2, questions_per_caption=2, rounds=1, rounds_list=(1,),
                       rows=ROWS, settings={"prompt": "caprl_answer"})
    assert res["settings"]["captions"] == 2 and res["settings"]["caption_source"] == "rows"
    assert res["settings"]["reward_settings"] == {"prompt": "caprl_answer"}
    assert any("<description>\nA shape.\n</description>" in r.messages[0]["content"] for r in reader.requests)
    gap = res["by_rounds"]["rounds_1"]["exact_vs_sample"]
    assert gap["mean_letter_mass"] == 1.0 and gap["mean_gap"] == 0.0
    by_caption = {(r["exact"], r["sample"]) for r in gap["per_caption"]}
    assert by_caption == {(1.0, 1.0), (0.0, 0.0)}  # the first caption states both facts, the second none


def test_rows_without_a_caption_or_questions_are_refused():
    from vlrl.bench.reward import bench_reward

    with pytest.raises(ValueError, match="need a 'caption' and 'questions'"):
        bench_reward(_reader(), n_captions=2, repeats=1, rounds=1, rounds_list=(1,), rows=[{"caption": "x"}])
