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
from its newest complete checkpoint (weights loaded with the transformers #43701 workaround). A stage
folder torn by a kill during its final save is recovered from that checkpoint (the final step is
always checkpointed, so no step is trained twice); one with no complete checkpoint restarts the stage
from the previous stage's weights, and says so. A finished run is reported and not trained again.

**One data stream across stages.** The dataset is shuffled once for the whole run (``trainer.seed``)
and each stage starts where the previous one stopped: stage k skips the ``prompts_per_step ×
steps`` prompts the earlier stages consumed (wrapping around at the end of the dataset). TRL's own
per-trainer shuffle is turned off for PTST stages, since every stage would otherwise draw the same
permutation from the same seed and replay the same first prompts.

**World size may change between reruns** as long as ``prompts_per_step`` and the stages are
unchanged: the per-device geometry is re-planned for the new world size.

**Teardown between stages, in-process.** ``accelerate launch`` starts one process per rank for the
whole run, so a stage cannot get a fresh process without re-launching; instead
:func:`teardown_stage` destroys the colocated vLLM engine (and vLLM's model-parallel groups), frees
accelerate's DeepSpeed engine and optimizer references, and empties the CUDA cache before the next
stage builds its trainer, so the second stage's colocated vLLM engine can claim its memory.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vlrl.core.pipeline import atomic_write_json as _atomic_write_json
from vlrl.training.recipe import Recipe, RecipeError
from vlrl.training.validation import plan_stages

logger = logging.getLogger(__name__)

STATE_FILE = "ptst_state.json"
PLANNED_KEYS = ("per_device_train_batch_size", "gradient_accumulation_steps", "steps_per_generation",
                "generation_batch_size", "num_generations", "max_completion_length", "max_steps")
# what makes two plans the same run; the per-device geometry may differ with the world size
PLAN_IDENTITY = ("max_completion_length", "num_generations", "max_steps", "prompts_per_step")


def atomic_write_json(path, obj) -> None:
    """Run-level files are written by rank 0 only (every rank computes the same content)."""
    from vlrl.training.runstate import is_main_process

    if is_main_process():
        _atomic_write_json(path, obj)


def _overrides(stage_plan: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in stage_plan.items() if k in PLANNED_KEYS}


def read_state(output_dir: str | Path) -> dict[str, Any] | None:
    p = Path(output_dir) / STATE_FILE
    return json.loads(p.read_text()) if p.is_file() else None


def _plan_key(plan: list[dict[str, Any]]) -> list[tuple]:
    return [tuple(p.get(k) for k in PLAN_IDENTITY) for p in plan]


def stage_offsets(plan: list[dict[str, Any]]) -> list[int]:
    """Prompts consumed before each stage: each stage continues the data stream where the last stopped."""
    out, seen = [], 0
    for sp in plan:
        out.append(seen)
        seen += sp["prompts_per_step"] * sp["max_steps"]
    return out


def stage_dataset(dataset, seed: int, offset: int):
    """The run's one shuffled order, rotated to start ``offset`` prompts in."""
    import random

    n = len(dataset)
    order = list(range(n))
    random.Random(seed).shuffle(order)
    start = offset % n
    return dataset.select(order[start:] + order[:start])


def teardown_stage(trainer) -> None:
    """Free what a stage holds on the GPU before the next stage builds its own (see module docstring)."""
    import gc

    gen = getattr(trainer, "vllm_generation", None)
    if getattr(gen, "llm", None) is not None:
        del gen.llm
        try:
            from vllm.distributed.parallel_state import destroy_distributed_environment, destroy_model_parallel

            destroy_model_parallel()
            destroy_distributed_environment()
        except Exception as e:  # noqa: BLE001 - vLLM versions differ; the cache is emptied below anyway
            logger.warning("vLLM teardown incomplete (%s); the next stage's engine may not fit", e)
    if getattr(trainer, "is_deepspeed_enabled", False):
        engine = getattr(trainer, "model_wrapped", None)
        if hasattr(engine, "destroy"):
            engine.destroy()
    trainer.accelerator.free_memory()
    trainer.model_wrapped = trainer.model = trainer.optimizer = trainer.lr_scheduler = None
    if hasattr(trainer, "ref_model"):
        trainer.ref_model = None
    gc.collect()
    try:
        import torch

        if torch.cuda.is_available():
            torch.cuda.empty_cache()
    except Exception:  # noqa: BLE001 - nothing to free without CUDA
        pass


def _stage_weights_ok(stage_dir: Path) -> bool:
    return (stage_dir / "config.json").is_file() and any(
        (stage_dir / f).is_file() for f in ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin"))


@dataclass
class PTSTRun:
    """A PTST run in ``out``: its stage plan, its state file and the one shuffled data stream."""

    recipe: Recipe
    out: Path
    plan: list[dict[str, Any]]
    state: dict[str, Any]
    dataset: Any
    resume: bool
    results: list[dict[str, Any]] = field(default_factory=list)

    @property
    def finished(self) -> bool:
        return self.state.get("current") is None and len(self.state.get("completed", [])) == len(self.plan)


def open_ptst(recipe: Recipe, resume: bool = True, force: bool = False) -> PTSTRun:
    """Validate and probe the recipe, plan the stages, refuse another run's folder (unless ``force``)
    or a different stage plan, and load the dataset once for every stage."""
    from vlrl.training.data import to_trl_dataset
    from vlrl.training.runstate import check_data_stream, check_identity, prepare, write_identity

    recipe = prepare(recipe)
    ignored = sorted(k for k in recipe.trainer if k in PLANNED_KEYS)
    if ignored:
        logger.info("PTST sets %s per stage; the trainer block's values are not used", ignored)
    plan = plan_stages(recipe)
    out = Path(recipe.output_dir)
    check_identity(recipe, out, force=force)
    state = read_state(out) if resume else None
    if state is not None and _plan_key(state["plan"]) != _plan_key(plan):
        raise RecipeError(
            f"{out} holds a PTST run with a different stage plan; use a new output_dir, or restore the stages "
            f"it was started with ({[(p['max_completion_length'], p['num_generations'], p['max_steps']) for p in state['plan']]}"
            f" at {state['plan'][0].get('prompts_per_step')} prompts per step)"
        )
    if state is not None and [_overrides(p) for p in state["plan"]] != [_overrides(p) for p in plan]:
        logger.info("world size changed since the run started; prompts per step are unchanged (%d), so the "
                    "per-device batch geometry is re-planned", plan[0]["prompts_per_step"])
        state["plan"] = plan
    if state is not None and state.get("current") is None and len(state.get("completed", [])) == len(plan):
        logger.info("%s: this PTST run already finished all %d stages; nothing to train (use a new output_dir "
                    "or add a stage to continue)", out, len(plan))
    state = state or {"plan": plan, "completed": [], "current": 1}
    write_identity(recipe, out)
    atomic_write_json(out / STATE_FILE, state)
    dataset = to_trl_dataset(recipe.data, cache_dir=out / "_data")
    check_data_stream(dataset, out, force=force, resume=resume)
    return PTSTRun(recipe, out, plan, state, dataset, resume)


def train_stage(run: PTSTRun, sp: dict[str, Any]) -> dict[str, Any]:
    """Train stage ``sp`` of the plan (or report it, when it is done) and return its metrics."""
    from vlrl.training.grpo import build_trainer, close_rewards, summarize_history
    from vlrl.training.runstate import checkpoint_step, latest_checkpoint, train_or_finish

    recipe, out, state, resume = run.recipe, run.out, run.state, run.resume
    k = sp["stage"]
    offset = stage_offsets(run.plan)[k - 1]
    stage_dir = out / f"stage-{k}"
    if k in state["completed"]:
        if not _stage_weights_ok(stage_dir):
            raise RecipeError(
                f"{stage_dir}: stage {k} is marked done but its weights are missing; restore the folder, or "
                f"remove {k} from 'completed' in {out / STATE_FILE} to retrain the stage"
            )
        logger.info("stage %d already done; skipping", k)
        metrics = json.loads((stage_dir / "metrics.json").read_text())
        run.results.append(metrics)
        return metrics
    start = recipe.model.path if k == 1 else str(out / f"stage-{k - 1}")
    ckpt = latest_checkpoint(stage_dir) if resume else None
    if resume and ckpt is None and stage_dir.is_dir() and any(stage_dir.iterdir()):
        logger.warning("stage %d: %s holds no complete checkpoint (interrupted before its first save, or "
                       "torn); restarting the stage from %s", k, stage_dir, start)
    elif ckpt is not None and checkpoint_step(ckpt) == sp["max_steps"]:
        logger.info("stage %d: its final step is checkpointed in %s (the stage's last save was interrupted); "
                    "finishing it without training again", k, ckpt)
    state["current"] = k
    atomic_write_json(out / STATE_FILE, state)
    logger.info(
        "PTST stage %d/%d: max_completion_length=%d num_generations=%d steps=%d (micro-batch %d × %d accumulation), "
        "data from prompt %d%s",
        k, len(run.plan), sp["max_completion_length"], sp["num_generations"], sp["max_steps"],
        sp["per_device_train_batch_size"], sp["gradient_accumulation_steps"], offset,
        f", resuming from {ckpt}" if ckpt else "",
    )
    trainer, ckpt_arg = build_trainer(
        recipe, model_path=start, resume=ckpt, output_dir=str(stage_dir),
        train_dataset=stage_dataset(run.dataset, int(recipe.trainer.get("seed", 42)), offset),
        stage_overrides={**_overrides(sp), "shuffle_dataset": False},
    )
    try:
        train_or_finish(trainer, ckpt_arg)
    finally:
        close_rewards(trainer)
    _save_stage_weights(trainer, stage_dir)
    trainer.accelerator.wait_for_everyone()  # the next stage loads these files on every rank
    metrics = {**summarize_history(trainer.state.log_history), "global_step": trainer.state.global_step,
               "stage": k, "config": sp, "start_model": start, "resumed_from": ckpt_arg, "data_offset": offset}
    atomic_write_json(stage_dir / "metrics.json", metrics)
    state["completed"].append(k)
    atomic_write_json(out / STATE_FILE, state)
    run.results.append(metrics)
    teardown_stage(trainer)
    return metrics


def close_ptst(run: PTSTRun) -> dict[str, Any]:
    """Mark the run finished and write its ``metrics.json`` (every stage's metrics)."""
    run.state["current"] = None
    atomic_write_json(run.out / STATE_FILE, run.state)
    atomic_write_json(run.out / "metrics.json", {"stages": run.results, "finished": True})
    return {"stages": run.results}


def run_ptst(recipe: Recipe, resume: bool = True, force: bool = False) -> dict[str, Any]:
    """Run (or resume) every PTST stage in order; returns the per-stage metrics. ``vlrl train ptst``
    and ``train/ptst.py`` reach it through :func:`vlrl.training.entry.run`."""
    run = open_ptst(recipe, resume=resume, force=force)
    for stage in run.plan:
        train_stage(run, stage)
    return close_ptst(run)


def _save_stage_weights(trainer, stage_dir: Path) -> None:
    """Full weights (LoRA merged in) + processor, so the next stage loads them with from_pretrained."""
    from vlrl.training.runstate import is_main_process

    model = trainer.model
    if hasattr(model, "merge_and_unload"):
        model = model.merge_and_unload()
        if is_main_process():
            model.save_pretrained(str(stage_dir))
            trainer.processing_class.save_pretrained(str(stage_dir))
    else:
        trainer.save_model(str(stage_dir))
