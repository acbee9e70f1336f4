"""The one ``\\boxed{}`` reader and the one ``math_verify`` check, safe against answers that never end.

Two places decide whether a model's final answer is mathematically right: Vision-R1's reward
(HFRRF, :mod:`vlrl.methods.vision_r1.reward`), which grades training rollouts, and Prism's
``answer_mode="reason"`` (:mod:`vlrl.methods.caprl.prism`), which grades an answerer's boxed
answer. They must agree on what "the boxed answer" is and on when two expressions are equal, so
both use this module; it sits in the rewards layer, below both methods.

Why the bounds: sympy, under ``math_verify``, can spend hours on one pathological answer
(``9^{9^{9^{9}}}``, ``(x+1)^{3000}(x-1)^{3000}``), and a policy finds such answers. Two bounds apply:

* **Before any arithmetic**, :func:`too_big` refuses answers whose numbers cannot be computed
  exactly in reasonable time: a numeric power tower (``10^10^10``), an exponent or a scientific
  exponent beyond :data:`MAX_EXPONENT`, a factorial beyond :data:`MAX_FACTORIAL`. Python computes
  ``10**(10**10)`` in one C call that no signal or timer can interrupt, so this check must come first,
  on every thread. Such an answer is graded wrong.
* **Per check, in time.** On the main thread ``math_verify``'s own SIGALRM timeouts apply. Off it
  (verl calls rewards from worker threads, TRL may too) signals cannot be used, so each check runs in
  a worker process of its own for the length of the check (:class:`CheckPool`): the clock starts
  when the worker receives the check, never while the check waits for a free worker, and a worker
  whose check overruns is killed and replaced alone, so one pathological answer never costs another
  thread's check its verdict. The pool grows with the number of concurrent checks up to one worker
  per CPU (``VLRL_ANSWER_CHECK_WORKERS`` overrides).

A check that gives no verdict in time is a wrong answer, never a hung step and never an exception.
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import re
import select
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
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


def math_equal_here(pred: str, gold: str, timeout: int | None) -> bool:
    from math_verify import verify

    try:
        g, p = _mv_parse(gold, timeout), _mv_parse(pred, timeout)
        return bool(g and p and verify(g, p, timeout_seconds=timeout))
    except Exception as e:  # noqa: BLE001 - a parser crash is a wrong answer, not a crashed step
        logger.debug("math_verify failed on %r vs %r: %s", pred, gold, e)
        return False


def math_number_here(text: str, timeout: int | None) -> float | None:
    from math_verify import parse

    try:
        for v in parse(f"${text}$", parsing_timeout=timeout):
            if getattr(v, "is_number", False):
                return float(v)
    except Exception:  # noqa: BLE001 - not a number math_verify can read
        pass
    return None


_OPS: dict[str, Callable[..., Any]] = {"equal": math_equal_here, "number": math_number_here}

MAX_EXPONENT = 10_000  # 10^10000 has 10,001 digits: exact arithmetic on it is instant
MAX_FACTORIAL = 10_000

_NUMERIC = re.compile(r"^[\d\s.,+\-*/(){}^]*$")
_PLAIN_INT = re.compile(r"^\s*\{?\s*([+-]?[\d,]+)\s*\}?\s*$")
_SCI_EXP = re.compile(r"\d\s*[eE]\s*([-+]?\d+)")
_FACTORIAL = re.compile(r"(\d+)\s*!")


def _exponent_at(s: str, i: int) -> tuple[str, int]:
    """The exponent written at ``s[i:]`` (a braced group, a parenthesised group, or a token) and its end."""
    while i < len(s) and s[i].isspace():
        i += 1
    if i < len(s) and s[i] in "{(":
        close = "}" if s[i] == "{" else ")"
        depth = 0
        for j in range(i, len(s)):
            if s[j] == s[i]:
                depth += 1
            elif s[j] == close:
                depth -= 1
                if depth == 0:
                    return s[i + 1 : j], j + 1
        return s[i + 1 :], len(s)
    m = re.match(r"[+-]?[\w.]+", s[i:])
    return (m.group(0), i + m.end()) if m else ("", i)


def too_big(text: str) -> str | None:
    """Why ``text`` holds a number too big to compute exactly (a numeric tower, a huge exponent), else None.

    >>> too_big("10^10^10"), too_big("1e999999999"), too_big("2^{10}"), too_big("e^{-x^2}")
    ('numeric power tower', 'exponent beyond 10000', None, None)
    """
    s = str(text)
    for m in _SCI_EXP.finditer(s):
        if abs(int(m.group(1)[:12])) > MAX_EXPONENT:
            return f"exponent beyond {MAX_EXPONENT}"
    for m in _FACTORIAL.finditer(s):
        if len(m.group(1)) > 12 or int(m.group(1)) > MAX_FACTORIAL:
            return f"factorial beyond {MAX_FACTORIAL}"
    for m in re.finditer(r"\^|\*\*", s):
        exp, end = _exponent_at(s, m.end())
        if not _NUMERIC.match(exp):
            continue  # a symbolic exponent (e^{-x^2}) is not a big number
        rest = s[end:].lstrip()
        if "^" in exp or "**" in exp or rest.startswith(("^", "**")):
            return "numeric power tower"
        plain = _PLAIN_INT.match(exp)
        digits = plain.group(1).replace(",", "").lstrip("+-") if plain else ""
        if digits and (len(digits) > 12 or int(digits) > MAX_EXPONENT):
            return f"exponent beyond {MAX_EXPONENT}"
    return None


def _workers_wanted() -> int:
    env = os.environ.get("VLRL_ANSWER_CHECK_WORKERS")
    if env:
        return max(1, int(env))
    try:
        return max(2, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(2, os.cpu_count() or 2)


class WorkerStartError(OSError):
    """No answer-check worker process could be started here."""


_NO_WORKERS_WARNED = False


class _Worker:
    """One ``python -m vlrl.rewards.check_worker`` process, used by one check at a time."""

    def __init__(self, start_timeout: float) -> None:
        root = str(Path(__file__).resolve().parents[2])  # vlrl's own tree, installed or not
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p))
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "vlrl.rewards.check_worker"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL, env=env, text=True, bufsize=1,
            )
        except OSError as e:
            raise WorkerStartError(f"cannot start python -m vlrl.rewards.check_worker ({e})") from e
        try:
            ready = self._read(start_timeout)
        except EOFError:
            ready = None
        if ready is None:
            self.kill()
            raise WorkerStartError(f"answer-check worker did not start within {start_timeout:.0f}s")

    def _read(self, timeout: float) -> dict | None:
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        if not ready:
            return None
        line = self.proc.stdout.readline()
        if not line:
            raise EOFError("answer-check worker exited")
        return json.loads(line)

    def check(self, op: str, args: tuple, timeout: float) -> Any:
        """The verdict, or raises TimeoutError after ``timeout`` seconds counted from the send."""
        self.proc.stdin.write(json.dumps({"op": op, "args": list(args)}) + "\n")
        self.proc.stdin.flush()
        reply = self._read(timeout)
        if reply is None:
            raise TimeoutError
        return reply["value"]

    def kill(self) -> None:
        self.proc.kill()  # a hung sympy evaluation cannot be cancelled, only killed
        self.proc.wait()
        for f in (self.proc.stdin, self.proc.stdout):
            try:
                f.close()
            except OSError:
                pass


class CheckPool:
    """Worker processes lent one per check; a worker whose check overruns is killed and replaced alone.

    Workers start on demand, when every started one is busy, up to ``size``; a check waits for a free
    worker before its clock starts. Start-up (interpreter, sympy, the LaTeX grammar) is never charged
    to a check either.
    """

    def __init__(self, size: int | None = None, start_timeout: float = 120.0) -> None:
        self.size = size or _workers_wanted()
        self.start_timeout = start_timeout
        self._idle: list[_Worker] = []
        self._lent: set[_Worker] = set()
        self._count = 0
        self._cond = threading.Condition()
        self.killed = 0  # workers killed for an overrun (tests and logs read it)

    @property
    def busy(self) -> int:
        """Workers lent to a check right now."""
        with self._cond:
            return self._count - len(self._idle)

    def _acquire(self) -> _Worker:
        with self._cond:
            while not self._idle and self._count >= self.size:
                self._cond.wait()
            if self._idle:
                worker = self._idle.pop()
                self._lent.add(worker)
                return worker
            self._count += 1
        try:
            worker = _Worker(self.start_timeout)
            with self._cond:
                self._lent.add(worker)
            return worker
        except BaseException:
            with self._cond:
                self._count -= 1
                self._cond.notify()
            raise

    def _release(self, worker: _Worker, healthy: bool) -> None:
        if not healthy:
            worker.kill()
        with self._cond:
            self._lent.discard(worker)
            if healthy:
                self._idle.append(worker)
            else:
                self._count -= 1
            self._cond.notify()

    def run(self, op: str, args: tuple, timeout: float) -> Any:
        """The worker's verdict; raises TimeoutError (that worker killed) or OSError/EOFError."""
        worker = self._acquire()
        healthy = False
        try:
            value = worker.check(op, args, timeout)
            healthy = True
            return value
        except TimeoutError:
            with self._cond:
                self.killed += 1
            raise
        finally:
            self._release(worker, healthy)

    def close(self) -> None:
        """Kill every worker, idle or still checking (at interpreter exit no check is waited for)."""
        with self._cond:
            workers, self._idle = [*self._idle, *self._lent], []
            self._lent = set()
            self._count = 0
        for w in workers:
            w.kill()


_POOL: CheckPool | None = None
_POOL_LOCK = threading.Lock()


def check_pool() -> CheckPool:
    """The process-wide pool for checks made off the main thread (built on first use)."""
    global _POOL
    with _POOL_LOCK:
        if _POOL is None:
            _POOL = CheckPool()
            atexit.register(_POOL.close)
        return _POOL


def _bounded(op: str, args: tuple, timeout: int, default: Any) -> Any:
    """``op(*args)`` within ``timeout`` seconds: in this thread on the main thread, else in a worker."""
    if (why := next(filter(None, map(too_big, args)), None)) is not None:
        logger.debug("answer refused before any arithmetic (%s): %s", why, " vs ".join(repr(str(a)[:80]) for a in args))
        return default
    if threading.current_thread() is threading.main_thread():
        return _OPS[op](*args, timeout)
    try:
        return check_pool().run(op, args, timeout)
    except TimeoutError:
        logger.warning("math_verify gave no verdict within %ss on %s; graded wrong",
                       timeout, " vs ".join(repr(str(a)[:80]) for a in args))
    except WorkerStartError as e:
        # No worker can start here (a sandbox without subprocesses): checking in this thread without a
        # time limit beats grading every answer wrong; huge numbers were refused above all the same.
        global _NO_WORKERS_WARNED
        if not _NO_WORKERS_WARNED:
            _NO_WORKERS_WARNED = True
            logger.warning("answer checks run in their own thread without a time limit: %s", e)
        return _OPS[op](*args, None)
    except (OSError, EOFError, ValueError) as e:  # a worker that died mid-check (the answer killed it)
        logger.warning("answer check failed in its worker (%s: %s); graded wrong", e.__class__.__name__, e)
    return default


def math_equal(pred: str, gold: str, timeout: int = DEFAULT_TIMEOUT_S) -> bool:
    """``math_verify`` equivalence within ``timeout`` seconds; False on failure or timeout (never raises).

    Each side is read as LaTeX math (``$...$`` added unless it already has ``$`` or ``\\boxed``),
    and as plain text when that reads nothing.

    >>> math_equal("\\\\frac{1}{2}", "0.5"), math_equal("x^2+1", "1+x^2"), math_equal("3", "4")
    (True, True, False)
    """
    return bool(_bounded("equal", (str(pred), str(gold)), timeout, False))


def math_number(text: str, timeout: int = DEFAULT_TIMEOUT_S) -> float | None:
    """The value of a LaTeX number (``\\frac{25}{2}`` → 12.5) within ``timeout`` seconds, else None."""
    return _bounded("number", (str(text),), timeout, None)


__all__ = ["DEFAULT_TIMEOUT_S", "MAX_EXPONENT", "MAX_FACTORIAL", "CheckPool", "check_pool", "last_boxed", "math_equal",
           "math_equal_here", "math_number", "math_number_here", "too_big"]
