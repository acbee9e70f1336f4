"""Sanity checks of a reward before training on it, found by reward name (``vlrl reward smoke --reward``).

Each method knows how to check its own reward (CapRL: real captions must out-score generic ones;
RubiCap: rubrics must fail the student caption and pass the teachers'). The command lives in one
method's command module, and methods never import each other, so the checks meet here: a method
registers its check under its reward's name when its commands are registered, and the command looks
the check up by the ``--reward`` it was given.

A check is called with the command's options as keyword arguments and returns a summary dict with
at least ``passed`` (bool) and ``failures`` (list of one-line reasons).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

SmokeCheck = Callable[..., dict[str, Any]]
_CHECKS: dict[str, SmokeCheck] = {}


def register_smoke(reward: str, check: SmokeCheck) -> None:
    _CHECKS[reward] = check


def get_smoke(reward: str) -> SmokeCheck:
    if reward not in _CHECKS:
        raise ValueError(f"no smoke check for reward {reward!r}; available: {', '.join(sorted(_CHECKS)) or 'none'}")
    return _CHECKS[reward]


def smoke_checks() -> list[str]:
    return sorted(_CHECKS)


__all__ = ["get_smoke", "register_smoke", "smoke_checks"]
