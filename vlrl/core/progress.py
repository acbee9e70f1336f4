"""Progress at the level of requests: a bar that moves while one large batch is with the model.

Pipelines hand a backend whole batches (a generate call for 16 images, every ask of 32 captions
in one call), because batches are what make a model fast. A bar that advances once per batch
then sits at 0/17 for the thirteen minutes a tiny CPU model takes over one batch of 17 captions,
and the user cannot tell a slow job from a hung one. So backends report each request as it
completes (:func:`requests_done`: per request on the HTTP and ``py:`` backends, per generate
chunk in process, at once for cache hits), and whoever shows a bar listens while the batch runs
(:func:`on_requests`): :func:`vlrl.core.stage.run_stage` moves its item bar by completed
captions, or counts asks on a second bar; ``vlrl caption`` moves its image bar by completed
captions.

Nothing listens outside those bars, so a backend used on its own pays one empty list lookup per
report. Listeners may be called from a backend's event-loop thread, so they must be thread-safe
(:class:`Credit` is).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

_LISTENERS: list[Callable[[int], None]] = []


def requests_done(n: int = 1) -> None:
    """Report ``n`` completed model requests (called by backends; never raises)."""
    if n > 0:
        for fn in list(_LISTENERS):
            try:
                fn(n)
            except Exception:  # noqa: BLE001, S110 - a progress bar must never fail a model call
                pass


@contextmanager
def on_requests(fn: Callable[[int], None]) -> Iterator[None]:
    """Call ``fn(n)`` for every report of completed requests while the block runs."""
    _LISTENERS.append(fn)
    try:
        yield
    finally:
        if fn in _LISTENERS:
            _LISTENERS.remove(fn)


class Credit:
    """Advance a bar by completed requests within one batch, never past the batch's size, and give
    the rest when the batch is committed (:meth:`settle`): each item is counted once."""

    def __init__(self, advance: Callable[[int], None]) -> None:
        self.advance = advance
        self.lock = threading.Lock()
        self.cap = self.given = 0

    def start(self, items: int) -> None:
        with self.lock:
            self.cap, self.given = items, 0

    def __call__(self, n: int) -> None:
        with self.lock:
            step = min(n, self.cap - self.given)
            if step <= 0:
                return
            self.given += step
        self.advance(step)

    def settle(self) -> int:
        """Close the batch; returns how many of its items were already shown."""
        with self.lock:
            given, self.cap, self.given = self.given, 0, 0
        return given


class LazyBar:
    """A tqdm bar that appears with its first update (a reward that asks no model shows none)."""

    def __init__(self, desc: str, total: int | None = None, unit: str = "request", enabled: bool = True) -> None:
        self.kwargs = {"desc": desc, "total": total, "unit": unit, "dynamic_ncols": True, "leave": False}
        self.enabled = enabled
        self.bar: Any = None
        self.lock = threading.Lock()

    def update(self, n: int) -> None:
        if not self.enabled:
            return
        with self.lock:
            if self.bar is None:
                from tqdm.auto import tqdm

                self.bar = tqdm(**self.kwargs)
        self.bar.update(n)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


@contextmanager
def request_bar(desc: str, total: int | None = None, *, unit: str = "request", enabled: bool = True) -> Iterator[None]:
    """A bar counting the model requests that complete while the block runs (up to ``total``)."""
    if not enabled:
        yield
        return
    bar = LazyBar(desc, total, unit)
    credit = Credit(bar.update)
    credit.start(total if total is not None else 2**62)
    try:
        with on_requests(credit):
            yield
    finally:
        bar.close()


__all__ = ["Credit", "LazyBar", "on_requests", "request_bar", "requests_done"]
