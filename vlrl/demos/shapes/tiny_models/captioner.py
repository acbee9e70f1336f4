"""The tiny captioner of every demo's warm start, trained by the project's SFT recipe.

RL can only sharpen what a policy already does now and then, so the demos start from a tiny
Qwen2.5-VL captioner fine-tuned on deliberately incomplete captions: full captions first (so every
attribute word gets bound to the pixels), then captions with each attribute dropped with
p=``drop_p``. It ends up stating about a third of the facts when sampled, nearly all of them right:
the room GRPO has to improve.

It is trained by the project's SFT (:func:`vlrl.training.sft.run_sft`, what ``vlrl train sft``
runs: TRL's ``SFTTrainer``) with the very prompt the demo's GRPO recipe asks for captions with (the
recipe prompt :data:`~vlrl.demos.shapes.kit.world.CAPTION_PROMPT`, no system prompt), so both
trainers template it the same way: ``prepare_multimodal_messages`` then the processor's chat
template (default system line, image before text), with the ``mm_token_type_ids`` Qwen2.5-VL needs
for M-RoPE. :func:`caption_prompt_encoding` is that prompt, for tests and ``prompt_tokens``. The
curriculum is data, not code: :func:`captioner_sft_rows` writes one row per (step, slot) in
training order and :func:`captioner_recipe` reads them sequentially, one pass, so step ``s`` trains
on exactly the captions the schedule gives it.
"""

from __future__ import annotations

import os
import random
import shutil
from pathlib import Path
from typing import Any

from vlrl.core.pipeline import write_jsonl
from vlrl.demos.shapes.kit import world as W
from vlrl.demos.shapes.kit.recipes import run_recipe, save_recipe
from vlrl.demos.shapes.tiny_models.settings import WarmStartConfig
from vlrl.demos.shapes.tiny_models.train_loop import WARMUP_STEPS


def caption_prompt_encoding(processor, image) -> dict[str, Any]:
    """The captioning prompt exactly as TRL's GRPOTrainer tokenizes it (system line, image first)."""
    from trl.data_utils import prepare_multimodal_messages

    msgs = prepare_multimodal_messages([{"role": "user", "content": W.CAPTION_PROMPT}], images=[image])
    return processor.apply_chat_template(
        conversation=[msgs], add_generation_prompt=True, tokenize=True, return_dict=True, return_tensors="pt"
    )


def captioner_sft_rows(cfg: WarmStartConfig, seed: int, scenes: list[W.Scene]) -> list[dict[str, Any]]:
    """The captioner's curriculum as data: one row per (step, slot), in training order.

    Step ``s`` holds ``sft_batch`` distinct scenes; its captions are full for the first
    ``full_caption_steps`` steps and drop each attribute with p=``drop_p`` after. The draws (one
    seeded RNG: the step's scenes, then their captions) are those of the loop this replaced, so the
    recipe sees the same examples in the same order; it must read them sequentially.
    """
    rng = random.Random(f"sft/{seed}")
    rows = []
    for step in range(cfg.sft_steps):
        idx = rng.sample(range(len(scenes)), cfg.sft_batch)
        drop = 0.0 if step < cfg.full_caption_steps else cfg.drop_p
        for slot, i in enumerate(idx):
            rows.append({"id": f"{step:05d}-{slot:03d}", "image": f"images/{scenes[i].id}.png",
                         "caption": W.caption(scenes[i], rng, drop), "step": step, "drop_p": drop})
    return rows


def captioner_recipe(cfg: WarmStartConfig, seed: int, model: Path, data: Path, output_dir: Path) -> dict[str, Any]:
    """The captioner's ``vlrl train sft`` recipe: one pass over :func:`captioner_sft_rows`, in order.

    The user turn is the recipe prompt (the rows carry none), exactly as the demo's GRPO recipe
    asks for captions, so SFT and RL see one prompt. The schedule is the demo's other warm starts'
    (AdamW without weight decay, 30 warm-up steps then cosine to 0, gradients clipped to norm 1;
    transformers' warm-up starts at a rate of 0 where :func:`~vlrl.demos.shapes.tiny_models.train_loop.warmup_cosine`
    starts at 1/30 of it, a one-step offset). TRL's completion also trains the newline the chat
    template writes after ``<|im_end|>``, one easy token per caption the old loop did not train.
    ``logging_steps=50`` makes the last logged loss the mean of the last 50 steps (``final_loss``).
    """
    return {
        "method": "sft",
        "model": {"path": str(model), "dtype": "float32"},
        "data": {"source": str(data), "prompt": W.CAPTION_PROMPT, "response_column": "caption"},
        "trainer": {
            "output_dir": str(output_dir),
            "max_steps": cfg.sft_steps,
            "num_train_epochs": 1,
            "per_device_train_batch_size": cfg.sft_batch,
            "gradient_accumulation_steps": 1,
            "train_sampling_strategy": "sequential",  # the rows are the curriculum, in order
            "shuffle_dataset": False,
            "learning_rate": cfg.sft_lr,
            "lr_scheduler_type": "cosine",
            "warmup_steps": WARMUP_STEPS,
            "weight_decay": 0.0,
            "max_grad_norm": 1.0,
            "logging_steps": max(1, min(50, cfg.sft_steps)),
            "save_strategy": "no",
            "seed": seed,
            "dataloader_num_workers": 0,
            "gradient_checkpointing": False,
            "report_to": "none",
        },
    }


def captioner_scenes(cfg: WarmStartConfig, seed: int) -> list[W.Scene]:
    """The ``sft_images`` scenes the captioner is SFT'd on: the world's training layouts only."""
    return W.make_scenes(cfg.sft_images, seed, cfg.world, prefix="sft", split="train")


def write_captioner_sft(cfg: WarmStartConfig, seed: int, model: Path, root: Path) -> Path:
    """Render the ``sft_images`` scenes, write the curriculum and the recipe under ``root``; returns
    the recipe's path (``root/sft.yaml``, runnable as ``vlrl train sft``; it trains into ``root/sft``)."""
    data = root / "sft_data"
    (data / "images").mkdir(parents=True)
    scenes = captioner_scenes(cfg, seed)
    for sc in scenes:
        W.render(sc, cfg.world).save(data / "images" / f"{sc.id}.png")
    write_jsonl(data / "train.jsonl", captioner_sft_rows(cfg, seed, scenes))
    return save_recipe(captioner_recipe(cfg, seed, model, data / "train.jsonl", root / "sft"), root / "sft.yaml")


def train_captioner(cfg: WarmStartConfig, tok_dir: Path, out: Path, seed: int) -> dict[str, Any]:
    """Build the tiny captioner in ``out``: a fresh Qwen2.5-VL, then the project's SFT on the curriculum."""
    from transformers import AutoProcessor, GenerationConfig

    from vlrl.core.images import load_image
    from vlrl.core.tiny import make_tiny

    init = out / "init"
    make_tiny("qwen2_5_vl", init, seed=seed, tokenizer=str(tok_dir), hidden_size=cfg.cap_hidden,
              num_hidden_layers=cfg.cap_layers, num_attention_heads=4, num_key_value_heads=2,
              mrope_section=list(cfg.cap_mrope), vision_hidden_size=cfg.vision_hidden, vision_depth=cfg.vision_depth,
              initializer_range=cfg.cap_init)
    metrics = run_recipe(write_captioner_sft(cfg, seed, init, out))
    if metrics.get("global_step") != cfg.sft_steps:
        raise RuntimeError(f"captioner SFT ran {metrics.get('global_step')} steps, not {cfg.sft_steps}")
    # the trained model (weights, config, processor) becomes the cached captioner itself
    for f in (out / "sft").iterdir():
        if f.is_file():
            os.replace(f, out / f.name)
    image = next((out / "sft_data" / "images").iterdir())
    prompt_tokens = len(caption_prompt_encoding(AutoProcessor.from_pretrained(str(out)), load_image(str(image)))
                        ["input_ids"][0])
    for d in ("init", "sft_data", "sft"):
        shutil.rmtree(out / d, ignore_errors=True)
    gen = GenerationConfig.from_pretrained(str(out))
    gen.do_sample = False
    gen.save_pretrained(str(out))
    return {"kind": "captioner", "seed": seed, "final_loss": metrics["loss_last"], "prompt_tokens": prompt_tokens,
            "trained_by": "vlrl train sft", "sft": {k: metrics.get(k) for k in ("global_step", "loss_first",
                                                                                  "loss_last", "rows")}}
