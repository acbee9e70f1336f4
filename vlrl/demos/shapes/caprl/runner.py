"""``vlrl demo``: the whole CapRL loop on a laptop CPU, judged honestly.

Stages (each leaves a marker under ``DIR/state`` so an interrupted demo resumes where it stopped):

1. **warm start** — tokenizer, SFT captioner, reward answerer, twin judge answerer, full-caption
   baseline captioner (cached across runs, :mod:`vlrl.demos.shapes.tiny_models.warmstart`: the
   captioners by the project's SFT recipe, the answerers by their own loop), all trained on the
   world's training layouts only (:func:`vlrl.demos.shapes.kit.world.layout_split`);
2. **data** — shapes-world scenes for GRPO (training layouts) and evaluation (held-out layouts, so
   no evaluation image equals any training image), rendered to PNG, with their MCQs
   (:mod:`vlrl.demos.shapes.kit.world`);
3. **curation** — the text-only half of CapRL's QA filter (:func:`vlrl.methods.caprl.filtering.text_only_filter`)
   asks the tiny answerer every question with *no caption*; what it gets right needs no image and
   is dropped (in a world without printed words, "is there any writing?" is such a question);
4. **evaluation before RL** — greedy and sampled captions of held-out scenes (of the warm start and
   of the full-caption baseline), every curated question answered from the caption by the
   rule-based reader (:mod:`vlrl.demos.shapes.kit.judging`, the headline: no training), and by the
   twin judge answerer and the reward answerer through the project's caption-QA evaluation
   (:func:`vlrl.methods.caprl.evaluate.caption_qa_eval`, both option orders), every rate with a
   95% bootstrap interval over scenes;
5. **GRPO** — a recipe written to ``DIR/recipe.yaml`` and run by the project's trainer
   (:func:`vlrl.training.grpo.run_grpo`, the code behind ``vlrl train grpo``) with the ``caprl_qa``
   reward in exact mode behind the anti-hacking guards; TRL checkpoints make it resumable;
6. **evaluation after RL**, then ``metrics.json`` and ``report.html`` (:mod:`vlrl.demos.shapes.kit.report`).

Accuracy is the share of questions a judge gets right from the caption; "hallucination" is the
caption settling a question on the *wrong concrete option* (it stated something false or
invented), as opposed to "cannot answer" (the caption left the fact out).
"""

from __future__ import annotations

import json
import logging
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vlrl.core.pipeline import atomic_write_json, read_jsonl, write_jsonl
from vlrl.demos.shapes.kit import world as W
from vlrl.demos.shapes.kit.base import DemoSettings, hf_spec, open_run, timing
from vlrl.demos.shapes.kit.history import CALLBACK, read_history, window_mean
from vlrl.demos.shapes.kit.recipes import grpo_trainer, run_recipe, save_recipe
from vlrl.demos.shapes.kit.rewards import grammar_reward_block
from vlrl.demos.shapes.tiny_models.settings import WarmStartConfig
from vlrl.demos.shapes.tiny_models.warmstart import build_all

logger = logging.getLogger(__name__)

FILTER_PROMPT = "shapes_filter_answer"


@dataclass(frozen=True)
class DemoConfig(DemoSettings):
    seed: int = 0
    quick: bool = False
    grpo_steps: int = 200
    images_per_step: int = 4
    num_generations: int = 8
    max_completion_length: int = 24
    learning_rate: float = 2e-4
    temperature: float = 1.0
    questions_per_caption: int = 4
    rounds: int = 2
    filter_rounds: int = 2
    eval_scenes: int = 100
    judge_seed_offset: int = 1000
    warm: WarmStartConfig = field(default_factory=WarmStartConfig)
    twin_judge: bool = True
    """Also judge with the twin answerer (trained like the reward answerer, seed + ``judge_seed_offset``):
    a second column beside the rule-based reader; off saves one answerer's training per seed."""
    full_caption_baseline: bool = True
    """Also SFT a captioner on full captions only (same budget) and evaluate it: the strongest no-RL
    baseline, beside the attribute-dropping warm start RL begins from (:func:`full_caption_config`)."""

    @classmethod
    def make(cls, seed: int = 0, quick: bool = False) -> DemoConfig:
        if quick:
            return cls(seed=seed, quick=True, grpo_steps=60, eval_scenes=60)
        return cls(seed=seed)


# -- data and curation -------------------------------------------------------------------------


def make_data(out: Path, cfg: DemoConfig) -> None:
    """Render GRPO and held-out scenes and write their raw MCQs (``data/*_raw.jsonl``)."""
    data = out / "data"
    (data / "images").mkdir(parents=True, exist_ok=True)
    world = cfg.warm.world
    splits = {"train": cfg.grpo_steps * cfg.images_per_step, "eval": cfg.eval_scenes}
    for split, n in splits.items():
        rng = random.Random(f"demo-questions/{split}/{cfg.seed}")
        rows = []
        for sc in W.make_scenes(n, cfg.seed, world, prefix=f"{split}-", split=split):
            path = data / "images" / f"{sc.id}.png"
            W.render(sc, world).save(path)
            qs = [q.to_dict() for q in W.scene_questions(sc, rng, world)]
            rows.append({"id": sc.id, "image": f"images/{sc.id}.png", "scene": sc.to_dict(),
                         "caption_full": W.caption(sc), "questions": qs})
        write_jsonl(data / f"{split}_raw.jsonl", rows)


def curate(out: Path, cfg: DemoConfig, answerer: str) -> dict[str, Any]:
    """Text-only half of the CapRL QA filter over every question; writes ``data/{train,eval}.jsonl``."""
    from vlrl.methods.caprl.filtering import text_only_filter

    data = out / "data"
    stats: dict[str, Any] = {"by_kind": {}}
    for split in ("train", "eval"):
        rows = list(read_jsonl(data / f"{split}_raw.jsonl"))
        flat = [(r, q) for r in rows for q in r["questions"]]
        # The paper's strict rule (chance_floor=False): at 2 rounds chance is 1/2, and the demo's
        # trained answerer is never blind, so the floor would only keep half-guessable questions.
        verdicts = text_only_filter([_mcq(q) for _, q in flat], answerer, rounds=cfg.filter_rounds,
                                    keys=[q["id"] for _, q in flat], seed=cfg.seed, prompt=FILTER_PROMPT,
                                    chance_floor=False)
        kept: dict[str, list] = {r["id"]: [] for r in rows}
        for (r, q), v in zip(flat, verdicts, strict=True):
            k = stats["by_kind"].setdefault(q["kind"], {"asked": 0, "dropped": 0})
            k["asked"] += 1
            if v.keep:
                kept[r["id"]].append(q)
            else:
                k["dropped"] += 1
        out_rows = [{**r, "questions": kept[r["id"]]} for r in rows if kept[r["id"]]]
        write_jsonl(data / f"{split}.jsonl", out_rows)
        stats[split] = {"questions": len(flat), "kept": sum(len(v) for v in kept.values()),
                        "scenes": len(rows), "scenes_kept": len(out_rows)}
    stats["dropped_rate"] = 1 - (stats["train"]["kept"] + stats["eval"]["kept"]) / max(
        1, stats["train"]["questions"] + stats["eval"]["questions"])
    atomic_write_json(data / "curation.json", stats)
    return stats


def _mcq(q: dict[str, Any]) -> dict[str, Any]:
    """The record shape every CapRL stage reads (question, options, answer)."""
    return {"question": q["question"], "options": q["options"], "answer": q["answer"]}


# -- evaluation --------------------------------------------------------------------------------


def caption_scenes(model_dir: str | Path, out: Path, rows: list[dict[str, Any]], cfg: DemoConfig) -> dict[str, list[str]]:
    """Greedy and sampled captions (one each) of the held-out scenes, through the hf backend."""
    from vlrl.captioning.captioner import caption_images
    from vlrl.core.backends import SamplingParams, load_backend

    backend = load_backend(hf_spec(model_dir, 64))
    try:
        caps = {}
        for name, sp in (("greedy", SamplingParams(max_tokens=cfg.max_completion_length, temperature=0.0)),
                         ("sampled", SamplingParams(max_tokens=cfg.max_completion_length, temperature=cfg.temperature,
                                                    top_k=0, seed=cfg.seed))):
            outcomes = caption_images(backend, [str(out / "data" / r["image"]) for r in rows], W.CAPTION_PROMPT, sp,
                                      ids=[r["id"] for r in rows], min_words=None)
            caps[name] = [oc.caption.strip() if oc.caption is not None else "" for oc in outcomes]
        return caps
    finally:
        backend.close()


def judge(backend, captions: list[str], rows: list[dict[str, Any]], prompt: str) -> dict[str, Any]:
    """Every curated question of each scene in both option orders, argmax letter of ``backend``.

    This is the project's caption-QA evaluation (:func:`vlrl.methods.caprl.evaluate.caption_qa_eval`);
    the demo only names its answer prompt and keeps its report's key for per-scene accuracy.
    """
    from vlrl.methods.caprl.evaluate import caption_qa_eval

    res = caption_qa_eval(backend, captions, [[_mcq(q) for q in r["questions"]] for r in rows], prompt=prompt)
    out = res.to_dict()
    out["per_scene"] = out.pop("per_caption")
    return out


def caption_stats(captions: list[str], rows: list[dict[str, Any]], seed: int = 0) -> dict[str, Any]:
    """Parser-based statistics for the report (facts stated, and how many of them are right), with
    bootstrap intervals over scenes for the shares of facts stated and of stated facts that are false."""
    from vlrl.demos.shapes.kit.judging import interval

    per = []  # [stated, correct, total facts] per scene
    parsed = 0
    for cap, r in zip(captions, rows, strict=True):
        sc = W.Scene.from_dict(r["scene"])
        c = [0, 0, sum(3 if not it.is_word else 1 for it in sc.items)]
        per.append(c)
        items = W.parse_caption(cap)
        if items is None:
            continue
        parsed += 1
        truth = {it.position: it for it in sc.items}
        for it in items:
            for a in ("colour", "shape", "size", "word"):
                v = getattr(it, a)
                if v:
                    c[0] += 1
                    c[1] += it.position in truth and getattr(truth[it.position], a) == v
    stated, correct, total = (sum(c[i] for c in per) for i in range(3))
    return {
        "parse_rate": parsed / max(1, len(rows)),
        "facts_stated": stated / max(1, total),
        "facts_stated_ci": interval([c[0] for c in per], [c[2] for c in per], seed),
        "stated_correct": correct / max(1, stated),
        "false_fact_rate": 1 - correct / max(1, stated),
        "false_fact_rate_ci": interval([c[0] - c[1] for c in per], [c[0] for c in per], seed),
        "words": sum(len(c.split()) for c in captions) / max(1, len(captions)),
    }


def evaluate(model_dir: str | Path, out: Path, cfg: DemoConfig, judge_dir: Path, answerer_dir: Path) -> dict[str, Any]:
    """Held-out captions of ``model_dir`` judged three ways: ``reader_*`` (the rule-based reader, the
    headline: :mod:`vlrl.demos.shapes.kit.judging`), ``twin_judge_*`` (an answerer trained like the
    reward answerer with another seed: the reward's twin, not an independent judge) and
    ``reward_answerer_*`` (the reward's own reader); each rate with its interval over scenes."""
    from vlrl.core.backends import load_backend
    from vlrl.demos.shapes.kit.judging import check_reader, rate_intervals, reader_eval

    rows = list(read_jsonl(out / "data" / "eval.jsonl"))
    caps = caption_scenes(model_dir, out, rows, cfg)
    result: dict[str, Any] = {"captions": caps, "ids": [r["id"] for r in rows], "reader_check": check_reader(rows)}
    prompt = cfg.warm.answer_prompt
    for kind, c in caps.items():
        result[f"reader_{kind}"] = reader_eval(c, rows)
    for who, path in (("twin_judge", judge_dir), ("reward_answerer", answerer_dir)):
        if path is None:  # no twin judge in this run
            continue
        backend = load_backend(hf_spec(path, 256))
        try:
            for kind, c in caps.items():
                result[f"{who}_{kind}"] = judge(backend, c, rows, prompt)
        finally:
            backend.close()
    for who in JUDGES:
        for kind in caps:
            if f"{who}_{kind}" in result:
                result[f"{who}_{kind}"].update(rate_intervals(result[f"{who}_{kind}"], cfg.seed))
    for kind, c in caps.items():
        result[f"stats_{kind}"] = caption_stats(c, rows, cfg.seed)
    return result


JUDGES = ("reader", "twin_judge", "reward_answerer")
"""The evaluation's judges, headline first (see :func:`evaluate`)."""


# -- GRPO --------------------------------------------------------------------------------------


def write_recipe(out: Path, cfg: DemoConfig, captioner: Path, answerer: Path, rewards: list[dict[str, Any]] | None = None,
                 source: Path | None = None) -> Path:
    """The GRPO recipe of the demo: the same file format and trainer as any GPU run.

    ``rewards`` and ``source`` replace the CapRL reward blocks and training rows (the other demos
    train the same warm start, world and GRPO settings against their own reward)."""
    return save_recipe(recipe_dict(out, cfg, captioner, answerer, rewards, source), out / "recipe.yaml")


def recipe_dict(out: Path, cfg: DemoConfig, captioner: Path, answerer: Path, rewards: list[dict[str, Any]] | None = None,
                source: Path | None = None) -> dict[str, Any]:
    """The demo's GRPO recipe as a dict (``vlrl demo --compare`` reads its reward blocks)."""
    return {
        "method": "grpo",
        "model": {"path": str(captioner), "dtype": "float32"},
        "data": {"source": str(source or out / "data" / "train.jsonl"), "prompt": W.CAPTION_PROMPT},
        "rewards": rewards or [{
            "name": "caprl_qa",
            "settings": {
                "answerer": hf_spec(answerer, 256),
                "mode": "exact",
                "questions_per_caption": cfg.questions_per_caption,
                "rounds": cfg.rounds,
                "prompt": cfg.warm.answer_prompt,
                "seed": cfg.seed,
                # the answerer's own distribution (T=1), no letter-mass floor (its letters carry
                # ~0.99 of the mass anyway), and fresh question draws every step: with draws frozen
                # per image the policy is rewarded for the same few facts of each training image
                # and evaluation accuracy (scenes then drawn apart by seed only) gained only ~+0.14
                # (seed 0, --quick) instead of ~+0.56
                "temperature": 1.0,
                "draws": "per_step",
                "min_letter_mass": 0.0,
            },
            # Veto loops and run-ons: the longest honest caption of this world has 8 words per item.
            "guards": {"policy": "veto", "min_words": 3, "max_words": 8 * max_items(cfg.warm.world),
                       "repetition": {"max_consecutive": 2}},
        }, grammar_reward_block()],
        "trainer": grpo_trainer(out / "grpo", cfg.seed, cfg.learning_rate, cfg.temperature, max_steps=cfg.grpo_steps,
                                per_device_train_batch_size=cfg.images_per_step * cfg.num_generations,
                                num_generations=cfg.num_generations, max_completion_length=cfg.max_completion_length),
        "callbacks": [CALLBACK],
    }


def judge_seed(cfg: DemoConfig) -> int | None:
    """The twin judge answerer's seed, or None when the config leaves it out."""
    return cfg.seed + cfg.judge_seed_offset if getattr(cfg, "twin_judge", True) else None


def max_items(world: W.WorldConfig) -> int:
    return min(3, world.max_shapes + (world.word_prob > 0))


# -- the whole demo ----------------------------------------------------------------------------


def run_demo(out: str | Path = "runs/demo", seed: int = 0, quick: bool = False, force: bool = False,
             cache_dir: str | Path | None = None, config: DemoConfig | None = None) -> dict[str, Any]:
    """Run (or resume, or reuse) the demo in ``out``; returns the metrics.

    ``config`` replaces the settings chosen by ``seed``/``quick`` (tests shrink every stage with it).
    """
    cfg = config or DemoConfig.make(seed=seed, quick=quick)
    run = open_run(out, cfg, force, cache_dir)
    if run.reused is not None:
        return run.reused
    out, stages, seed = run.out, run.stages, cfg.seed
    ws = stages.timed("warm_start", lambda: build_all(cfg.warm, seed, judge_seed(cfg), run.cache,
                                                      full_caption=cfg.full_caption_baseline))
    answerer_spec = hf_spec(ws.answerer, 256)

    stages.run("data", lambda: make_data(out, cfg))
    stages.run("curate", lambda: logger.info("QA curation: text-only filter dropped %.1f%% of questions",
                                             100 * curate(out, cfg, answerer_spec)["dropped_rate"]))
    stages.run("eval_before", lambda: atomic_write_json(out / "eval" / "before.json",
                                                        evaluate(ws.captioner, out, cfg, ws.judge, ws.answerer)))
    if ws.full_captioner is not None:
        stages.run("eval_full_sft", lambda: atomic_write_json(
            out / "eval" / "full_sft.json", evaluate(ws.full_captioner, out, cfg, ws.judge, ws.answerer)))
    stages.run("grpo", lambda: run_recipe(write_recipe(out, cfg, ws.captioner, ws.answerer)))
    stages.run("eval_after", lambda: atomic_write_json(out / "eval" / "after.json",
                                                       evaluate(out / "grpo", out, cfg, ws.judge, ws.answerer)))

    from vlrl.demos.shapes.kit.report import write_report

    before = json.loads((out / "eval" / "before.json").read_text())
    after = json.loads((out / "eval" / "after.json").read_text())
    history = read_history(out / "grpo")
    curation = json.loads((out / "data" / "curation.json").read_text())
    full_sft = load_full_sft(out)
    metrics = build_metrics(cfg, before, after, history, curation, stages.times, full_sft=full_sft)
    write_report(out, cfg, metrics, before, after, history, full_sft=full_sft)
    atomic_write_json(out / "metrics.json", metrics)
    return metrics


def load_full_sft(out: Path) -> dict[str, Any] | None:
    """The full-caption captioner's evaluation, if this run made one."""
    p = Path(out) / "eval" / "full_sft.json"
    return json.loads(p.read_text()) if p.exists() else None


def build_metrics(cfg: DemoConfig, before: dict, after: dict, history: list[dict], curation: dict,
                  times: dict[str, float], window: int = 5, full_sft: dict | None = None) -> dict[str, Any]:
    """The run's numbers. Headline: the rule-based reader's accuracy on greedy captions of the
    held-out scenes (``acc_*``, with 95% intervals over scenes ``*_ci``); the twin judge and the
    reward answerer give the same rates under their own names."""
    from vlrl.demos.shapes.kit.judging import gain_interval, kind_accuracy

    # The QA reward alone (the total adds the format reward, 0 for well-formed captions).
    rewards = [h.get("rewards/caprl_qa/mean", h["reward"]) for h in history]
    rb, ra = before["reader_greedy"], after["reader_greedy"]
    m: dict[str, Any] = {
        "seed": cfg.seed,
        "quick": cfg.quick,
        "judge": "reader",
        "acc_before": round(rb["acc"], 4),
        "acc_before_ci": rb.get("acc_ci"),
        "acc_after": round(ra["acc"], 4),
        "acc_after_ci": ra.get("acc_ci"),
        "reward_first": window_mean(rewards, window, last=False),
        "reward_last": window_mean(rewards, window, last=True),
        "reward_window_steps": window,
        "grpo_steps": len(history) and max(h["step"] for h in history),
    }
    m["gain"] = round(m["acc_after"] - m["acc_before"], 4)
    m["gain_ci"] = gain_interval(rb, ra, cfg.seed)
    m["acc_by_kind_before"] = kind_accuracy(rb)
    m["acc_by_kind_after"] = kind_accuracy(ra)
    m["reader_check"] = after.get("reader_check")
    if full_sft is not None:
        rf = full_sft["reader_greedy"]
        m["acc_full_sft"] = round(rf["acc"], 4)
        m["acc_full_sft_ci"] = rf.get("acc_ci")
        m["gain_over_full_sft"] = round(ra["acc"] - rf["acc"], 4)
        m["gain_over_full_sft_ci"] = gain_interval(rf, ra, cfg.seed)
        m["acc_by_kind_full_sft"] = kind_accuracy(rf)
    evals = [("before", before), ("after", after)] + ([("full_sft", full_sft)] if full_sft is not None else [])
    for who in JUDGES:
        for kind in ("greedy", "sampled"):
            for when, ev in evals:
                if f"{who}_{kind}" not in ev:  # no twin judge in this run
                    continue
                r = ev[f"{who}_{kind}"]
                for rate, short in (("acc", "acc"), ("hallucination_rate", "hallucination"),
                                    ("cannot_answer_rate", "cannot_answer")):
                    m[f"{who}_{kind}_{short}_{when}"] = round(r[rate], 4)
                    m[f"{who}_{kind}_{short}_{when}_ci"] = r.get(f"{rate}_ci")
    for kind in ("greedy", "sampled"):
        for when, ev in evals:
            for k, v in ev[f"stats_{kind}"].items():
                m[f"captions_{kind}_{k}_{when}"] = round(v, 4) if isinstance(v, float) else v
    zero = [h.get("frac_reward_zero_std") for h in history if h.get("frac_reward_zero_std") is not None]
    m["frac_reward_zero_std_mean"] = round(sum(zero) / len(zero), 4) if zero else None
    m["curation"] = {k: curation[k] for k in ("train", "eval", "dropped_rate", "by_kind")}
    m["stage_seconds"] = times
    m.update(timing(times))
    return m
