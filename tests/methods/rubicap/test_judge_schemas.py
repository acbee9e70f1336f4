"""The judges' JSON answers travel with a JSON schema (server-side structured output where the
backend has it, tests/core/backends/test_openai_structured.py); the schema names exactly what the
parser will ask for: the rubric ids in the prompt's order, the caption labels the writer may cite."""

from __future__ import annotations

import json
import re

import pytest

from tests.methods.rubicap.test_rubric_reward import RUBRICS
from tests.methods.rubicap.test_rubrics import _teacher_dir, _text
from tests.support.scripted import Scripted
from vlrl.methods.rubicap.arena import JUDGE_SCHEMA
from vlrl.methods.rubicap.synthesis import build_rubrics
from vlrl.methods.rubicap.verdicts import score_schema, single_verdict_schema, verdicts_schema
from vlrl.rewards import build_reward


def _verdicts_from_schema(req):
    """A judge that answers what the schema allows, every criterion passed."""
    items = req.json_schema["properties"]["verdicts"]["prefixItems"]
    return json.dumps({"verdicts": [{"id": it["properties"]["id"]["const"], "pass": True} for it in items]})


def test_rubric_judge_sends_the_verdict_schema_of_its_own_prompt():
    judge = Scripted("judge", _verdicts_from_schema)
    reward = build_reward("rubicap_rubric", judge=judge)
    s = reward.score(["a red bus, STOP, rain"], rubrics=[RUBRICS])[0]
    assert s.value == pytest.approx(1.0)
    (req,) = judge.requests
    ids_in_prompt = re.findall(r'- id "(\w+)"', _text(req))
    want = verdicts_schema(ids_in_prompt)
    assert req.json_schema == want and sorted(ids_in_prompt) == ["a", "b", "c"]
    assert want["properties"]["verdicts"]["minItems"] == want["properties"]["verdicts"]["maxItems"] == 3


@pytest.mark.parametrize(("opts", "schema"), [
    ({"per_rubric": True}, single_verdict_schema()),
    ({"aggregation": "implicit"}, score_schema()),
    ({"per_rubric": True, "explain": True}, single_verdict_schema(True)),
])  # fmt: skip
def test_other_judge_modes_send_their_schema(opts, schema):
    answer = json.dumps({"pass": True} if "per_rubric" in opts else {"score": 10})
    judge = Scripted("judge", lambda r: answer)
    build_reward("rubicap_rubric", judge=judge, **opts).score(["a caption"], rubrics=[RUBRICS])
    assert judge.requests and all(r.json_schema == schema for r in judge.requests)
    if opts.get("explain"):  # the explanation comes first: the judge reasons before it decides
        assert list(schema["properties"]) == ["explanation", "pass"]


def test_a_custom_judge_prompt_goes_without_a_schema(tmp_path):
    prompt = tmp_path / "mine.jinja"
    prompt.write_text('Caption: {{ caption_json }}. Criteria: {% for r in rubrics %}{{ r.id }} {% endfor %}. '
                      'Answer {"verdicts": [{"id": ..., "pass": ...}]}')
    judge = Scripted("judge", lambda r: json.dumps({"verdicts": [{"id": i, "pass": True} for i in "abc"]}))
    build_reward("rubicap_rubric", judge=judge, prompt=str(prompt)).score(["a caption"], rubrics=[RUBRICS])
    assert judge.requests and all(r.json_schema is None for r in judge.requests)


def test_rubric_writer_schema_names_the_labels_of_its_prompt(tmp_path):
    tdir = _teacher_dir(tmp_path, ["a", "b"])
    writer = Scripted("writer", lambda r: "not JSON")
    build_rubrics(tdir, Scripted("s", lambda r: "A red truck."), writer, tmp_path / "out", max_retries=1)
    assert len(writer.requests) == 4  # 2 images, each retried once with the correction: the schema stays on
    for req in writer.requests:
        labels = sorted(set(re.findall(r"^\[(T\d+)\]$", _text(req), re.M)))
        schema = req.json_schema
        assert schema["title"] == "rubric_writer" and list(schema["properties"])[-1] == "student_meets_all"
        fact = schema["properties"]["consensus_facts"]["items"]
        assert sorted(fact["properties"]["sources"]["items"]["enum"]) == labels and len(labels) == 3


def test_arena_schema_is_the_prompt_answer():
    assert JUDGE_SCHEMA["properties"]["winner"]["enum"] == ["A", "B", "tie"]
    assert JUDGE_SCHEMA["required"] == ["reason", "winner"]  # reason first, as the prompt asks


def test_a_raw_control_character_inside_a_string_is_not_a_reason_to_repair():
    # xgrammar (vLLM's structured output) lets a model write raw control characters in strings
    from vlrl.judge.structured import extract_final_json, extract_json

    text = '{"reason": "tab\there\x07", "winner": "B"}'
    assert extract_json(text) == ({"reason": "tab\there\x07", "winner": "B"}, False)
    assert extract_final_json(text, lambda obj: obj["winner"]) == "B"
