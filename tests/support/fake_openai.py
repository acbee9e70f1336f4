"""A minimal OpenAI-compatible HTTP server on 127.0.0.1 for job-level tests (no model behind it).

It serves ``GET /v1/models`` and ``POST /v1/chat/completions`` with a caption that is a function
of the request (or whatever ``reply`` answers), optionally slowly (``delay``) or failing with a chosen status and body (``fail``),
so tests can exercise the real HTTP client, pre-flight, the circuit breaker and redaction
without starting a model server. Runs in a daemon thread, or as a process
(``python tests/support/fake_openai.py PORT MODEL DELAY``) for tests that need a server outliving a kill.
:class:`LoopbackServer` is the threaded server under it and under the other test servers that take
bursts of concurrent requests.
"""

from __future__ import annotations

import hashlib
import json
import sys
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class LoopbackServer(ThreadingHTTPServer):
    """A threaded HTTP server whose listen queue holds a real client's burst of connections.

    The standard library listens with a queue of 5; a client opening 16 connections at once (the
    openai backend's default concurrency) then has some reset mid-request (``ReadError``), a
    failure of the test server, not of the code under test.
    """

    request_queue_size = 128


class FakeOpenAI:
    def __init__(self, model: str = "fake-vlm", delay: float = 0.0, port: int = 0,
                 reply: Callable[[dict], str] | None = None, also: tuple[str, ...] = ()) -> None:
        self.model = model
        self.delay = delay
        self.reply = reply
        """The answer text as a function of the request body (default: "a caption <hash>")."""
        self.also = also
        """More model names /v1/models lists (one server standing in for several backends)."""
        self.fail: tuple[int, str] | Callable[[dict, dict], tuple[int, str] | None] | None = None
        """(status, body) to answer every chat request with, or a function of (request body, request
        headers) that returns one for the requests it fails (None: answer normally), or None."""
        self.refuse: Callable[[dict], tuple[int, str] | None] | None = None
        """(status, body) to answer a chat request with, as a function of its body (None: answer it)."""
        self.bodies: list[dict] = []
        """Every chat request body, in order of arrival."""
        self.chats = 0
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):  # quiet
                pass

            def _send(self, status: int, body: str | bytes, ctype: str = "application/json") -> None:
                data = body.encode() if isinstance(body, str) else body
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):
                if self.path.rstrip("/").endswith("/models"):
                    self._send(200, json.dumps({"object": "list", "data": [{"id": m, "object": "model"} for m in (outer.model, *outer.also)]}))
                else:
                    self._send(404, "{}")

            def do_POST(self):
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                outer.chats += 1
                body = json.loads(raw) if raw else {}
                outer.bodies.append(body)
                fail = outer.fail(body, dict(self.headers)) if callable(outer.fail) else outer.fail
                refused = outer.refuse(body) if outer.refuse else None
                if fail is not None or refused is not None:
                    self._send(*(refused or fail))
                    return
                if outer.delay:
                    time.sleep(outer.delay)
                text = outer.reply(body) if outer.reply else "a caption " + hashlib.sha1(raw).hexdigest()[:8]
                self._send(200, json.dumps({
                    "id": "x", "object": "chat.completion", "created": 0, "model": outer.model,
                    "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
                    "usage": {"prompt_tokens": 3, "completion_tokens": 3, "total_tokens": 6},
                }))

        self.server = LoopbackServer(("127.0.0.1", port), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def spec(self, **opts: str) -> str:
        q = "&".join(f"{k}={v}" for k, v in {"max_retries": "0", "timeout": "10", **opts}.items())
        return f"openai:{self.base_url}@{self.model}?{q}"

    def __enter__(self) -> FakeOpenAI:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


if __name__ == "__main__":
    port, model, delay = int(sys.argv[1]), sys.argv[2], float(sys.argv[3])
    srv = FakeOpenAI(model, delay, port)
    srv.server.serve_forever()
