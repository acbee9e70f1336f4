"""The HTTP face of a reward service: one FastAPI app for both engines.

Routes (payloads in docs/serve.md):

* ``POST /v1/score``: ``{"rows": [{"id", "completion", <columns>}], "step": int}`` →
  ``{"results": [{"id", "reward", "details", "error"}]}``, the row fields of ``vlrl reward score``;
* ``POST /openrlhf``: OpenRLHF's ``--remote_rm_url`` payload; ``POST /get_reward``: CapRL++'s
  (:mod:`vlrl.serve.compat`);
* ``GET /health`` (the process is up), ``GET /ready`` (200 once every backend passed pre-flight,
  else 503 with the reason), ``GET /metrics`` (Prometheus text).

Status codes a client acts on: 400 a body that is not the documented shape; 401 a missing or wrong
bearer token; 413 a body over ``max_body_bytes`` or more than ``max_rows`` rows; 503 (with
``Retry-After``) the backend is down, the queue is full, or the service is draining. A bad *row*
is never a bad request: it gets its own ``error`` and the other rows are scored.

Nothing a client sends is echoed into logs or metrics beyond row ids, and every error text passes
through :func:`vlrl.core.redact.redact`; the token is registered with the redaction module, so it is
scrubbed wherever it would appear.
"""

from __future__ import annotations

import contextlib
import hmac
import json
import logging
import os
import time
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, PlainTextResponse, Response

from vlrl.core.redact import redact, register_secret_env
from vlrl.serve import compat
from vlrl.serve.metrics import CONTENT_TYPE_LATEST, ServeMetrics
from vlrl.serve.service import RewardService, ServeSettings, Unavailable

logger = logging.getLogger(__name__)

RETRY_AFTER_S = 2
DRAIN_TIMEOUT_S = 60.0


class _TooLarge(ValueError):
    pass


def _token(conf: ServeSettings) -> str | None:
    if not conf.token_env:
        return None
    register_secret_env(conf.token_env)
    token = os.environ.get(conf.token_env, "")
    if not token:
        raise ValueError(f"--token-env {conf.token_env}: that environment variable is empty or unset")
    return token


def build_app(conf: ServeSettings, service: RewardService | None = None) -> FastAPI:
    """The app for ``conf``; the reward is built (and its backends probed) when the app starts."""
    token = _token(conf)
    state: dict[str, Any] = {"service": service}
    metrics = ServeMetrics()

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI):
        import asyncio

        svc = state["service"]
        if svc is None:
            svc = state["service"] = await asyncio.to_thread(RewardService, conf, None, metrics)
        else:
            svc.metrics = metrics
        await asyncio.to_thread(svc.probe, True)
        logger.info("reward %s served (max_batch_rows %d, max_wait_ms %g)", svc.name, conf.max_batch_rows, conf.max_wait_ms)
        try:
            yield
        finally:
            await svc.drain(DRAIN_TIMEOUT_S)
            await asyncio.to_thread(svc.close)

    app = FastAPI(title="vlrl reward service", lifespan=lifespan, docs_url=None, redoc_url=None, openapi_url=None)

    def svc() -> RewardService:
        s = state["service"]
        if s is None:
            raise Unavailable("the reward is still being built")
        return s

    @app.middleware("http")
    async def guard(request: Request, call_next):
        t0 = time.perf_counter()
        path = request.url.path
        if token is not None and path != "/health":
            scheme, _, sent = request.headers.get("authorization", "").partition(" ")
            # the scheme name is case-insensitive (RFC 9110); the token itself is compared exactly
            if scheme.lower() != "bearer" or not hmac.compare_digest(sent.strip().encode(), token.encode()):
                response: Response = JSONResponse({"detail": "missing or wrong bearer token"}, status_code=401)
                metrics.observe_request(_endpoint(path), 401, time.perf_counter() - t0)
                return response
        response = await call_next(request)
        metrics.observe_request(_endpoint(path), response.status_code, time.perf_counter() - t0)
        return response

    async def read_json(request: Request) -> Any:
        length = request.headers.get("content-length")
        if length is not None and length.isdigit() and int(length) > conf.max_body_bytes:
            raise _TooLarge(f"body of {length} bytes is over the limit of {conf.max_body_bytes}")
        body = bytearray()
        async for chunk in request.stream():
            body += chunk
            if len(body) > conf.max_body_bytes:
                raise _TooLarge(f"body is over the limit of {conf.max_body_bytes} bytes")
        try:
            return json.loads(body)
        except ValueError as e:
            raise compat.PayloadError(f"body is not JSON ({e})") from None

    async def run(request: Request, parse, answer) -> Response:
        try:
            rows, step = parse(await read_json(request))
            if len(rows) > conf.max_rows:
                raise _TooLarge(f"{len(rows)} rows is over the limit of {conf.max_rows} per request")
            results = await svc().score(rows, step)
        except _TooLarge as e:
            return JSONResponse({"detail": str(e)}, status_code=413)
        except compat.PayloadError as e:
            return JSONResponse({"detail": redact(e)}, status_code=400)
        except Unavailable as e:
            return JSONResponse({"detail": redact(e)}, status_code=503, headers={"Retry-After": str(RETRY_AFTER_S)})
        return JSONResponse(answer(results))

    def v1_rows(body: Any) -> tuple[list, int]:
        if not isinstance(body, dict) or not isinstance(body.get("rows"), list):
            raise compat.PayloadError('expected {"rows": [{"id", "completion", ...}], "step": int}')
        step = body.get("step", 0)
        if not isinstance(step, int) or isinstance(step, bool) or step < 0:
            raise compat.PayloadError("'step' must be a non-negative integer")
        return body["rows"], step

    @app.post("/v1/score")
    async def score(request: Request) -> Response:
        return await run(request, v1_rows, lambda results: {"results": results})

    @app.post("/openrlhf")
    async def openrlhf(request: Request) -> Response:
        label = conf.label_column or (svc().required[0] if svc().required else "answer")
        return await run(request, lambda b: compat.openrlhf_rows(b, label), compat.openrlhf_answer)

    @app.post("/get_reward")
    async def get_reward(request: Request) -> Response:
        return await run(request, compat.caprl_rows, compat.caprl_answer)

    @app.get("/health")
    async def health() -> dict[str, str]:
        return {"status": "up"}

    @app.get("/ready")
    async def ready() -> Response:
        import asyncio

        s = state["service"]
        if s is None:
            return JSONResponse({"ready": False, "reason": "the reward is still being built"}, status_code=503)
        problem = "the service is shutting down (draining)" if s.draining else await asyncio.to_thread(s.probe)
        if problem:
            return JSONResponse({"ready": False, "reason": problem}, status_code=503,
                                headers={"Retry-After": str(RETRY_AFTER_S)})
        return JSONResponse({"ready": True, "reward": s.name, "backends": len(s.backends)})

    @app.get("/metrics")
    async def prometheus() -> Response:
        return PlainTextResponse(metrics.render(), media_type=CONTENT_TYPE_LATEST)

    app.state.metrics = metrics
    app.state.holder = state
    return app


def _endpoint(path: str) -> str:
    """A route name for metric labels (never a client's arbitrary path)."""
    return path if path in ("/v1/score", "/openrlhf", "/get_reward", "/health", "/ready", "/metrics") else "other"
