"""Empty and truncated model outputs: counted in every job's summary, warned about once.

A tiny random VLM (or a real one with a broken chat template) can answer every image with nothing
but newlines, each answer running into the length limit. Such a job finishes "complete": every
request returned text, so nothing failed. The numbers that tell the user are how many outputs hold
no visible character (*empty*) and how many stopped at the length limit (*truncated*,
``finish_reason == "length"``), so every job that writes model text counts both
(:class:`OutputCounts`), reports them next to its other counts, and warns once when either passes
:data:`WARN_SHARE` of the outputs: during the run as soon as :data:`WARN_AFTER` outputs show it (a
job of millions should not wait for its end), or at the end of a smaller one.

Empty here means whitespace only. A reply with no character at all is no answer and already a
failure of its request (:func:`vlrl.core.backends.base.answer_problem`); whitespace is an answer,
a bad one, which a job keeps (a corpus records what the model said) and this counts.
"""

from __future__ import annotations

import logging
from typing import Any

logger = logging.getLogger(__name__)

WARN_SHARE = 0.1
"""Warn when more than this share of a job's outputs is empty, or more than this share truncated."""
WARN_AFTER = 20
"""Outputs to see before warning during the run (the end of a run warns whatever its size)."""


def is_empty(text: Any) -> bool:
    """Whether a model output holds no visible character (``None``, ``""``, only whitespace)."""
    return not isinstance(text, str) or not text.strip()


class OutputCounts:
    """How many of a job's outputs were empty or truncated, and one warning when too many were.

    ``what`` names the outputs in the warning ("captions", "teacher captions"); ``limit_flag``
    names the flag that raises the length limit, so the warning says what to change.
    """

    def __init__(self, what: str = "outputs", limit_flag: str = "--max-tokens", *, share: float = WARN_SHARE,
                 after: int = WARN_AFTER) -> None:
        self.what = what
        self.limit_flag = limit_flag
        self.share = share
        self.after = after
        self.seen = self.empty = self.truncated = 0
        self.warned = False

    def add(self, text: Any, finish_reason: str | None = None, *, truncated: bool | None = None) -> None:
        """Count one output (``truncated`` overrides reading it from ``finish_reason``)."""
        self.seen += 1
        self.empty += is_empty(text)
        self.truncated += bool(truncated if truncated is not None else finish_reason == "length")
        if self.seen >= self.after:
            self.check()

    def as_dict(self) -> dict[str, int]:
        return {"empty": self.empty, "truncated": self.truncated}

    def check(self) -> str | None:
        """Warn (once per job) when either count is over the share; returns the warning, if any."""
        if self.warned or not self.seen:
            return None
        parts = []
        if self.empty > self.share * self.seen:
            parts.append(f"{self.empty} of {self.seen} {self.what} are empty (whitespace only)")
        if self.truncated > self.share * self.seen:
            parts.append(f"{self.truncated} of {self.seen} {self.what} stopped at the length limit (raise {self.limit_flag})")
        if not parts:
            return None
        self.warned = True
        msg = "; ".join(parts) + ": the model may be broken or untrained (counted as 'empty'/'truncated' in the summary)"
        logger.warning(msg)
        return msg


__all__ = ["WARN_AFTER", "WARN_SHARE", "OutputCounts", "is_empty"]
