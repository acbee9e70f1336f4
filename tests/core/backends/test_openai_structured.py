"""A request's JSON schema goes out as ``response_format``; a server that refuses it gets the
request again without it, and the judge's repair path does the work (logged once per backend)."""

from __future__ import annotations

import json
import logging

from tests.support.fake_openai import FakeOpenAI
from vlrl.core.backends import ChatRequest, SamplingParams, load_backend
from vlrl.judge import chat_structured
from vlrl.methods.rubicap.arena import JUDGE_SCHEMA, parse_winner

# what vLLM answers a server started without structured output would look like; OpenAI-compatible
# servers that lack the feature answer the same way (a 400 naming the field)
_REFUSAL = (400, json.dumps({"error": {"message": "response_format json_schema is not supported", "type": "BadRequestError",
                                       "param": "response_format", "code": 400}}))


def _judge(srv, n=3):
    backend = load_backend(srv.spec())
    reqs = [ChatRequest([{"role": "user", "content": f"which caption {i}?"}], SamplingParams(max_tokens=32), id=f"q{i}")
            for i in range(n)]
    try:
        return backend, chat_structured(backend, reqs, lambda t, i: parse_winner(t), raw_text=True, json_schema=JUDGE_SCHEMA)
    finally:
        backend.close()


def test_schema_is_sent_as_response_format_and_counted(caplog):
    with FakeOpenAI(reply=lambda body: '{"reason": "r", "winner": "B"}') as srv, caplog.at_level(logging.INFO):
        backend, out = _judge(srv)
    assert [r.value for r in out] == ["B"] * 3 and not any(r.repaired for r in out)
    sent = [b["response_format"] for b in srv.bodies]
    assert len(sent) == 3 and all(f["type"] == "json_schema" and f["json_schema"]["schema"] == JUDGE_SCHEMA
                                  and f["json_schema"]["name"] == "arena_verdict" and f["json_schema"]["strict"]
                                  for f in sent)
    assert backend.stats.structured == 3
    routes = [r.getMessage() for r in caplog.records if "structured output:" in r.getMessage()]
    assert len(routes) == 1 and "json_schema" in routes[0]  # once per backend, not per request


def test_a_server_refusing_response_format_gets_the_request_again_without_it(caplog):
    answers = iter(['winner: B, because {"reason": "x", "winner": "B",', '{"reason": "y", "winner": "A"}',
                    'B. Caption B is better'])
    with FakeOpenAI(reply=lambda body: next(answers)) as srv, caplog.at_level(logging.INFO):
        srv.refuse = lambda body: _REFUSAL if "response_format" in body else None
        backend, out = _judge(srv)
        # remembered: a later batch goes straight out without the field
        later = load_backend(srv.spec())
        later._structured = backend._structured
        later.chat([ChatRequest([{"role": "user", "content": "again"}], json_schema=JUDGE_SCHEMA)])
    assert all(r.ok for r in out) and sorted(r.value for r in out) == ["A", "B", "B"]
    with_field = [b for b in srv.bodies if "response_format" in b]
    without = [b for b in srv.bodies if "response_format" not in b]
    assert len(with_field) == 3 and len(without) == 4  # the 3 refused, re-sent bare; the later one bare at once
    assert backend._structured.supported is False and backend.stats.structured == 0
    msgs = [r.getMessage() for r in caplog.records]
    assert sum("refuses response_format" in m for m in msgs) == 1
    assert any("structured output: repair path" in m for m in msgs)
    assert not any("structured output: json_schema" in m for m in msgs)


def test_other_client_errors_are_not_taken_for_a_refusal():
    with FakeOpenAI(reply=lambda body: "{}") as srv:
        srv.refuse = lambda body: (400, json.dumps({"error": {"message": "maximum context length exceeded"}}))
        backend, out = _judge(srv, n=1)
    assert not out[0].ok and "HTTP 400" in out[0].error and "context length" in out[0].error
    assert len(srv.bodies) == 3 and all("response_format" in b for b in srv.bodies)  # 1 + 2 retries, never bare
    assert backend._structured.supported is None


def test_in_process_backends_take_the_repair_path_and_say_so(caplog):
    from tests.support.scripted import Scripted

    backend = Scripted("judge", answer=lambda r: "{'reason': 'ok', 'winner': 'A',}")
    reqs = [ChatRequest([{"role": "user", "content": "which?"}]) for _ in range(2)]
    with caplog.at_level(logging.INFO):
        out = chat_structured(backend, reqs, lambda obj, i: obj["winner"], json_schema=JUDGE_SCHEMA)
    assert [r.value for r in out] == ["A", "A"] and all(r.repaired for r in out)
    assert all(r.json_schema == JUDGE_SCHEMA for r in backend.requests)  # the schema went along, ignored
    assert sum("structured output: repair path" in r.getMessage() for r in caplog.records) == 1
