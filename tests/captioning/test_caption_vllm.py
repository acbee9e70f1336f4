"""``vlrl caption`` on a real vLLM server serving a tiny VLM gives the in-process captions.

Both runs caption the same random-noise images with the same tiny weights, greedily: once with
``--model hf:DIR`` in process, once with ``--model openai:URL@NAME`` against vLLM. The image must
reach the served model (its vision tokens are in the prompt token count, the same count the
in-process processor makes), and the greedy captions must be the same tokens.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

pytestmark = [pytest.mark.vllm, pytest.mark.slow]


def _images(folder: Path, n: int = 4) -> Path:
    rng = np.random.default_rng(3)
    folder.mkdir(parents=True)
    for i in range(n):
        Image.fromarray(rng.integers(0, 255, (112, 112, 3), dtype=np.uint8)).save(folder / f"noise{i}.png")
    return folder


def _caption(images: Path, model: str, out: Path) -> dict[str, dict]:
    cmd = [str(Path(sys.executable).parent / "vlrl"), "caption", "--images", str(images), "--model", model,
           "--out", str(out), "--max-tokens", "12", "--batch-size", "4", "--no-progress", "--no-cache"]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = [json.loads(line) for p in sorted((out / "captions").glob("*.jsonl")) for line in p.read_text().splitlines()]
    return {r["image_id"]: r for r in rows}


def test_greedy_qwen2_5_vl_captions_over_vllm_equal_in_process(vllm_vlm, tiny_vlm, tmp_path):
    _greedy_captions_agree(vllm_vlm, tiny_vlm, tmp_path)


def test_greedy_qwen3_vl_captions_over_vllm_equal_in_process(vllm_qwen3_vl, tiny_qwen3_vl, tmp_path):
    _greedy_captions_agree(vllm_qwen3_vl, tiny_qwen3_vl, tmp_path)


def _greedy_captions_agree(server, model_dir: Path, tmp_path: Path) -> None:
    """(One test per server, so each VLM server runs alone and stops after its test.)"""
    from transformers import AutoTokenizer

    images = _images(tmp_path / "imgs")
    want = _caption(images, f"hf:{model_dir}?device=cpu&dtype=float32", tmp_path / "hf")
    got = _caption(images, f"openai:{server.base_url}@{server.model}?timeout=300", tmp_path / "vllm")
    assert sorted(got) == sorted(want) and len(got) == 4
    tok = AutoTokenizer.from_pretrained(str(model_dir))
    for image_id, w in want.items():
        g = got[image_id]
        # the image reached the model: the served prompt counts the same vision tokens (16 for a
        # 112x112 image after 2x2 merging, plus its start/end markers) as the in-process processor
        assert g["prompt_tokens"] == w["prompt_tokens"] > 16
        assert tok(g["caption"])["input_ids"] == tok(w["caption"])["input_ids"], image_id
