"""Warm starts for the shapes demos: a captioner that *can* say everything, and answerers that read.

:func:`build_all` gives every CapRL-style demo its tokenizer (a byte-level BPE trained on the
world's text, :func:`build_tokenizer`), the tiny captioner (:mod:`.captioner`), the reward answerer
and a judge answerer of another seed (the reward answerer's twin: same data, other seed) (:mod:`.answerer`); their settings are one
:class:`~vlrl.demos.shapes.tiny_models.settings.WarmStartConfig`.

Every artefact is cached under ``cache_dir`` by a hash of its settings plus its seed, written to a
temporary folder and renamed into place (:func:`vlrl.demos.shapes.kit.cache.cached`), so an
interrupted warm start never leaves a half model. Jobs run in separate processes with one thread
each (:func:`build_all`).
"""

from __future__ import annotations

import logging
import random
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, replace
from multiprocessing import get_context
from pathlib import Path
from typing import Any

from vlrl.demos.shapes.kit import world as W
from vlrl.demos.shapes.kit.cache import cached, default_cache_dir, job_process_setup
from vlrl.demos.shapes.tiny_models.answerer import train_answerer
from vlrl.demos.shapes.tiny_models.captioner import train_captioner
from vlrl.demos.shapes.tiny_models.settings import WarmStartConfig

logger = logging.getLogger(__name__)


def tokenizer_corpus(cfg: WarmStartConfig) -> list[str]:
    """Every string the demo's models will read: captions, questions, rendered answerer prompts."""
    from vlrl.core.prompts import render
    from vlrl.methods.caprl.ask import PREFILL
    from vlrl.methods.caprl.mcq import CANNOT_ANSWER, normalize_mcq, present

    texts = W.world_texts(cfg.world)
    rng = random.Random(0)
    for sc in W.make_scenes(300, 0, replace(cfg.world, max_shapes=3, word_prob=0.5), prefix="tokq"):
        cap = W.caption(sc, rng, rng.random() * 0.6)
        for q in W.questions(sc, rng):
            pres = present(normalize_mcq(q.to_dict()), rng, CANNOT_ANSWER)
            texts.append(render(cfg.answer_prompt, caption=cap, question=q.question, options=pres.lines()))
            texts.append(f"{PREFILL} {rng.choice(pres.letters)}")
    texts += ["You are a helpful assistant.", "system\n", "user\n", "assistant\n", PREFILL + " A", PREFILL + " B",
              PREFILL + " C", CANNOT_ANSWER]
    return texts * 3


def build_tokenizer(cfg: WarmStartConfig, cache_dir: Path) -> Path:
    def build(out: Path) -> dict[str, Any]:
        from vlrl.core.tiny import train_tokenizer

        tok = train_tokenizer(tokenizer_corpus(cfg), out, vocab_size=cfg.vocab_size)
        for w in [*W.COLOURS, *W.SHAPES, *W.SIZES, *W.WORDS, *W.NUMBERS, "yes", "no", "A", "B", "C"]:
            ids = tok(" " + w, add_special_tokens=False)["input_ids"]
            if len(ids) != 1:
                raise RuntimeError(f"shapes tokenizer splits {' ' + w!r} into {len(ids)} tokens; raise vocab_size")
        return {"vocab": len(tok)}

    return cached(cache_dir / f"tokenizer-{cfg.key('vocab')}", build)


def job(kind: str, cfg: WarmStartConfig, tok_dir: str, out: str, seed: int) -> str:
    """Process entry point: one thread, build one cached model (``kind`` captioner or answerer)."""
    job_process_setup()
    fn = train_captioner if kind == "captioner" else train_answerer
    return str(cached(Path(out), lambda tmp: fn(cfg, Path(tok_dir), tmp, seed)))


@dataclass
class WarmStart:
    tokenizer: Path
    captioner: Path
    answerer: Path
    judge: Path | None
    """The twin judge: an answerer trained exactly like the reward answerer, with another seed
    (None when not asked for)."""
    full_captioner: Path | None = None
    """The captioner SFT'd on full captions only (:func:`full_caption_config`): the strongest
    no-RL baseline, reported beside the warm start RL begins from (None when not asked for)."""


def full_caption_config(cfg: WarmStartConfig) -> WarmStartConfig:
    """The warm start's settings with every SFT step on full captions (no attribute dropped).

    The demo's own warm start drops attributes (p=``drop_p``) after a full-caption curriculum so that
    RL has room to gain; this captioner is what the same SFT budget gives without that handicap."""
    return replace(cfg, full_caption_steps=cfg.sft_steps, drop_p=0.0)


def paths(cfg: WarmStartConfig, seed: int, judge_seed: int | None, cache_dir: Path, full_caption: bool = False) -> WarmStart:
    tok = cache_dir / f"tokenizer-{cfg.key('vocab')}"
    return WarmStart(
        tok,
        cache_dir / f"captioner-{cfg.key('cap')}-s{seed}",
        cache_dir / f"answerer-{cfg.key('ans')}-s{seed}",
        cache_dir / f"answerer-{cfg.key('ans')}-s{judge_seed}" if judge_seed is not None else None,
        cache_dir / f"captioner-{full_caption_config(cfg).key('cap')}-s{seed}" if full_caption else None,
    )


def build_all(cfg: WarmStartConfig, seed: int, judge_seed: int | None, cache_dir: Path | None = None, workers: int = 2,
              full_caption: bool = False) -> WarmStart:
    """Tokenizer, captioner, reward answerer and the twin judge answerer (none when ``judge_seed`` is
    None; with ``full_caption`` also the full-caption captioner); cached, trained in parallel."""
    cache_dir = Path(cache_dir or default_cache_dir())
    ws = paths(cfg, seed, judge_seed, cache_dir, full_caption)
    build_tokenizer(cfg, cache_dir)
    # the two captioners first (the long jobs, one per worker), then the answerers
    jobs = [("captioner", ws.captioner, seed, cfg)]
    if full_caption:
        jobs.append(("captioner", ws.full_captioner, seed, full_caption_config(cfg)))
    jobs.append(("answerer", ws.answerer, seed, cfg))
    if ws.judge is not None:
        jobs.append(("answerer", ws.judge, judge_seed, cfg))
    todo = [j for j in jobs if not (j[1] / "warmstart.json").exists()]
    if todo:
        logger.info("warm start: training %s (cached under %s)", ", ".join(f"{k}-s{s}" for k, _, s, _ in todo), cache_dir)
        if workers <= 1 or len(todo) == 1:
            for kind, out, s, c in todo:
                job(kind, c, str(ws.tokenizer), str(out), s)
        else:
            with ProcessPoolExecutor(max_workers=min(workers, len(todo)), mp_context=get_context("spawn")) as ex:
                futs = [ex.submit(job, kind, c, str(ws.tokenizer), str(out), s) for kind, out, s, c in todo]
                for f in futs:
                    f.result()
    return ws
