"""The README's exit-code table holds for every long command, at 0%, partial and 100% backend
failure: 0 done, 3 finished with some records failed in the backend, 1 nothing succeeded.

Each command runs for real against one OpenAI-compatible server that answers its prompts
(:func:`tests.support.long_commands.answer`) and fails, at the response level, every request about
the green image (partial) or every request (100%). ``pipelines/*.sh`` stop on a non-zero code,
so a command that exits 0 with records missing lets the next stage run on a silently smaller set.
"""

from __future__ import annotations

import json

import pytest

from tests.support.fake_openai import FakeOpenAI
from tests.support.long_commands import COMMANDS, answer, fails_all, fails_on, run

LEVELS = {"none": None, "partial": fails_on("green"), "all": fails_all}
EXPECTED = {"none": 0, "partial": 3, "all": 1}


def _run(tmp_path, command, fault, *extra):
    with FakeOpenAI(reply=answer) as srv:
        srv.fail = fault
        # retries absorb the fake server's own dropped connections; injected faults fail every attempt
        argv = COMMANDS[command](tmp_path, srv.spec(max_retries="2", backoff="0.01"))
        return run([*argv, *extra])


@pytest.mark.parametrize("level", sorted(LEVELS))
@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_exit_code_follows_backend_failures(tmp_path, command, level):
    strict = ["--strict"] if command in ("reward-score", "reward-guard") else []  # per-row honest; --strict makes failures count
    res = _run(tmp_path, command, LEVELS[level], *strict)
    assert res.returncode == EXPECTED[level], f"{command} at {level} failure: exit {res.returncode}\n{res.stderr[-3000:]}"


def test_reward_score_without_strict_exits_zero_on_some_failures(tmp_path):
    res = _run(tmp_path, "reward-score", LEVELS["partial"])
    assert res.returncode == 0, res.stderr[-2000:]
    summary = json.loads(res.stdout[res.stdout.index("{"):])
    assert summary["backend_failed"] == 1 and summary["none"] == 1 and summary["scored"] == 4


def test_caption_qa_never_scores_a_smaller_question_set_and_a_healthy_rerun_repairs(tmp_path):
    with FakeOpenAI(reply=answer) as srv:
        argv = COMMANDS["caption-qa"](tmp_path, srv.spec(max_retries="2", backoff="0.01"))
        srv.fail = LEVELS["partial"]
        res = run(argv)
        assert res.returncode == 3
        results = json.loads((tmp_path / "out" / "results.json").read_text())
        cell = results["captioners"]["caps"]["50"]
        assert cell["scored"] == 3 and cell["unscored"] == 1 and cell["failed"] == 1
        assert not any('"img1"' in line for line in (tmp_path / "out" / "scores.jsonl").read_text().splitlines())
        srv.fail = None  # the answerer is healthy again: the same command scores the failed units
        res = run(argv)
        assert res.returncode == 0, res.stderr[-2000:]
        fresh = run(COMMANDS["caption-qa"](tmp_path / "fresh", srv.spec(max_retries="2", backoff="0.01")))
        assert fresh.returncode == 0, fresh.stderr[-2000:]
    cell = json.loads((tmp_path / "out" / "results.json").read_text())["captioners"]["caps"]
    healthy = json.loads((tmp_path / "fresh" / "out" / "results.json").read_text())["captioners"]["caps"]
    assert cell["50"]["scored"] == 4 and cell["50"]["unscored"] == 0
    assert cell == healthy  # the repaired numbers are the healthy run's, not the degraded ones


def test_eval_reasoning_leaves_failed_items_unscored_and_a_healthy_rerun_scores_them(tmp_path):
    with FakeOpenAI(reply=answer) as srv:
        argv = COMMANDS["reasoning"](tmp_path, srv.spec(max_retries="2", backoff="0.01"))
        srv.fail = LEVELS["partial"]
        res = run(argv)
        assert res.returncode == 3, res.stderr[-2000:]
        metrics = json.loads((tmp_path / "out" / "metrics.json").read_text())
        assert metrics["n"] == 3 and metrics["unscored"] == 1  # accuracy is over 3, and says so
        assert "q1" not in {json.loads(line)["id"] for line in (tmp_path / "out" / "predictions.jsonl").open()}
        srv.fail = None
        res = run(argv)
        assert res.returncode == 0, res.stderr[-2000:]
    metrics = json.loads((tmp_path / "out" / "metrics.json").read_text())
    assert metrics["n"] == 4 and metrics["unscored"] == 0
