"""Prometheus metrics of a reward service (``GET /metrics``), through ``prometheus_client``.

One registry per service (never the process-global one), so two apps in one process (tests, the
benchmark) count apart. What an operator watches on a fleet's reward service:

* ``vlrl_serve_requests_total{endpoint,status}`` and ``vlrl_serve_request_seconds{endpoint}``;
* ``vlrl_serve_rows_total{outcome}``: ``scored``, ``none`` (the reward said "not applicable" or its
  backend failed) and ``error`` (a bad row);
* ``vlrl_serve_batch_rows`` and ``vlrl_serve_batch_seconds``: the size and time of each reward
  call, i.e. how full the batches the answerer sees are;
* ``vlrl_serve_backend_errors_total``: rows whose backend failed; ``vlrl_serve_cache_hits_total``:
  answers replayed from the response cache;
* ``vlrl_serve_subscore_mean{key}``: the running mean of every numeric sub-score (``qa_acc``,
  ``guard/any``...), as a trainer logs them per step;
* ``vlrl_serve_ready``: 1 once every backend passed pre-flight.

Labels never hold a request's content or a credential: endpoints are route names, keys are the
reward's own detail names.
"""

from __future__ import annotations

import math
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from vlrl.rewards.base import BACKEND_FAILED, Score

__all__ = ["CONTENT_TYPE_LATEST", "ServeMetrics"]

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 4096)


class ServeMetrics:
    def __init__(self) -> None:
        self.registry = r = CollectorRegistry()
        self.requests = Counter("vlrl_serve_requests", "Requests by endpoint and HTTP status", ["endpoint", "status"], registry=r)
        self.latency = Histogram("vlrl_serve_request_seconds", "Request latency", ["endpoint"], buckets=LATENCY_BUCKETS, registry=r)
        self.rows = Counter("vlrl_serve_rows", "Rows answered, by outcome", ["outcome"], registry=r)
        self.batch_rows = Histogram("vlrl_serve_batch_rows", "Rows per reward call", buckets=BATCH_BUCKETS, registry=r)
        self.batch_seconds = Histogram("vlrl_serve_batch_seconds", "Time of one reward call", buckets=LATENCY_BUCKETS, registry=r)
        self.backend_errors = Counter("vlrl_serve_backend_errors", "Rows whose reward backend failed", registry=r)
        self.cache_hits = Counter("vlrl_serve_cache_hits", "Backend answers replayed from the response cache", registry=r)
        self.subscore = Gauge("vlrl_serve_subscore_mean", "Running mean of each numeric sub-score", ["key"], registry=r)
        self.ready = Gauge("vlrl_serve_ready", "1 when every backend passed pre-flight", registry=r)
        self._sums: dict[str, tuple[float, int]] = {}
        self._hits_seen = 0

    def observe_request(self, endpoint: str, status: int, seconds: float) -> None:
        self.requests.labels(endpoint, str(status)).inc()
        self.latency.labels(endpoint).observe(seconds)

    def observe_rows(self, results: list[dict[str, Any]]) -> None:
        for r in results:
            self.rows.labels("error" if r["error"] else "none" if r["reward"] is None else "scored").inc()

    def observe_batch(self, n: int, seconds: float, scores: list[Any], reward: Any) -> None:
        self.batch_rows.observe(n)
        self.batch_seconds.observe(seconds)
        for s in scores:
            if not isinstance(s, Score):
                continue
            if s.details.get(BACKEND_FAILED):
                self.backend_errors.inc()
            for k, v in s.details.items():
                if isinstance(v, bool):
                    v = float(v)
                if isinstance(v, (int, float)) and math.isfinite(v):
                    total, count = self._sums.get(k, (0.0, 0))
                    self._sums[k] = (total + v, count + 1)
                    self.subscore.labels(k).set((total + v) / (count + 1))
        hits = _cache_hits(reward)
        if hits > self._hits_seen:
            self.cache_hits.inc(hits - self._hits_seen)
            self._hits_seen = hits

    def render(self) -> bytes:
        return generate_latest(self.registry)


def _cache_hits(reward: Any, seen: set[int] | None = None) -> int:
    """Cache hits of every backend a reward (and the rewards it wraps) holds, from their accounting."""
    from vlrl.core.backends.base import Backend
    from vlrl.rewards.base import Reward

    seen = set() if seen is None else seen
    if id(reward) in seen:
        return 0
    seen.add(id(reward))
    total = 0
    for value in list(vars(reward).values()) if hasattr(reward, "__dict__") else []:
        if isinstance(value, Backend):
            total += int(getattr(value.stats, "cache_hits", 0) or 0)
        elif isinstance(value, Reward):
            total += _cache_hits(value, seen)
    return total
