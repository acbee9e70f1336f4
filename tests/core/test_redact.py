"""Redaction by value: a configured secret never reaches a file or a log, whatever its shape.

The canary key below has no telltale shape (no ``sk-``, no ``Bearer``), so only redaction by the
value of the configured key variable can hide it. The fake server echoes the ``Authorization``
header it received into every error body, as misconfigured proxies do.
"""

from __future__ import annotations

import json

import pytest

from tests.support.fake_openai import FakeOpenAI
from tests.support.long_commands import COMMANDS, run

CANARY = "canary" + "Q7x9LmZ2pW4vR8tK"


def _echoing_server() -> FakeOpenAI:
    srv = FakeOpenAI()
    srv.echoed = 0

    def fail(body, headers):
        key = {k.lower(): v for k, v in headers.items()}.get("authorization", "").removeprefix("Bearer ")
        srv.echoed += key == CANARY
        return 500, json.dumps({"error": {"message": f"upstream refused key {key} for {body.get('model')}"}})

    srv.fail = fail
    return srv


def test_redact_masks_configured_secret_values(monkeypatch):
    from vlrl.core.redact import redact, scrub

    monkeypatch.setenv("OPENAI_API_KEY", CANARY)
    assert scrub(f"x {CANARY} y") == "x *** y" and CANARY not in redact(f"error: {CANARY}")
    monkeypatch.setenv("MY_PROXY_KEY", "proxytoken123")
    from vlrl.core.backends import parse_spec

    parse_spec("openai:http://127.0.0.1:9/v1@m?api_key_env=MY_PROXY_KEY")  # naming the variable registers it
    assert scrub("got proxytoken123") == "got ***"
    monkeypatch.setenv("OPENAI_API_KEY", "EMPTY")  # a placeholder is not a secret: text stays whole
    assert scrub("EMPTY answer") == "EMPTY answer"


def test_a_short_key_is_masked_where_it_stands_alone_and_a_tiny_one_is_named(monkeypatch, caplog):
    from vlrl.core import redact as r

    monkeypatch.setenv("OPENAI_API_KEY", "k3y9z")  # 5 characters: below the anywhere-length
    assert r.scrub("upstream refused key k3y9z (401)") == "upstream refused key *** (401)"
    assert r.scrub('{"key": "k3y9z"}') == '{"key": "***"}'
    assert r.scrub("xk3y9zy and k3y9z_2") == "xk3y9zy and k3y9z_2"  # inside a word: ordinary text stays whole
    monkeypatch.setattr(r, "_warned_short", set())
    monkeypatch.setenv("OPENAI_API_KEY", "ab")
    with caplog.at_level("WARNING"):
        assert r.scrub("ab cd") == "ab cd" and r.scrub("ab") == "ab"
    named = [rec for rec in caplog.records if "OPENAI_API_KEY" in rec.getMessage()]
    assert len(named) == 1 and "too short" in named[0].getMessage()  # once, not on every line


def test_a_key_with_json_escaped_characters_is_masked_inside_a_written_line(tmp_path, monkeypatch):
    from vlrl.core.pipeline import write_jsonl

    key = 'sk"quote\\slash-1234567'
    monkeypatch.setenv("OPENAI_API_KEY", key)
    out = tmp_path / "rows.jsonl"
    write_jsonl(out, [{"error": f"server said: bad key {key}"}])
    text = out.read_text()
    assert json.dumps(key)[1:-1] not in text and "quote" not in text and "***" in text


def test_token_in_the_url_is_refused_and_never_echoed(tmp_path):
    res = run(["caption", "--images", str(tmp_path), "--model", f"openai:http://{CANARY}@127.0.0.1:9/v1@m", "--out",
               str(tmp_path / "o")])
    assert res.returncode == 2 and "credentials" in res.stderr
    assert CANARY not in res.stderr + res.stdout


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_echoed_key_appears_in_no_file_and_no_log(tmp_path, command):
    with _echoing_server() as srv:
        argv = COMMANDS[command](tmp_path, srv.spec())
        res = run(argv, OPENAI_API_KEY=CANARY)
    assert srv.echoed > 0, res.stderr[-2000:]  # the server was really asked, and echoed the key
    assert CANARY not in res.stderr + res.stdout, res.stderr[-3000:]
    files = [p for p in (tmp_path / "out").rglob("*") if p.is_file()]
    assert files, "the command wrote nothing to check"
    for p in files:
        assert CANARY.encode() not in p.read_bytes(), p


@pytest.mark.slow
def test_echoed_key_appears_nowhere_a_training_run_writes(tmp_path):
    """``vlrl train grpo`` with a CapRL answerer that echoes the key in every error: the run's folder
    (completions, checkpoints, recipe) and its output hold no trace of it."""
    from tests.support.paths import ROOT

    out = tmp_path / "run"
    with _echoing_server() as srv:
        reward = ("rewards=[{name: caprl_qa, settings: {answerer: '" + srv.spec() + "', mode: exact, "
                  "questions_per_caption: 2, rounds: 1, min_letter_mass: 0.0}}]")
        res = run(["train", "grpo", "--recipe", str(ROOT / "train" / "recipes" / "tiny" / "caprl_tiny.yaml"),
                   f"output_dir={out}", "max_steps=2", reward, "run.max_none_reward_steps=0"], OPENAI_API_KEY=CANARY)
    assert res.returncode == 0 and srv.echoed > 0, res.stderr[-2000:]
    assert CANARY not in res.stderr + res.stdout
    files = [p for p in out.rglob("*") if p.is_file()]
    assert any(p.name.startswith("step-") for p in files)  # the completions log was written
    for p in files:
        assert CANARY.encode() not in p.read_bytes(), p
