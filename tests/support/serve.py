"""Reward services for tests, on 127.0.0.1: the app in a uvicorn thread, and a step-sensitive answerer.

:func:`hashed_reader` is a ``py:`` answerer whose letter is a hash of the whole prompt, so it depends
on the option order caprl_qa draws from the step: a service that scored a row under the wrong step
(or twice under different ones) would give a different reward than ``vlrl reward score``.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from tests.support.servers import free_port
from vlrl.serve.engines import served_in_thread as app_server  # noqa: F401 - the tests serve apps as the benchmark does

READER = "py:tests.support.serve:hashed_reader"
CAPRL_SETTINGS = {"answerer": READER, "mode": "exact", "questions_per_caption": 2, "rounds": 1, "min_letter_mass": 0.0}


def hashed_reader():
    def reply(messages, sampling):
        text = "".join(str(m.get("content")) for m in messages)
        return "ABCD"[int(hashlib.sha256(text.encode()).hexdigest(), 16) % 4]
    return reply


QUESTION_BANK = [
    {"question": "What colour is the circle?", "options": ["red", "blue", "green"], "answer": "A"},
    {"question": "How many squares are there?", "options": ["one", "two", "three", "four"], "answer": "C"},
    {"question": "Where is the star?", "options": ["left", "right", "top"], "answer": "B"},
]


def caprl_rows(n: int, prefix: str = "r") -> list[dict[str, Any]]:
    """``n`` rows with distinct captions, each with the question bank (some rows lack questions)."""
    rows = []
    for i in range(n):
        row: dict[str, Any] = {"id": f"{prefix}{i}", "completion": f"A red circle number {i} with {i % 5} squares.",
                               "questions": QUESTION_BANK if i % 7 else []}
        rows.append(row)
    return rows


WORDS = "tests.support.serve:word_count"


def word_count(prompts=None, completions=None, **kwargs):
    """A TRL reward function without a model: the number of words of each completion."""
    from vlrl.rewards import completion_text

    return [float(len(completion_text(c).split())) for c in completions]


@dataclass
class Service:
    root: str
    """``http://127.0.0.1:PORT``"""
    pid: int
    """The ``vlrl serve reward`` process (Ray's processes run below it)."""


def wait_ready(root: str, timeout: float = 240) -> None:
    """Wait until the service's ``/ready`` says ready (its backends passed pre-flight)."""
    from tests.support.servers import get_json

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if get_json(root + "/ready", timeout=5).get("ready"):
                return
        except OSError:
            pass
        time.sleep(1)
    raise AssertionError("the reward service never became ready")


@contextmanager
def vlrl_service(args: list[str], log, startup_timeout: float = 240.0, env: dict[str, str] | None = None) -> Iterator[Service]:
    """``vlrl serve reward ARGS --port P`` as its own process group; yields it once /health answers."""
    import shutil
    import sys
    from pathlib import Path

    from tests.support.servers import get_json, server_process

    port = free_port()
    exe = Path(sys.executable).parent / "vlrl"
    cmd = [str(exe) if exe.exists() else (shutil.which("vlrl") or "vlrl"), "serve", "reward", *args, "--port", str(port)]
    from tests.support.jobs import child_env

    # child_env: the repository on PYTHONPATH, so rewards and answerers from tests.support import
    full_env = child_env(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", **(env or {}))
    root = f"http://127.0.0.1:{port}"
    with server_process(cmd, full_env, log, lambda: get_json(root + "/health").get("status") == "up",
                        "vlrl serve reward", startup_timeout) as proc:
        yield Service(root, proc.pid)
        proc.send_signal(2)  # SIGINT: the graceful shutdown path
        proc.wait(60)


def slow_words(prompts=None, completions=None, delay="0.5", **kwargs):
    """:func:`word_count` after a pause: a batch still running when the service is told to stop."""
    time.sleep(float(delay))
    return word_count(prompts, completions)


def echoing_words(prompts=None, completions=None, **kwargs):
    """:func:`word_count` that logs what a careless server echoes: the API key it was sent."""
    import logging
    import os

    logging.getLogger("vlrl.core.backends").warning("server said: invalid key %s", os.environ.get("OPENAI_API_KEY"))
    return word_count(prompts, completions)
