"""The ``remote`` reward: any recipe's reward, scored by a ``vlrl serve reward`` service.

    rewards:
      - name: remote
        settings: {url: "http://reward-node:8765", timeout_s: 60, retries: 4, failure_budget: 0}

Each reward call becomes one ``POST /v1/score`` with the batch's completions and every dataset
column TRL passes (those that are JSON: an in-memory image is not sent; the served reward reads its
images from their paths), and the trainer's ``global_step`` as ``step``, so the draws are those of
the same reward in process. A dataset ``id`` column is sent as ``image_id`` (a row's ``id`` is its
place in the request), which is how caprl_qa keys the draws of an image in process. The rows'
``details`` come back as the reward's sub-scores, logged as ``remote/<key>``.

What can go wrong, and what happens (a failed request is never a 0.0):

* a connection error, a timeout, a 429 or a 5xx: the request is retried ``retries`` times with
  exponential backoff from ``backoff_s`` (at most ``max_backoff_s``), waiting what the service's
  ``Retry-After`` asks when it says;
* a 413 (more rows or bytes than the service takes) halves the rows per request and sends them
  again; a single row it refuses is a failed request;
* a request that still fails (or another 4xx: a bad token, a malformed request) counts against
  ``failure_budget``: within it, the batch's rewards are ``None`` with ``backend_failed`` and the
  reason (the trainer's no-signal stop counts them); past it, :class:`RemoteRewardFailed` ends
  training with one line and a non-zero exit;
* a row the service could not score is ``None`` with its reason in the details, as in process.

The verl adapter uses the same reward (``reward: remote`` in ``reward_kwargs``;
:mod:`vlrl.training.verl`), so verl's per-sample calls reach the service, which batches them.
"""

from __future__ import annotations

import http.client
import json
import logging
import os
import random
import threading
import time
import urllib.error
import urllib.request
from typing import Any

from vlrl.core.redact import redact, register_secret_env
from vlrl.rewards import register_reward
from vlrl.rewards.base import BACKEND_FAILED, Reward, Score

logger = logging.getLogger(__name__)

RETRYABLE = {408, 425, 429, 500, 502, 503, 504}


def pause(seconds: float) -> None:
    """The wait between two tries (one name, so a test can record the waits instead)."""
    time.sleep(seconds)


class RemoteRewardFailed(RuntimeError):
    """The reward service failed past the failure budget: training cannot go on without rewards."""


class RequestTooLarge(RemoteRewardFailed):
    """The service answered 413: the request holds more rows (or bytes) than it takes."""


class RemoteClient:
    """``POST URL/v1/score`` with timeouts, retries and backoff; raises :class:`RemoteRewardFailed`."""

    def __init__(self, url: str, *, token_env: str | None = None, timeout_s: float = 60.0, retries: int = 4,
                 backoff_s: float = 0.5, max_backoff_s: float = 10.0) -> None:
        if not isinstance(url, str) or not url.startswith(("http://", "https://")):
            raise ValueError(f"remote: url must be http(s)://HOST:PORT, got {url!r}")
        self.url = url.rstrip("/")
        self.token_env = token_env
        if token_env:
            register_secret_env(token_env)
        self.timeout_s = float(timeout_s)
        self.retries = int(retries)
        self.backoff_s = float(backoff_s)
        self.max_backoff_s = float(max_backoff_s)
        self.requests = 0
        self.retried = 0

    def _headers(self) -> dict[str, str]:
        headers = {"Content-Type": "application/json"}
        if self.token_env:
            token = os.environ.get(self.token_env, "")
            if not token:
                raise RemoteRewardFailed(f"remote: the token variable {self.token_env} is empty or unset")
            headers["Authorization"] = f"Bearer {token}"
        return headers

    def _once(self, method: str, path: str, body: bytes | None) -> tuple[int, dict[str, str], bytes]:
        req = urllib.request.Request(self.url + path, data=body, method=method, headers=self._headers())
        try:
            with urllib.request.urlopen(req, timeout=self.timeout_s) as r:
                return r.status, dict(r.headers), r.read()
        except urllib.error.HTTPError as e:
            return e.code, dict(e.headers or {}), e.read()

    def request(self, method: str, path: str, payload: Any = None) -> Any:
        """The JSON answer; retries what can succeed later, raises :class:`RemoteRewardFailed` otherwise."""
        body = None if payload is None else json.dumps(payload).encode()
        why = ""
        for attempt in range(self.retries + 1):
            wait = min(self.max_backoff_s, self.backoff_s * 2**attempt) * (0.5 + random.random() / 2)
            self.requests += 1
            try:
                status, headers, raw = self._once(method, path, body)
            except (OSError, TimeoutError, http.client.HTTPException) as e:
                # refused, reset, timed out, or an answer cut off (a service killed while it wrote)
                why = f"{type(e).__name__}: {e}"
            else:
                if status == 200:
                    try:
                        return json.loads(raw)
                    except ValueError:
                        why = "the answer is not JSON"
                else:
                    why = f"HTTP {status}: {_detail(raw)}"
                    if status == 413:
                        raise RequestTooLarge(redact(f"reward service {self.url}{path} failed: {why}"))
                    if status not in RETRYABLE:
                        break
                    after = headers.get("Retry-After") or headers.get("retry-after")
                    if after and after.strip().replace(".", "", 1).isdigit():
                        wait = min(self.max_backoff_s, float(after))
            if attempt < self.retries:
                self.retried += 1
                logger.warning("remote reward %s%s: %s; retry %d of %d in %.1fs", redact(self.url), path, redact(why),
                               attempt + 1, self.retries, wait)
                pause(wait)
        raise RemoteRewardFailed(redact(f"reward service {self.url}{path} failed: {why}"))

    def score(self, rows: list[dict], step: int) -> list[dict]:
        answer = self.request("POST", "/v1/score", {"rows": rows, "step": int(step)})
        results = answer.get("results") if isinstance(answer, dict) else None
        if (not isinstance(results, list) or not all(isinstance(r, dict) for r in results)
                or [r.get("id") for r in results] != [r["id"] for r in rows]):
            raise RemoteRewardFailed(f"reward service {redact(self.url)} answered rows that are not the ones sent")
        return results

    def ready(self) -> str | None:
        """None when ``GET /ready`` says 200 (one try), else why not."""
        req = urllib.request.Request(self.url + "/ready", headers=self._headers())
        try:
            with urllib.request.urlopen(req, timeout=min(self.timeout_s, 10.0)):
                return None
        except urllib.error.HTTPError as e:
            return redact(f"reward service {self.url} is not ready (HTTP {e.code}: {_detail(e.read())})")
        except (OSError, TimeoutError, http.client.HTTPException) as e:
            return redact(f"reward service {self.url} does not answer ({type(e).__name__}: {e})")


def _detail(raw: bytes) -> str:
    try:
        doc = json.loads(raw)
        text = doc.get("detail") or doc.get("reason") or raw.decode(errors="replace") if isinstance(doc, dict) else str(doc)
    except ValueError:
        text = raw.decode(errors="replace")
    return redact(" ".join(str(text).split())[:300])


def _jsonable_column(values: list[Any]) -> list[Any] | None:
    """The column as JSON values (numpy arrays as lists), or None when it cannot be sent."""
    def conv(v: Any) -> Any:
        if hasattr(v, "tolist") and not isinstance(v, (str, bytes)):
            return v.tolist()
        raise TypeError(type(v).__name__)

    try:
        return json.loads(json.dumps(values, default=conv))
    except (TypeError, ValueError):
        return None


@register_reward("remote")
class RemoteReward(Reward):
    """A reward scored by a ``vlrl serve reward`` service (see the module docstring)."""

    name = "remote"

    def __init__(self, url: str, token_env: str | None = None, timeout_s: float = 60.0, retries: int = 4,
                 backoff_s: float = 0.5, max_backoff_s: float = 10.0, failure_budget: int = 0,
                 max_rows_per_request: int = 1024) -> None:
        self.url = url
        self.client = RemoteClient(url, token_env=token_env, timeout_s=timeout_s, retries=retries, backoff_s=backoff_s,
                                   max_backoff_s=max_backoff_s)
        self.failure_budget = int(failure_budget)
        self.max_rows_per_request = int(max_rows_per_request)
        self.failures = 0
        self._calls = 0
        self._lock = threading.Lock()
        self._local = threading.local()
        self._skipped: set[str] = set()
        # The trainer fills these in, as for hfrrf in process (build_trainer): the service cannot see token
        # ids, so a completion that reached the cap without EOS is sent with ``truncated`` set, which hfrrf
        # reads as a column; without it a cut-off completion would be paid by the served hfrrf.
        self.max_completion_length: int | None = None
        self.eos_token_ids: Any = None

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        for k in ("_lock", "_local"):
            state.pop(k, None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()
        self._local = threading.local()

    def __call__(self, prompts=None, completions=None, completion_ids=None, **kwargs: Any) -> list[float | None]:
        step = getattr(kwargs.get("trainer_state"), "global_step", None)
        self._local.step = int(step) if isinstance(step, int) else None
        if completion_ids is not None and self.max_completion_length and "truncated" not in kwargs:
            eos = set(self.eos_token_ids or ())
            kwargs["truncated"] = [len(ids) >= self.max_completion_length and not (ids and eos and ids[-1] in eos)
                                   for ids in completion_ids]
        try:
            return super().__call__(prompts, completions, completion_ids, **kwargs)
        finally:
            self._local.step = None

    def score(self, completions: list[str], prompts: Any = None, **columns: Any) -> list[Score]:
        with self._lock:
            step = getattr(self._local, "step", None)
            if step is None:
                step = self._calls
            self._calls += 1
        rows: list[dict[str, Any]] = [{"id": i, "completion": c} for i, c in enumerate(completions)]
        if "id" in columns and "image_id" not in columns:
            # a row's "id" is its place in the request, never a column: the dataset's id column (which
            # caprl_qa seeds its draws from in process) travels as image_id, read the same way
            columns = {("image_id" if k == "id" else k): v for k, v in columns.items()}
        for key, values in columns.items():
            if key == "id":
                continue
            sent = _jsonable_column(list(values)) if isinstance(values, (list, tuple)) else None
            if sent is None or len(sent) != len(rows):
                if key not in self._skipped:
                    self._skipped.add(key)
                    logger.info("remote reward: column %r is not sent (not JSON, e.g. an in-memory image)", key)
                continue
            for row, v in zip(rows, sent, strict=True):
                row[key] = v
        try:
            results = self._score_rows(rows, step)
        except RemoteRewardFailed as e:
            with self._lock:
                self.failures += 1
                over = self.failures > self.failure_budget
            if over:
                raise RemoteRewardFailed(f"{e} ({self.failures} failed request(s), failure_budget "
                                         f"{self.failure_budget})") from None
            logger.error("%s (%d of %d failed requests allowed); this batch has no reward", e, self.failures,
                         self.failure_budget)
            return [Score(None, {BACKEND_FAILED: 1.0, "error": str(e)}) for _ in completions]
        out = []
        for r in results:
            details = dict(r.get("details") or {})
            if r.get("error"):
                details["error"] = r["error"]
            value = r.get("reward")
            out.append(Score(float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None,
                             details))
        return out

    def _score_rows(self, rows: list[dict[str, Any]], step: int) -> list[dict]:
        """Requests of at most ``max_rows_per_request`` rows; a 413 halves that (said once) and the
        rows are sent again in smaller requests, so a service with a lower ``--max-rows`` than the
        client's default still scores every row. One row the service refuses is a failed request."""
        results: list[dict] = []
        start = 0
        while start < len(rows):
            chunk = rows[start : start + self.max_rows_per_request]
            try:
                results += self.client.score(chunk, step)
            except RequestTooLarge:
                if len(chunk) == 1:
                    raise
                self.max_rows_per_request = len(chunk) // 2
                logger.warning("reward service %s refused %d rows in one request (413): sending at most %d "
                               "from now on", redact(self.url), len(chunk), self.max_rows_per_request)
                continue
            start += len(chunk)
        return results

    def probe(self) -> str | None:
        """Pre-flight: None when the service's ``/ready`` answers 200, else one line why not."""
        return self.client.ready()
