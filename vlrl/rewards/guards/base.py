"""The guard contract and its registry, below every guard module.

A guard is a cheap check that fires on a caption (:class:`Guard`); guards are chosen by name from a
settings block (:class:`vlrl.rewards.guards.GuardSet`). The base class lives apart from the guards
themselves so that guard families in their own modules (the rubric-judge hacks of
:mod:`vlrl.rewards.guards.judge`) register the same way as the guards of :mod:`vlrl.rewards.guards`
without an import cycle.
"""

from __future__ import annotations

import abc
from collections.abc import Callable

from vlrl.rewards.guards.doc import Doc

GUARDS: dict[str, type[Guard]] = {}


def register_guard(name: str) -> Callable[[type[Guard]], type[Guard]]:
    def deco(cls: type[Guard]) -> type[Guard]:
        cls.name = name
        GUARDS[name] = cls
        return cls

    return deco


class Guard(abc.ABC):
    """A check that fires on a caption. ``match`` returns the evidence (a snippet) or ``None``."""

    name = "guard"
    default = True
    """Whether ``enabled`` left unset turns the guard on (an LLM-judged guard is opt-in)."""
    rank = 0
    """Default guards run in (rank, registration) order, whatever module was imported first."""

    def __init__(self, penalty: float = 1.0) -> None:
        self.penalty = float(penalty)

    @abc.abstractmethod
    def match(self, doc: Doc) -> str | None:
        """The evidence (a snippet of the caption) when the guard fires, else ``None``."""

    def fires(self, text: str) -> bool:
        return self.match(Doc.of(text)) is not None

    def unjudged(self, doc: Doc) -> str | None:
        """Why the guard could not decide on ``doc`` (a judge that failed), or ``None``. A pattern
        always decides; a guard that asks a model must say when the model gave no answer, or a dead
        judge would pass every caption as clean."""
        return None


__all__ = ["GUARDS", "Guard", "register_guard"]
