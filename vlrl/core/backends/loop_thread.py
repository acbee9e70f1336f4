"""A private asyncio event loop in a daemon thread: async inside a backend, plain calls outside.

An HTTP backend gets its throughput from many requests in flight, so its batch runs as coroutines;
its callers, though, are plain synchronous code, or code that already runs a loop of its own
(Jupyter, TRL's async reward path), where ``asyncio.run`` would fail. Running the coroutines on a
loop the backend owns, in its own thread, works the same in both cases and keeps the HTTP client's
connection pool on one loop for its whole life.

Two things make this more than ``run_coroutine_threadsafe``: a fork (a DataLoader worker, Ray)
copies the loop object but not its thread, so a loop started in another process is replaced, and
its client with it (``on_start`` builds a fresh one); and a pickled backend (Ray, multiprocessing)
travels without a loop, which is started again on first use.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
from collections.abc import Awaitable, Callable
from typing import Any

logger = logging.getLogger(__name__)


class LoopThread:
    """Runs coroutines on a private loop; ``on_start`` runs on the loop each time one is started."""

    def __init__(self, owner: str, on_start: Callable[[], Awaitable[Any]], name: str = "vlrl-loop") -> None:
        self.owner, self.on_start, self.name = owner, on_start, name
        self._reset()

    def _reset(self) -> None:
        self.loop: asyncio.AbstractEventLoop | None = None
        self.thread: threading.Thread | None = None
        self.pid: int | None = None
        self._lock = threading.Lock()

    def run(self, coro: Awaitable[Any]) -> Any:
        """Run ``coro`` on the private loop and wait for it (safe inside a running event loop)."""
        loop = self.ensure()
        if threading.current_thread() is self.thread:
            raise RuntimeError(f"{self.owner} called from its own event loop thread")
        return asyncio.run_coroutine_threadsafe(coro, loop).result()

    def ensure(self) -> asyncio.AbstractEventLoop:
        """The running loop of this process, started (and ``on_start`` run on it) when there is none."""
        with self._lock:
            if self.loop is not None and self.pid == os.getpid() and self.thread.is_alive():
                return self.loop
            loop = asyncio.new_event_loop()
            thread = threading.Thread(target=loop.run_forever, name=self.name, daemon=True)
            thread.start()
            self.loop, self.thread, self.pid = loop, thread, os.getpid()
            asyncio.run_coroutine_threadsafe(self.on_start(), loop).result()
            return loop

    def stop(self, cleanup: Callable[[], Awaitable[Any]] | None = None) -> bool:
        """Run ``cleanup`` on the loop (errors logged, never raised), then stop the loop and its thread.

        Returns whether a loop was running."""
        with self._lock:
            loop, thread = self.loop, self.thread
            self.loop = self.thread = None
        if loop is None or not thread.is_alive():
            return False
        if cleanup is not None:
            try:
                asyncio.run_coroutine_threadsafe(cleanup(), loop).result(timeout=10)
            except Exception as e:  # noqa: BLE001 - closing must not fail a job
                logger.debug("%s: cleanup on close failed: %s", self.owner, e)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=10)
        loop.close()
        return True

    def __getstate__(self) -> dict[str, Any]:
        # a loop, a thread and a lock do not travel; the loop is started again on first use
        return {"owner": self.owner, "on_start": self.on_start, "name": self.name}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._reset()


__all__ = ["LoopThread"]
