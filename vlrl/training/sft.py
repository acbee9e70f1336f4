"""Supervised fine-tuning of a VLM on TRL's SFTTrainer (Vision-R1's cold start, caption SFT).

Records carry an image, a user turn (``prompt`` or ``question``, else the recipe prompt) and the
target assistant turn (``data.response_column``, ``response`` by default — what ``vlrl data
cold-start`` writes). They become TRL's conversational *prompt-completion* rows plus an ``image``
column, so the loss covers only the assistant turn (TRL's ``completion_only_loss``) and the
prompt is templated exactly as GRPO will template it later (TRL inserts the image part itself).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from vlrl.core.pipeline import atomic_write_json
from vlrl.training.data import load_processor
from vlrl.training.recipe import Recipe

logger = logging.getLogger(__name__)


def to_sft_dataset(data, cache_dir: str | Path | None = None):
    """prompt/completion/image rows; images open lazily through vlrl's loader. Records are read as
    GRPO's adapter reads them (the same ids, images, image root and prompt)."""
    import datasets

    from vlrl.core.sources.rows import iter_rows
    from vlrl.training.data import DecodeColumns, chat_prompt, image_columns, image_root, resolve_images, user_text

    cache = Path(cache_dir or Path.home() / ".cache" / "vlrl")
    root = image_root(data)
    rows: dict[str, list] = {"prompt": [], "completion": [], "image": []}
    for row in iter_rows(data.source, cache_dir=cache):
        if data.max_samples is not None and len(rows["prompt"]) >= data.max_samples:
            break
        target = row.record.get(data.response_column)
        if not isinstance(target, str) or not target.strip() or not row.images:
            logger.warning("record %s: missing image or %r; skipped", row.id, data.response_column)
            continue
        try:
            # a missing or corrupt file is skipped now, not a crash mid-training
            img = resolve_images(row.images, cache / "dataset_images", row.id, root)
        except Exception as e:  # noqa: BLE001 - one bad record is skipped
            logger.warning("record %s: %s; skipped", row.id, e)
            continue
        rows["prompt"].append(chat_prompt(data, user_text(row, data.prompt)))
        rows["completion"].append([{"role": "assistant", "content": target}])
        rows["image"].append(img)
    if not rows["prompt"]:
        raise ValueError(f"data.source {data.source!r}: no usable SFT records")
    table = {"prompt": rows["prompt"], "completion": rows["completion"], **image_columns(rows["image"])}
    return datasets.Dataset.from_dict(table).with_transform(DecodeColumns([]))


def build_sft_trainer(recipe: Recipe, *, resume: Path | None = None):
    """A ready ``SFTTrainer`` for a prepared recipe; ``resume`` is a checkpoint whose weights the policy
    loads (transformers #43701: the trainer's own weight loading is skipped, the optimizer, scheduler
    and step come from the checkpoint). Returns ``(trainer, resume_from_checkpoint)``."""
    from trl import SFTConfig, SFTTrainer

    from vlrl.training.policy import load_start_policy
    from vlrl.training.runstate import trainer_callbacks

    cfg = SFTConfig(**sft_kwargs(recipe))
    policy, peft = load_start_policy(recipe, recipe.model.path, str(resume) if resume else None)
    processor = load_processor(recipe.model.path, recipe.data)
    ds = to_sft_dataset(recipe.data, cache_dir=Path(recipe.output_dir) / "_data")

    class _Trainer(SFTTrainer):
        def _load_from_checkpoint(self, resume_from_checkpoint, model=None):
            """Skips loading the weights the policy already holds (#43701). An override: ``Trainer.train``
            calls it before the first callback event (``on_train_begin``), and no event can skip it."""
            logger.info("weights already loaded from %s", resume_from_checkpoint)

    trainer = _Trainer(model=policy, args=cfg, train_dataset=ds, processing_class=processor, peft_config=peft,
                       callbacks=trainer_callbacks(recipe))
    return trainer, (str(resume) if resume else None)


def finish_sft(trainer: Any, run: Any) -> dict[str, Any]:
    """Save the fine-tuned model into ``output_dir`` and write ``metrics.json`` (first and last loss)."""
    trainer.save_model(str(run.out))
    losses = [h["loss"] for h in trainer.state.log_history if isinstance(h.get("loss"), (int, float))]
    metrics = {"global_step": trainer.state.global_step, "loss_first": losses[0] if losses else None,
               "loss_last": losses[-1] if losses else None, "rows": len(trainer.train_dataset),
               "max_steps": trainer.state.max_steps, "finished": True}
    atomic_write_json(run.out / "metrics.json", metrics)
    return metrics


def run_sft(recipe: Recipe, force: bool = False) -> dict[str, Any]:
    """Fine-tune; a killed run continues from its newest checkpoint, a finished one is reported.
    ``vlrl train sft`` and ``train/sft.py`` reach it through :func:`vlrl.training.entry.run`."""
    from vlrl.training.runstate import open_run

    run = open_run(recipe, resume=True, force=force)
    if run.finished is not None:
        return run.finished
    trainer, resume_from = build_sft_trainer(run.recipe, resume=run.checkpoint)
    trainer.train(resume_from_checkpoint=resume_from)
    return finish_sft(trainer, run)


def sft_kwargs(recipe: Recipe) -> dict[str, Any]:
    from vlrl.training.policy import device_defaults

    kwargs = device_defaults({"output_dir": recipe.output_dir, **recipe.trainer})
    kwargs.setdefault("max_length", None)  # truncating image tokens breaks VLM inputs
    kwargs.setdefault("remove_unused_columns", False)
    return kwargs
