"""Qwen3-VL end to end on tiny offline models: make-tiny, GRPO, PTST, SFT and corpus captioning
(CapRL's newest captioners are Qwen3-VL models)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.support.paths import ROOT
from vlrl.training.recipe import load_recipe

TINY = ROOT / "train" / "recipes" / "tiny"

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def tiny_qwen3(tmp_path_factory):
    from vlrl.cli import app

    out = tmp_path_factory.mktemp("q3") / "model"
    res = CliRunner().invoke(app, ["models", "make-tiny", "--arch", "qwen3_vl", "--out", str(out)])
    assert res.exit_code == 0, res.output
    return out


def test_make_tiny_qwen3_vl_loads_and_counts_its_image_tokens(tiny_qwen3):
    from PIL import Image
    from transformers import AutoConfig, AutoModelForImageTextToText, AutoProcessor

    assert AutoConfig.from_pretrained(tiny_qwen3).model_type == "qwen3_vl"
    model = AutoModelForImageTextToText.from_pretrained(tiny_qwen3)
    proc = AutoProcessor.from_pretrained(tiny_qwen3)
    assert type(proc).__name__ == "Qwen3VLProcessor"
    msgs = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "Describe."}]}]
    text = proc.apply_chat_template(msgs, add_generation_prompt=True)
    inputs = proc(text=[text], images=[Image.new("RGB", (96, 64), "red")], return_tensors="pt")
    t, h, w = inputs["image_grid_thw"][0].tolist()
    n_image_tokens = int((inputs["input_ids"] == model.config.image_token_id).sum())
    assert n_image_tokens == t * h * w // 4  # 16-px patches merged 2×2, as the vision tower expects
    out = model.generate(**inputs, max_new_tokens=4, do_sample=False)
    assert out.shape[1] == inputs["input_ids"].shape[1] + 4


def test_grpo_and_sft_with_qwen3_vl(tmp_path):
    from vlrl.training.grpo import run_grpo
    from vlrl.training.sft import run_sft

    m = run_grpo(load_recipe(TINY / "caprl_tiny.yaml", [f"output_dir={tmp_path / 'g'}", "model.path=tiny:qwen3_vl",
                                                        "max_steps=1"]))
    assert m["global_step"] == 1 and "rewards/caprl_qa/mean" in m
    rows = [json.loads(x) for x in next((tmp_path / "g" / "completions").glob("step-*.jsonl")).read_text().splitlines()]
    assert rows and all(r["images"] for r in rows)  # the image reached generation
    s = run_sft(load_recipe(TINY / "sft_tiny.yaml", [f"output_dir={tmp_path / 's'}", "model.path=tiny:qwen3_vl"]))
    assert s["global_step"] == 3 and s["loss_last"] < s["loss_first"]


def test_ptst_with_qwen3_vl(tmp_path):
    from vlrl.training.ptst import run_ptst

    res = run_ptst(load_recipe(TINY / "vision_r1_tiny_ptst.yaml", [
        f"output_dir={tmp_path / 'p'}", "model.path=tiny:qwen3_vl",
        "stages=[{max_completion_length: 8, num_generations: 4, steps: 1}, {max_completion_length: 12, num_generations: 2, steps: 1}]"]))
    assert [s["stage"] for s in res["stages"]] == [1, 2]
    assert (tmp_path / "p" / "stage-2" / "model.safetensors").is_file()


def test_corpus_captioning_with_qwen3_vl(tiny_qwen3, tmp_path):
    from PIL import Image

    from vlrl.cli import app

    corpus = tmp_path / "imgs"
    corpus.mkdir()
    for i, color in enumerate(("red", "blue")):
        Image.new("RGB", (64, 48), color).save(corpus / f"img{i}.png")
    out = tmp_path / "caps"
    res = CliRunner().invoke(app, ["caption", "--images", str(corpus), "--model", f"hf:{tiny_qwen3}", "--out", str(out),
                                   "--max-tokens", "6"])
    assert res.exit_code == 0, res.output
    rows = [json.loads(x) for f in sorted((out / "captions").glob("*.jsonl")) for x in f.read_text().splitlines()]
    assert sorted(Path(r["image_id"]).stem for r in rows) == ["img0", "img1"]
    assert all(isinstance(r["caption"], str) for r in rows)
