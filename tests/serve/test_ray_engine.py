"""``--engine ray``: the same app as a Ray Serve deployment. Load from 8 concurrent clients, and one
replica killed mid-run: Ray Serve replaces it, clients retry, no row is lost or answered twice, and
every reward equals in-process scoring."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.support.jobs import child_env
from tests.support.serve import CAPRL_SETTINGS, caprl_rows, vlrl_service, wait_ready
from tests.support.servers import get_json

pytest.importorskip("ray.serve")
pytestmark = pytest.mark.slow

CLIENTS = 8
ROWS = 2000
PER_REQUEST = 50


def serve_args(replicas: int) -> list[str]:
    args = ["--engine", "ray", "--replicas", str(replicas), "-r", "caprl_qa", "--max-wait-ms", "10"]
    for k, v in CAPRL_SETTINGS.items():
        args += ["-s", f"{k}={v}"]
    return args



def descendants(root_pid: int) -> dict[int, str]:
    """pid → command line of every process below ``root_pid`` (ours: the service we started)."""
    out = subprocess.run(["ps", "-eo", "pid=,ppid=,args="], capture_output=True, text=True).stdout
    procs = {}
    for line in out.splitlines():
        pid, ppid, args = line.strip().split(None, 2) + [""] * (3 - len(line.strip().split(None, 2)))
        procs[int(pid)] = (int(ppid), args)
    found, frontier = {}, [root_pid]
    while frontier:
        p = frontier.pop()
        for pid, (ppid, args) in procs.items():
            if ppid == p and pid not in found:
                found[pid] = args
                frontier.append(pid)
    return found


def replicas(service_pid: int) -> set[int]:
    return {pid for pid, args in descendants(service_pid).items() if "ServeReplica:vlrl-reward" in args}


def expected(rows_by_client: list[list[dict]]) -> dict[str, float | None]:
    from vlrl.rewards import build_reward
    from vlrl.rewards.scoring import score_batch

    reward = build_reward("caprl_qa", **CAPRL_SETTINGS)
    out = {}
    for step, rows in enumerate(rows_by_client):
        for k in range(0, len(rows), 500):
            chunk = rows[k : k + 500]
            out.update({r["id"]: s.value for r, s in zip(chunk, score_batch(reward, chunk, step), strict=True)})
    return out


def run_clients(root: str, rows_by_client: list[list[dict]], progress: threading.Event | None = None,
                after: int = 0) -> tuple[dict[str, list], int]:
    """Each client sends its rows (its own step) in requests of PER_REQUEST; id → rewards received."""
    from vlrl.rewards.remote import RemoteClient

    got: dict[str, list] = {}
    lock = threading.Lock()
    retried = [0]

    def client(step: int) -> None:
        c = RemoteClient(root, timeout_s=60, retries=10, backoff_s=0.2, max_backoff_s=3)
        rows = rows_by_client[step]
        for k in range(0, len(rows), PER_REQUEST):
            for r in c.score(rows[k : k + PER_REQUEST], step):
                with lock:
                    got.setdefault(r["id"], []).append(r["reward"])
                    if progress is not None and len(got) >= after:
                        progress.set()
        with lock:
            retried[0] += c.retried

    with ThreadPoolExecutor(len(rows_by_client)) as pool:
        list(pool.map(client, range(len(rows_by_client))))
    return got, retried[0]


def test_load_and_a_killed_replica_lose_nothing(tmp_path):
    rows_by_client = [caprl_rows(ROWS, prefix=f"c{i}-") for i in range(CLIENTS)]
    want = expected(rows_by_client)
    assert len(set(want.values())) > 2
    with vlrl_service(serve_args(2), tmp_path / "serve.log") as service:
        root = service.root
        wait_ready(root)
        # load: 8 clients x 2,000 rows
        t0 = time.monotonic()
        got, _ = run_clients(root, rows_by_client)
        load_s = time.monotonic() - t0
        assert {k: len(v) for k, v in got.items()} == dict.fromkeys(want, 1)  # every row answered once
        assert {k: v[0] for k, v in got.items()} == want  # as in process
    print(f"load: {CLIENTS * ROWS} rows in {load_s:.1f}s")


def test_a_killed_replica_is_replaced_and_clients_lose_nothing(tmp_path):
    rows_by_client = [caprl_rows(ROWS // 4, prefix=f"k{i}-") for i in range(CLIENTS)]
    want = expected(rows_by_client)
    log = tmp_path / "serve.log"
    with vlrl_service(serve_args(2), log) as service:
        root, pid = service.root, service.pid
        wait_ready(root)
        before = replicas(pid)
        assert len(before) == 2, before
        progress = threading.Event()
        result: dict = {}

        def load() -> None:
            result["got"], result["retried"] = run_clients(root, rows_by_client, progress, 1000)

        worker = threading.Thread(target=load)
        worker.start()
        assert progress.wait(120)
        victim = sorted(before)[0]
        os.kill(victim, signal.SIGKILL)  # one replica dies mid-run
        worker.join(600)
        deadline = time.monotonic() + 120
        while len(after := replicas(pid)) < 2 and time.monotonic() < deadline:
            time.sleep(1)
    got = result["got"]
    assert victim not in after and len(after) == 2  # Ray Serve started a new replica
    assert {k: len(v) for k, v in got.items()} == dict.fromkeys(want, 1)  # nothing lost, nothing twice
    assert {k: v[0] for k, v in got.items()} == want
    print(f"killed replica {victim}; clients retried {result['retried']} request(s)")


def test_sigterm_lets_a_request_in_flight_finish(tmp_path):
    """Graceful shutdown under Ray Serve: a request being scored when the service is told to stop is
    answered (the replicas drain before the proxy goes), and the command exits 0."""
    import json
    import sys
    import urllib.request
    from pathlib import Path

    from tests.support.servers import free_port, server_process

    port = free_port()
    root = f"http://127.0.0.1:{port}"
    cmd = [str(Path(sys.executable).parent / "vlrl"), "serve", "reward", "-r", "tests.support.serve:slow_words",
           "-s", "delay=3.0", "--engine", "ray", "--port", str(port)]
    with server_process(cmd, child_env(), tmp_path / "serve.log", lambda: get_json(root + "/health").get("status") == "up",
                        "vlrl serve reward", 240) as proc:
        wait_ready(root)
        answer: dict = {}

        def score() -> None:
            req = urllib.request.Request(root + "/v1/score", data=json.dumps({"rows": [{"id": 1, "completion": "a b c"}]}).encode())
            with urllib.request.urlopen(req, timeout=120) as r:
                answer["r"] = (r.status, json.loads(r.read()))

        client = threading.Thread(target=score)
        client.start()
        time.sleep(1.0)  # the batch is being scored (3 s)
        proc.send_signal(signal.SIGTERM)
        client.join(120)
        code = proc.wait(120)
    assert answer.get("r") == (200, {"results": [{"id": 1, "reward": 3.0, "details": {}, "error": None}]})
    assert code == 0


def test_a_replica_log_line_never_holds_a_credential():
    """Replicas are Ray worker processes, not the vlrl command: their log lines go to Ray's log files
    and must pass the same redaction (here a reward that logs the key a server echoed)."""
    import json
    import shutil
    import sys
    import tempfile
    import urllib.request
    from pathlib import Path

    from tests.support.servers import free_port, server_process

    secret = "sk-replica-" + "w4" * 12
    ray_tmp = Path(tempfile.mkdtemp(prefix="vr", dir="/tmp"))  # short: Ray's socket paths live below it
    port = free_port()
    root = f"http://127.0.0.1:{port}"
    cmd = [str(Path(sys.executable).parent / "vlrl"), "serve", "reward", "-r", "tests.support.serve:echoing_words",
           "--engine", "ray", "--port", str(port)]
    env = child_env(OPENAI_API_KEY=secret, RAY_TMPDIR=str(ray_tmp))
    try:
        with server_process(cmd, env, ray_tmp / "serve.log", lambda: get_json(root + "/health").get("status") == "up",
                            "vlrl serve reward", 240) as proc:
            wait_ready(root)
            req = urllib.request.Request(root + "/v1/score", data=json.dumps({"rows": [{"id": 1, "completion": "a b"}]}).encode())
            with urllib.request.urlopen(req, timeout=60) as r:
                assert json.loads(r.read())["results"][0]["reward"] == 2.0
            time.sleep(2)  # Ray flushes its worker logs
            proc.send_signal(signal.SIGTERM)
            proc.wait(120)
        logs = [f for f in ray_tmp.rglob("*") if f.is_file() and not f.is_symlink()]
        assert not [f for f in logs if secret.encode() in f.read_bytes()]
        assert any(b"invalid key ***" in f.read_bytes() for f in logs), "the replica's line was not logged at all"
    finally:
        shutil.rmtree(ray_tmp, ignore_errors=True)
