"""A 200 is not an answer: empty content or an error page as completion text is a failure of its
request (retried, never cached, never committed as a record), whichever backend produced it."""

from __future__ import annotations

import json

from tests.support.fake_openai import FakeOpenAI
from tests.support.long_commands import caption, run
from tests.support.scripted import Scripted
from vlrl.core.backends import ChatRequest, load_backend

HTML = "<!DOCTYPE html><html><head><title>502 Bad Gateway</title></head><body>nginx</body></html>"


def _ask(backend, n=1):
    return backend.chat([ChatRequest([{"role": "user", "content": "Describe."}], id=f"r{i}") for i in range(n)])


def test_empty_content_is_retried_then_an_error():
    replies = iter(["", "", "a red square"])
    with FakeOpenAI(reply=lambda body: next(replies)) as srv:
        b = load_backend(srv.spec(max_retries="2", backoff="0"))
        (res,) = _ask(b)
        assert res.ok and res.text == "a red square" and srv.chats == 3  # two empty replies were retried
        b.close()
    with FakeOpenAI(reply=lambda body: "") as srv:
        b = load_backend(srv.spec(max_retries="1", backoff="0"))
        (res,) = _ask(b)
        assert not res.ok and "empty" in res.error and srv.chats == 2 and res.texts == []
        b.close()


def test_an_html_page_as_text_is_never_cached_nor_replayed(tmp_path):
    with FakeOpenAI(reply=lambda body: HTML) as srv:
        b = load_backend(srv.spec(), cache=tmp_path / "cache")
        (res,) = _ask(b)
        assert not res.ok and "HTML page" in res.error
        assert len(b.cache) == 0
        (again,) = _ask(b)  # asked again, not replayed
        assert not again.ok and srv.chats == 2
        b.close()


def test_every_backend_kind_gets_the_same_rule(tmp_path):
    s = Scripted("m", answer=lambda r: {"r0": "", "r1": HTML, "r2": "fine"}[r.id])
    a, h, ok = _ask(s, 3)
    assert "r0: the reply is empty" in a.error and "r1: the reply is an HTML page" in h.error and ok.text == "fine"
    multi = Scripted("m", answer=lambda r: None)
    multi._chat = lambda reqs: [type(a)(texts=["", "a cat"], finish_reasons=["stop", "stop"]) for _ in reqs]
    (res,) = _ask(multi)
    assert res.ok and res.texts == ["", "a cat"]  # one empty sample among answers is an outcome, not a failure


def test_caption_never_commits_an_empty_caption_and_a_rerun_repairs(tmp_path):
    with FakeOpenAI(reply=lambda body: "") as srv:
        argv = caption(tmp_path, srv.spec())
        res = run(argv)
    assert res.returncode == 1, res.stderr[-2000:]  # nothing succeeded
    rows = [json.loads(x) for p in (tmp_path / "out" / "captions").glob("*.jsonl") for x in p.read_text().splitlines()]
    assert rows == []
    assert "the reply is empty" in res.stderr
    with FakeOpenAI() as srv:  # the server is fixed: the same command captions every image
        res = run(caption(tmp_path, srv.spec()))
    assert res.returncode == 0, res.stderr[-2000:]
    rows = [json.loads(x) for p in (tmp_path / "out" / "captions").glob("*.jsonl") for x in p.read_text().splitlines()]
    assert len(rows) == 4 and all(r["caption"].strip() for r in rows)


def test_an_image_whose_reply_stays_empty_is_a_counted_failure_with_its_reason_never_a_record(tmp_path):
    """After the retry budget a persistent empty reply is the image's backend failure: not committed,
    not cached, not quarantined (the next run asks again), exit 3, and its reason in the manifest."""
    from tests.support.long_commands import _parts, answer, colour_of

    broken = {"green": True}

    def reply(body):
        _, urls = _parts(body)
        return "" if broken["green"] and urls and colour_of(urls[0]) == "green" else answer(body)

    with FakeOpenAI(reply=reply) as srv:
        argv = caption(tmp_path, srv.spec(max_retries="2", backoff="0"))
        res = run(argv)
        assert res.returncode == 3, res.stderr[-2000:]
        assert srv.chats == 3 + 3  # three images answered once, the green one asked 1 + 2 retries
        out = tmp_path / "out"
        rows = [json.loads(x) for p in (out / "captions").glob("*.jsonl") for x in p.read_text().splitlines()]
        assert sorted(r["image_id"] for r in rows) == ["img0.png", "img2.png", "img3.png"]
        manifest = json.loads((out / "manifest.json").read_text())
        assert manifest["status"] == "incomplete" and manifest["this_run"]["failed"] == 1
        assert "the reply is empty" in manifest["this_run"]["failures"]["img1.png"]
        assert (out / "quarantine.jsonl").read_text() == ""
        broken["green"] = False  # the server answers now: only the failed image is asked, nothing replayed
        before = srv.chats
        res = run(argv)
        assert res.returncode == 0 and srv.chats == before + 1, res.stderr[-2000:]
    rows = [json.loads(x) for p in (out / "captions").glob("*.jsonl") for x in p.read_text().splitlines()]
    assert sorted(r["image_id"] for r in rows) == ["img0.png", "img1.png", "img2.png", "img3.png"]


def test_the_fake_server_answers_a_full_burst_of_connections_without_resets():
    """The fake server every job-level test leans on must not drop connections itself: with the
    standard library's listen queue of 5, a burst of 16 connections had some reset (``ReadError``),
    which a test with ``max_retries=0`` reports as the code's failure."""
    with FakeOpenAI() as srv:
        b = load_backend(srv.spec(concurrency="64"))
        try:
            results = [r for _ in range(5) for r in _ask(b, 64)]
        finally:
            b.close()
    assert [r.error for r in results if not r.ok] == [] and len(srv.bodies) == 320  # (a list append is atomic)
