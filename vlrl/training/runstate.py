"""What an ``output_dir`` already holds, and what a rerun may do with it.

Three questions are answered before any model loads, each with a one-line message:

* **Is it the same run?** (:func:`check_identity`) ``recipe.resolved.json`` is written when a run
  *starts*; a rerun whose resolved recipe differs (other than in keys that may change between
  reruns, :data:`IDENTITY_IGNORED`) is refused with the differences shown ``old → new``, unless
  ``--force``. Resuming another recipe's checkpoint would silently mix two runs and overwrite the
  first one's metrics.
* **Is it finished?** (:func:`finished_metrics`) ``metrics.json`` carries ``finished: true`` and the
  ``max_steps`` it ran to. Rerunning a finished run reports it and trains nothing; raising
  ``max_steps`` continues from the final checkpoint (always written, :class:`SaveAtEnd`) with the
  learning-rate schedule re-planned for the new length (:func:`replan_lr`), because the restored
  optimizer otherwise holds the old schedule's last value (0 for a decaying schedule) for one step.
* **Is training producing signal?** (:class:`NoneRewardGuard`) after K consecutive steps in which
  every reward was ``None`` the run stops with :class:`RunFailed`, instead of "succeeding" on zero
  advantages.
"""

from __future__ import annotations

import json
import logging
import math
import os
from pathlib import Path
from typing import Any

from transformers import TrainerCallback

from vlrl.training.recipe import RecipeError

logger = logging.getLogger(__name__)

RESOLVED = "recipe.resolved.json"
METRICS = "metrics.json"
# Keys that may differ between an interrupted run and its rerun without making it another run.
IDENTITY_IGNORED = (
    "trainer.output_dir", "trainer.max_steps", "trainer.num_train_epochs", "trainer.logging_steps",
    "trainer.save_steps", "trainer.save_total_limit", "trainer.report_to", "trainer.log_completions",
    "trainer.num_completions_to_print", "trainer.run_name", "trainer.dataloader_num_workers",
    "callbacks", "run.", "stages.", "data.max_samples",
)


class RunFailed(RuntimeError):
    """Training ran but cannot produce a useful model (e.g. no reward signal); exit non-zero."""


def _flatten(obj: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(obj, dict):
        out: dict[str, Any] = {}
        for k, v in obj.items():
            out.update(_flatten(v, f"{prefix}{k}."))
        return out or {prefix.rstrip("."): {}}
    return {prefix.rstrip("."): obj}


def identity_diff(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """``key: old → new`` for every identity-relevant difference between two resolved recipes."""
    from vlrl.core.jobs import identity_changes

    def relevant(flat: dict[str, Any]) -> dict[str, Any]:
        return {  # both sides are JSON round trips of a recipe, so values compare as plain JSON
            k: v
            for k, v in flat.items()
            if not any(k == ig or (ig.endswith(".") and k.startswith(ig)) for ig in IDENTITY_IGNORED)
            and not k.startswith(("stages", "run"))
        }

    return identity_changes(relevant(_flatten(old)), relevant(_flatten(new)), shared_only=False)


def check_identity(recipe, out: Path, *, force: bool = False) -> None:
    """Refuse (unless ``force``) to continue in ``out`` when it holds a run of a different recipe."""
    path = Path(out) / RESOLVED
    if not path.is_file():
        return
    try:
        old = json.loads(path.read_text())
    except (OSError, ValueError):
        logger.warning("%s is unreadable; cannot tell which run %s holds", path, out)
        return
    diffs = identity_diff(old, json.loads(json.dumps(recipe.to_dict(), default=str)))
    if not diffs:
        return
    shown = "\n    ".join(diffs[:20]) + (f"\n    … and {len(diffs) - 20} more" if len(diffs) > 20 else "")
    if force:
        logger.warning("--force: continuing in %s although its recipe differs:\n    %s", out, shown)
        return
    raise RecipeError(
        f"{out} holds a different run (its {RESOLVED} differs: old → new):\n    {shown}\n"
        "use a new output_dir, restore those values, or pass --force to continue this folder with the new recipe"
    )


def write_identity(recipe, out: Path) -> None:
    from vlrl.core.pipeline import atomic_write_json

    if int(os.environ.get("RANK", "0") or 0) == 0:  # rank 0 writes run-level files
        Path(out).mkdir(parents=True, exist_ok=True)
        atomic_write_json(Path(out) / RESOLVED, json.loads(json.dumps(recipe.to_dict(), default=str)))


def checkpoint_step(ckpt: Path | None) -> int | None:
    if ckpt is None:
        return None
    try:
        return int(json.loads((Path(ckpt) / "trainer_state.json").read_text())["global_step"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def finished_metrics(out: Path, max_steps: Any, latest_ckpt: Path | None) -> dict[str, Any] | None:
    """The saved metrics when ``out`` holds a finished run that ``max_steps`` does not extend.

    Raises :class:`RecipeError` when ``max_steps`` extends a finished run whose final state was not
    checkpointed (runs from before the final checkpoint was always written): resuming the older
    checkpoint would train the last steps twice.
    """
    path = Path(out) / METRICS
    if not path.is_file():
        return None
    try:
        m = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(m, dict) or not m.get("finished"):
        return None
    done = int(m.get("global_step") or 0)
    if not isinstance(max_steps, int) or max_steps <= done:
        return m
    step = checkpoint_step(latest_ckpt)
    if step != done:
        raise RecipeError(
            f"{out} finished at step {done}, but its newest checkpoint is step {step}; raising max_steps to "
            f"{max_steps} would retrain steps after {step}. Continue from its weights in a new folder instead: "
            f"model.path={out} output_dir=NEW_DIR max_steps={max_steps - done}"
        )
    logger.info("%s finished at step %d; continuing to max_steps=%d with the schedule re-planned", out, done, max_steps)
    return None


class SaveAtEnd(TrainerCallback):
    """Always checkpoint the final step, so a finished run can be extended exactly where it ended."""

    def on_step_end(self, args, state, control, **kw):
        if state.max_steps and state.global_step >= state.max_steps:
            control.should_save = True
        return control


def replan_lr(lr_scheduler: Any, optimizer: Any) -> None:
    """Set the optimizer's learning rates from the *current* schedule at the restored step.

    ``Trainer`` builds the scheduler for the new ``max_steps`` and then loads the checkpoint's
    scheduler state (its step counter) and optimizer state (whose learning rate is the value the old
    schedule set last). The first step after a resume therefore runs at the old schedule's rate — 0
    at the end of a linear or cosine decay. Recomputing from the lambdas fixes that for every
    ``LambdaLR`` schedule transformers builds; other schedulers are left as restored.
    """
    sch = getattr(lr_scheduler, "scheduler", lr_scheduler)
    lambdas, bases = getattr(sch, "lr_lambdas", None), getattr(sch, "base_lrs", None)
    if not lambdas or not bases or optimizer is None:
        return
    step = int(getattr(sch, "last_epoch", 0))
    groups = optimizer.param_groups
    for group, base, lam in zip(groups, bases, lambdas, strict=False):
        group["lr"] = base * lam(step)
    sch._last_lr = [g["lr"] for g in groups]
    if step and all(g["lr"] == 0 for g in groups):
        logger.warning("the learning-rate schedule is 0 at the restored step %d; raise max_steps further", step)


class NoneRewardGuard:
    """Counts consecutive steps in which every reward (all functions, all completions) was None."""

    def __init__(self, limit: int) -> None:
        self.limit = int(limit)
        self.streak = 0

    def observe(self, rewards_per_func) -> None:
        """``rewards_per_func``: TRL's gathered (completions × functions) tensor, None as NaN."""
        import torch

        if self.limit <= 0:
            return
        if bool(torch.isnan(rewards_per_func).all()):
            self.streak += 1
            logger.warning("every reward was None in this step (%d in a row of %d allowed)", self.streak, self.limit)
            if self.streak >= self.limit:
                raise RunFailed(
                    f"every reward was None for {self.streak} consecutive steps: the reward cannot score anything "
                    "(a dead answerer/judge backend, or a dataset without the columns it needs); check the "
                    "reward's backend with `vlrl train check`, fix it and rerun (run.max_none_reward_steps=0 "
                    "turns this stop off)"
                )
        else:
            self.streak = 0


def reward_share(history: list[dict[str, Any]]) -> float | None:
    """Reward time as a share of step time over a run's log history."""
    r = sum(h["timing/reward_s"] for h in history if isinstance(h.get("timing/reward_s"), (int, float)))
    s = sum(h["timing/step_s"] for h in history if isinstance(h.get("timing/step_s"), (int, float)))
    return r / s if s > 0 and math.isfinite(r / s) else None
