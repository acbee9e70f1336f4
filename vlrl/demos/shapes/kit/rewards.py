"""The shapes world's format reward: captions must stay in the world's grammar.

A text answerer is a lenient, learned reader, and a policy under RL pressure finds phrasings it
still rewards but a strict reader cannot parse ("... on the left and small red triangle on the
right", run-ons that chain items with "on"). In a closed world the grammar is known, so the demo
adds a format reward in the spirit of DeepSeek-R1's: 0 for a caption that parses
(:func:`vlrl.demos.shapes.kit.world.parse_caption`), ``-penalty`` otherwise. Recipes name it by its dotted path,
``vlrl.demos.shapes.kit.rewards:GrammarReward``, like any user reward. ``parser`` names another
world's grammar (``module:function``, returning None for a caption that does not parse; the video
demo's is :func:`vlrl.demos.shapes.caprl_video.world.parse_caption`).
"""

from __future__ import annotations

from typing import Any

from vlrl.demos.shapes.kit.world import parse_caption
from vlrl.rewards.base import Reward, Score


class GrammarReward(Reward):
    name = "shapes_grammar"

    def __init__(self, penalty: float = 1.0, parser: str | None = None) -> None:
        self.penalty = float(penalty)
        self.parse = parse_caption
        if parser:
            import importlib

            module, _, name = parser.partition(":")
            self.parse = getattr(importlib.import_module(module), name)

    def score(self, completions: list[str], **_: Any) -> list[Score]:
        out = []
        for text in completions:
            ok = self.parse(text or "") is not None
            out.append(Score(0.0 if ok else -self.penalty, {"parse_ok": float(ok)}))
        return out


def grammar_reward_block(parser: str | None = None) -> dict[str, Any]:
    """The recipes' ``rewards[]`` entry for :class:`GrammarReward` (every GRPO demo adds it beside its main reward)."""
    settings: dict[str, Any] = {"penalty": 1.0, **({"parser": parser} if parser else {})}
    return {"name": "vlrl.demos.shapes.kit.rewards:GrammarReward", "weight": 1.0, "settings": settings}
