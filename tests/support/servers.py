"""Real servers for tests, on 127.0.0.1 only: ``transformers serve`` and a fault-injecting proxy.

:func:`transformers_serve` starts ``transformers serve`` on a tiny VLM, waits for ``/health`` and
yields a :class:`Served`; ``tests/conftest.py`` wraps it as the session fixture
``transformers_server``. :class:`FaultProxy` sits between a client and that server and decides per
request what happens: pass through, answer 500/429/400, drop the connection, stall past the
client's timeout, cut the answer off half-way (a server killed while it writes), or rewrite the JSON answer (e.g. to add vLLM-style logprobs). It counts what it
saw, so tests can assert how many HTTP requests a client really made.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

Action = str | Callable[[dict], dict]
"""``"pass"``, ``"500"``, ``"429"``, ``"400"``, ``"drop"``, ``"stall"``, ``"cut"``, or a function that
rewrites the upstream JSON response (the response is passed through otherwise)."""


def free_port() -> int:
    """A free loopback port for a server a test starts, chosen outside the ranges other processes take
    ports from on their own.

    A port is free only until someone binds it, and between this call and the server's bind another
    process may take it: Ray, started inside ``vlrl serve reward --engine ray`` before Ray Serve binds
    the HTTP port, binds many ports of the OS's ephemeral range (``bind(0)``, 32768-60999 on Linux)
    and its workers take 10002-19999; vLLM and torch do the same. A port the OS would hand out for
    ``bind(0)`` was seen taken by a Ray process that way (the readiness probe then read gRPC bytes).
    So the port is drawn from 20000-32767, where nothing binds unless told to."""
    import random

    rng = random.SystemRandom()
    for _ in range(200):
        port = rng.randrange(20000, 32768)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError("no free port in 20000-32767 on 127.0.0.1")


@dataclass
class Served:
    root: str
    """``http://127.0.0.1:PORT``"""
    model: str
    """The model id the server answers to (``transformers serve`` uses the folder path)."""

    @property
    def base_url(self) -> str:
        return self.root + "/v1"


def get_json(url: str, timeout: float = 2.0) -> Any:
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return json.loads(r.read())


@lru_cache(maxsize=1)
def _setpriv() -> str | None:
    """``setpriv``'s path, where it can set a parent-death signal (util-linux 2.33 and later; Linux only)."""
    exe = shutil.which("setpriv")
    if exe is None:
        return None
    try:
        ok = subprocess.run([exe, "--pdeathsig", "TERM", "true"], capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return None
    return exe if ok else None


def bounded(cmd: list[str]) -> list[str]:
    """``cmd`` tied to this process: ``setpriv --pdeathsig TERM`` has the kernel send the server SIGTERM
    when the thread that started it ends, as when a test session is killed with -9 (which runs no
    cleanup). SIGTERM is the server's own graceful stop, which also stops the workers it started (vLLM's
    engine, Ray); without it a vLLM server's engine processes lived on after a killed session (up to 90
    minutes, 2 GB each) and slowed the next run. Servers are started from the main thread (session
    fixtures and tests), which lives as long as the session. Where ``setpriv`` cannot do this, the
    command as it is."""
    exe = _setpriv()
    return [exe, "--pdeathsig", "TERM", *cmd] if exe else cmd


@contextmanager
def server_process(
    cmd: list[str], env: dict[str, str], log: Path, ready: Callable[[], bool], name: str, startup_timeout: float
) -> Iterator[subprocess.Popen]:
    """Run ``cmd`` in its own process group, its output in ``log``, until ``ready()`` holds.

    A server that exits or is not ready within ``startup_timeout`` raises with the tail of its log;
    on leaving the block the whole group is stopped by pid (SIGTERM, then SIGKILL after 15 s), so
    no engine worker outlives the test session; and the server is stopped when this process dies, even
    killed with -9 (:func:`bounded`).
    """
    cmd = bounded(cmd)
    with open(log, "wb") as fh:
        proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    try:
        deadline = time.monotonic() + startup_timeout
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"{name} exited with {proc.returncode}:\n{log_tail(log)}")
            try:
                if ready():
                    break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"{name} not ready after {startup_timeout}s:\n{log_tail(log)}")
            time.sleep(0.5)
        yield proc
    finally:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=15)
        except ProcessLookupError:
            pass
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def log_tail(log: Path, chars: int = 3000) -> str:
    return log.read_text(errors="replace")[-chars:] if log.exists() else "(no log)"


@contextmanager
def transformers_serve(model_dir: str | Path, log: Path, startup_timeout: float = 240.0) -> Iterator[Served]:
    """Run ``transformers serve MODEL_DIR`` on a free loopback port for the duration of the block."""
    exe = Path(sys.executable).parent / "transformers"
    cmd = [str(exe) if exe.exists() else (shutil.which("transformers") or "transformers")]
    port = free_port()
    cmd += ["serve", str(model_dir), "--host", "127.0.0.1", "--port", str(port), "--device", "cpu"]
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", OMP_NUM_THREADS="1")
    root = f"http://127.0.0.1:{port}"
    with server_process(cmd, env, log, lambda: get_json(root + "/health").get("status") == "ok",
                        "transformers serve", startup_timeout):
        ids = [m["id"] for m in get_json(root + "/v1/models")["data"]]
        model = str(model_dir) if str(model_dir) in ids else ids[0]
        yield Served(root=root, model=model)


# -- fault-injecting proxy ---------------------------------------------------------------------------


@dataclass
class Seen:
    method: str
    path: str
    headers: dict[str, str]
    body: dict | None
    action: str


class FaultProxy:
    """HTTP/1.1 loopback proxy with a per-request script (one connection per request).

    ``script(*actions)`` queues actions for the next requests in arrival order; ``route(fn)``
    picks an action from the request JSON (``fn(body) -> action | None``) before the queue is
    consulted; otherwise ``default`` applies. ``stall_s`` is how long a stall lasts.
    """

    def __init__(self, upstream: str, default: Action = "pass", stall_s: float = 30.0, blank: str | None = None) -> None:
        self.upstream = upstream.rstrip("/")
        self.blank = blank
        """Text put where the upstream answered empty content: a tiny random model often stops at
        once, and an empty completion is a failure by design (``answer_problem``); transport tests
        that only need *an* answer pass one."""
        self.default = default
        self.stall_s = stall_s
        self.seen: list[Seen] = []
        self._queue: list[Action] = []
        self._router: Callable[[dict | None], Action | None] | None = None
        self._lock = threading.Lock()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._server: asyncio.AbstractServer | None = None
        self.port = 0

    # public API
    @property
    def root(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def script(self, *actions: Action) -> None:
        with self._lock:
            self._queue.extend(actions)

    def route(self, fn: Callable[[dict | None], Action | None]) -> None:
        self._router = fn

    def posts(self) -> list[Seen]:
        return [s for s in self.seen if s.method == "POST"]

    def start(self) -> FaultProxy:
        self._thread.start()
        self._server = asyncio.run_coroutine_threadsafe(
            asyncio.start_server(self._handle, "127.0.0.1", 0), self._loop
        ).result()
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    def stop(self) -> None:
        async def shutdown() -> None:
            self._server.close()
            for t in asyncio.all_tasks():
                if t is not asyncio.current_task():
                    t.cancel()

        asyncio.run_coroutine_threadsafe(shutdown(), self._loop).result(timeout=10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)

    def __enter__(self) -> FaultProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # internals
    def _next_action(self, body: dict | None) -> Action:
        if self._router is not None:
            a = self._router(body)
            if a is not None:
                return a
        with self._lock:
            return self._queue.pop(0) if self._queue else self.default

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            lines = head.decode("latin-1").split("\r\n")
            method, path, _ = lines[0].split(" ", 2)
            headers = {k.strip().lower(): v.strip() for k, v in (ln.split(":", 1) for ln in lines[1:] if ":" in ln)}
            raw = await reader.readexactly(int(headers.get("content-length", 0)))
            try:
                body = json.loads(raw) if raw else None
            except ValueError:
                body = None
            action = self._next_action(body) if method == "POST" else "pass"
            self.seen.append(Seen(method, path, headers, body, action if isinstance(action, str) else "rewrite"))
            if action == "drop":
                return
            if action == "stall":
                await asyncio.sleep(self.stall_s)
                return
            if action in ("500", "429", "400"):
                msg = {"500": "injected server error", "429": "injected rate limit", "400": "injected bad request"}
                err = json.dumps({"error": {"message": msg[action], "type": "injected", "code": int(action)}})
                await self._reply(writer, int(action), {"content-type": "application/json"}, err.encode())
                return
            status, rheaders, rbody = await self._forward(method, path, headers, raw)
            if self.blank is not None and status == 200 and method == "POST":
                rbody = self._fill_blank(rbody)
            if callable(action) and status == 200:
                rbody = json.dumps(action(json.loads(rbody))).encode()
            if action == "cut":  # the server dies while sending its answer: half the promised body
                await self._reply(writer, status, rheaders, rbody, cut=True)
                return
            await self._reply(writer, status, rheaders, rbody)
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.LimitOverrunError):
            pass
        finally:
            writer.close()

    async def _forward(self, method: str, path: str, headers: dict[str, str], raw: bytes) -> tuple[int, dict, bytes]:
        host, port = self.upstream.split("://", 1)[1].split(":")
        r, w = await asyncio.open_connection(host, int(port))
        keep = {k: v for k, v in headers.items() if k not in ("connection", "keep-alive", "content-length", "host")}
        out = [f"{method} {path} HTTP/1.1", f"host: {host}:{port}", "connection: close", f"content-length: {len(raw)}"]
        out += [f"{k}: {v}" for k, v in keep.items()]
        w.write(("\r\n".join(out) + "\r\n\r\n").encode("latin-1") + raw)
        await w.drain()
        data = await r.read()
        w.close()
        head, _, rbody = data.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        status = int(lines[0].split(" ", 2)[1])
        rheaders = {k.strip().lower(): v.strip() for k, v in (ln.split(":", 1) for ln in lines[1:] if ":" in ln)}
        if rheaders.get("transfer-encoding", "").lower() == "chunked":
            rbody = _dechunk(rbody)
        return status, rheaders, rbody

    def _fill_blank(self, rbody: bytes) -> bytes:
        try:
            resp = json.loads(rbody)
        except ValueError:
            return rbody
        for c in resp.get("choices", []) if isinstance(resp, dict) else []:
            msg = c.get("message") or {}
            if msg.get("content") == "":
                msg["content"] = self.blank
        return json.dumps(resp).encode()

    @staticmethod
    async def _reply(writer: asyncio.StreamWriter, status: int, headers: dict[str, str], body: bytes,
                     cut: bool = False) -> None:
        drop = ("connection", "keep-alive", "content-length", "transfer-encoding")
        out = [f"HTTP/1.1 {status} X", "connection: close", f"content-length: {len(body)}"]
        out += [f"{k}: {v}" for k, v in headers.items() if k not in drop]
        writer.write(("\r\n".join(out) + "\r\n\r\n").encode("latin-1") + (body[: len(body) // 2] if cut else body))
        await writer.drain()


def _dechunk(data: bytes) -> bytes:
    out = bytearray()
    while data:
        size_line, _, data = data.partition(b"\r\n")
        size = int(size_line.split(b";")[0], 16)
        if size == 0:
            break
        out += data[:size]
        data = data[size + 2 :]
    return bytes(out)


def inject_logprobs(top: dict[str, float]) -> Callable[[dict], dict]:
    """A proxy action that adds vLLM-shaped first-token logprobs (``top``: token → logprob)."""

    def rewrite(resp: dict) -> dict:
        best = max(top, key=top.__getitem__)
        entry = {
            "token": best,
            "logprob": top[best],
            "bytes": list(best.encode()),
            "top_logprobs": [{"token": t, "logprob": lp, "bytes": list(t.encode())} for t, lp in top.items()],
        }
        for c in resp.get("choices", []):
            c["logprobs"] = {"content": [entry]}
            c["message"]["content"] = best
        return resp

    return rewrite


# -- a vLLM-like stub that renders the real chat template -------------------------------------------


class TemplateServer:
    """A loopback ``/v1/chat/completions`` endpoint that renders every request with a real tokenizer's
    chat template, the way vLLM does, and records the prompt text the model would see.

    It honours ``continue_final_message`` / ``add_generation_prompt`` (vLLM's extra-body fields),
    answers ``reply`` (``n`` choices), and adds vLLM-shaped first-token logprobs from ``top``
    (token → logprob) when asked. ``script(*faults)`` queues response-level faults for the next
    requests: ``"empty_choices"``, ``"null_content"``, ``"html"``, ``"bad_json"``, ``"no_logprobs"``,
    ``"500"`` or ``("429", retry_after_seconds)``.
    """

    def __init__(self, tokenizer: Any, reply: str = " B", top: dict[str, float] | None = None,
                 honour_continue: bool = True) -> None:
        self.tokenizer = tokenizer
        self.reply = reply
        self.top = top or {" B": -0.2, " A": -2.0, "A": -3.0, "\nC": -3.5, " D": -4.0}
        self.honour_continue = honour_continue
        self.prompts: list[str] = []
        self.bodies: list[dict] = []
        self._faults: list[Any] = []
        self._lock = threading.Lock()
        self._server: Any = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_port}/v1"

    def script(self, *faults: Any) -> None:
        with self._lock:
            self._faults.extend(faults)

    def __enter__(self) -> TemplateServer:
        from http.server import BaseHTTPRequestHandler

        from tests.support.fake_openai import LoopbackServer

        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's naming
                body = json.loads(self.rfile.read(int(self.headers.get("content-length", 0))) or b"{}")
                if self.path.rstrip("/").endswith("/chat/completions"):
                    status, headers, payload = outer._answer(body)
                else:  # like any server that is not vLLM: no /tokenize, no /v1/completions
                    status, headers = 404, {"content-type": "application/json"}
                    payload = b'{"error": {"message": "Not Found", "code": 404}}'
                self.send_response(status)
                for k, v in headers.items():
                    self.send_header(k, v)
                self.send_header("content-length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, *args: Any) -> None:
                pass

        self._server = LoopbackServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    def _render(self, body: dict) -> str:
        msgs = []
        for m in body.get("messages", []):
            c = m.get("content")
            if isinstance(c, list):
                c = "".join(p.get("text", "") for p in c if p.get("type") == "text")
            msgs.append({"role": m["role"], "content": c})
        cont = bool(body.get("continue_final_message")) and self.honour_continue
        return self.tokenizer.apply_chat_template(
            msgs, tokenize=False, continue_final_message=cont,
            add_generation_prompt=body.get("add_generation_prompt", True) and not cont,
        )

    def _answer(self, body: dict) -> tuple[int, dict[str, str], bytes]:
        js = {"content-type": "application/json"}
        with self._lock:
            fault = self._faults.pop(0) if self._faults else None
            self.bodies.append(body)
        if isinstance(fault, tuple) and fault[0] == "429":
            err = {"error": {"message": "slow down", "type": "rate_limit", "code": 429}}
            return 429, {**js, "retry-after": str(fault[1])}, json.dumps(err).encode()
        if fault == "500":
            return 500, js, b'{"error": {"message": "injected", "code": 500}}'
        if fault == "html":
            return 200, {"content-type": "text/html"}, b"<html><body>502 Bad Gateway</body></html>"
        if fault == "bad_json":
            return 200, js, b'{"choices": [{"message": '
        prompt = self._render(body)
        with self._lock:
            self.prompts.append(prompt)
        n = int(body.get("n") or 1)
        top = dict(sorted(self.top.items(), key=lambda kv: -kv[1])[: int(body.get("top_logprobs") or 0)])
        choices = []
        for i in range(n):
            content = None if fault == "null_content" else (max(self.top, key=self.top.get) if body.get("logprobs") else self.reply)
            c: dict[str, Any] = {"index": i, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}
            if body.get("logprobs") and fault != "no_logprobs":
                best = max(self.top, key=self.top.get)
                c["logprobs"] = {"content": [{"token": best, "logprob": self.top[best], "bytes": list(best.encode()),
                                              "top_logprobs": [{"token": t, "logprob": lp, "bytes": list(t.encode())}
                                                               for t, lp in top.items()]}]}
            choices.append(c)
        if fault == "empty_choices":
            choices = []
        resp = {"id": "cmpl-1", "object": "chat.completion", "created": 0, "model": body.get("model", "m"),
                "choices": choices, "usage": {"prompt_tokens": 10, "completion_tokens": 1, "total_tokens": 11}}
        return 200, js, json.dumps(resp).encode()
