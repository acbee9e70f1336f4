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


def test_pass_at_k_is_the_unbiased_estimate():
    import math

    from vlrl.methods.vision_r1.evaluate import pass_at_k

    assert pass_at_k(8, 0, 8) == 0.0 and pass_at_k(8, 8, 1) == 1.0 and pass_at_k(8, 1, 1) == 0.125
    assert pass_at_k(8, 1, 4) == 0.5 and pass_at_k(8, 4, 4) == 1 - 1 / math.comb(8, 4)
    # the estimate's mean over draws of c from n samples of a problem solved with p is 1 - (1-p)^k
    p, n, k = 0.3, 8, 4
    expected = sum(math.comb(n, c) * p**c * (1 - p) ** (n - c) * pass_at_k(n, c, k) for c in range(n + 1))
    assert expected == pytest.approx(1 - (1 - p) ** k)
    with pytest.raises(ValueError):
        pass_at_k(2, 1, 4)


def test_eval_reasoning_reports_pass_at_k_beside_greedy_accuracy(tmp_path):
    """A policy that solves a problem on some samples only: greedy accuracy says 0 or 1, pass@k
    says how often a rollout finds the answer (what GRPO can reinforce)."""
    import json as _json

    from tests.support.fake_openai import FakeOpenAI
    from tests.support.long_commands import reasoning, run

    def reply(body):  # right on even seeds; the greedy request (seed 0) too
        seed = body.get("seed") or 0
        return "<think>2+3</think><answer>5</answer>" if seed % 2 == 0 else "<think>hm</think><answer>6</answer>"

    with FakeOpenAI(reply=reply) as srv:
        res = run([*reasoning(tmp_path, srv.spec(max_retries="2", backoff="0.01")), "--samples", "8",
                   "--sample-temperature", "1.0"])
    assert res.returncode == 0, res.stderr[-2000:]
    m = _json.loads((tmp_path / "out" / "metrics.json").read_text())
    assert m["accuracy"] == 1.0 and m["samples"] == 8
    assert m["pass_at_k"]["pass@1"] == pytest.approx(0.5) and m["pass_at_k"]["pass@8"] == 1.0
    assert m["pass_at_k"]["pass@4"] == pytest.approx(1 - 1 / 70)
    # greedy is right on every problem, and half the samples are
    assert m["sampled_right_share"] == {"where_greedy_right": pytest.approx(0.5), "problems_where_greedy_right": m["n"],
                                        "where_greedy_wrong": None, "problems_where_greedy_wrong": 0}


def test_sampled_right_share_splits_the_problems_by_the_greedy_answer():
    """pass@8 is 1 for a problem with one right sample in 8 and for one with 8; what sharpening does to
    the greedy answer depends on which (a near-tie can flip, a minority is sharpened away)."""
    from vlrl.methods.vision_r1.evaluate import summarize

    def row(correct, right):
        return {"format_ok": True, "correct": correct, "correct_strict_format": correct, "pred": "x", "truncated": False,
                "completion_tokens": 5, "output": "x", "samples": 8, "samples_correct": right}

    m = summarize([row(True, 6), row(True, 8), row(False, 2), row(False, 0), row(False, 1)])
    share = m["sampled_right_share"]
    assert share["where_greedy_right"] == pytest.approx(14 / 16) and share["problems_where_greedy_right"] == 2
    assert share["where_greedy_wrong"] == pytest.approx(3 / 24) and share["problems_where_greedy_wrong"] == 3
    assert m["pass_at_k"]["pass@8"] == pytest.approx(4 / 5)
