"""The reward's share of a GRPO step: seconds inside a reward against the whole ``trainer.train()``.

``vlrl bench reward`` reports it beside its throughput numbers (:mod:`vlrl.bench.reward`). It drives
a real trainer, which is why the benchmarks sit above the training layer.
"""

from __future__ import annotations

import contextlib
import logging
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from vlrl.training.grpo import build_trainer, close_rewards
from vlrl.training.recipe import load_recipe
from vlrl.training.runstate import prepare

logger = logging.getLogger(__name__)

TINY_CAPRL_RECIPE = Path(__file__).resolve().parents[2] / "train" / "recipes" / "tiny" / "caprl_tiny.yaml"


def grpo_reward_share(steps: int = 3, *, recipe: str | Path | None = None,
                      modes: tuple[str, ...] = ("exact", "sample")) -> dict[str, Any]:
    """Seconds in the first reward vs the whole ``trainer.train()``, over ``steps`` steps of
    ``recipe`` (default: the tiny CapRL recipe ``train/recipes/tiny/caprl_tiny.yaml``, a tiny VLM
    policy with a tiny text answerer), once per reward ``mode``; model loading is outside the timing.

    The runs share this process, one after the other, each with its own trainer and models. Whatever
    warms up once per process (allocator, kernel choice) then favours the later runs, so ``sample``
    runs after ``exact``: the comparison cannot flatter exact mode. The training loop's own printing
    goes to stderr, so that stdout keeps the bench's report.
    """
    path = Path(recipe) if recipe is not None else TINY_CAPRL_RECIPE
    if not path.is_file():
        raise ValueError(f"GRPO recipe not found at {path}")
    if steps < 1:
        raise ValueError(f"steps must be >= 1, got {steps}")
    out: dict[str, Any] = {"steps": steps}
    for mode in modes:
        try:
            out[mode] = _timed_run(path, steps, mode)
        except Exception as e:  # noqa: BLE001 - any failure of the run is reported as the bench's error
            reason = " ".join(str(e).split())[:300] or type(e).__name__
            raise RuntimeError(f"tiny GRPO run ({mode}) failed: {reason}") from e
    return out


def _timed_run(recipe_path: Path, steps: int, mode: str) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="vlrl-bench-grpo-") as d, contextlib.redirect_stdout(sys.stderr):
        recipe = prepare(load_recipe(recipe_path, [f"output_dir={d}", f"max_steps={steps}", "save_steps=1000",
                                                   "log_completions=false", "logging_steps=1000"]))
        if not recipe.rewards:
            raise ValueError(f"recipe {recipe_path} has no reward to time")
        recipe.rewards[0].settings["mode"] = mode
        trainer, _ = build_trainer(recipe)
        spent = [0.0]
        for fn in trainer.reward_funcs:
            inner = getattr(fn, "inner", None)  # guards call their inner reward's own __call__, then guard
            if inner is not None and hasattr(fn, "_guarded"):
                fn._guarded = _timed(fn._guarded, spent)
            target = inner if inner is not None else fn
            if hasattr(target, "score"):
                target.score = _timed(target.score, spent)
        t0 = time.perf_counter()
        try:
            trainer.train()
        finally:
            total = time.perf_counter() - t0
            close_rewards(trainer)
    logger.info("tiny GRPO (%s): reward %.3fs of %.3fs", mode, spent[0], total)
    return {"reward_seconds": round(spent[0], 3), "train_seconds": round(total, 3),
            "reward_share": spent[0] / total if total > 0 else None}


def _timed(score: Any, spent: list[float]) -> Any:
    """``score`` adding its wall time to ``spent[0]`` (the reward's share of the step)."""

    def timed(*args: Any, **kwargs: Any) -> Any:
        t = time.perf_counter()
        try:
            return score(*args, **kwargs)
        finally:
            spent[0] += time.perf_counter() - t

    return timed
