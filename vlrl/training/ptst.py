"""PTST: Progressive Thinking Suppression Training as a schedule of GRPO stages.

Vision-R1 trains its reasoning policy in stages that loosen the output-length cap while shrinking
the group size: 4K tokens × 16 generations, then 8K × 8, then 16K × 4 (about 100 steps each). Short
first makes the model learn correct reasoning in a small budget before it is allowed to think long,
which avoids long-but-wrong chains; smaller groups later keep the cost per step flat as completions
grow.

TRL fixes ``max_completion_length`` and ``num_generations`` when a ``GRPOTrainer`` is built, so each
stage is its own trainer, started from the previous stage's saved weights (the KL reference of a
stage is the model it started from). Between stages the batch geometry is recomputed so that

* the number of *prompts* per optimizer step stays constant (``ptst.prompts_per_step``, default:
  the first stage's ``per_device_train_batch_size × gradient_accumulation_steps × world /
  num_generations``), and
* every generation batch holds whole groups: completions per step = prompts × group size, split
  into a per-device micro-batch no larger than the recipe's ``per_device_train_batch_size`` and
  enough accumulation steps (``steps_per_generation`` = accumulation, i.e. one fresh generation per
  optimizer step).

Layout under ``output_dir``::

    ptst_state.json        # plan, completed stages, current stage (atomic writes)
    stage-1/               # trainer output_dir of stage 1: checkpoint-N/, final weights, metrics.json
    stage-2/ ...

An interrupted run, rerun with the same command, skips finished stages and resumes the current one
from its newest checkpoint (weights loaded with the transformers #43701 workaround).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from vlrl.core.pipeline import atomic_write_json as _atomic_write_json
from vlrl.training.recipe import Recipe, RecipeError, plan_stages

logger = logging.getLogger(__name__)

STATE_FILE = "ptst_state.json"
PLANNED_KEYS = ("per_device_train_batch_size", "gradient_accumulation_steps", "steps_per_generation",
                "generation_batch_size", "num_generations", "max_completion_length", "max_steps")


def atomic_write_json(path, obj) -> None:
    """Run-level files are written by rank 0 only (every rank computes the same content)."""
    from vlrl.training.grpo import is_main_process

    if is_main_process():
        _atomic_write_json(path, obj)


def _overrides(stage_plan: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in stage_plan.items() if k in PLANNED_KEYS}


def read_state(output_dir: str | Path) -> dict[str, Any] | None:
    p = Path(output_dir) / STATE_FILE
    return json.loads(p.read_text()) if p.is_file() else None


def run_ptst(recipe: Recipe, resume: bool = True) -> dict[str, Any]:
    """Run (or resume) every PTST stage in order; returns the per-stage metrics."""
    from vlrl.training.data import to_trl_dataset
    from vlrl.training.grpo import build_trainer, close_rewards, latest_checkpoint, prepare, summarize_history

    recipe = prepare(recipe)
    ignored = sorted(k for k in recipe.trainer if k in PLANNED_KEYS)
    if ignored:
        logger.info("PTST sets %s per stage; the trainer block's values are not used", ignored)
    plan = plan_stages(recipe)
    out = Path(recipe.output_dir)
    state = read_state(out) if resume else None
    if state is not None and [_overrides(p) for p in state["plan"]] != [_overrides(p) for p in plan]:
        raise RecipeError(
            f"{out} holds a PTST run with a different stage plan; use a new output_dir, or restore the stages "
            f"it was started with ({[(p['max_completion_length'], p['num_generations'], p['max_steps']) for p in state['plan']]})"
        )
    state = state or {"plan": plan, "completed": [], "current": 1}
    atomic_write_json(out / STATE_FILE, state)
    dataset = to_trl_dataset(recipe.data, cache_dir=out / "_data")
    results = []
    for sp in plan:
        k = sp["stage"]
        stage_dir = out / f"stage-{k}"
        if k in state["completed"]:
            results.append(json.loads((stage_dir / "metrics.json").read_text()))
            logger.info("stage %d already done; skipping", k)
            continue
        start = recipe.model.path if k == 1 else str(out / f"stage-{k - 1}")
        ckpt = latest_checkpoint(stage_dir) if resume else None
        state["current"] = k
        atomic_write_json(out / STATE_FILE, state)
        logger.info(
            "PTST stage %d/%d: max_completion_length=%d num_generations=%d steps=%d (micro-batch %d × %d accumulation)%s",
            k, len(plan), sp["max_completion_length"], sp["num_generations"], sp["max_steps"],
            sp["per_device_train_batch_size"], sp["gradient_accumulation_steps"], f", resuming from {ckpt}" if ckpt else "",
        )
        trainer, ckpt_arg = build_trainer(
            recipe, model_path=start, resume=ckpt, output_dir=str(stage_dir), train_dataset=dataset,
            stage_overrides=_overrides(sp),
        )
        try:
            trainer.train(resume_from_checkpoint=ckpt_arg)
        finally:
            close_rewards(trainer)
        _save_stage_weights(trainer, stage_dir)
        trainer.accelerator.wait_for_everyone()  # the next stage loads these files on every rank
        metrics = {**summarize_history(trainer.state.log_history), "global_step": trainer.state.global_step,
                   "stage": k, "config": sp, "start_model": start, "resumed_from": ckpt_arg}
        atomic_write_json(stage_dir / "metrics.json", metrics)
        state["completed"].append(k)
        atomic_write_json(out / STATE_FILE, state)
        results.append(metrics)
        del trainer
    state["current"] = None
    atomic_write_json(out / STATE_FILE, state)
    atomic_write_json(out / "metrics.json", {"stages": results})
    return {"stages": results}


def _save_stage_weights(trainer, stage_dir: Path) -> None:
    """Full weights (LoRA merged in) + processor, so the next stage loads them with from_pretrained."""
    from vlrl.training.grpo import is_main_process

    model = trainer.model
    if hasattr(model, "merge_and_unload"):
        model = model.merge_and_unload()
        if is_main_process():
            model.save_pretrained(str(stage_dir))
            trainer.processing_class.save_pretrained(str(stage_dir))
    else:
        trainer.save_model(str(stage_dir))
