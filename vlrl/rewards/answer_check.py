"""The one ``\\boxed{}`` reader and the one ``math_verify`` check, safe against answers that never end.

Two places decide whether a model's final answer is mathematically right: Vision-R1's reward
(HFRRF, :mod:`vlrl.methods.vision_r1.reward`), which grades training rollouts, and Prism's
``answer_mode="reason"`` (:mod:`vlrl.methods.caprl.prism`), which grades an answerer's boxed
answer. They must agree on what "the boxed answer" is and on when two expressions are equal, so
both use this module; it sits in the rewards layer, below both methods.

Why the timeouts: sympy, under ``math_verify``, can spend hours on one pathological answer
(``9^{9^{9^{9}}}``), and a policy finds such answers. On the main thread ``math_verify``'s own
SIGALRM timeouts apply. Off it (verl calls rewards from worker threads, TRL may too) signals
cannot be used, so the call runs in a small process pool and one that overruns is abandoned by
terminating the pool (rebuilt on the next call). A check that gives no verdict in time is a wrong
answer, never a hung step and never an exception.
"""

from __future__ import annotations

import atexit
import logging
import threading
from collections.abc import Callable
from typing import Any

logger = logging.getLogger(__name__)

DEFAULT_TIMEOUT_S = 5


def last_boxed(text: str) -> str | None:
    """Content of the last ``\\boxed{...}`` (``\\fbox{...}`` too), nested braces allowed; None if none.

    >>> last_boxed(r"first \\boxed{1} then \\boxed{\\frac{3}{4}}")
    '\\\\frac{3}{4}'
    """
    start = max(text.rfind("\\boxed"), text.rfind("\\fbox"))
    if start < 0:
        return None
    i = text.find("{", start)
    if i < 0:
        return None
    depth = 0
    for j in range(i, len(text)):
        if text[j] == "{":
            depth += 1
        elif text[j] == "}":
            depth -= 1
            if depth == 0:
                return text[i + 1 : j]
    return None


class _NoTimeoutNotice(logging.Filter):
    """math_verify warns on every call made off the main thread (where we must disable its timer)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("Timeout is disabled")


for _name in ("math_verify.parser", "math_verify.grader"):
    logging.getLogger(_name).addFilter(_NoTimeoutNotice())


def _mv_parse(s: str, timeout: int | None) -> list:
    from math_verify import parse

    wrapped = [] if ("$" in s or "\\boxed" in s) else parse(f"${s}$", parsing_timeout=timeout)
    return wrapped or parse(s, parsing_timeout=timeout)


def _math_equal_here(pred: str, gold: str, timeout: int | None) -> bool:
    from math_verify import verify

    try:
        g, p = _mv_parse(gold, timeout), _mv_parse(pred, timeout)
        return bool(g and p and verify(g, p, timeout_seconds=timeout))
    except Exception as e:  # noqa: BLE001 - a parser crash is a wrong answer, not a crashed step
        logger.debug("math_verify failed on %r vs %r: %s", pred, gold, e)
        return False


def _math_number_here(text: str, timeout: int | None) -> float | None:
    from math_verify import parse

    try:
        for v in parse(f"${text}$", parsing_timeout=timeout):
            if getattr(v, "is_number", False):
                return float(v)
    except Exception:  # noqa: BLE001 - not a number math_verify can read
        pass
    return None


_POOL = None
_POOL_LOCK = threading.Lock()


def _pool():
    """A small spawn-context process pool for math_verify calls made off the main thread."""
    global _POOL
    with _POOL_LOCK:
        if _POOL is None:
            import multiprocessing as mp

            pool = mp.get_context("spawn").Pool(processes=2)
            # start-up (spawn + importing sympy) must not count against the first answer's timeout
            pool.map(_warm, range(2))
            _POOL = pool
            atexit.register(_reset_pool)  # closed before interpreter teardown, not by Pool.__del__ during it
        return _POOL


def _warm(_: int) -> None:
    import math_verify  # noqa: F401


def _reset_pool() -> None:
    global _POOL
    with _POOL_LOCK:
        if _POOL is not None:
            _POOL.terminate()  # a hung sympy evaluation cannot be cancelled, only killed
            _POOL = None


def _bounded(fn: Callable[..., Any], args: tuple, timeout: int, default: Any) -> Any:
    """``fn(*args, timeout)`` here on the main thread; off it in the pool, abandoned after ``timeout``."""
    if threading.current_thread() is threading.main_thread():
        return fn(*args, timeout)
    try:
        pool = _pool()
    except (OSError, AssertionError, ValueError) as e:  # e.g. a daemonic process may not start children
        logger.warning("math_verify runs without a timeout here (no process pool: %s)", e)
        return fn(*args, None)
    try:
        return pool.apply_async(fn, (*args, None)).get(timeout)
    except Exception as e:  # noqa: BLE001 - timeout or a dead worker: no verdict, not a hung step
        logger.warning("math_verify gave no verdict within %ss on %s (%s); graded wrong",
                       timeout, " vs ".join(repr(str(a)[:80]) for a in args), e.__class__.__name__)
        _reset_pool()
        return default


def math_equal(pred: str, gold: str, timeout: int = DEFAULT_TIMEOUT_S) -> bool:
    """``math_verify`` equivalence within ``timeout`` seconds; False on failure or timeout (never raises).

    Each side is read as LaTeX math (``$...$`` added unless it already has ``$`` or ``\\boxed``),
    and as plain text when that reads nothing.

    >>> math_equal("\\\\frac{1}{2}", "0.5"), math_equal("x^2+1", "1+x^2"), math_equal("3", "4")
    (True, True, False)
    """
    return bool(_bounded(_math_equal_here, (pred, gold), timeout, False))


def math_number(text: str, timeout: int = DEFAULT_TIMEOUT_S) -> float | None:
    """The value of a LaTeX number (``\\frac{25}{2}`` → 12.5) within ``timeout`` seconds, else None."""
    return _bounded(_math_number_here, (text,), timeout, None)


__all__ = ["DEFAULT_TIMEOUT_S", "last_boxed", "math_equal", "math_number"]
