"""Inputs for ``vlrl bench reward`` with a trained answerer: the CapRL demo's reward answerer and
captions of its world.

The bench's default answerer has random weights: its letter choice does not depend on the prompt,
so the spread of its rewards across seeds says nothing about a real run. The demo's answerer is
trained on the very requests the ``caprl_qa`` reward sends in the shapes world (its prompt, option
presentation and pre-fill), so it answers from the caption. This module builds it (cached, as every
demo does) and writes captions of fresh scenes (any layout: a bench, not an evaluation) with some facts left out, each with its scene's
questions, in the rows ``vlrl bench reward --qa`` reads; ``bench.json`` beside them holds the
answerer spec and the reward settings the demo trains with.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

from vlrl.core.pipeline import atomic_write_json, write_jsonl
from vlrl.demos.shapes.caprl.runner import DemoConfig
from vlrl.demos.shapes.kit import world as W
from vlrl.demos.shapes.kit.base import hf_spec
from vlrl.demos.shapes.kit.cache import default_cache_dir
from vlrl.demos.shapes.tiny_models.warmstart import build_tokenizer, job, paths


def write_bench_inputs(out: str | Path, n_captions: int = 16, seed: int = 0, cache_dir: str | Path | None = None) -> dict[str, Any]:
    """Build (or reuse) the demo's reward answerer and write ``out/qa.jsonl`` and ``out/bench.json``.

    Captions state each fact with probability 1 - drop, drop spread over [0, 0.6] across the rows
    (the range the answerer was trained on), so some questions are answerable from the caption and
    some are not, as for a policy's captions mid-training.
    """
    cfg = DemoConfig.make(seed=seed)
    cache = Path(cache_dir) if cache_dir else default_cache_dir()
    build_tokenizer(cfg.warm, cache)
    ws = paths(cfg.warm, cfg.seed, cfg.seed + cfg.judge_seed_offset, cache)
    if not (ws.answerer / "warmstart.json").exists():
        job("answerer", cfg.warm, str(ws.tokenizer), str(ws.answerer), cfg.seed)
    rows = bench_rows(cfg, n_captions, seed)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    write_jsonl(out / "qa.jsonl", rows)
    info = {"answerer": hf_spec(ws.answerer, 256),
            "settings": {"prompt": cfg.warm.answer_prompt},
            "captions": len(rows), "questions": sum(len(r["questions"]) for r in rows), "seed": seed}
    atomic_write_json(out / "bench.json", info)
    return info


def bench_rows(cfg: DemoConfig, n_captions: int, seed: int) -> list[dict[str, Any]]:
    """Captions of ``n_captions`` fresh scenes, drop rising from 0 to 0.6, each with its scene's MCQs."""
    rng = random.Random(f"bench-inputs/{seed}")
    rows = []
    for i, sc in enumerate(W.make_scenes(n_captions, seed, cfg.warm.world, prefix="bench-")):
        drop = 0.6 * i / max(1, n_captions - 1)
        qs = [{"question": q.question, "options": q.options, "answer": q.answer}
              for q in W.scene_questions(sc, rng, cfg.warm.world)]
        rows.append({"id": sc.id, "caption": W.caption(sc, rng, drop), "questions": qs, "drop": round(drop, 3)})
    return rows


def bench_command(out: str | Path, info: dict[str, Any]) -> str:
    """The ``vlrl bench reward`` command line that uses these inputs."""
    sets = " ".join(f"--set {k}={json.dumps(v) if not isinstance(v, str) else v}" for k, v in info["settings"].items())
    return (f"vlrl bench reward --answerer '{info['answerer']}' --qa {Path(out) / 'qa.jsonl'} {sets} "
            f"--captions {info['captions']} --json bench-reward.json")
