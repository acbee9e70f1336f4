"""Warm starts of the video demo: a tokenizer, a tiny video captioner and the reward answerer.

* **Tokenizer**: a byte-level BPE trained on the clip world's text and the answerer's requests.
* **Captioner**: a tiny Qwen2.5-VL (the image demo's sizes) fine-tuned on captions of clips, full
  first, then with each attribute left out with p=``drop_p``, so that it *can* say every fact but
  usually does not (the room GRPO has to improve). Its processor's video budget is 56×56 a frame.
  It has its own short loop (the demos' shared step, :func:`~vlrl.demos.shapes.tiny_models.train_loop.train_steps`)
  because ``vlrl train sft`` reads image rows only; its prompts are encoded by
  :func:`vlrl.training.video.encode_video_prompt`, the code GRPO generates with, from the same
  decoded MP4 files, so both trainers see one prompt.
* **Reward answerer**: the image demo's tiny Qwen2 answerer (:func:`~vlrl.demos.shapes.tiny_models.answerer.train_answerer`)
  trained on this world's captions (attributes left out, one mis-stated, or garbled) and questions,
  labelled by what a strict reader of the grammar gets from the caption.

The judge needs no warm start: it is that strict reader itself (:mod:`.world`), never the reward.
Every artefact is cached under the demo cache by a hash of its settings plus its seed
(:func:`vlrl.demos.shapes.kit.cache.cached`).
"""

from __future__ import annotations

import hashlib
import json
import random
import shutil
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass, field
from multiprocessing import get_context
from pathlib import Path
from typing import Any

from vlrl.demos.shapes.caprl_video import world as V
from vlrl.demos.shapes.kit.cache import cached, job_process_setup
from vlrl.demos.shapes.kit.world import COLOURS, SHAPES, WorldConfig
from vlrl.demos.shapes.tiny_models.answerer import label_requests, train_answerer
from vlrl.demos.shapes.tiny_models.settings import ANSWER_PROMPT, WarmStartConfig

VERSION = 2
"""2: every training set draws only training configurations (``heldout_layouts``)."""
VALUES = (*COLOURS, *SHAPES, *V.WAYS, *V.COUNTS, "yes", "no")
"""The answers the reward answerer's auxiliary head names."""


@dataclass(frozen=True)
class VideoWarmConfig:
    vocab_size: int = 512
    cap_hidden: int = 128
    cap_layers: int = 2
    cap_mrope: tuple[int, int, int] = (4, 6, 6)
    vision_hidden: int = 128
    vision_depth: int = 2
    cap_init: float = 0.05
    sft_clips: int = 800
    sft_steps: int = 800
    sft_batch: int = 32
    sft_lr: float = 3e-3
    full_caption_steps: int = 500
    drop_p: float = 0.65
    heldout_layouts: float = WorldConfig.heldout_layouts
    """Share of the clip world's configurations (:func:`~.world.configuration`) kept for evaluation
    only, split by the image world's :func:`~vlrl.demos.shapes.kit.world.layout_split` (the image
    world's default share): the captioner's SFT clips, the answerer's captions and GRPO's clips draw
    the other configurations, the held-out clips only these."""
    answerer: WarmStartConfig = field(default_factory=lambda: WarmStartConfig(ans_steps=300, ans_pool=12000))
    """The answerer's settings (its ``ans_*`` fields; the image world's fields are unused)."""

    def key(self, part: str) -> str:
        d = asdict(self)
        if part == "ans":
            keep = {k: v for k, v in d["answerer"].items() if k.startswith("ans") or k in ("aux_weight", "answer_prompt")}
            keep["heldout_layouts"] = self.heldout_layouts
        else:
            keep = {k: v for k, v in d.items() if k != "answerer" and (part == "cap" or k == "vocab_size")}
        keep["vocab_size"] = self.vocab_size
        return hashlib.sha1(json.dumps([VERSION, part, keep], sort_keys=True).encode()).hexdigest()[:10]


@dataclass
class VideoWarmStart:
    tokenizer: Path
    captioner: Path
    answerer: Path


def paths(cfg: VideoWarmConfig, seed: int, cache_dir: Path) -> VideoWarmStart:
    return VideoWarmStart(cache_dir / f"video-tokenizer-{cfg.key('vocab')}",
                          cache_dir / f"video-captioner-{cfg.key('cap')}-s{seed}",
                          cache_dir / f"video-answerer-{cfg.key('ans')}-s{seed}")


# -- tokenizer ----------------------------------------------------------------------------------


def build_tokenizer(cfg: VideoWarmConfig, out: Path) -> Path:
    def build(tmp: Path) -> dict[str, Any]:
        from vlrl.core.prompts import render
        from vlrl.core.tiny import train_tokenizer
        from vlrl.methods.caprl.ask import PREFILL
        from vlrl.methods.caprl.mcq import CANNOT_ANSWER, normalize_mcq, present

        texts = V.world_texts()
        rng = random.Random(0)
        for c in V.make_clips(300, 0, prefix="tokq"):
            cap = V.caption(V.stated(c, rng, rng.random() * 0.6))
            for q in V.questions(c, rng):
                pres = present(normalize_mcq(q.to_dict()), rng, CANNOT_ANSWER)
                texts.append(render(ANSWER_PROMPT, caption=cap, question=q.question, options=pres.lines()))
                texts.append(f"{PREFILL} {rng.choice(pres.letters)}")
        texts += ["You are a helpful assistant.", "system\n", "user\n", "assistant\n", CANNOT_ANSWER]
        tok = train_tokenizer(texts * 3, tmp, vocab_size=cfg.vocab_size)
        for w in [*VALUES, "A", "B", "C"]:
            if len(tok(" " + w, add_special_tokens=False)["input_ids"]) != 1:
                raise RuntimeError(f"video tokenizer splits {' ' + w!r}; raise vocab_size")
        return {"vocab": len(tok)}

    return cached(out, build)


# -- reward answerer ----------------------------------------------------------------------------


def answerer_clips(cfg: VideoWarmConfig, n: int, seed: int) -> list[V.ClipFacts]:
    """The clips behind ``n`` answerer examples (four questions each): training configurations only."""
    return V.make_clips(n // 4 + 1, seed, prefix="ans", split="train", heldout=cfg.heldout_layouts)


def captioner_clips(cfg: VideoWarmConfig, seed: int) -> list[V.ClipFacts]:
    """The ``sft_clips`` clips the captioner is fine-tuned on: training configurations only."""
    return V.make_clips(cfg.sft_clips, seed, prefix="sft", split="train", heldout=cfg.heldout_layouts)


def answerer_examples(cfg: VideoWarmConfig, n: int, seed: int, render_request, choice_token) -> list[dict[str, Any]]:
    """The reward answerer's labelled requests about clip captions (see the module docstring)."""
    rng = random.Random(f"video-answerer/{seed}")
    acfg = cfg.answerer

    def cases():
        for clip in answerer_clips(cfg, n, seed):
            facts = V.stated(clip, rng, rng.uniform(0, acfg.ans_drop_max))
            if rng.random() < acfg.ans_corrupt_p:
                facts = V.corrupt(facts, rng)
            cap = V.caption(facts)
            if rng.random() < acfg.ans_garble_p:
                cap = V.garble(cap, rng)
            read = V.parse_caption(cap)
            yield cap, V.questions(clip, rng), lambda q, read=read: V.answer_from_caption(read, q)

    return label_requests(acfg, n, rng, cases(), render_request, choice_token, values=VALUES)


def train_video_answerer(cfg: VideoWarmConfig, tok_dir: Path, out: Path, seed: int) -> dict[str, Any]:
    def examples(_acfg, n, s, render_request, choice_token):
        return answerer_examples(cfg, n, s, render_request, choice_token)

    info = train_answerer(cfg.answerer, tok_dir, out, seed, examples=examples, values=VALUES)
    return {**info, "trained_on": "captions of clips of the training configurations (attributes left out, one "
                                  "mis-stated, or garbled) with their questions, labelled by the strict grammar reader"}


# -- captioner ----------------------------------------------------------------------------------


def video_processor_budget(processor) -> None:
    """Hold the processor's video frames at 56×56 (the stock budget would upscale them ~30×)."""
    vp = processor.video_processor
    vp.size = {"shortest_edge": V.SIZE * V.SIZE, "longest_edge": V.SIZE * V.SIZE}
    vp.min_pixels = vp.max_pixels = V.SIZE * V.SIZE


def caption_prompt() -> list[dict[str, str]]:
    """The GRPO recipe's conversational prompt (no system turn, the recipe's prompt text)."""
    return [{"role": "user", "content": V.CAPTION_PROMPT}]


def train_captioner(cfg: VideoWarmConfig, tok_dir: Path, out: Path, seed: int) -> dict[str, Any]:
    import torch
    from transformers import AutoModelForImageTextToText, AutoProcessor, GenerationConfig

    from vlrl.core.tiny import make_tiny
    from vlrl.demos.shapes.tiny_models.train_loop import train_steps
    from vlrl.training.video import VIDEO_KEYS, encode_video_prompt

    make_tiny("qwen2_5_vl", out, seed=seed, tokenizer=str(tok_dir), hidden_size=cfg.cap_hidden,
              num_hidden_layers=cfg.cap_layers, num_attention_heads=4, num_key_value_heads=2,
              mrope_section=list(cfg.cap_mrope), vision_hidden_size=cfg.vision_hidden, vision_depth=cfg.vision_depth,
              initializer_range=cfg.cap_init)
    proc = AutoProcessor.from_pretrained(str(out))
    video_processor_budget(proc)
    proc.save_pretrained(str(out))
    torch.manual_seed(seed)
    model = AutoModelForImageTextToText.from_pretrained(str(out), dtype=torch.float32)
    tok = proc.tokenizer
    clips = captioner_clips(cfg, seed)
    encs = []
    for c in clips:  # written and decoded as GRPO's rows are, then encoded as GRPO encodes them
        path = V.write_video(c, out / "sft_videos" / f"{c.id}.mp4")
        encs.append(encode_video_prompt(proc, caption_prompt(), V.load_clip(path)))
    shutil.rmtree(out / "sft_videos", ignore_errors=True)
    prompt_len = encs[0]["input_ids"].shape[1]
    if any(e["input_ids"].shape[1] != prompt_len for e in encs):
        raise RuntimeError("video prompts differ in length; the captioner's batching assumes one length")
    pad, end = tok.pad_token_id, tok.convert_tokens_to_ids("<|im_end|>")
    video_pad = tok.convert_tokens_to_ids("<|video_pad|>")
    # the curriculum: per step, sft_batch distinct clips; full captions for full_caption_steps steps,
    # then each attribute left out with p=drop_p (drawn as the step runs, from one seeded stream)
    rng = random.Random(f"video-sft/{seed}")
    schedule = [rng.sample(range(len(clips)), cfg.sft_batch) for _ in range(cfg.sft_steps)]

    def step_loss(step: int):
        drop = 0.0 if step < cfg.full_caption_steps else cfg.drop_p
        idx = schedule[step]
        # the caption then <|im_end|>: what GRPO's completions are (it stops at the end of turn)
        caps = [tok(V.caption(V.stated(clips[i], rng, drop)), add_special_tokens=False)["input_ids"] + [end]
                for i in idx]
        n = max(len(c) for c in caps)
        ids = torch.full((len(idx), prompt_len + n), pad, dtype=torch.long)
        labels = torch.full_like(ids, -100)
        attn = torch.zeros_like(ids)
        for b, (i, c) in enumerate(zip(idx, caps, strict=True)):
            ids[b, :prompt_len] = encs[i]["input_ids"][0]
            ids[b, prompt_len : prompt_len + len(c)] = torch.tensor(c)
            labels[b, prompt_len : prompt_len + len(c)] = torch.tensor(c)
            attn[b, : prompt_len + len(c)] = 1
        extra = {k: torch.cat([encs[i][k] for i in idx]) for k in VIDEO_KEYS if k in encs[idx[0]]}
        mm = torch.zeros_like(ids)
        mm[ids == video_pad] = 2
        return model(input_ids=ids, attention_mask=attn, labels=labels, mm_token_type_ids=mm, **extra).loss

    model.train()
    losses = train_steps(model.parameters(), step_loss, steps=cfg.sft_steps, lr=cfg.sft_lr, name=f"video-captioner-s{seed}")
    model.eval()
    model.save_pretrained(str(out))
    gen = GenerationConfig.from_pretrained(str(out))
    gen.do_sample = False
    gen.save_pretrained(str(out))
    return {"kind": "video_captioner", "seed": seed, "final_loss": sum(losses[-50:]) / len(losses[-50:]),
            "prompt_tokens": prompt_len, "video_tokens": int((encs[0]["input_ids"] == video_pad).sum()),
            "trained_on": f"{cfg.sft_clips} clips of the training configurations, {cfg.sft_steps} steps x {cfg.sft_batch} captions: full captions for "
                          f"{cfg.full_caption_steps} steps, then each attribute left out with p={cfg.drop_p}"}


# -- all of it ----------------------------------------------------------------------------------


def job(kind: str, cfg: VideoWarmConfig, tok_dir: str, out: str, seed: int) -> str:
    """Process entry point: one thread, build one cached model."""
    job_process_setup()
    fn = train_captioner if kind == "captioner" else train_video_answerer
    return str(cached(Path(out), lambda tmp: fn(cfg, Path(tok_dir), tmp, seed)))


def build_all(cfg: VideoWarmConfig, seed: int, cache_dir: Path, workers: int = 2) -> VideoWarmStart:
    """Tokenizer, captioner and reward answerer; cached, the two models trained in parallel."""
    ws = paths(cfg, seed, cache_dir)
    build_tokenizer(cfg, ws.tokenizer)
    todo = [(k, p) for k, p in (("captioner", ws.captioner), ("answerer", ws.answerer))
            if not (p / "warmstart.json").exists()]
    if workers <= 1 or len(todo) <= 1:
        for kind, p in todo:
            job(kind, cfg, str(ws.tokenizer), str(p), seed)
    else:
        with ProcessPoolExecutor(max_workers=len(todo), mp_context=get_context("spawn")) as ex:
            for f in [ex.submit(job, kind, cfg, str(ws.tokenizer), str(p), seed) for kind, p in todo]:
                f.result()
    return ws
