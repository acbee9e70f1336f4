"""What ``vlrl serve reward`` serves: a reward block from the command line or a recipe, and where.

``--recipe FILE`` takes the reward block a training run would build (its settings and guards, the
same :class:`vlrl.training.recipe.RewardSpec`), so the service scores exactly what the recipe would
score in process. A recipe with several rewards names the one to serve with ``--reward NAME``.
"""

from __future__ import annotations

import ipaddress
from typing import Any

LOOPBACK_NAMES = {"localhost", "ip6-localhost"}


def is_loopback(host: str) -> bool:
    """Whether binding to ``host`` keeps the service on this machine."""
    if host in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_binding(host: str, token_env: str | None) -> None:
    """Refuse to expose a service without a token: anything but loopback needs ``--token-env``."""
    if not is_loopback(host) and not token_env:
        raise ValueError(f"--host {host}: binding beyond loopback needs --token-env NAME (a bearer token read from "
                         "that environment variable, which every client must send)")


def reward_block(reward: str | None, settings: dict[str, Any], recipe: str | None) -> tuple[str, dict[str, Any]]:
    """``(name, settings)`` of the reward to serve, guards included as ``settings["guards"]``."""
    if recipe is None:
        if not reward:
            raise ValueError("name the reward to serve: --reward NAME [-s key=value ...] or --recipe FILE")
        return reward, settings
    from vlrl.training.recipe import load_recipe

    rec = load_recipe(recipe)
    blocks = [r for r in rec.rewards if r.name != "remote"]
    if reward is not None:
        blocks = [r for r in blocks if r.name == reward]
    if len(blocks) != 1:
        names = ", ".join(r.name for r in rec.rewards if r.name != "remote") or "none"
        raise ValueError(f"{recipe}: {'no' if not blocks else 'several'} reward block(s) to serve "
                         f"({names}); pick one with --reward NAME")
    block = blocks[0]
    merged = {**block.settings, **settings}
    if block.guards:
        merged.setdefault("guards", block.guards)
    return block.name, merged
