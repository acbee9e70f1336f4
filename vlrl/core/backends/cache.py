"""A persistent response cache in front of any backend.

Reruns and resumed pipelines must never pay twice for the same model call. The cache is a SQLite
file (atomic commits survive ``kill -9``; several processes may share it) keyed by a hash of the
backend identity (kind + model + anything that changes answers), the full request (messages with
images hashed by pixels, sampling parameters, seed). API keys are never part of a backend identity,
so they never reach the file.

Only successful, non-empty results are stored: a failure (timeout, 500, a malformed reply), an
empty answer or an HTML error page as text (:func:`~vlrl.core.backends.base.answer_problem`) is
asked again on the next run, never replayed, and such an entry left by an older cache is not
replayed either. Choice scores are keyed by the method
that produced them (``logits``/``logprobs`` exact, ``sampled`` estimate): a sampled estimate made
while a server looked unable to return logprobs is never replayed as an exact score.
Greedy requests and seeded sampling are deterministic and cache safely. Unseeded sampling is cached
too: a resumed pipeline must replay exactly what it already saw (that is the point), and callers who
want fresh samples pass a new seed.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import sqlite3
import threading
from collections.abc import Sequence
from pathlib import Path

from vlrl.core.backends.base import (
    Backend,
    BackendError,
    ChatRequest,
    ChatResult,
    ChoiceRequest,
    ChoiceResult,
    answer_problem,
    request_key,
)
from vlrl.core.progress import requests_done

logger = logging.getLogger(__name__)


class ResponseCache:
    """Key → JSON value store on SQLite (thread-safe, process-safe)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        try:
            self._db = sqlite3.connect(str(self.path), timeout=60, check_same_thread=False)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("CREATE TABLE IF NOT EXISTS responses (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
            self._db.commit()
        except sqlite3.Error as e:  # a garbage file, a folder in the way, a read-only location
            raise BackendError(
                f"response cache {self.path}: cannot open it as SQLite ({e}); move it away to start a fresh cache"
            ) from None

    def get_many(self, keys: Sequence[str]) -> dict[str, dict]:
        out: dict[str, dict] = {}
        with self._lock:
            for i in range(0, len(keys), 500):
                chunk = list(keys[i : i + 500])
                q = f"SELECT key, value FROM responses WHERE key IN ({','.join('?' * len(chunk))})"
                out.update((k, json.loads(v)) for k, v in self._db.execute(q, chunk))
        return out

    def put_many(self, items: dict[str, dict]) -> None:
        if not items:
            return
        with self._lock:
            self._db.executemany(
                "INSERT OR REPLACE INTO responses (key, value) VALUES (?, ?)",
                [(k, json.dumps(v)) for k, v in items.items()],
            )
            self._db.commit()

    def __len__(self) -> int:
        with self._lock:
            return self._db.execute("SELECT COUNT(*) FROM responses").fetchone()[0]

    def close(self) -> None:
        with self._lock:
            self._db.close()


class CachedBackend(Backend):
    """Wraps a backend; answers repeated requests from a :class:`ResponseCache`.

    Identical deterministic requests (greedy, or seeded sampling) *within* one batch are sent once.
    """

    def __init__(self, inner: Backend, cache: ResponseCache | str | Path) -> None:
        super().__init__(inner.model)
        self.inner = inner
        self.kind = inner.kind
        self.raw_prompts = inner.raw_prompts
        self.observed = False  # the inner backend reports real model calls; replays are not evidence
        self.cache = cache if isinstance(cache, ResponseCache) else ResponseCache(cache)
        self.stats = inner.stats  # one set of counters for the pair

    def identity(self) -> dict:
        return self.inner.identity()

    def chat(self, requests: Sequence[ChatRequest]) -> list[ChatResult]:
        keys = [
            request_key(self.identity(), {"op": "chat", "messages": r.messages, "sampling": r.sampling.to_dict(),
                                          # only when set: keys made before schemas existed stay valid
                                          **({"json_schema": r.json_schema} if r.json_schema is not None else {}),
                                          **({"prompt": r.prompt} if r.prompt is not None else {})})
            for r in requests
        ]
        # Unseeded sampling is not deterministic: k identical requests in one batch ask for k
        # independent draws, so each occurrence gets a key of its own (and replays as itself).
        seen: dict[str, int] = {}
        for i, r in enumerate(requests):
            if r.sampling.temperature > 0 and r.sampling.seed is None:
                k = seen.get(keys[i], 0)
                seen[keys[i]] = k + 1
                if k:
                    keys[i] = f"{keys[i]}#{k}"
        return self._through(
            requests, keys, self.inner.chat, lambda d: ChatResult(**d),
            # an empty reply or an error page is asked again, never stored nor replayed
            lambda r: r.ok and answer_problem(r.texts) is None,
        )

    def score_choices(self, requests: Sequence[ChoiceRequest]) -> list[ChoiceResult]:
        def key(r: ChoiceRequest, method: str | None) -> str:
            payload = {
                "op": "choices",
                "messages": r.messages,
                "choices": r.choices,
                "prefix": r.prefix,
                "samples": r.samples,
                "seed": r.seed,
                "method": method,
            }
            if r.temperature != 1.0:  # keys made before temperatures existed stay valid at T=1
                payload["temperature"] = r.temperature
            if method == "logprobs":
                # HTTP scores from before the exact letter route read the listed top logprobs only,
                # and on a server that lists no letter they are wrong: never replay them
                payload["letters"] = "exact"
            return request_key(self.identity(), payload)

        expected = self.inner.choice_method()
        keys = [key(r, expected) for r in requests]
        by_key = dict(zip(keys, requests, strict=True))
        return self._through(
            requests, keys, self.inner.score_choices, lambda d: ChoiceResult(**d),
            lambda r: r.ok and bool(r.probs), store_key=lambda k, res: key(by_key[k], res.method),
        )

    def _through(self, requests, keys, call, build, storable, store_key=None):
        hits = self.cache.get_many(sorted(set(keys)))
        # an entry a cache from before this rule kept (an HTML page as an answer) is asked again
        hits = {k: v for k, v in hits.items() if storable(build(v))}
        todo: dict[str, object] = {}
        for k, r in zip(keys, requests, strict=True):
            if k not in hits and k not in todo:
                todo[k] = r
        n_hits = sum(k in hits for k in keys)
        requests_done(n_hits)  # answered already: the bar moves before the model is asked the rest
        fresh = dict(zip(todo, call(list(todo.values())), strict=True)) if todo else {}
        requests_done(len(keys) - n_hits - len(todo))  # repeats in the batch, answered with their first
        self.cache.put_many(
            {(store_key(k, v) if store_key else k): _to_dict(v) for k, v in fresh.items() if storable(v)}
        )
        self.stats.add(cache_hits=n_hits)
        out = []
        for k in keys:
            if k in hits:
                res = build(hits[k])
                res.cached = True
            else:
                res = dataclasses.replace(fresh[k])  # duplicates in a batch get their own object
            out.append(res)
        return out

    def _chat(self, requests):  # pragma: no cover - chat() is overridden
        raise AssertionError

    def _score_choices(self, requests):  # pragma: no cover - score_choices() is overridden
        raise AssertionError

    def close(self) -> None:
        self.inner.close()
        self.cache.close()


def _to_dict(result) -> dict:
    d = dataclasses.asdict(result)
    d.pop("cached", None)
    return d
