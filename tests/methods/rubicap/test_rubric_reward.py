"""``rubicap_rubric``: weights, veto, implicit aggregation, judge failures, empty inputs.

The judge is a scripted :class:`Backend` (the one seam tests may replace): it reads the rubric ids
from the prompt and answers from a table, or answers garbage / wrong ids / errors on purpose.
"""

from __future__ import annotations

import json
import re

import pytest

from vlrl.core.backends import Backend, ChatResult
from vlrl.methods.rubicap.reward import parse_score, parse_single_verdict, parse_verdicts
from vlrl.rewards import build_reward

RUBRICS = [
    {
        "id": "a",
        "criterion": "mentions the red bus",
        "pass_rule": "Pass if a red bus is named.",
        "severity": "critical",
        "weight": 3.0,
    },
    {
        "id": "b",
        "criterion": "mentions the text STOP",
        "pass_rule": "Pass if STOP is quoted.",
        "severity": "important",
        "weight": 2.0,
    },
    {
        "id": "c",
        "criterion": "states it is raining",
        "pass_rule": "Pass if rain is mentioned.",
        "severity": "minor",
        "weight": 1.0,
    },
]


def _prompt(req) -> str:
    content = req.messages[0]["content"]
    text = (
        content if isinstance(content, str) else "".join(p.get("text", "") for p in content if p.get("type") == "text")
    )
    # corrective rounds append turns: the caption is in the first message
    return text


def _caption(prompt: str) -> str:
    m = re.search(r"<(caption-[0-9a-f]+)>\n(.*?)\n</\1>", prompt, re.S)
    return json.loads(m.group(2))


class KeywordJudge(Backend):
    """Passes a rubric when its keyword is in the caption; counts chat() calls and requests."""

    kind = "scripted"
    KEYS = {"red bus": "bus", "STOP": "STOP", "raining": "rain"}

    def __init__(self, mode: str = "explicit", broken: dict | None = None) -> None:
        super().__init__("keyword-judge")
        self.mode = mode
        self.calls = 0
        self.requests = 0
        self.broken = broken or {}  # caption substring -> list of bad answers, consumed per round

    def _verdict(self, criterion: str, caption: str) -> bool:
        return any(k in criterion and v in caption for k, v in self.KEYS.items())

    def _chat(self, requests):
        self.calls += 1
        self.requests += len(requests)
        self.last = requests
        out = []
        for req in requests:
            prompt = _prompt(req)
            caption = _caption(prompt)
            bad = next((v for k, v in self.broken.items() if k in caption), None)
            if bad:
                answer = bad.pop(0)
                out.append(answer if isinstance(answer, ChatResult) else ChatResult(texts=[answer]))
                continue
            if self.mode == "per_rubric":
                crit = re.search(r"Criterion: (.*)", prompt).group(1)
                out.append(ChatResult(texts=[json.dumps({"pass": self._verdict(crit, caption)})]))
            elif self.mode == "implicit":
                out.append(ChatResult(texts=['{"score": 7.5}']))
            else:
                items = re.findall(r'- id "([^"]+)": (.*)', prompt)
                verdicts = [{"id": i, "pass": self._verdict(c, caption)} for i, c in items]
                out.append(ChatResult(texts=["Sure!\n```json\n" + json.dumps({"verdicts": verdicts}) + "\n```"]))
        return out

    def _score_choices(self, requests):
        raise NotImplementedError


def test_weighted_pass_rate_and_severity_details():
    judge = KeywordJudge()
    r = build_reward("rubicap_rubric", judge=judge)
    caps = [
        "A red bus under a STOP sign in the rain.",
        "A red bus.",
        "A sign that reads STOP while raining, no vehicle.",
    ]
    scores = r.score(caps, rubrics=[RUBRICS] * 3)
    assert [s.value for s in scores] == pytest.approx([1.0, 3 / 6, 3 / 6])
    assert scores[1].details["pass_rate_critical"] == 1.0 and scores[1].details["pass_rate_important"] == 0.0
    assert scores[2].details["pass_rate"] == pytest.approx(2 / 3)
    assert judge.calls == 1 and judge.requests == 3  # one batched call, one request per caption


def test_trl_contract_and_metrics():
    r = build_reward("rubicap_rubric", judge=KeywordJudge())
    logged = {}
    out = r(
        prompts=None,
        completions=[[{"role": "assistant", "content": "red bus"}]],
        rubrics=[RUBRICS],
        log_metric=lambda k, v: logged.__setitem__(k, v),
    )
    assert out == [pytest.approx(0.5)]
    assert "rubicap_rubric/pass_rate_critical" in logged and logged["rubicap_rubric/judge_failures"] == 0


def test_veto_critical():
    r = build_reward("rubicap_rubric", judge=KeywordJudge(), veto_critical=True)
    s = r.score(["A STOP sign in the rain."], rubrics=[RUBRICS])[0]
    assert s.value == 0.0 and s.details["vetoed"] == 1
    assert s.details["weighted_pass_rate"] == pytest.approx(0.5)


def test_per_rubric_calls_batched():
    judge = KeywordJudge(mode="per_rubric")
    r = build_reward("rubicap_rubric", judge=judge, per_rubric=True)
    scores = r.score(["red bus and STOP", "nothing"], rubrics=[RUBRICS, RUBRICS])
    assert [s.value for s in scores] == pytest.approx([5 / 6, 0.0])
    assert judge.calls == 1 and judge.requests == 6


def test_implicit_aggregation():
    r = build_reward("rubicap_rubric", judge=KeywordJudge(mode="implicit"), aggregation="implicit")
    s = r.score(["a caption"], rubrics=[RUBRICS])[0]
    assert s.value == pytest.approx(0.75) and "pass_rate" not in s.details
    with pytest.raises(ValueError):
        build_reward("rubicap_rubric", judge=KeywordJudge(), aggregation="implicit", veto_critical=True)


def test_retry_with_correction_on_wrong_ids():
    wrong = json.dumps({"verdicts": [{"id": "a", "pass": True}, {"id": "zz", "pass": True}]})
    judge = KeywordJudge(broken={"BROKEN": [wrong]})
    r = build_reward("rubicap_rubric", judge=judge, max_retries=2)
    scores = r.score(["BROKEN red bus", "red bus"], rubrics=[RUBRICS, RUBRICS])
    assert scores[0].value == pytest.approx(0.5) and scores[0].details["judge_retries"] == 1
    assert judge.calls == 2 and judge.requests == 3  # round 2 re-asks only the broken one


@pytest.mark.parametrize("policy,expected", [("drop", None), ("zero", 0.0)])
def test_judge_failure_policy(policy, expected):
    garbage = ["I think it's good.", '{"verdicts": [{"id": "a", "pass": true}]}', ChatResult(error="timeout after 60s")]
    judge = KeywordJudge(broken={"BAD": list(garbage)})
    r = build_reward("rubicap_rubric", judge=judge, on_judge_failure=policy, max_retries=2)
    scores = r.score(["BAD red bus", "red bus"], rubrics=[RUBRICS, RUBRICS])
    assert scores[0].value == expected and scores[0].details["judge_failures"] == 1
    assert "timeout" in scores[0].details["reason"]
    assert scores[1].value == pytest.approx(0.5)
    assert r.counts["judge_failures"] == 1 and judge.calls == 3


def test_empty_inputs_never_call_the_judge():
    judge = KeywordJudge()
    r = build_reward("rubicap_rubric", judge=judge)
    scores = r.score(["", "red bus", "red bus", "red bus"], rubrics=[RUBRICS, [], None, "{not json"])
    assert scores[0].value == 0.0 and scores[0].details["empty_caption"] == 1
    assert scores[1].value is None and scores[1].details["empty_rubrics"] == 1
    assert scores[2].value is None
    assert scores[3].value is None and scores[3].details["malformed_rubrics"] == 1
    assert judge.calls == 0


def test_judge_that_raises_never_crashes():
    class Exploding(KeywordJudge):
        def _chat(self, requests):
            raise ConnectionError("server gone")

    r = build_reward("rubicap_rubric", judge=Exploding(), on_judge_failure="zero", max_retries=1)
    assert r.score(["red bus"], rubrics=[RUBRICS])[0].value == 0.0


def test_duplicate_captions_sent_once():
    judge = KeywordJudge()
    r = build_reward("rubicap_rubric", judge=judge)
    r.score(["red bus"] * 4, rubrics=[RUBRICS] * 4)
    assert judge.requests == 1


def test_parsers():
    assert parse_verdicts({"a": "pass", "b": "no"}, ["a", "b"]) == {"a": True, "b": False}
    with pytest.raises(ValueError, match="duplicated"):
        parse_verdicts([{"id": "a", "pass": 1}, {"id": "a", "pass": 0}], ["a", "b"])
    with pytest.raises(ValueError, match="missing"):
        parse_verdicts({"verdicts": [{"id": "a", "pass": True}]}, ["a", "b"])
    assert parse_single_verdict("PASS - it mentions it") is True
    assert parse_single_verdict('{"pass": false}') is False
    with pytest.raises(ValueError):
        parse_single_verdict("maybe")
    assert parse_score("8/10") == pytest.approx(0.8)
    with pytest.raises(ValueError):
        parse_score('{"score": 11}')


def test_with_image_and_json_string_rubrics(tmp_path):
    from PIL import Image

    img = tmp_path / "x.png"
    Image.new("RGB", (8, 8), "red").save(img)
    judge = KeywordJudge()
    r = build_reward("rubicap_rubric", judge=judge, with_image=True)
    s = r.score(["red bus", "red bus"], rubrics=[json.dumps(RUBRICS)] * 2, image=[str(img)] * 2)
    assert [x.value for x in s] == [pytest.approx(0.5)] * 2
    assert judge.requests == 1  # same image path + same prompt: asked once
    part = judge.last[0].messages[0]["content"][0]
    assert part["type"] == "image" and part["image"].size == (8, 8)


@pytest.mark.slow
def test_tiny_hf_judge_junk_is_a_counted_failure(tiny_lm):
    r = build_reward("rubicap_rubric", judge=f"hf:{tiny_lm}", max_retries=1, max_tokens=16, on_judge_failure="drop")
    scores = r.score(["A red bus by a STOP sign.", ""], rubrics=[RUBRICS, RUBRICS])
    assert scores[1].value == 0.0  # empty caption: no judge call
    s = scores[0]
    # random weights answer junk: either a (very unlikely) valid verdict set or a counted failure
    assert (
        s.value is None and s.details["judge_failures"] == 1 and r.counts["judge_failures"] == 1
    ) or 0 <= s.value <= 1
