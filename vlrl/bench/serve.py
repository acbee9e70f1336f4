"""``vlrl bench serve``: the reward service against in-process scoring, on one backend.

What a fleet pays for moving the reward behind HTTP, and what it gains from batching across
trainers. The same caprl_qa settings and answerer (default: a tiny random Qwen2 on this machine's
CPU, ``mode: exact``) score the same rows three ways, each in requests of ``request_rows`` rows
(a trainer's micro-batch):

* ``in_process``: :func:`vlrl.rewards.scoring.score_batch` called directly, one batch after another;
* ``service_1_client``: one client sending those batches one after another to the service
  (``POST /v1/score``, loopback);
* ``service_8_clients``: eight clients sending them concurrently, so the service can merge them
  (``max_batch_rows``, ``max_wait_ms``) into fuller answerer batches.

Each is repeated ``repeats`` times, interleaved, after one warm-up request per side (model load).
Per side: rows/s and the p50/p99 latency of one request (one ``score_batch`` call in process).
Ratios: ``service_vs_in_process`` (1 client, throughput) and ``batching_gain`` (8 clients over 1).
The service runs in a uvicorn thread of the bench process (the local engine); Ray Serve is not
measured here.
"""

from __future__ import annotations

import logging
import statistics
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from vlrl.bench.reward import synthetic_captions

logger = logging.getLogger(__name__)


def _percentile(values: list[float], q: float) -> float:
    vs = sorted(values)
    return vs[min(len(vs) - 1, max(0, round(q * (len(vs) - 1))))]


def _side(rows_n: int, seconds: float, latencies: list[float]) -> dict[str, Any]:
    return {"rows": rows_n, "seconds": round(seconds, 3), "rows_per_s": round(rows_n / seconds, 2),
            "latency_p50_s": round(_percentile(latencies, 0.5), 4), "latency_p99_s": round(_percentile(latencies, 0.99), 4),
            "requests": len(latencies)}


def bench_serve(answerer: str | None = None, n_rows: int = 96, request_rows: int = 8, clients: int = 8,
                repeats: int = 2, max_batch_rows: int = 64, max_wait_ms: float = 20.0) -> dict[str, Any]:
    from vlrl.rewards import build_reward
    from vlrl.rewards.remote import RemoteClient
    from vlrl.rewards.scoring import score_batch
    from vlrl.serve.app import build_app
    from vlrl.serve.engines import served_in_thread
    from vlrl.serve.service import ServeSettings

    tmp = None
    if answerer is None:
        from vlrl.core.tiny import make_tiny

        tmp = tempfile.TemporaryDirectory(prefix="vlrl-bench-serve-")
        answerer = f"hf:{make_tiny('qwen2', tmp.name)}"
    settings = {"answerer": answerer, "mode": "exact", "questions_per_caption": 2, "rounds": 1, "min_letter_mass": 0.0}
    captions, questions = synthetic_captions(n_rows)
    rows = [{"id": i, "completion": c, "questions": q} for i, (c, q) in enumerate(zip(captions, questions, strict=True))]
    chunks = [rows[k : k + request_rows] for k in range(0, len(rows), request_rows)]

    reward = build_reward("caprl_qa", **settings)
    conf = ServeSettings("caprl_qa", settings, max_batch_rows=max_batch_rows, max_wait_ms=max_wait_ms)
    app = build_app(conf)
    runs: dict[str, list[tuple[float, list[float]]]] = {"in_process": [], "service_1_client": [], "service_8_clients": []}
    batch_sizes: list[float] = []
    try:
        with served_in_thread(app) as root:
            client = RemoteClient(root, timeout_s=600, retries=0)
            score_batch(reward, chunks[0], 0)  # warm-up: both sides load the answerer once
            client.score(chunks[0], 0)

            def local(chunk: list[dict]) -> float:
                t0 = time.perf_counter()
                score_batch(reward, chunk, 0)
                return time.perf_counter() - t0

            def remote(chunk: list[dict]) -> float:  # the client holds no state: threads share it
                t0 = time.perf_counter()
                client.score(chunk, 0)
                return time.perf_counter() - t0

            for rep in range(repeats):
                t0 = time.perf_counter()
                lat = [local(c) for c in chunks]
                runs["in_process"].append((time.perf_counter() - t0, lat))
                t0 = time.perf_counter()
                lat = [remote(c) for c in chunks]
                runs["service_1_client"].append((time.perf_counter() - t0, lat))
                hist = app.state.metrics.batch_rows.collect()[0].samples
                before = {s.name: s.value for s in hist if s.name.endswith(("_sum", "_count"))}
                t0 = time.perf_counter()
                with ThreadPoolExecutor(clients) as pool:  # each thread is one trainer sending its batches
                    lat = list(pool.map(remote, chunks))
                runs["service_8_clients"].append((time.perf_counter() - t0, lat))
                after = {s.name: s.value for s in app.state.metrics.batch_rows.collect()[0].samples
                         if s.name.endswith(("_sum", "_count"))}
                calls = after["vlrl_serve_batch_rows_count"] - before["vlrl_serve_batch_rows_count"]
                batch_sizes.append((after["vlrl_serve_batch_rows_sum"] - before["vlrl_serve_batch_rows_sum"]) / calls)
                logger.info("repeat %d: in-process %.2fs, 1 client %.2fs, %d clients %.2fs", rep,
                            runs["in_process"][-1][0], runs["service_1_client"][-1][0], clients, runs["service_8_clients"][-1][0])
    finally:
        reward.close()
        if tmp is not None:
            tmp.cleanup()
    out: dict[str, Any] = {}
    for name, rs in runs.items():
        out[name] = _side(len(rows) * len(rs), sum(s for s, _ in rs), [x for _, lat in rs for x in lat])
    out["service_8_clients"]["mean_rows_per_reward_call"] = round(statistics.mean(batch_sizes), 2)
    out["service_vs_in_process"] = round(out["service_1_client"]["rows_per_s"] / out["in_process"]["rows_per_s"], 3)
    out["batching_gain"] = round(out["service_8_clients"]["rows_per_s"] / out["service_1_client"]["rows_per_s"], 3)
    out["settings"] = {"answerer": answerer if tmp is None else "tiny qwen2 (random weights, built in a temp folder)",
                       "reward": "caprl_qa", **{k: v for k, v in settings.items() if k != "answerer"},
                       "rows": n_rows, "request_rows": request_rows, "clients": clients, "repeats": repeats,
                       "max_batch_rows": max_batch_rows, "max_wait_ms": max_wait_ms, "engine": "local"}
    return out
