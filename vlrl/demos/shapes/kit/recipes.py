"""The demos' recipe files: every training stage of the demos is an ordinary recipe on disk.

The SFT stages (the CapRL captioner's warm start, the Vision-R1 student's cold-start SFT) are
``vlrl train sft`` recipes run by :func:`vlrl.training.sft.run_sft` (TRL's ``SFTTrainer``); the RL
stages are ``vlrl train grpo`` / ``vlrl train ptst`` recipes. Writing the file first, rather than
building a ``Recipe`` in memory, leaves each stage runnable again with the CLI.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml


def save_recipe(recipe: dict[str, Any], path: Path) -> Path:
    """Write ``recipe`` as YAML at ``path`` (keys in the order given) and return ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(recipe, sort_keys=False))
    return path


def run_recipe(path: Path) -> dict[str, Any]:
    """Run the recipe at ``path`` as ``vlrl train <its method>`` would (resuming an RL stage from its
    newest checkpoint); returns its metrics."""
    from vlrl.training.entry import run
    from vlrl.training.recipe import load_recipe

    return run(load_recipe(path))
