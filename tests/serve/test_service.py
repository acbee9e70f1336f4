"""The reward service on loopback: parity with ``vlrl reward score``, batching, row errors, limits,
readiness, auth and the OpenRLHF / CapRL++ payloads."""

from __future__ import annotations

import json
import random
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.support.jobs import child_env
from tests.support.serve import CAPRL_SETTINGS, QUESTION_BANK, WORDS, app_server, caprl_rows
from tests.support.servers import free_port
from vlrl.serve.app import build_app
from vlrl.serve.service import ServeSettings


def post(root: str, path: str, body, headers: dict | None = None) -> tuple[int, dict, dict]:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    req = urllib.request.Request(root + path, data=data, headers={"Content-Type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, dict(r.headers), json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), json.loads(e.read() or b"{}")


def get(root: str, path: str, headers: dict | None = None) -> tuple[int, str]:
    req = urllib.request.Request(root + path, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def in_process(tmp_path, rows, batch_size: int) -> dict:
    """``vlrl reward score``'s library call on the same rows: id → output record."""
    from vlrl.rewards import build_reward
    from vlrl.rewards.scoring import score_rows_file

    src = tmp_path / "rows.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    reward = build_reward("caprl_qa", **CAPRL_SETTINGS)
    score_rows_file(reward, src, tmp_path / "out.jsonl", batch_size=batch_size, progress=False)
    return {r["id"]: r for r in map(json.loads, (tmp_path / "out.jsonl").read_text().splitlines())}


def test_same_rewards_as_reward_score_however_rows_are_split(tmp_path):
    rows = caprl_rows(48)
    batch = 16
    want = in_process(tmp_path, rows, batch)
    assert len({r["reward"] for r in want.values()}) > 2, "rewards all alike: the comparison would prove nothing"
    conf = ServeSettings("caprl_qa", dict(CAPRL_SETTINGS), max_batch_rows=7, max_wait_ms=30)
    with app_server(build_app(conf)) as root:
        # batch k of reward score is step k; send each step's rows in random pieces, concurrently
        pieces = []
        rng = random.Random(0)
        for k in range(0, len(rows), batch):
            chunk = rows[k : k + batch]
            cut = sorted(rng.sample(range(1, len(chunk)), 3))
            pieces += [(k // batch, p) for p in (chunk[: cut[0]], chunk[cut[0] : cut[1]], chunk[cut[1] : cut[2]], chunk[cut[2] :])]
        rng.shuffle(pieces)
        with ThreadPoolExecutor(8) as pool:
            answers = list(pool.map(lambda sp: post(root, "/v1/score", {"rows": sp[1], "step": sp[0]}), pieces))
    got = {}
    for (_, sent), (status, _, body) in zip(pieces, answers, strict=True):
        assert status == 200
        assert [r["id"] for r in body["results"]] == [r["id"] for r in sent]  # its own rows, in order
        got.update({r["id"]: r for r in body["results"]})
    assert got.keys() == want.keys()
    for rid, r in got.items():
        assert r["reward"] == want[rid]["reward"], rid
        assert r["details"] == want[rid]["details"], rid
        assert r["error"] is None


def test_another_step_draws_differently(tmp_path):
    """The step reaches the reward: the same rows at step 0 and step 5 are asked different draws."""
    rows = caprl_rows(30)
    conf = ServeSettings("caprl_qa", dict(CAPRL_SETTINGS))
    with app_server(build_app(conf)) as root:
        a = post(root, "/v1/score", {"rows": rows, "step": 0})[2]["results"]
        b = post(root, "/v1/score", {"rows": rows, "step": 5})[2]["results"]
        again = post(root, "/v1/score", {"rows": rows, "step": 0})[2]["results"]
    assert [r["reward"] for r in a] == [r["reward"] for r in again]
    assert [r["reward"] for r in a] != [r["reward"] for r in b]


def test_concurrent_requests_share_batches_and_get_their_own_rows():
    conf = ServeSettings("caprl_qa", dict(CAPRL_SETTINGS), max_batch_rows=64, max_wait_ms=400)
    app = build_app(conf)
    with app_server(app) as root:
        reqs = [caprl_rows(4, prefix=f"c{i}-") for i in range(8)]
        with ThreadPoolExecutor(8) as pool:
            answers = list(pool.map(lambda rs: post(root, "/v1/score", {"rows": rs, "step": 0}), reqs))
        metrics = get(root, "/metrics")[1]
    for sent, (status, _, body) in zip(reqs, answers, strict=True):
        assert status == 200 and [r["id"] for r in body["results"]] == [r["id"] for r in sent]
    # some reward call saw more rows than any one request sent
    sizes = app.state.metrics.batch_rows.collect()[0].samples
    count = next(s.value for s in sizes if s.name.endswith("_count"))
    total = next(s.value for s in sizes if s.name.endswith("_sum"))
    assert total == 32 and count < 8
    for name in ("vlrl_serve_requests_total", "vlrl_serve_rows_total", "vlrl_serve_batch_rows_bucket",
                 "vlrl_serve_request_seconds_bucket", "vlrl_serve_backend_errors_total", "vlrl_serve_cache_hits_total",
                 'vlrl_serve_subscore_mean{key="qa_acc"}'):
        assert name in metrics, name


def test_a_bad_row_gets_its_error_and_the_rest_are_scored():
    conf = ServeSettings("caprl_qa", dict(CAPRL_SETTINGS))
    rows = [*caprl_rows(3), {"id": "noq", "completion": "A caption."}, {"completion": "no id"},
            {"id": "num", "completion": 7, "questions": QUESTION_BANK}, "not a row"]
    with app_server(build_app(conf)) as root:
        status, _, body = post(root, "/v1/score", {"rows": rows, "step": 0})
    assert status == 200
    res = body["results"]
    assert len(res) == 7
    assert res[1]["reward"] is not None and res[1]["error"] is None
    assert "missing column(s) 'questions'" in res[3]["error"]
    assert "missing 'id'" in res[4]["error"] and res[4]["id"] is None
    assert "must be a string" in res[5]["error"]
    assert "expected an object" in res[6]["error"]
    assert all(r["reward"] is None and r["details"]["error"] == r["error"] for r in res[3:])


def test_limits_and_malformed_bodies():
    conf = ServeSettings(WORDS, {}, max_rows=5, max_body_bytes=4000)
    with app_server(build_app(conf)) as root:
        rows = [{"id": i, "completion": "words " * 3} for i in range(6)]
        status, _, body = post(root, "/v1/score", {"rows": rows})
        assert status == 413 and "6 rows" in body["detail"]
        status, _, body = post(root, "/v1/score", {"rows": [{"id": 1, "completion": "x" * 5000}]})
        assert status == 413 and "limit" in body["detail"]
        assert post(root, "/v1/score", b"{not json")[0] == 400
        assert post(root, "/v1/score", {"rows": "x"})[0] == 400
        assert post(root, "/v1/score", {"rows": [], "step": -1})[0] == 400
        status, _, body = post(root, "/v1/score", {"rows": rows[:5]})
        assert status == 200 and all(isinstance(r["reward"], float) for r in body["results"])


def test_dead_backend_is_503_with_the_reason_never_rows():
    dead = f"openai:http://127.0.0.1:{free_port()}/v1@answerer"
    conf = ServeSettings("caprl_qa", {**CAPRL_SETTINGS, "answerer": dead}, reprobe_s=0.0)
    with app_server(build_app(conf)) as root:
        assert get(root, "/health")[0] == 200
        status, text = get(root, "/ready")
        assert status == 503 and "127.0.0.1" in json.loads(text)["reason"]
        status, headers, body = post(root, "/v1/score", {"rows": caprl_rows(3), "step": 0})
        assert status == 503 and "not ready" in body["detail"] and headers.get("retry-after")
        assert "vlrl_serve_ready 0.0" in get(root, "/metrics")[1]


def test_binding_beyond_loopback_needs_a_token(monkeypatch):
    from vlrl.serve.config import check_binding

    check_binding("127.0.0.1", None)
    check_binding("::1", None)
    with pytest.raises(ValueError, match="--token-env"):
        check_binding("0.0.0.0", None)
    check_binding("0.0.0.0", "VLRL_SERVE_TOKEN")
    monkeypatch.delenv("VLRL_T_UNSET", raising=False)
    with pytest.raises(ValueError, match="VLRL_T_UNSET"):
        build_app(ServeSettings(WORDS, {}, token_env="VLRL_T_UNSET"))


def test_the_token_is_required_and_never_shown(monkeypatch, caplog):
    secret = "sk-serve-" + "q7" * 12
    monkeypatch.setenv("VLRL_T_TOKEN", secret)
    conf = ServeSettings(WORDS, {}, token_env="VLRL_T_TOKEN")
    rows = {"rows": [{"id": 1, "completion": f"caption {secret}"}, {"id": 2}]}
    with app_server(build_app(conf)) as root:
        assert get(root, "/health")[0] == 200  # liveness stays open
        assert get(root, "/ready")[0] == 401
        assert post(root, "/v1/score", rows)[0] == 401
        assert post(root, "/v1/score", rows, {"Authorization": "Bearer wrong"})[0] == 401
        assert post(root, "/v1/score", rows, {"Authorization": f"Basic {secret}"})[0] == 401
        assert post(root, "/v1/score", rows, {"Authorization": f"bearer {secret}"})[0] == 200  # scheme: any case
        status, _, body = post(root, "/v1/score", rows, {"Authorization": f"Bearer {secret}"})
        assert status == 200 and body["results"][1]["error"]
        metrics = get(root, "/metrics", {"Authorization": f"Bearer {secret}"})[1]
    assert secret not in metrics and secret not in json.dumps(body["results"][1])
    assert secret not in caplog.text


def test_openrlhf_payload():
    conf = ServeSettings("caprl_qa", dict(CAPRL_SETTINGS))
    rows = caprl_rows(3)
    body = {"query": ["<prompt>" + r["completion"] for r in rows], "prompts": ["<prompt>"] * 3,
            "labels": [r["questions"] for r in rows]}
    with app_server(build_app(conf)) as root:
        status, _, ans = post(root, "/openrlhf", body)
        _, _, v1 = post(root, "/v1/score", {"rows": rows, "step": 0})
        assert post(root, "/openrlhf", {"query": ["a"], "labels": []})[0] == 200
        assert post(root, "/openrlhf", {"query": ["a", "b"], "labels": [1]})[0] == 400
    assert status == 200
    assert ans["rewards"] == [r["reward"] for r in v1["results"]]  # the prompt was cut off the query
    assert ans["scores"] == ans["rewards"] and "qa_acc" in ans["extra_logs"]
    assert ans["rewards"][0] is None and ans["errors"][0]["index"] == 0  # row 0 has no questions


def test_caprl_plus_plus_payload():
    from vlrl.serve.compat import caprl_question

    q = caprl_question("What colour is the circle?\n   - A) red\n   - B) blue\n   - C) Can not answer based on the caption", "B")
    assert q == {"question": "What colour is the circle?", "options": ["red", "blue"], "answer": "blue"}
    conf = ServeSettings("caprl_qa", dict(CAPRL_SETTINGS))
    qa = [["What colour is the circle?\n   - A) red\n   - B) blue\n   - C) green\n   - D) Can not answer based on the caption", "A"],
          ["How many squares are there?\n   - A) one\n   - B) two\n   - C) three", "C"]]
    body = {"prompts": [["A red circle and three squares.", qa], ["Nothing.", []]], "query": [], "labels": []}
    with app_server(build_app(conf)) as root:
        status, _, ans = post(root, "/get_reward", body)
        assert post(root, "/get_reward", {"prompts": [["only a caption"]]})[0] == 400
    assert status == 200
    assert isinstance(ans["rewards"][0], float) and ans["qa_rewards"][0] == ans["rewards"][0]
    assert ans["rewards"][1] is None and ans["errors"] == [{"index": 1, "error": "no usable question"}]


def test_shutdown_drains_requests_in_flight():
    import threading

    import uvicorn

    conf = ServeSettings("tests.support.serve:slow_words", {"delay": "1.0"})
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(build_app(conf), host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    root = f"http://127.0.0.1:{port}"
    while not server.started:
        thread.join(0.05)
    answer: dict = {}
    client = threading.Thread(target=lambda: answer.update(r=post(root, "/v1/score", {"rows": [{"id": 1, "completion": "a b"}]})))
    client.start()
    thread.join(0.3)  # the request is being scored
    server.should_exit = True  # SIGINT/SIGTERM do this
    client.join(30)
    thread.join(30)
    status, _, body = answer["r"]
    assert status == 200 and body["results"][0]["reward"] == 2.0  # finished, not cut off
    assert not thread.is_alive()
    with pytest.raises(OSError):
        urllib.request.urlopen(root + "/health", timeout=2)


def test_command_refuses_a_public_address_without_a_token_and_picks_a_recipe_block(tmp_path):
    import subprocess
    import sys
    from pathlib import Path

    from vlrl.serve.config import reward_block

    vlrl = Path(sys.executable).parent / "vlrl"
    proc = subprocess.run([str(vlrl), "serve", "reward", "-r", WORDS, "--host", "0.0.0.0"], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 2 and "--token-env" in proc.stderr
    recipe = tmp_path / "r.yaml"
    recipe.write_text("rewards:\n  - {name: caprl_qa, settings: {mode: exact}, guards: {policy: veto}}\n"
                      "  - {name: hfrrf}\n  - {name: remote, settings: {url: 'http://x:1'}}\n")
    with pytest.raises(ValueError, match="several.*caprl_qa, hfrrf"):
        reward_block(None, {}, str(recipe))
    assert reward_block("caprl_qa", {"rounds": 2}, str(recipe)) == (
        "caprl_qa", {"mode": "exact", "rounds": 2, "guards": {"policy": "veto"}})


def test_a_backend_that_dies_mid_run_turns_the_service_unready():
    from tests.support.fake_openai import FakeOpenAI

    fake = FakeOpenAI(model="answerer", reply=lambda body: "B").__enter__()
    settings = {**CAPRL_SETTINGS, "answerer": fake.spec(), "mode": "sample"}
    conf = ServeSettings("caprl_qa", settings, reprobe_s=0.0)
    with app_server(build_app(conf)) as root:
        assert get(root, "/ready")[0] == 200
        status, _, body = post(root, "/v1/score", {"rows": caprl_rows(3), "step": 0})
        assert status == 200 and isinstance(body["results"][1]["reward"], float)
        fake.__exit__(None, None, None)  # the answerer goes away
        status, headers, body = post(root, "/v1/score", {"rows": caprl_rows(3), "step": 1})
        assert status == 503 and "not ready" in body["detail"] and headers.get("retry-after")
        assert get(root, "/ready")[0] == 503
        metrics = get(root, "/metrics")[1]
    errors = [ln for ln in metrics.splitlines() if ln.startswith("vlrl_serve_backend_errors_total")]
    assert errors and float(errors[0].split()[-1]) >= 2  # the rows whose backend failed were counted


def test_a_request_cancelled_mid_batch_does_not_fail_the_others_in_its_batch():
    """A request whose client went away is cancelled (Ray Serve cancels a disconnected HTTP request;
    uvicorn cancels what outlives its graceful-shutdown timeout) while its rows are being scored:
    the other requests of that batch still get their own rows back."""
    import asyncio

    from vlrl.serve.service import RewardService

    async def run() -> tuple[list, list]:
        svc = RewardService(ServeSettings("tests.support.serve:slow_words", {"delay": "0.5"}, max_wait_ms=200))
        svc.probe(True)
        gone = asyncio.create_task(svc.score([{"id": "gone", "completion": "x y"}], 0))
        kept = asyncio.create_task(svc.score([{"id": "kept", "completion": "x y z"}], 0))
        await asyncio.sleep(0.35)  # both queued in one batch, which is running now
        gone.cancel()
        first = await asyncio.wait_for(kept, 30)
        after = await asyncio.wait_for(svc.score([{"id": "next", "completion": "q"}], 0), 30)
        svc.close()
        return first, after

    first, after = asyncio.run(run())
    assert first == [{"id": "kept", "reward": 3.0, "details": {}, "error": None}]
    assert after[0]["reward"] == 1.0


def test_a_slow_re_probe_never_blocks_the_other_requests():
    """A backend that accepts connections and never answers: the re-probe a /v1/score request
    triggers waits out its timeout off the event loop, so /health (a liveness probe) and other
    requests are answered meanwhile."""
    import socket
    import threading

    hole = socket.socket()
    hole.bind(("127.0.0.1", 0))
    hole.listen(64)  # connections are accepted by the kernel and never answered
    spec = f"openai:http://127.0.0.1:{hole.getsockname()[1]}/v1@answerer"
    app = build_app(ServeSettings("caprl_qa", {**CAPRL_SETTINGS, "answerer": spec}, reprobe_s=0.0))
    with app_server(app) as root:
        service = app.state.holder["service"]
        answer: dict = {}
        scorer = threading.Thread(target=lambda: answer.update(r=post(root, "/v1/score", {"rows": caprl_rows(2)})))
        scorer.start()
        while not service._probe_lock.locked() and scorer.is_alive():
            scorer.join(0.01)
        assert get(root, "/health")[0] == 200
        assert service._probe_lock.locked(), "/health waited for the re-probe to end"
        assert get(root, "/ready")[0] == 503  # a probe already running: its last verdict, at once
        scorer.join(60)
    hole.close()
    assert answer["r"][0] == 503


def test_replicas_without_the_ray_engine_is_refused_not_ignored():
    import subprocess
    import sys
    from pathlib import Path

    vlrl = Path(sys.executable).parent / "vlrl"
    proc = subprocess.run([str(vlrl), "serve", "reward", "-r", WORDS, "--replicas", "4", "--port", str(free_port())],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "--replicas" in proc.stderr and "--engine ray" in proc.stderr


def test_sigterm_stops_the_local_engine_with_exit_code_0(tmp_path):
    """SIGTERM is how systemd and Kubernetes stop a service: a clean drain is exit code 0, as the
    command's help says, not a process killed by the signal."""
    import signal
    import sys
    from pathlib import Path

    from tests.support.servers import get_json, server_process

    port = free_port()
    cmd = [str(Path(sys.executable).parent / "vlrl"), "serve", "reward", "-r", WORDS, "--port", str(port)]
    root = f"http://127.0.0.1:{port}"
    with server_process(cmd, child_env(), tmp_path / "serve.log",
                        lambda: get_json(root + "/health").get("status") == "up", "vlrl serve reward", 120) as proc:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0
