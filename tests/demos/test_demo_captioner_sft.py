"""The shapes demo's captioner warm start is the project's SFT (fast, tiny settings).

The curriculum lives in the data (one row per step and slot, in order) and the recipe must read it
in that order, one pass; the prompt SFT trains on must be the prompt GRPO later samples captions
with, as both trainers actually template it (the demo's tokenizer, the Qwen2.5-VL chat template).
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from vlrl.demos.shapes.kit import world as W
from vlrl.demos.shapes.tiny_models.captioner import (
    caption_prompt_encoding,
    captioner_sft_rows,
    train_captioner,
    write_captioner_sft,
)
from vlrl.demos.shapes.tiny_models.settings import WarmStartConfig
from vlrl.demos.shapes.tiny_models.warmstart import build_tokenizer

TINY = WarmStartConfig(sft_images=24, sft_steps=7, sft_batch=5, full_caption_steps=3)


@pytest.fixture(scope="module")
def shapes_tokenizer(tmp_path_factory) -> Path:
    return build_tokenizer(TINY, tmp_path_factory.mktemp("cache"))


@pytest.fixture(scope="module")
def captioner(shapes_tokenizer, tmp_path_factory) -> tuple[Path, dict]:
    out = tmp_path_factory.mktemp("captioner")
    info = train_captioner(TINY, shapes_tokenizer, out, seed=0)
    return out, info


def test_curriculum_rows_are_full_captions_then_dropped_ones_in_step_order():
    cfg = WarmStartConfig(sft_images=40, sft_steps=12, sft_batch=16, full_caption_steps=4, drop_p=0.65)
    scenes = W.make_scenes(cfg.sft_images, 3, cfg.world, prefix="sft")
    by_image = {f"images/{s.id}.png": s for s in scenes}
    rows = captioner_sft_rows(cfg, 3, scenes)
    assert len(rows) == cfg.sft_steps * cfg.sft_batch
    assert [r["step"] for r in rows] == [s for s in range(cfg.sft_steps) for _ in range(cfg.sft_batch)]
    for s in range(cfg.sft_steps):  # a step's batch holds distinct scenes, as the loop drew them
        assert len({r["image"] for r in rows[s * cfg.sft_batch:(s + 1) * cfg.sft_batch]}) == cfg.sft_batch
    head = rows[: cfg.full_caption_steps * cfg.sft_batch]
    tail = rows[cfg.full_caption_steps * cfg.sft_batch:]
    assert all(r["caption"] == W.caption(by_image[r["image"]]) for r in head)
    assert {r["drop_p"] for r in head} == {0.0} and {r["drop_p"] for r in tail} == {cfg.drop_p}
    # every dropped caption states a subset of the scene; at p=0.65 nearly all of them lose something
    shortened = [r["caption"] != W.caption(by_image[r["image"]]) for r in tail]
    assert sum(shortened) >= 0.9 * len(tail)
    assert all(len(r["caption"]) <= len(W.caption(by_image[r["image"]])) for r in tail)


def test_curriculum_rows_are_the_draws_of_the_replaced_loop():
    """Same seeded RNG, same order of draws (the step's scenes, then their captions) as the
    hand-written loop drew per step, so the recipe trains on the examples that loop trained on."""
    cfg = WarmStartConfig(sft_images=30, sft_steps=6, sft_batch=8, full_caption_steps=2)
    scenes = W.make_scenes(cfg.sft_images, 1, cfg.world, prefix="sft")
    rng = random.Random("sft/1")
    expected = []
    for step in range(cfg.sft_steps):
        idx = rng.sample(range(len(scenes)), cfg.sft_batch)
        drop = 0.0 if step < cfg.full_caption_steps else cfg.drop_p
        caps = [W.caption(scenes[i], rng, drop) for i in idx]
        expected += [(f"images/{scenes[i].id}.png", c) for i, c in zip(idx, caps, strict=True)]
    assert [(r["image"], r["caption"]) for r in captioner_sft_rows(cfg, 1, scenes)] == expected


def test_recipe_reads_the_rows_sequentially_for_exactly_the_planned_steps(captioner, tmp_path):
    from vlrl.training.recipe import load_recipe
    from vlrl.training.sft import build_sft_trainer

    model, _ = captioner
    recipe = load_recipe(write_captioner_sft(TINY, 0, model, tmp_path))
    t = recipe.trainer
    assert t["train_sampling_strategy"] == "sequential" and t["shuffle_dataset"] is False
    assert t["max_steps"] == TINY.sft_steps and t["per_device_train_batch_size"] == TINY.sft_batch
    assert (t["max_grad_norm"], t["weight_decay"], t["lr_scheduler_type"]) == (1.0, 0.0, "cosine")
    trainer, _ = build_sft_trainer(recipe)
    assert trainer.args.train_sampling_strategy == "sequential" and trainer.args.shuffle_dataset is False
    n = len(trainer.train_dataset)
    assert n == TINY.sft_steps * TINY.sft_batch
    assert list(trainer._get_train_sampler()) == list(range(n))  # the curriculum's order, one pass
    steps = [json.loads(line)["step"] for line in (tmp_path / "sft_data" / "train.jsonl").read_text().splitlines()]
    assert steps == sorted(steps)


def test_train_captioner_runs_the_sft_recipe_and_keeps_its_info_keys(captioner):
    out, info = captioner
    assert {"kind", "seed", "final_loss", "prompt_tokens"} <= set(info)
    assert info["kind"] == "captioner" and info["sft"]["global_step"] == TINY.sft_steps
    assert info["sft"]["rows"] == TINY.sft_steps * TINY.sft_batch and info["final_loss"] is not None
    assert (out / "model.safetensors").exists() and (out / "sft.yaml").exists()
    assert not (out / "sft_data").exists() and not (out / "init").exists()  # only the model is cached
    assert json.loads((out / "generation_config.json").read_text()).get("do_sample") is False


def test_sft_trains_on_the_prompt_grpo_samples_captions_with(captioner, tmp_path):
    """One example rendered both ways: by the SFT trainer's collator (as training sees it) and as
    GRPO renders the demo recipe's prompt (TRL's ``prepare_multimodal_messages`` + chat template)."""
    import torch
    from trl.data_utils import prepare_multimodal_messages

    from vlrl.core.images import load_image
    from vlrl.demos.shapes.caprl.runner import DemoConfig, recipe_dict
    from vlrl.training.data import to_trl_dataset
    from vlrl.training.recipe import load_recipe
    from vlrl.training.sft import build_sft_trainer

    model, info = captioner
    sft, _ = build_sft_trainer(load_recipe(write_captioner_sft(TINY, 0, model, tmp_path / "sft")))
    row = sft.train_dataset[0]
    batch = sft.data_collator([row])
    trained = batch["labels"][0] != -100  # the completion: the only tokens with a loss
    keep = batch["attention_mask"][0].bool() & ~trained
    sft_prompt = batch["input_ids"][0][keep]
    sft_mm = batch["mm_token_type_ids"][0][keep]

    # GRPO side: the demo's own GRPO recipe over a one-row source holding the same image
    first = json.loads((tmp_path / "sft" / "sft_data" / "train.jsonl").read_text().splitlines()[0])
    image = tmp_path / "sft" / "sft_data" / first["image"]
    src = tmp_path / "grpo.jsonl"
    src.write_text(json.dumps({"id": "x", "image": str(image), "scene": {}}) + "\n")
    grpo_recipe = recipe_dict(tmp_path / "run", DemoConfig.make(quick=True), model, model, source=src)
    grpo_recipe["trainer"] = {"output_dir": str(tmp_path / "run")}
    (tmp_path / "grpo.yaml").write_text(json.dumps(grpo_recipe))
    data = load_recipe(tmp_path / "grpo.yaml").data
    grpo_row = to_trl_dataset(data, cache_dir=tmp_path / "_d")[0]
    msgs = prepare_multimodal_messages(grpo_row["prompt"], images=[grpo_row["image"]])
    grpo = sft.processing_class.apply_chat_template(conversation=[msgs], add_generation_prompt=True, tokenize=True,
                                                    return_dict=True, return_tensors="pt")

    assert torch.equal(sft_prompt, grpo["input_ids"][0])
    assert torch.equal(sft_mm, grpo["mm_token_type_ids"][0]) and int(sft_mm.sum()) > 0  # image tokens marked
    ref = caption_prompt_encoding(sft.processing_class, load_image(str(image)))
    assert torch.equal(sft_prompt, ref["input_ids"][0]) and len(sft_prompt) == info["prompt_tokens"]
    text = sft.processing_class.tokenizer.decode(sft_prompt)
    assert text.index("<|vision_start|>") < text.index(W.CAPTION_PROMPT)  # image before text
    assert text.startswith("<|im_start|>system\n")  # the template's default system line
    # the target is the row's caption, ended by the turn's end token
    target = batch["input_ids"][0][trained]
    assert trained.nonzero().min() == len(sft_prompt)  # loss on the whole completion, none on the prompt
    assert sft.processing_class.tokenizer.decode(target) == first["caption"] + "<|im_end|>\n"
