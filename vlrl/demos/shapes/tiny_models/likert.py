"""The holistic Likert judge of ``vlrl demo --compare``: a tiny VLM that scores a caption 1–10.

What both caption papers call an "LLM-as-a-judge" / Likert reward, in miniature: the judge sees the
image and the caption and answers ``{"score": n}``. It is used exactly as a real judge would be: an
``hf:`` backend spec in the ``likert_judge`` reward (:mod:`vlrl.rewards.likert`), through the judge
seam, with the compact ``shapes_likert`` prompt it was trained on.

**What it was trained on.** It starts from a shapes captioner warm start of *another* seed
(``seed + 2000``: it can see shapes and colours, and it was never the policy), then learns to
write ``{"score": n}`` for (image, caption) pairs, where ``n`` is :func:`oracle_score`, a fixed
function of the facts the caption states right, states wrong or leaves out (parsed with the
world's grammar). The captions it is trained on are drawn the way captions come about in this
world: complete ones, ones with attributes dropped at random, ones with one or two attributes
mis-stated, ones describing another scene's items (invented or missing shapes), and garbled ones
(the run-ons and repetitions of a drifting policy; see :func:`vlrl.demos.shapes.kit.noise.garble`).
It never sees the policy's own captions, rubrics or QA answers, and the QA judge that evaluates
every row of the comparison learned nothing (the CapRL demo's rule-based reader). Its scenes, and
its captioner init's SFT images, come from the world's training layouts; the pairs its agreement
is measured on come from the held-out layouts.

Its agreement with the oracle on held-out pairs (exact, within ±1, rank correlation) is stored in
its ``warmstart.json`` and shown in the report: a real judge is imperfect too, and where this one
errs is where a policy can hack it.
"""

from __future__ import annotations

import hashlib
import json
import logging
import random
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from vlrl.demos.shapes.kit import world as W
from vlrl.demos.shapes.kit.base import hf_spec
from vlrl.demos.shapes.kit.cache import cached, default_cache_dir
from vlrl.demos.shapes.kit.noise import corrupt, garble
from vlrl.demos.shapes.tiny_models.settings import WarmStartConfig
from vlrl.demos.shapes.tiny_models.train_loop import train_steps
from vlrl.demos.shapes.tiny_models.warmstart import build_tokenizer, job, paths

logger = logging.getLogger(__name__)

VERSION = 1
PROMPT = "shapes_likert"
LOW, HIGH = 1, 10
JUDGE_MAX_TOKENS = 16
"""``{"score": 10}`` is 12 tokens of the shapes tokenizer (plus the end of turn)."""
WRONG_WEIGHT = 1.0
"""A wrong fact cancels a correct one: a full caption with one error in six facts grades 7, the same as
a cautious caption that states four of six facts right; invented content can never pay."""


# -- the oracle ------------------------------------------------------------------------------


def grade_facts(scene: W.Scene, caption: str) -> dict[str, int] | None:
    """Facts the caption states right, wrong or omits, by slot (None: not in the world's grammar).

    Each shape has three facts (colour, shape, size), a printed word one. A stated item in a slot
    the scene does not have is invented: its stated facts are wrong, plus one for the item itself.
    """
    items = W.parse_caption(caption)
    if items is None:
        return None
    truth = {it.position: it for it in scene.items}
    stated = {}
    for it in items:
        if it.position in stated:  # the same slot twice is invented content too
            stated[f"dup{len(stated)}"] = it
        else:
            stated[it.position] = it
    out = {"correct": 0, "wrong": 0, "omitted": 0, "total": 0}
    for pos, t in truth.items():
        attrs = ("word",) if t.is_word else ("colour", "shape", "size")
        out["total"] += len(attrs)
        s = stated.get(pos)
        for a in attrs:
            v = getattr(s, a, None) if s is not None and s.is_word == t.is_word else None
            if s is not None and s.is_word != t.is_word:
                out["wrong"] += 1
            elif not v:
                out["omitted"] += 1
            else:
                out["correct" if v == getattr(t, a) else "wrong"] += 1
    for pos, s in stated.items():
        if pos not in truth:
            out["wrong"] += 1 + sum(bool(getattr(s, a)) for a in ("colour", "shape", "size", "word"))
    return out


def oracle_score(scene: W.Scene, caption: str) -> int:
    """1–10: ``1 + round(9 · max(0, correct − wrong) / total)``; 1 for a caption outside the grammar."""
    g = grade_facts(scene, caption)
    if g is None or g["total"] == 0:
        return LOW
    q = max(0.0, (g["correct"] - WRONG_WEIGHT * g["wrong"]) / g["total"])
    return LOW + int((HIGH - LOW) * q + 0.5)


def target_text(score: int) -> str:
    """What the judge writes (what the ``likert_judge`` reward parses)."""
    return json.dumps({"score": int(score)})


# -- training data ---------------------------------------------------------------------------


def sample_caption(scene: W.Scene, rng: random.Random, world: W.WorldConfig) -> tuple[str, str]:
    """One training caption for ``scene`` and the kind of caption it is."""
    u = rng.random()
    if u < 0.10:
        return W.caption(scene), "full"
    if u < 0.50:
        return W.caption(scene, rng, rng.uniform(0.1, 0.9)), "dropped"
    if u < 0.75:
        items = W.stated_items(scene, rng, rng.uniform(0.0, 0.6))
        for _ in range(rng.randint(1, 2)):
            items = corrupt(items, rng)
        return W.caption_from_items(items), "corrupted"
    if u < 0.88:
        other = W.random_scene(rng, world, "other")
        return W.caption(other, rng, rng.uniform(0.0, 0.5)), "other_scene"
    return garble(W.caption(scene, rng, rng.uniform(0.0, 0.5)), rng), "garbled"


@dataclass(frozen=True)
class LikertConfig:
    init_seed_offset: int = 2000
    scenes: int = 4000
    steps: int = 500
    batch: int = 64
    lr: float = 1e-3
    heldout: int = 600

    def key(self, captioner_key: str) -> str:
        blob = json.dumps([VERSION, asdict(self), captioner_key, PROMPT], sort_keys=True)
        return hashlib.sha1(blob.encode()).hexdigest()[:10]


def judge_path(cache_dir: Path, seed: int, cfg: LikertConfig | None = None, warm=None) -> Path:
    cfg = cfg or LikertConfig()
    warm = warm or WarmStartConfig()
    return Path(cache_dir) / f"likert-{cfg.key(warm.key('cap'))}-s{seed}"


def build_likert_judge(seed: int, cache_dir: Path | None = None, cfg: LikertConfig | None = None, warm=None) -> Path:
    """The cached judge for ``seed`` (trained on first use: its captioner init, then the scoring)."""
    cfg = cfg or LikertConfig()
    warm = warm or WarmStartConfig()
    cache_dir = Path(cache_dir or default_cache_dir())
    final = judge_path(cache_dir, seed, cfg, warm)
    if (final / "warmstart.json").exists():
        return final
    tok = build_tokenizer(warm, cache_dir)
    init_seed = seed + cfg.init_seed_offset
    init = paths(warm, init_seed, init_seed, cache_dir).captioner
    job("captioner", warm, str(tok), str(init), init_seed)
    return cached(final, lambda tmp: train_likert_judge(warm, cfg, init, tmp, seed))


def judge_text(caption: str) -> str:
    """The user text of one judge request, exactly as the reward renders it."""
    from vlrl.core.prompts import render
    from vlrl.judge.fence import fence_caption

    return render(PROMPT, **fence_caption(caption), with_image=True, low=LOW, high=HIGH)


def likert_scenes(cfg: LikertConfig, warm, seed: int) -> list[W.Scene]:
    """The judge's scenes: the first ``heldout`` (only to measure it) from the world's held-out
    layouts, the rest (its training scenes) from the training layouts."""
    return (W.make_scenes(cfg.heldout, seed, warm.world, prefix="likert-held", split="eval")
            + W.make_scenes(cfg.scenes - cfg.heldout, seed, warm.world, prefix="likert", split="train"))


def train_likert_judge(warm, cfg: LikertConfig, init: Path, out: Path, seed: int) -> dict[str, Any]:
    import shutil

    import torch
    from transformers import AutoModelForImageTextToText, AutoProcessor

    from vlrl.core.backends.hf import HFBackend

    torch.manual_seed(seed)
    for f in init.iterdir():  # start from the captioner's weights and processor
        if f.is_file() and f.name != "warmstart.json":
            shutil.copy2(f, out / f.name)
    model = AutoModelForImageTextToText.from_pretrained(str(out))
    proc = AutoProcessor.from_pretrained(str(out))
    tok = proc.tokenizer
    eos = tok.convert_tokens_to_ids("<|im_end|>")
    pad = tok.pad_token_id
    # The backend the reward will use, around the model being trained: its public renderer builds
    # the training prompts, so training and use cannot disagree (as for the answerers).
    backend = HFBackend(model=model, processor=proc, device="cpu", name="likert-judge-in-training")

    def render_request(text: str) -> str:
        return backend.render_prompt([{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": text}]}])

    rng = random.Random(f"likert/{seed}")
    scenes = likert_scenes(cfg, warm, seed)
    images = [W.render(s, warm.world) for s in scenes]
    held_idx = list(range(cfg.heldout))
    train_idx = list(range(cfg.heldout, len(scenes)))
    held = [(i, *sample_caption(scenes[i], rng, warm.world)) for i in held_idx]

    def encode(pairs: list[tuple[int, str]], with_target: bool):
        prompts = [render_request(judge_text(c)) for _, c in pairs]
        enc = proc(text=prompts, images=[images[i] for i, _ in pairs], padding=False)
        rows, labels = [], []
        for b, (i, c) in enumerate(pairs):
            p = list(enc["input_ids"][b])
            t = tok(target_text(oracle_score(scenes[i], c)), add_special_tokens=False)["input_ids"] + [eos] if with_target else []
            rows.append(p + t)
            labels.append([-100] * len(p) + t)
        L = max(len(r) for r in rows)
        ids = torch.full((len(rows), L), pad, dtype=torch.long)
        lab = torch.full((len(rows), L), -100, dtype=torch.long)
        attn = torch.zeros((len(rows), L), dtype=torch.long)
        mm = torch.zeros((len(rows), L), dtype=torch.long)
        for b, (r, lb) in enumerate(zip(rows, labels, strict=True)):  # left padding, as the backend pads
            ids[b, L - len(r):] = torch.tensor(r)
            lab[b, L - len(r):] = torch.tensor(lb)
            attn[b, L - len(r):] = 1
            if "mm_token_type_ids" in enc:
                mtt = list(enc["mm_token_type_ids"][b])
                mm[b, L - len(r): L - len(r) + len(mtt)] = torch.tensor(mtt)
        batch = {"input_ids": ids, "attention_mask": attn, "pixel_values": torch.as_tensor(enc["pixel_values"]),
                 "image_grid_thw": torch.as_tensor(enc["image_grid_thw"])}
        if "mm_token_type_ids" in enc:
            batch["mm_token_type_ids"] = mm
        return batch, lab

    def step_loss(step: int):
        pairs = []
        for i in rng.sample(train_idx, cfg.batch):
            pairs.append((i, sample_caption(scenes[i], rng, warm.world)[0]))
        batch, lab = encode(pairs, True)
        return model(**batch, labels=lab).loss

    model.train()
    losses = train_steps(model.parameters(), step_loss, steps=cfg.steps, lr=cfg.lr, name=f"likert-judge-s{seed}")
    model.eval()
    model.generation_config.do_sample = False
    model.save_pretrained(str(out))
    proc.save_pretrained(str(out))
    agreement = judge_agreement(str(out), [(images[i], scenes[i], c, kind) for i, c, kind in held])
    return {"kind": "likert_judge", "seed": seed, "init": init.name, "final_loss": sum(losses[-50:]) / 50,
            "trained_on": "oracle_score of (image, caption) pairs: full, attribute-dropped, mis-stated, "
                          "other-scene and garbled captions of shapes-world scenes",
            "config": asdict(cfg), **agreement}


def judge_agreement(judge_dir: str, pairs: list[tuple[Any, W.Scene, str, str]]) -> dict[str, Any]:
    """The judge's scores through the real ``likert_judge`` reward against the oracle's."""
    from vlrl.rewards import build_reward

    reward = build_reward("likert_judge", judge=hf_spec(judge_dir, 128),
                          prompt=PROMPT, max_tokens=JUDGE_MAX_TOKENS, max_retries=0)
    try:
        scores = reward.score([c for _, _, c, _ in pairs], image=[im for im, _, _, _ in pairs])
    finally:
        reward.close()
    return agreement_stats([s.details.get("likert") for s in scores],
                           [oracle_score(sc, c) for _, sc, c, _ in pairs], [k for *_, k in pairs])


def agreement_stats(pred: list[float | None], gold: list[int], kinds: list[str]) -> dict[str, Any]:
    """Exact and ±1 agreement, Spearman correlation and the parse-failure rate of judge scores."""
    import numpy as np
    import pandas as pd

    def spearman(a: list[float], b: list[float]) -> float:
        ra, rb = pd.Series(a).rank().to_numpy(), pd.Series(b).rank().to_numpy()  # average ranks for ties
        return float(np.corrcoef(ra, rb)[0, 1]) if ra.std() > 0 and rb.std() > 0 else float("nan")

    ok = [(p, g) for p, g in zip(pred, gold, strict=True) if p is not None]
    out: dict[str, Any] = {
        "heldout_pairs": len(gold),
        "heldout_failure_rate": round(1 - len(ok) / max(1, len(gold)), 4),
        "heldout_exact": round(sum(p == g for p, g in ok) / max(1, len(ok)), 4),
        "heldout_within1": round(sum(abs(p - g) <= 1 for p, g in ok) / max(1, len(ok)), 4),
        "heldout_spearman": round(spearman([p for p, _ in ok], [g for _, g in ok]), 4) if len(ok) > 2 else None,
    }
    by_kind: dict[str, list[float]] = {}
    for p, g, k in zip(pred, gold, kinds, strict=True):
        if p is not None:
            by_kind.setdefault(k, []).append(p - g)
    out["heldout_mean_error_by_kind"] = {k: round(sum(v) / len(v), 3) for k, v in sorted(by_kind.items())}
    return out


__all__ = ["LikertConfig", "build_likert_judge", "grade_facts", "judge_text", "oracle_score"]
