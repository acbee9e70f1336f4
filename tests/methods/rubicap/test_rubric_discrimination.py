"""``vlrl reward smoke --reward rubicap_rubric``: rubrics must fail the student and pass the teachers."""

from __future__ import annotations

import json
import re

from typer.testing import CliRunner

from tests.support.scripted import Scripted
from vlrl.methods.rubicap.discrimination import rubric_discrimination


def _rubrics_file(tmp_path, n=8):
    rows = []
    for i in range(n):
        rows.append({
            "image_id": f"img{i}",
            "image": None,
            "student_caption": "A truck near a dog.",
            "teacher_captions": {"t1": "A red bus by a STOP sign.", "t2": "A red bus and a STOP sign in the rain.",
                                 "t3": "A red bus at a STOP sign."},
            "rubrics": [
                {"id": "r1", "criterion": "mentions the bus", "pass_rule": "Pass if a bus is named.", "severity": "critical",
                 "weight": 3.0},
                {"id": "r2", "criterion": "mentions the STOP sign", "pass_rule": "Pass if STOP is named.",
                 "severity": "important", "weight": 2.0},
                {"id": "r3", "criterion": "mentions the dog", "pass_rule": "Pass if a dog is named.", "severity": "important",
                 "weight": -2.0},
                {"id": "r4", "criterion": "mentions the sky", "pass_rule": "Pass if the sky is named.", "severity": "minor",
                 "weight": 1.0},
                {"id": "r5", "criterion": "mentions the moon", "pass_rule": "Pass if the moon is named.",
                 "severity": "minor", "weight": -1.0, "kind": "regression"},
            ],
        })
    path = tmp_path / "rubrics.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def keyword_judge(req):
    prompt = req.messages[0]["content"]
    caption = json.loads(re.search(r"<(caption-[0-9a-f]+)>\n(.*?)\n</\1>", prompt, re.S).group(2)).lower()
    items = re.findall(r'^- id "([^"]+)": mentions the (\w+)', prompt, re.M)
    return json.dumps({"verdicts": [{"id": i, "pass": word.lower() in caption} for i, word in items]})


def test_discriminating_rubrics_pass_and_a_useless_one_is_flagged(tmp_path):
    path = _rubrics_file(tmp_path)
    s = rubric_discrimination(path, Scripted("judge", keyword_judge), out=tmp_path / "smoke.json", drop=True)
    assert s["passed"] and s["rubrics"] == 32 and s["judge_failures"] == 0 and s["regression_rubrics"] == 8
    flagged = {e["rubric"] for e in s["per_rubric"] if not e["discriminates"]}
    assert flagged == {"r4"}  # nobody mentions the sky: it cannot separate student from teachers
    pit = next(e for e in s["per_rubric"] if e["rubric"] == "r3")
    assert pit["pitfall"] and pit["student_met"] is True and pit["teacher_expected_rate"] == 1.0
    assert s["teacher_credit_ci95"][0] > s["student_credit_ci95"][1] and s["student_credit_rate"] == 0.0
    kept = [json.loads(line) for line in (tmp_path / "rubrics.discriminating.jsonl").read_text().splitlines()]
    assert len(kept) == 8 and all([r["id"] for r in row["rubrics"]] == ["r1", "r2", "r3", "r5"] for row in kept)


def test_a_judge_that_cannot_tell_them_apart_fails_loudly(tmp_path):
    from vlrl.cli import app

    path = _rubrics_file(tmp_path)
    yes = Scripted("yes", lambda req: json.dumps({"verdicts": [
        {"id": i, "pass": True} for i in re.findall(r'^- id "([^"]+)":', req.messages[0]["content"], re.M)]}))
    s = rubric_discrimination(path, yes)
    assert not s["passed"] and "cannot tell" in s["failures"][0]
    # through the CLI: a judge spec that answers nothing usable is a non-zero exit, not a quiet pass
    res = CliRunner().invoke(app, ["reward", "smoke", "--reward", "rubicap_rubric", "--rubrics", str(path),
                                   "--judge", "openai:http://127.0.0.1:9/v1@x", "--set", "max_retries=0",
                                   "--out", str(tmp_path / "s.json")])
    assert res.exit_code == 1, res.output
    res = CliRunner().invoke(app, ["reward", "smoke", "--reward", "rubicap_rubric", "--out", str(tmp_path / "s.json")])
    assert res.exit_code == 2 and "--rubrics" in res.output
    res = CliRunner().invoke(app, ["reward", "smoke", "--out", str(tmp_path / "s.json")])
    assert res.exit_code == 2 and "--qa" in res.output  # caprl_qa stays the default
