"""What every vlrl reward is: a TRL reward function that also explains itself.

TRL calls a reward as ``fn(prompts, completions, completion_ids, **columns)`` and wants one
``float | None`` per completion (``None``: not applicable, the sample does not steer training).
Dataset columns (questions, rubrics, answers) arrive as keyword arguments, together with
``log_metric`` / ``trainer_state`` in TRL >= 1.x.

:class:`Reward` keeps exactly that contract and adds one thing: ``score()`` returns a
:class:`Score` per completion whose ``details`` hold the sub-scores (QA accuracy, pass rate by
severity, which guard fired). ``__call__`` averages numeric details into ``log_metric`` so every
sub-score shows up in the trainer's logs without any extra wiring, and ``vlrl reward score`` writes
them per row.
"""

from __future__ import annotations

import abc
import contextlib
import logging
import math
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

logger = logging.getLogger(__name__)


@dataclass
class Score:
    value: float | None
    details: dict[str, Any] = field(default_factory=dict)


BACKEND_FAILED = "backend_failed"
"""Detail key of a score that stands in for a backend failure (an answerer or judge that did not
answer): its value, ``None`` or a configured fallback such as 0.0, says nothing about the completion."""

NO_SIGNAL_DETAILS = (BACKEND_FAILED, "guarded_none", "guard_floor")
"""Details that mark a score as carrying no evidence from the reward itself: a backend failure, a
guard's floor put where the inner reward gave ``None``, or a veto's floor."""


def no_signal(score: Score) -> bool:
    """Whether ``score`` carries no evidence about its completion: ``None``, a number standing in for
    a backend failure, or a guard's floor. A training step where every score of a reward is so has
    no signal from that reward, whatever the numbers look like (the reward-health rule,
    :class:`vlrl.training.runstate.NoneRewardGuard`)."""
    return score.value is None or any(score.details.get(k) for k in NO_SIGNAL_DETAILS)


@dataclass
class Health:
    """What the last call of a reward gave: how many of its ``total`` scores had :func:`no_signal`
    (``dead``), and how many of those were failures rather than a plain "not applicable" ``None``."""

    dead: int = 0
    failed: int = 0
    total: int = 0


def completion_text(completion: Any) -> str:
    """TRL passes conversational completions as ``[{"role": "assistant", "content": str}]``."""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, list) and completion:
        content = completion[-1].get("content", "")
        if isinstance(content, list):  # content parts
            return "".join(p.get("text", "") for p in content if p.get("type") == "text")
        return content or ""
    if isinstance(completion, dict):
        return completion.get("content", "") or ""
    return str(completion or "")


_LAST = threading.local()


def last_scores(reward: Any) -> list[Score] | None:
    """The :class:`Score` list of ``reward``'s latest ``__call__`` on this thread, else None.

    A wrapper (guards) calls the reward it wraps through its ``__call__``, so everything that reward
    does there (seeding its draws from the trainer step, counting tokens against the length cap)
    still happens, and then reads the scores' details here. Per thread, so concurrent calls of one
    shared reward (verl's worker threads) never read each other's scores."""
    return getattr(_LAST, "scores", {}).get(id(reward))


def remember_scores(reward: Any, scores: list[Score]) -> None:
    if not hasattr(_LAST, "scores"):
        _LAST.scores = {}
    _LAST.scores[id(reward)] = scores


@contextlib.contextmanager
def quiet_report():
    """Within it, :meth:`Reward.report` on this thread logs no sub-scores: a wrapper calling the reward
    it wraps logs them once itself, merged with its own (TRL's ``log_metric`` appends, so a key logged
    twice would be counted twice). Whatever else the wrapped reward logs (a user function's own
    metrics) still goes through."""
    _LAST.quiet = getattr(_LAST, "quiet", 0) + 1
    try:
        yield
    finally:
        _LAST.quiet -= 1


# TRL's own keyword arguments: not dataset columns.
TRL_KWARGS = {"trainer_state", "log_metric", "log_extra", "completion_ids", "prompts"}


class Reward(abc.ABC):
    """Base class for rewards with settings. Subclasses implement :meth:`score`.

    ``required_columns`` names the dataset columns the reward needs; the trainer checks them before
    loading any model so a missing column fails fast with a clear message.
    """

    name: str = "reward"
    required_columns: tuple[str, ...] = ()

    @property
    def __name__(self) -> str:  # TRL names the reward's metrics after __name__
        return self.name

    @abc.abstractmethod
    def score(self, completions: list[str], **columns: Any) -> list[Score]:
        """One :class:`Score` per completion; columns arrive as lists aligned with completions."""

    def close(self) -> None:
        """Close the backends this reward opened (which logs their accounting); safe to call twice.

        Backends the caller handed in (public settings such as ``answerer=<Backend>``) stay open:
        the caller owns them. Wrapped rewards (guards) are closed too.
        """
        from vlrl.core.backends.base import Backend

        given = {id(v) for k, v in vars(self).items() if not k.startswith("_") and isinstance(v, Backend)}
        for value in vars(self).values():
            if isinstance(value, Backend) and id(value) not in given:
                value.close()
            elif isinstance(value, Reward) and value is not self:
                value.close()

    def __call__(self, prompts=None, completions=None, completion_ids=None, **kwargs: Any) -> list[float | None]:
        log_metric = kwargs.get("log_metric")
        columns = {k: v for k, v in kwargs.items() if k not in TRL_KWARGS}
        texts = [completion_text(c) for c in completions or []]
        scores = self.score(texts, prompts=prompts, **columns)
        return self.report(scores, log_metric)

    def report(self, scores: list[Score], log_metric: Any = None) -> list[float | None]:
        """What every ``__call__`` ends with: remember the scores (:func:`last_scores`), record their
        health for the no-signal rule, log the sub-scores' means, and return the values."""
        remember_scores(self, scores)
        self.health = Health(sum(no_signal(s) for s in scores),
                             sum(any(s.details.get(k) for k in NO_SIGNAL_DETAILS) for s in scores), len(scores))
        if log_metric is not None and not getattr(_LAST, "quiet", 0):
            for key, value in summarize_details(scores).items():
                log_metric(f"{self.name}/{key}", value)
        return [s.value for s in scores]


def summarize_details(scores: Sequence[Score]) -> dict[str, float]:
    """Mean of every numeric detail across completions, plus the rate of ``None`` rewards."""
    sums: dict[str, float] = {}
    counts: dict[str, int] = {}
    for s in scores:
        for k, v in s.details.items():
            if isinstance(v, bool):
                v = float(v)
            if isinstance(v, (int, float)) and not (isinstance(v, float) and math.isnan(v)):
                sums[k] = sums.get(k, 0.0) + v
                counts[k] = counts.get(k, 0) + 1
    out = {k: sums[k] / counts[k] for k in sums}
    if scores:
        out["none_rate"] = sum(s.value is None for s in scores) / len(scores)
    return out


class FunctionReward(Reward):
    """Adapts a plain TRL reward function (e.g. a user's ``pkg.mod:fn``) to :class:`Reward`.

    In training the function gets TRL's whole call, unchanged: ``prompts``, ``completions`` as TRL
    passed them, ``completion_ids``, ``trainer_state``, ``log_metric``, ``log_extra`` and the dataset
    columns (plus its settings), so a function written to TRL's contract runs as it would in TRL.
    Outside a trainer (``vlrl reward score``, verl) it gets the completions as conversations and
    ``completion_ids=None``."""

    def __init__(self, fn, name: str | None = None, **settings: Any) -> None:
        self.fn = fn
        self.settings = settings
        self.name = name or getattr(fn, "__name__", "reward")

    def __call__(self, prompts=None, completions=None, completion_ids=None, **kwargs: Any) -> list[float | None]:
        values = self.fn(prompts=prompts, completions=completions, completion_ids=completion_ids,
                         **self.settings, **kwargs)
        return self.report([Score(v) for v in values], kwargs.get("log_metric"))

    def score(self, completions: list[str], prompts=None, **columns: Any) -> list[Score]:
        convo = [[{"role": "assistant", "content": c}] for c in completions]
        values = self.fn(prompts=prompts, completions=convo, completion_ids=columns.pop("completion_ids", None),
                         **self.settings, **columns)
        return [Score(v) for v in values]
