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
    """prompt/completion/image rows; images open lazily through vlrl's loader."""
    import datasets

    from vlrl.training.data import _resolve_images, image_columns, iter_source, record_images, user_text

    cache = Path(cache_dir or Path.home() / ".cache" / "vlrl")
    # relative image paths resolve as in GRPO's adapter: against data.image_root, else the data file's folder
    src_dir = Path(data.source).parent if not data.source.startswith("builtin:") else None
    root = Path(data.image_root) if data.image_root else src_dir
    rows: dict[str, list] = {"prompt": [], "completion": [], "image": []}
    for i, rec in enumerate(iter_source(data.source, cache_dir=cache)):
        if data.max_samples is not None and len(rows["prompt"]) >= data.max_samples:
            break
        rid = str(rec.get("id", i))
        target = rec.get(data.response_column)
        imgs = record_images(rec)
        if not isinstance(target, str) or not target.strip() or not imgs:
            logger.warning("record %s: missing image or %r; skipped", rid, data.response_column)
            continue
        try:
            # a missing or corrupt file is skipped now, not a crash mid-training
            img = _resolve_images(imgs, cache / "dataset_images", rid, root)
        except Exception as e:  # noqa: BLE001 - one bad record is skipped
            logger.warning("record %s: %s; skipped", rid, e)
            continue
        prompt = [{"role": "system", "content": data.system_prompt}] if data.system_prompt else []
        prompt.append({"role": "user", "content": user_text(rec, data.prompt)})
        rows["prompt"].append(prompt)
        rows["completion"].append([{"role": "assistant", "content": target}])
        rows["image"].append(img)
    if not rows["prompt"]:
        raise ValueError(f"data.source {data.source!r}: no usable SFT records")
    from vlrl.training.data import _Decode

    table = {"prompt": rows["prompt"], "completion": rows["completion"], **image_columns(rows["image"])}
    return datasets.Dataset.from_dict(table).with_transform(_Decode([]))


def run_sft(recipe: Recipe, force: bool = False) -> dict[str, Any]:
    from trl import SFTConfig, SFTTrainer

    from vlrl.training.grpo import latest_checkpoint, load_callbacks, load_policy, lora_config, prepare
    from vlrl.training.runstate import SaveAtEnd, check_identity, finished_metrics, replan_lr, write_identity

    recipe = prepare(recipe)
    out = Path(recipe.output_dir)
    check_identity(recipe, out, force=force)
    ckpt = latest_checkpoint(out)
    if (done := finished_metrics(out, recipe.trainer.get("max_steps"), ckpt)) is not None:
        logger.info("%s: this run already finished at step %s; nothing to train (raise max_steps to continue, or use "
                    "a new output_dir)", out, done.get("global_step"))
        return {**done, "status": "already finished"}
    write_identity(recipe, out)
    cfg = SFTConfig(**sft_kwargs(recipe))
    lora = recipe.model.lora
    if ckpt and lora:
        policy, peft = load_policy(recipe.model.path, recipe.model, trainable_adapter_from=str(ckpt)), None
    elif ckpt:  # transformers #43701: load the weights ourselves, resume the rest
        policy, peft = load_policy(str(ckpt), recipe.model), None
    else:
        policy, peft = load_policy(recipe.model.path, recipe.model), (lora_config(lora) if lora else None)
    processor = load_processor(recipe.model.path, recipe.data)
    ds = to_sft_dataset(recipe.data, cache_dir=out / "_data")

    class _Trainer(SFTTrainer):
        def _load_from_checkpoint(self, resume_from_checkpoint, model=None):
            logger.info("weights already loaded from %s", resume_from_checkpoint)

        def _load_optimizer_and_scheduler(self, checkpoint):
            super()._load_optimizer_and_scheduler(checkpoint)
            if checkpoint is not None:
                replan_lr(self.lr_scheduler, self.optimizer)

    trainer = _Trainer(model=policy, args=cfg, train_dataset=ds, processing_class=processor, peft_config=peft,
                       callbacks=[*load_callbacks(recipe.callbacks), SaveAtEnd()])
    trainer.train(resume_from_checkpoint=str(ckpt) if ckpt else None)
    trainer.save_model(str(out))
    losses = [h["loss"] for h in trainer.state.log_history if isinstance(h.get("loss"), (int, float))]
    metrics = {"global_step": trainer.state.global_step, "loss_first": losses[0] if losses else None,
               "loss_last": losses[-1] if losses else None, "rows": len(ds), "max_steps": trainer.state.max_steps,
               "finished": True}
    atomic_write_json(out / "metrics.json", metrics)
    return metrics


def sft_kwargs(recipe: Recipe) -> dict[str, Any]:
    from vlrl.training.grpo import device_defaults

    kwargs = device_defaults({"output_dir": recipe.output_dir, **recipe.trainer})
    kwargs.setdefault("max_length", None)  # truncating image tokens breaks VLM inputs
    kwargs.setdefault("remove_unused_columns", False)
    return kwargs
