"""Where the app runs: ``local`` (uvicorn, one process) or ``ray`` (Ray Serve, N replicas).

Both run the same app (:func:`vlrl.serve.app.build_app`). With Ray Serve each replica builds its
own reward (and loads its own answerer) when it starts; Ray Serve's proxy balances requests over
the replicas and starts a new replica when one dies, so vlrl has no load balancer or worker pool
of its own. Batching happens inside each replica, across the requests routed to it
(``max_ongoing_requests`` is raised so that enough requests reach a replica to fill a batch).

Graceful shutdown: uvicorn stops accepting connections on SIGTERM/SIGINT, lets in-flight requests
finish, and the app's shutdown drains its queue (:meth:`RewardService.drain`); under Ray Serve the
application is deleted first, so each replica finishes the requests it holds
(``graceful_shutdown_timeout_s``) while the proxy still answers them, and only then does
``serve.shutdown()`` tear the proxy down.
"""

from __future__ import annotations

import contextlib
import logging
import signal
import threading
from collections.abc import Iterator
from typing import Any

from vlrl.serve.app import DRAIN_TIMEOUT_S, build_app
from vlrl.serve.service import RewardService, ServeSettings

logger = logging.getLogger(__name__)

APP_NAME = "vlrl-reward"
DEPLOYMENT = "RewardDeployment"


def run_local(conf: ServeSettings, host: str, port: int, service: RewardService | None = None) -> None:
    """Serve until SIGINT/SIGTERM, then drain (exit code 0)."""
    import uvicorn

    if threading.current_thread() is threading.main_thread():
        # uvicorn re-raises the signal it stopped on once it has drained, to the handler found before
        # it: the default SIGTERM handler would then kill the process after a clean drain (exit -15)
        signal.signal(signal.SIGTERM, lambda *_: logger.info("stopped on SIGTERM"))
    uvicorn.run(build_app(conf, service), host=host, port=port, log_level="warning", access_log=False,
                timeout_graceful_shutdown=int(DRAIN_TIMEOUT_S))


def ray_deployment(conf: ServeSettings, replicas: int, ray_actor_options: dict[str, Any] | None = None) -> Any:
    """The app as a bound Ray Serve deployment of ``replicas`` replicas (built on each replica)."""
    from ray import serve

    def build() -> Any:  # a plain function: Ray Serve calls it on each replica to build the app there
        from vlrl.core.redact import install_log_redaction

        # a replica is a Ray worker process, not the vlrl command: without this its log lines (a
        # backend error echoing a key) reach Ray's log files unredacted
        install_log_redaction()
        return build_app(conf)

    @serve.deployment(
        name=DEPLOYMENT,
        num_replicas=replicas,
        max_ongoing_requests=max(64, conf.max_batch_rows),
        graceful_shutdown_timeout_s=DRAIN_TIMEOUT_S,
        ray_actor_options=ray_actor_options or {"num_cpus": 0},
    )
    @serve.ingress(build)
    class RewardDeployment:
        pass

    return RewardDeployment.bind()


def run_ray(conf: ServeSettings, host: str, port: int, replicas: int, *, stop: threading.Event | None = None,
            on_ready: Any = None) -> None:
    """Start (or join, with ``RAY_ADDRESS``) a Ray cluster, deploy, and serve until SIGINT/SIGTERM."""
    import ray
    from ray import serve

    if not ray.is_initialized():
        ray.init(include_dashboard=False, logging_level=logging.WARNING, log_to_driver=False)
    serve.start(http_options={"host": host, "port": port}, detached=False)
    serve.run(ray_deployment(conf, replicas), name=APP_NAME, route_prefix="/", blocking=False)
    logger.info("reward %s served by Ray Serve: %d replica(s) on http://%s:%d", conf.reward, replicas, host, port)
    stop = stop or threading.Event()
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, lambda *_: stop.set())
    if on_ready is not None:
        on_ready()
    try:
        stop.wait()
    finally:
        logger.info("shutting down: draining the replicas")
        # deleting the application first stops its replicas gracefully (each finishes the requests it
        # holds, up to graceful_shutdown_timeout_s) while the proxy still answers them; serve.shutdown()
        # alone tears the proxy down with requests in flight
        serve.delete(APP_NAME)
        serve.shutdown()
        ray.shutdown()


@contextlib.contextmanager
def served_in_thread(app: Any, host: str = "127.0.0.1", startup_timeout: float = 120.0) -> Iterator[str]:
    """Serve ``app`` with uvicorn on a free port of ``host`` in a daemon thread (the benchmark's
    service); yields its root URL once ``/health`` answers, and shuts it down (draining) on exit."""
    import socket
    import time
    import urllib.request

    import uvicorn

    with socket.socket() as s:
        s.bind((host, 0))
        port = s.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, host=host, port=port, log_level="warning", access_log=False))
    thread = threading.Thread(target=server.run, daemon=True, name="vlrl-serve")
    thread.start()
    root = f"http://{host}:{port}"
    deadline = time.monotonic() + startup_timeout
    while True:
        try:
            urllib.request.urlopen(root + "/health", timeout=1).close()
            break
        except OSError:
            if time.monotonic() > deadline or not thread.is_alive():
                raise RuntimeError("the reward service did not start") from None
            time.sleep(0.05)
    try:
        yield root
    finally:
        server.should_exit = True
        thread.join(DRAIN_TIMEOUT_S)
