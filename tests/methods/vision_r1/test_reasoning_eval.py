"""Reasoning evaluation: HFRRF's answer extraction, format failures, lengths, one attempt per item."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from PIL import Image

from tests.support.scripted import Scripted
from vlrl.core.backends.base import ChatResult
from vlrl.methods.vision_r1.evaluate import evaluate_reasoning, score_output


def answering(answers) -> Scripted:
    """A model that answers each request id with its (text, finish reason) from ``answers``."""

    def answer(r):
        text, finish = answers[r.id]
        return ChatResult(texts=[text], finish_reasons=[finish], completion_tokens=len(text))

    return Scripted("scripted", answer)

def test_score_output_matches_hfrrf_rules():
    ok = score_output("<think>2+2</think><answer>4</answer>", "4")
    assert ok == {"format_ok": True, "pred": "4", "correct": True, "correct_strict_format": True, "truncated": False}
    boxed = score_output("so it is \\boxed{4}", "4")
    assert boxed["format_ok"] is False and boxed["correct"] is True and boxed["correct_strict_format"] is False
    mc = score_output("<think>x</think><answer>(B) Jupiter</answer>", "B", ["Mars", "Jupiter"])
    assert mc["correct"] and mc["format_ok"]
    cut = score_output("<think>2+2</think><answer>4</answer>", "4", truncated=True)
    assert cut["format_ok"] is False
    assert score_output("<think>thinking forever", "4")["pred"] is None


ANSWERS = {
    "a": ("<think>2+2</think><answer>4</answer>", "stop"),  # correct, formatted
    "b": ("<think>hmm</think><answer>5</answer>", "stop"),  # wrong, formatted
    "c": ("The answer is 4.", "stop"),  # right answer, format failure
    "d": ("<think>long long", "length"),  # truncated
    "e": ("<think>B is square</think><answer>B</answer>", "stop"),  # multiple choice
}


def _bench(tmp_path: Path) -> Path:
    Image.new("RGB", (16, 16), "green").save(tmp_path / "x.png")
    rows = [{"id": k, "image": "x.png", "question": f"Question {k}?", "answer": "4", "task": "arith" if k < "c" else "other"}
            for k in "abcd"]
    rows.append({"id": "e", "image": "x.png", "question": "Which?", "answer": "B", "choices": ["circle", "square"], "task": "mc"})
    rows.append({"id": "f", "image": "missing.png", "question": "?", "answer": "1"})
    p = tmp_path / "bench.jsonl"
    p.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return p


def test_evaluate_reasoning_metrics_and_single_attempt(tmp_path):
    bench = _bench(tmp_path)
    model = answering(ANSWERS)
    m = evaluate_reasoning(model, str(bench), tmp_path / "out", max_tokens=64)
    assert m["n"] == 5 and m["quarantined"] == 1
    assert m["accuracy"] == pytest.approx(3 / 5)  # a, c (lenient extraction), e
    assert m["accuracy_strict_format"] == pytest.approx(2 / 5)
    assert m["format_failure_rate"] == pytest.approx(2 / 5)  # c and the truncated d
    assert m["truncation_rate"] == pytest.approx(1 / 5)
    assert m["accuracy_when_formatted"] == pytest.approx(2 / 3)
    assert m["completion_tokens"]["max"] == max(len(t) for t, _ in ANSWERS.values())
    assert m["by_group"]["arith"] == {"n": 2, "accuracy": 0.5, "format_failure_rate": 0.0}
    # exactly one request per readable item: no retry until well-formed
    assert sorted(r.id for r in model.requests) == list("abcde")
    # the prompt carries the options and the format instruction, with the image
    req_e = next(r for r in model.requests if r.id == "e")
    text = req_e.messages[0]["content"][1]["text"]
    assert "A. circle" in text and "B. square" in text and "<answer>" in text
    assert req_e.messages[0]["content"][0]["type"] == "image"
    # resumable: a rerun asks nothing and gives the same numbers
    again = answering(ANSWERS)
    assert evaluate_reasoning(again, str(bench), tmp_path / "out", max_tokens=64) == m
    assert again.requests == []
    preds = [json.loads(x) for x in (tmp_path / "out" / "predictions.jsonl").read_text().splitlines()]
    assert {p["id"] for p in preds} == set("abcde")


@pytest.mark.slow
def test_eval_reasoning_cli_with_tiny_vlm(tmp_path):
    from typer.testing import CliRunner

    from vlrl.cli import app

    res = CliRunner().invoke(app, ["eval", "reasoning", "--model", "hf:tiny:qwen2_5_vl", "--bench", "builtin:tiny_math:3",
                                   "--out", str(tmp_path / "ev"), "--max-tokens", "8"])
    assert res.exit_code == 0, res.output
    m = json.loads((tmp_path / "ev" / "metrics.json").read_text())
    assert m["n"] == 3 and 0.0 <= m["accuracy"] <= 1.0
    assert m["format_failure_rate"] == 1.0  # random weights never produce the format
    assert m["truncation_rate"] > 0
