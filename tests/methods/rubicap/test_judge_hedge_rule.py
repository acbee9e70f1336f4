"""Judge-side defence against hedged captions: every built-in rubric judge prompt, as the reward
renders it, says that a criterion met only inside a hedge or a list of alternatives fails (the
caption-side counterpart is the ``hedging`` guard)."""

from __future__ import annotations

import json

import pytest

from tests.methods.rubicap.test_rubric_reward import RUBRICS
from tests.methods.rubicap.test_rubrics import _text
from tests.support.scripted import Scripted
from vlrl.rewards import build_reward

HEDGED = "A car parked on a street; the car is red, silver or black, holding perhaps a phone, a book or a cup."


@pytest.mark.parametrize("opts", [{}, {"per_rubric": True}, {"aggregation": "implicit"}, {"explain": True}])
def test_rendered_judge_prompt_fails_criteria_met_only_inside_a_hedge(opts):
    def answer(req):
        if "per_rubric" in opts:
            return json.dumps({"pass": False})
        if opts.get("aggregation") == "implicit":
            return json.dumps({"score": 0})
        return json.dumps({"verdicts": [{"id": i, "pass": False} for i in "abc"]})

    judge = Scripted("judge", answer)
    build_reward("rubicap_rubric", judge=judge, **opts).score([HEDGED], rubrics=[RUBRICS])
    assert judge.requests
    for req in judge.requests:
        text = " ".join(_text(req).split())
        assert "met only inside a hedge or a list of alternatives" in text
        assert 'silver or black" does not say' in text
        # the rule sits in the judge's instructions, outside the fenced caption
        assert text.index("met only inside a hedge") > text.index("red, silver or black, holding")
