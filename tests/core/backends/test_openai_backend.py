"""OpenAI-compatible backend against a real ``transformers serve`` (tiny VLM) and a fault proxy.

The server ignores ``n`` and ``logprobs`` and rejects ``continue_final_message``, so the fallbacks
are exercised for real; the proxy adds what the server cannot (500/429/drops/stalls, vLLM-shaped
logprobs) and counts the HTTP requests the client really made.
"""

from __future__ import annotations

import asyncio
import base64
import io
import logging
import math
import pickle

import pytest
from PIL import Image

from tests.support.servers import FaultProxy, free_port, inject_logprobs
from vlrl.core.backends import ChatRequest, ChoiceRequest, SamplingParams, load_backend
from vlrl.core.backends.openai_http import OpenAIBackend, probs_from_top_logprobs, top_logprobs_from_response

FAST = {"backoff": 0.01, "backoff_max": 0.05}


def user(text, image=None):
    content = [{"type": "image", "image": image}, {"type": "text", "text": text}] if image is not None else text
    return [{"role": "user", "content": content}]


@pytest.fixture
def proxy(transformers_server):
    with FaultProxy(transformers_server.root, blank="a blank tiny-model answer") as p:
        yield p


@pytest.fixture
def backend(proxy, transformers_server):
    b = OpenAIBackend(proxy.root + "/v1", transformers_server.model, timeout=3, max_retries=4, **FAST)
    yield b
    b.close()


# -- no server needed --------------------------------------------------------------------------------

VLLM_RESPONSE = {
    "id": "chatcmpl-1",
    "object": "chat.completion",
    "model": "Qwen/Qwen2.5-VL-7B-Instruct",
    "choices": [
        {
            "index": 0,
            "message": {"role": "assistant", "content": "B"},
            "finish_reason": "length",
            "logprobs": {
                "content": [
                    {
                        "token": "B",
                        "logprob": -0.5,
                        "bytes": [66],
                        "top_logprobs": [
                            {"token": "B", "logprob": -0.5, "bytes": [66]},
                            {"token": "A", "logprob": -1.2, "bytes": [65]},
                            {"token": " C", "logprob": -3.5, "bytes": [32, 67]},
                            {"token": "The", "logprob": -4.0, "bytes": [84, 104, 101]},
                            {"token": "C", "logprob": -5.0, "bytes": [67]},
                        ],
                    }
                ]
            },
        }
    ],
    "usage": {"prompt_tokens": 31, "completion_tokens": 1, "total_tokens": 32},
}


def test_parse_vllm_shaped_logprobs():
    top = top_logprobs_from_response(VLLM_RESPONSE)
    assert dict(top)["A"] == pytest.approx(-1.2)
    probs, mass = probs_from_top_logprobs(top, ["A", "B", "C", "D"])
    raw = {"A": math.exp(-1.2), "B": math.exp(-0.5), "C": math.exp(-3.5) + math.exp(-5.0), "D": 0.0}
    total = sum(raw.values())
    assert mass == pytest.approx(total)
    for c in "ABCD":
        assert probs[c] == pytest.approx(raw[c] / total)
    assert sum(probs.values()) == pytest.approx(1.0)
    no_lp = {"choices": [{"message": {"content": "B"}, "logprobs": None}]}
    assert top_logprobs_from_response(no_lp) is None


def test_spec_options_and_identity(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-SENTINEL-123")
    b = load_backend("openai:http://127.0.0.1:9/v1@my-model?concurrency=3&timeout=2.5&max_retries=0&logprobs=false")
    assert (b.concurrency, b.timeout, b.max_retries, b.logprobs_mode) == (3, 2.5, 0, "off")
    ident = b.identity()
    assert ident["base_url"] == "http://127.0.0.1:9/v1" and ident["model"] == "my-model"
    assert "SENTINEL" not in repr(ident)
    with pytest.raises(ValueError, match="unknown option"):
        load_backend("openai:http://127.0.0.1:9/v1@m?colour=blue")
    with pytest.raises(ValueError, match="API key"):
        load_backend("openai:http://127.0.0.1:9/v1@m?api_key=sk-x")


def test_spec_refuses_credentials_in_the_url_and_an_empty_model():
    """http://user:KEY@host put a secret on the command line (and into identity(), logs and cache
    keys); an empty model name after '@' was accepted and failed on every request."""
    for spec in ("openai:http://user:sk-SECRET@127.0.0.1:9/v1@m", "openai:https://sk-SECRET@api.example.com/v1@m"):
        with pytest.raises(ValueError, match="credentials") as exc:
            load_backend(spec)
        assert "SECRET" not in str(exc.value)
    with pytest.raises(ValueError, match="no model name"):
        load_backend("openai:http://127.0.0.1:9/v1@")


def test_close_logs_the_accounting(caplog):
    import logging

    b = OpenAIBackend(f"http://127.0.0.1:{free_port()}/v1", "m", max_retries=1, timeout=2, **FAST)
    with caplog.at_level(logging.INFO, logger="vlrl.core.backends.base"):
        b.chat([ChatRequest(user("hi"))])
        b.close()
    (line,) = [r.getMessage() for r in caplog.records if r.name == "vlrl.core.backends.base"]
    assert "@m:" in line and "requests=1" in line and "retries=1" in line and "failures=1" in line


def test_connection_refused_is_a_clear_error_not_an_exception(tmp_path):
    b = OpenAIBackend(f"http://127.0.0.1:{free_port()}/v1", "m", max_retries=1, timeout=2, **FAST)
    with b:
        res = b.chat([ChatRequest(user("hi"), id="rec-7"), ChatRequest(user("x", tmp_path / "missing.png"), id="rec-8")])
    assert "rec-7" in res[0].error and "connection error" in res[0].error and "gave up after 2 attempts" in res[0].error
    assert "rec-8" in res[1].error and "file not found" in res[1].error  # bad image: no request sent at all
    assert "\n" not in res[0].error
    assert b.stats.retries == 1 and b.stats.failures == 2
    clone = pickle.loads(pickle.dumps(b))  # e.g. shipped to a Ray worker: loop and client are rebuilt
    assert clone.stats.failures == 2 and "connection error" in clone.chat([ChatRequest(user("hi"))])[0].error
    clone.close()


# -- against transformers serve -----------------------------------------------------------------------


@pytest.mark.slow
def test_text_and_image_chat(backend, proxy, tmp_path):
    img = Image.new("RGB", (96, 64), (10, 200, 30))
    path = tmp_path / "green.png"
    img.save(path)
    reqs = [
        ChatRequest(user("Describe the picture."), SamplingParams(max_tokens=6)),
        ChatRequest(user("Describe the picture.", img), SamplingParams(max_tokens=6)),
        ChatRequest(user("Describe the picture.", str(path)), SamplingParams(max_tokens=6)),
    ]
    res = backend.chat(reqs)
    assert all(r.ok for r in res), [r.error for r in res]
    assert all(len(r.texts) == 1 and isinstance(r.text, str) and r.completion_tokens > 0 for r in res)
    # image tokens are counted by the server, so image prompts are longer than the text-only one
    assert res[1].prompt_tokens > res[0].prompt_tokens and res[1].prompt_tokens == res[2].prompt_tokens
    urls = [
        p["image_url"]["url"]
        for s in proxy.posts()
        for m in s.body["messages"]
        if isinstance(m["content"], list)
        for p in m["content"]
        if p["type"] == "image_url"
    ]
    assert len(urls) == 2 and all(u.startswith("data:image/png;base64,") for u in urls)
    sent = Image.open(io.BytesIO(base64.b64decode(urls[0].split(",", 1)[1])))
    assert sent.size == (96, 64) and sent.convert("RGB").getpixel((5, 5)) == (10, 200, 30)
    assert backend.stats.requests == 3 and backend.stats.failures == 0
    assert backend.stats.prompt_tokens == sum(r.prompt_tokens for r in res)
    assert backend.stats.completion_tokens == sum(r.completion_tokens for r in res)


@pytest.mark.slow
def test_n_samples_fall_back_to_separate_requests(backend, proxy, caplog):
    sp = SamplingParams(max_tokens=4, temperature=1.0, n=3, seed=5)
    with caplog.at_level(logging.WARNING, logger="vlrl.core.backends.openai_http"):
        first = backend.chat([ChatRequest(user("Say something."), sp)])[0]
        second = backend.chat([ChatRequest(user("Say more."), sp)])[0]
    assert first.ok and second.ok
    assert len(first.texts) == 3 and len(second.texts) == 3 and len(first.finish_reasons) == 3
    assert backend.supports_n is False
    posts = proxy.posts()
    assert len(posts) == 6
    assert posts[0].body.get("n") == 3  # tried once ...
    assert all("n" not in p.body for p in posts[1:])  # ... then remembered
    assert sorted(p.body["seed"] for p in posts[3:]) == [5, 6, 7]  # separate requests get distinct seeds
    assert sum("ignores 'n'" in r.getMessage() for r in caplog.records) == 1


@pytest.mark.slow
def test_score_choices_detects_missing_logprobs_and_samples(backend, proxy, caplog):
    reqs = [
        ChoiceRequest(user(f"Question {i}? A or B."), ["A", "B"], prefix="The answer is ", samples=3, seed=i, id=f"q{i}")
        for i in range(3)
    ]
    with caplog.at_level(logging.WARNING, logger="vlrl.core.backends.openai_http"):
        res = backend.score_choices(reqs)
        again = backend.score_choices(reqs[:1])
    for r in res + again:
        assert r.ok and r.method == "sampled" and not r.exact
        assert set(r.probs) == {"A", "B"} and sum(r.probs.values()) == pytest.approx(1.0)
        assert 0.0 <= r.mass <= 1.0
    assert backend.supports_logprobs is False and backend.supports_continue is False
    msgs = [r.getMessage() for r in caplog.records]
    assert sum("does not return logprobs" in m for m in msgs) == 1
    assert sum("continue_final_message" in m for m in msgs) == 1
    posts = proxy.posts()
    # probe: partial assistant turn (422 from the server) -> user-turn prefix with logprobs, asked
    # logprobs_evidence (3) times before sampling is believed -> 3 samples
    assert posts[0].body.get("continue_final_message") is True
    for p in posts[1:4]:
        assert p.body.get("logprobs") is True and "continue_final_message" not in p.body
        assert p.body["messages"][-1]["content"].endswith("The answer is")
    later = posts[4:]
    assert len(later) == 3 + 2 * 3 + 3  # probe's samples, two more requests' samples, the second batch
    assert all(not p.body.get("logprobs") and p.body["max_tokens"] == backend.sample_tokens for p in later)
    assert backend.stats.requests == 4 and backend.stats.prompt_tokens > 0 and backend.stats.completion_tokens > 0


@pytest.mark.slow
def test_logprobs_path_over_http(proxy, transformers_server):
    top = {"A": -0.5, " B": -1.5, "C": -4.0, "Hello": -2.0}
    proxy.default = inject_logprobs(top)
    with OpenAIBackend(proxy.root + "/v1", transformers_server.model, prefix_mode="user", **FAST) as b:
        res = b.score_choices([ChoiceRequest(user("Pick one."), ["A", "B", "C"], prefix="Answer:", id="q")])[0]
    assert res.ok and res.method == "logprobs" and res.exact
    z = math.exp(-0.5) + math.exp(-1.5) + math.exp(-4.0)
    assert res.probs["A"] == pytest.approx(math.exp(-0.5) / z)
    assert res.probs["B"] == pytest.approx(math.exp(-1.5) / z)
    assert res.mass == pytest.approx(z)
    assert b.supports_logprobs is True
    body = proxy.posts()[0].body
    assert (body["logprobs"], body["top_logprobs"], body["max_tokens"]) == (True, 20, 1)
    # the listed tokens leave 1.7% unlisted, where letters could hide: the exact route was asked
    # for once, and a server without /tokenize (transformers serve) keeps the listed numbers
    assert [s.path for s in proxy.posts()] == ["/v1/chat/completions", "/tokenize"]


@pytest.mark.slow
def test_retries_recover_from_every_fault(proxy, transformers_server):
    proxy.stall_s = 20
    proxy.script("500", "429", "drop", "stall")
    with OpenAIBackend(proxy.root + "/v1", transformers_server.model, timeout=1.5, max_retries=4, **FAST) as b:
        res = b.chat([ChatRequest(user("hello"), SamplingParams(max_tokens=3), id="r1")])[0]
    assert res.ok, res.error
    assert b.stats.retries == 4 and b.stats.failures == 0
    assert [s.action for s in proxy.posts()] == ["500", "429", "drop", "stall", "pass"]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("fault", "expect"),
    [("500", "HTTP 500"), ("429", "HTTP 429"), ("drop", "connection error"), ("stall", "timed out after 1s")],
)
def test_exhausted_retries_are_clear_per_request_errors(proxy, transformers_server, fault, expect):
    proxy.stall_s = 10
    proxy.route(lambda body: fault if "POISON" in json_text(body) else None)
    with OpenAIBackend(proxy.root + "/v1", transformers_server.model, timeout=1, max_retries=2, **FAST) as b:
        res = b.chat(
            [
                ChatRequest(user("fine"), SamplingParams(max_tokens=3), id="good"),
                ChatRequest(user("POISON"), SamplingParams(max_tokens=3), id="img-042.png"),
            ]
        )
    assert res[0].ok
    err = res[1].error
    assert err.startswith("openai request img-042.png:") and expect in err and "gave up after 3 attempts" in err
    assert "\n" not in err
    assert b.stats.retries == 2 and b.stats.failures == 1
    assert sum(s.action == fault for s in proxy.posts()) == 3


@pytest.mark.slow
def test_client_errors_are_not_retried(proxy, transformers_server):
    proxy.script("400")
    with OpenAIBackend(proxy.root + "/v1", transformers_server.model, max_retries=4, **FAST) as b:
        res = b.chat([ChatRequest(user("hi"), id="bad")])[0]
    assert "HTTP 400" in res.error and "injected bad request" in res.error and "gave up" not in res.error
    assert b.stats.retries == 0 and len(proxy.posts()) == 1


@pytest.mark.slow
def test_works_inside_a_running_event_loop(backend):
    async def caller():  # e.g. a notebook cell or TRL's async reward path
        return backend.chat([ChatRequest(user("hi"), SamplingParams(max_tokens=2))])

    assert asyncio.run(caller())[0].ok


@pytest.mark.slow
def test_cache_replays_without_http_and_never_stores_the_key(proxy, transformers_server, tmp_path, monkeypatch):
    monkeypatch.setenv("VLRL_TEST_KEY", "sk-SENTINEL-9f8e7d")
    spec = f"openai:{proxy.root}/v1@{transformers_server.model}?api_key_env=VLRL_TEST_KEY"
    reqs = [ChatRequest(user("cache me"), SamplingParams(max_tokens=4, seed=1))]

    def nonempty(resp):  # a random tiny model often answers "", and empty replies are never cached
        for c in resp.get("choices", []):
            c["message"]["content"] = c["message"].get("content") or "a reply"
        return resp

    proxy.route(lambda body: nonempty)
    with load_backend(spec, cache=tmp_path / "cache") as b:
        first = b.chat(reqs)[0]
        n_http = len(proxy.posts())
        second = b.chat(reqs)[0]
        assert first.ok and not first.cached and second.cached and second.texts == first.texts
        assert len(proxy.posts()) == n_http == 1
        assert b.stats.cache_hits == 1
    assert proxy.posts()[0].headers["authorization"] == "Bearer sk-SENTINEL-9f8e7d"  # the key was used ...
    files = list((tmp_path / "cache").iterdir())
    assert files and not any(b"SENTINEL" in f.read_bytes() for f in files)  # ... and never stored
    with load_backend(spec, cache=tmp_path / "cache") as b2:  # a rerun replays too
        assert b2.chat(reqs)[0].cached
    assert len(proxy.posts()) == 1


def json_text(body) -> str:
    import json

    return json.dumps(body)


def test_choices_from_samples_matches_space_prefixed_letters_and_whole_letters_only():
    from vlrl.core.backends.base import choices_from_samples, first_choice

    probs, mass = choices_from_samples(["B", " B.", "(C)", "Apple", "A"], [" A", " B", " C"])
    assert probs == pytest.approx({" A": 0.25, " B": 0.5, " C": 0.25}) and mass == pytest.approx(0.8)
    assert first_choice("Apples are red", ["A", "B"]) is None
    assert first_choice("10 apples", ["1", "10"]) == "10"
