"""`vlrl models make-tiny` builds real architectures that reload offline."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from vlrl.models.tiny import QWEN_SPECIAL_TOKENS, make_tiny, resolve_model_ref

VLRL = [str(Path(sys.executable).parent / "vlrl")]


@pytest.mark.parametrize("arch", ["qwen2_5_vl", "qwen2_vl", "qwen2"])
def test_make_tiny_cli_roundtrip_offline(arch, tmp_path):
    out = tmp_path / arch
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    subprocess.run([*VLRL, "models", "make-tiny", "--arch", arch, "--out", str(out), "--seed", "3"], check=True, env=env, capture_output=True)
    from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForImageTextToText, AutoProcessor, AutoTokenizer

    cfg = AutoConfig.from_pretrained(out)
    tok = AutoTokenizer.from_pretrained(out)
    # Qwen's specials, in Qwen's order, with consecutive ids
    ids = [tok.convert_tokens_to_ids(t) for t in QWEN_SPECIAL_TOKENS]
    assert ids == list(range(ids[0], ids[0] + len(ids)))
    assert tok.eos_token == "<|im_end|>"
    text = tok.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True)
    assert text.endswith("<|im_start|>assistant\n")
    if arch == "qwen2":
        model = AutoModelForCausalLM.from_pretrained(out)
    else:
        model = AutoModelForImageTextToText.from_pretrained(out)
        proc = AutoProcessor.from_pretrained(out)
        assert cfg.image_token_id == tok.convert_tokens_to_ids("<|image_pad|>")
        assert proc.tokenizer.convert_tokens_to_ids("<|image_pad|>") == cfg.image_token_id
    assert sum(p.numel() for p in model.parameters()) < 2_000_000
    meta = json.loads((out / "vlrl_tiny.json").read_text())
    assert meta["arch"] == arch and meta["seed"] == 3


def test_seed_changes_weights(tmp_path):
    from safetensors.torch import load_file

    a = load_file(make_tiny("qwen2", tmp_path / "a", seed=0) / "model.safetensors")
    b = load_file(make_tiny("qwen2", tmp_path / "b", seed=1) / "model.safetensors")
    c = load_file(make_tiny("qwen2", tmp_path / "c", seed=0) / "model.safetensors")
    k = "model.layers.0.mlp.up_proj.weight"
    assert not (a[k] == b[k]).all()
    assert (a[k] == c[k]).all()


def test_real_tokenizer_folder_is_used(tmp_path):
    """--tokenizer DIR keeps that tokenizer's vocabulary (here: one trained with a different size)."""
    from vlrl.models.tiny import train_tokenizer

    tok = train_tokenizer(vocab_size=400, out=tmp_path / "tok")
    out = make_tiny("qwen2", tmp_path / "m", tokenizer=tmp_path / "tok")
    from transformers import AutoConfig

    assert AutoConfig.from_pretrained(out).vocab_size == len(tok)


def test_tiny_ref_resolves_to_cached_folder(tmp_path, monkeypatch):
    monkeypatch.setenv("VLRL_CACHE", str(tmp_path))
    p1 = resolve_model_ref("tiny:qwen2:5")
    p2 = resolve_model_ref("tiny:qwen2:5")
    assert p1 == p2 and Path(p1, "config.json").exists()
    assert resolve_model_ref("/abs/path") == "/abs/path"


def test_bad_arch_is_refused(tmp_path):
    with pytest.raises(ValueError, match="unknown arch"):
        make_tiny("llama", tmp_path)
