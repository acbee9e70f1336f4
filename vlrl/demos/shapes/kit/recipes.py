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


def grpo_trainer(output_dir: Path, seed: int, learning_rate: float, temperature: float, save_steps: int = 50,
                 **extra: Any) -> dict[str, Any]:
    """The ``trainer`` block every demo's GRPO/PTST recipe shares: a tiny policy on a CPU, one
    process. Sampling at ``temperature`` with top-k off and no KL (beta 0), a constant learning rate,
    group-scaled advantages, a log line per step, one checkpoint kept every ``save_steps`` steps (so a
    killed run resumes), no activation recomputation (a tiny model only pays time for it). ``extra``
    adds each demo's own keys (steps, batch, group size, completion length)."""
    return {
        "output_dir": str(output_dir),
        "gradient_accumulation_steps": 1,
        "temperature": temperature,
        "top_k": 0,
        "beta": 0.0,
        "learning_rate": learning_rate,
        "lr_scheduler_type": "constant",
        "warmup_steps": 0,
        "scale_rewards": "group",
        "logging_steps": 1,
        "save_strategy": "steps",
        "save_steps": save_steps,
        "save_total_limit": 1,
        "seed": seed,
        "dataloader_num_workers": 0,
        "gradient_checkpointing": False,
        "report_to": "none",
        **extra,
    }


def run_recipe(path: Path) -> dict[str, Any]:
    """Run the recipe at ``path`` as ``vlrl train <its method>`` would (resuming an RL stage from its
    newest checkpoint); returns its metrics."""
    from vlrl.training.entry import run
    from vlrl.training.recipe import load_recipe

    return run(load_recipe(path))
