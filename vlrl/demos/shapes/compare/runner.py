"""``vlrl demo --compare``: the caption papers' reward comparison, in the shapes world.

One world, one warm-start captioner, one GRPO budget and seed; only the main reward changes from row
to row, and one judge grades every row's captions of the evaluation scenes (layouts held out of every
model's training): the rule-based reader of the world's grammar, which learned nothing
(:mod:`vlrl.demos.shapes.kit.judging`); the CapRL demo's twin judge answerer (the reward answerer's
twin: same data, seed ``seed + 1000``, never a reward) is reported beside it:

* ``no_rl`` — the warm start itself;
* ``caprl_qa_exact`` / ``caprl_qa_sample`` — CapRL's QA reward with the demo's reward answerer,
  reading the gold letter's probability (exact) or sampling the answer (sample, the public code's way);
* ``rubicap_rubric`` — RubiCap's rubric judge on per-image rubrics (the pieces of
  ``vlrl demo --method rubicap``: :mod:`vlrl.demos.shapes.rubicap.runner`);
* ``likert_judge`` — a holistic judge that scores the caption 1–10 (:mod:`vlrl.demos.shapes.tiny_models.likert`);
* ``rouge_l`` — ROUGE-L F against the scene's full caption (the world's reference caption).

Every row keeps the CapRL demo's guards (length veto, repetition) and its grammar format reward, so
the main reward is the only thing that differs. Per row: the reader's held-out accuracy,
hallucination rate (the caption settles a question on the wrong option), false-fact rate, each
with its 95% interval over scenes, mean caption length in words, and the row's reward over GRPO steps. :mod:`vlrl.demos.shapes.compare.report` writes ``report.html``
and says which of the papers' claims the numbers reproduce.

Stages leave markers under ``DIR/state`` (``grpo_<row>``, ``eval_<row>``), so a killed run resumes
at the row it was in (TRL checkpoints resume inside a row).
"""

from __future__ import annotations

import copy
import json
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from vlrl.core.pipeline import atomic_write_json, read_jsonl
from vlrl.demos.shapes.caprl.runner import DemoConfig, curate, evaluate, judge_seed, make_data, recipe_dict
from vlrl.demos.shapes.kit.base import DemoError, DemoSettings, hf_spec, open_run, timing
from vlrl.demos.shapes.kit.history import read_history, window_mean
from vlrl.demos.shapes.kit.recipes import run_recipe, save_recipe
from vlrl.demos.shapes.tiny_models.likert import JUDGE_MAX_TOKENS, LikertConfig, build_likert_judge
from vlrl.demos.shapes.tiny_models.likert import PROMPT as LIKERT_PROMPT
from vlrl.demos.shapes.tiny_models.warmstart import build_all

logger = logging.getLogger(__name__)

ROWS = ("no_rl", "caprl_qa_exact", "caprl_qa_sample", "rubicap_rubric", "likert_judge", "rouge_l")
"""Row names; each trained row's main reward is the registered reward of the same name (or its mode)."""
TRAIN_ORDER = ("no_rl", "caprl_qa_exact", "caprl_qa_sample", "rouge_l", "rubicap_rubric", "likert_judge")
"""Rows whose reward needs a model of its own train last (their judges' warm starts are built on first use)."""


@dataclass(frozen=True)
class CompareConfig(DemoSettings):
    seed: int = 0
    quick: bool = False
    demo: DemoConfig = field(default_factory=DemoConfig)
    likert: LikertConfig = field(default_factory=LikertConfig)
    rows: tuple[str, ...] = ROWS
    sample_max_tokens: int = 3
    """caprl_qa sample mode: the answerer writes a letter after the pre-fill; 3 tokens hold it."""

    @classmethod
    def make(cls, seed: int = 0, quick: bool = False) -> CompareConfig:
        demo = DemoConfig(seed=seed, quick=quick, grpo_steps=40, eval_scenes=60) if quick else DemoConfig(seed=seed)
        return cls(seed=seed, quick=quick, demo=demo)

    def identity(self) -> list[Any]:
        return ["compare", super().identity()]


class RowUnavailable(RuntimeError):
    """A row cannot be trained here (the message is the reason the report shows)."""


# -- reward blocks -----------------------------------------------------------------------------


def row_rewards(row: str, out: Path, cfg: CompareConfig, ws, base: dict[str, Any], cache_dir: Path) -> dict[str, Any]:
    """The recipe's main reward block for ``row`` (and a data source when the row needs its own)."""
    qa = copy.deepcopy(base["rewards"][0])
    guards = qa["guards"]
    if row == "caprl_qa_exact":
        return {"reward": qa}
    if row == "caprl_qa_sample":
        qa["settings"].update({"mode": "sample", "max_tokens": cfg.sample_max_tokens})
        return {"reward": qa}
    if row == "rouge_l":
        return {"reward": {"name": "rouge_l", "settings": {"reference_column": "caption_full", "measure": "f"},
                           "guards": guards}}
    if row == "likert_judge":
        judge = build_likert_judge(cfg.seed, cache_dir, cfg.likert, cfg.demo.warm)
        return {"reward": {"name": "likert_judge", "guards": guards, "settings": {
            "judge": hf_spec(judge, 64), "prompt": LIKERT_PROMPT,
            "max_tokens": JUDGE_MAX_TOKENS, "temperature": 0.0, "max_retries": 1}}}
    if row == "rubicap_rubric":
        rub = rubicap_pieces()
        judge = rub.build_rubric_judge(cfg.seed, cache_dir)
        # rubrics for the same curated training scenes (images the writer found solved drop out)
        source = rub.prepare_rubric_data(out, cfg.demo, ws)
        block = copy.deepcopy(rub.rubicap_reward_block(judge, cfg.demo))
        block.setdefault("guards", guards)
        return {"reward": block, "source": str(source)}
    raise ValueError(f"unknown comparison row {row!r}; rows: {', '.join(ROWS)}")


def rubicap_pieces():
    """The RubiCap demo's builders, or :class:`RowUnavailable` saying what is missing."""
    import importlib

    try:
        mod = importlib.import_module("vlrl.demos.shapes.rubicap.runner")
    except ImportError as e:
        raise RowUnavailable(f"not available: the RubiCap demo (vlrl.demos.shapes.rubicap.runner) is not installed ({e})") from None
    missing = [n for n in ("build_rubric_judge", "prepare_rubric_data", "rubicap_reward_block") if not hasattr(mod, n)]
    if missing:
        raise RowUnavailable(f"not available: vlrl.demos.shapes.rubicap.runner lacks {', '.join(missing)}")
    return mod


def write_row_recipe(row: str, out: Path, cfg: CompareConfig, ws, cache_dir: Path) -> Path:
    base = recipe_dict(out, cfg.demo, ws.captioner, ws.answerer)
    spec = row_rewards(row, out, cfg, ws, base, cache_dir)
    recipe = copy.deepcopy(base)
    recipe["rewards"] = [spec["reward"], base["rewards"][1]]  # the row's reward + the grammar format reward
    if "source" in spec:
        recipe["data"]["source"] = spec["source"]
    row_dir = out / "rows" / row
    recipe["trainer"]["output_dir"] = str(row_dir / "grpo")
    row_dir.mkdir(parents=True, exist_ok=True)
    return save_recipe(recipe, row_dir / "recipe.yaml")


# -- the run -----------------------------------------------------------------------------------


def run_compare(out: str | Path = "runs/demo-compare", seed: int = 0, quick: bool = False, force: bool = False,
                cache_dir: str | Path | None = None, config: CompareConfig | None = None) -> dict[str, Any]:
    """Run (or resume, or reuse) the comparison in ``out``; returns the metrics.

    ``config`` replaces the settings chosen by ``seed``/``quick`` (tests shrink every stage with it).
    """
    cfg = config or CompareConfig.make(seed=seed, quick=quick)
    run = open_run(out, cfg, force, cache_dir)
    if run.reused is not None:
        return run.reused
    out, stages, cache, dcfg = run.out, run.stages, run.cache, cfg.demo
    ws = stages.timed("warm_start", lambda: build_all(dcfg.warm, cfg.seed, judge_seed(dcfg), cache))
    answerer_spec = hf_spec(ws.answerer, 256)

    stages.run("data", lambda: make_data(out, dcfg))
    stages.run("curate", lambda: curate(out, dcfg, answerer_spec))
    stages.run("eval_no_rl", lambda: atomic_write_json(out / "eval" / "no_rl.json",
                                                       evaluate(ws.captioner, out, dcfg, ws.judge, ws.answerer)))

    # Why a row could not run, asked afresh by every invocation (never cached: a resumed run
    # picks up a row whose pieces have arrived since).
    status: dict[str, str] = {}
    for row in sorted(cfg.rows, key=TRAIN_ORDER.index):
        if row == "no_rl" or stages.done(f"eval_{row}"):
            continue
        t = time.time()
        try:
            if not stages.done(f"grpo_{row}"):
                recipe = write_row_recipe(row, out, cfg, ws, cache)
                logger.info("compare: training the %s row (%d GRPO steps)", row, dcfg.grpo_steps)
                run_recipe(recipe)
                stages.finish(f"grpo_{row}", time.time() - t)
                t = time.time()
            atomic_write_json(out / "eval" / f"{row}.json",
                              evaluate(out / "rows" / row / "grpo", out, dcfg, ws.judge, ws.answerer))
            stages.finish(f"eval_{row}", time.time() - t)
        except (RowUnavailable, DemoError) as e:  # this row cannot run here; the others still can
            logger.warning("compare: %s row skipped: %s", row, e)
            status[row] = str(e) if isinstance(e, RowUnavailable) else f"failed: {e}"
            stages.add_time(f"grpo_{row}", time.time() - t)

    metrics = build_compare_metrics(out, cfg, status, stages.times)
    from vlrl.demos.shapes.compare.report import write_compare_report

    write_compare_report(out, cfg, metrics)
    atomic_write_json(out / "metrics.json", metrics)
    return metrics


# -- metrics -----------------------------------------------------------------------------------


def main_reward_key(history: list[dict[str, Any]]) -> str | None:
    """The history key of the row's own reward (TRL logs ``rewards/<name>/mean`` per function)."""
    for h in history:
        for k in h:
            if k.startswith("rewards/") and k.endswith("/mean") and "shapes_grammar" not in k:
                return k
    return None


def row_metrics(row: str, ev: dict[str, Any], history: list[dict[str, Any]], window: int = 5,
                base: dict[str, Any] | None = None) -> dict[str, Any]:
    """One table row: the rule-based reader's view of the row's greedy (and sampled) held-out
    captions, each rate with its 95% interval over scenes, and the gain over ``base`` (the warm
    start's evaluation) with its paired interval; the twin judge's accuracy beside it."""
    from vlrl.demos.shapes.kit.judging import gain_interval, kind_accuracy

    g, s = ev["reader_greedy"], ev["reader_sampled"]
    stats = ev["stats_greedy"]
    key = main_reward_key(history)
    rewards = [h[key] for h in history if key and h.get(key) is not None]
    return {
        "reward": row,
        "status": "ok",
        "acc_after": round(g["acc"], 4),
        "acc_after_ci": g.get("acc_ci"),
        "gain": None if base is None else round(g["acc"] - base["reader_greedy"]["acc"], 4),
        "gain_ci": None if base is None else gain_interval(base["reader_greedy"], g),
        "hallucination_rate": round(g["hallucination_rate"], 4),
        "hallucination_rate_ci": g.get("hallucination_rate_ci"),
        "cannot_answer_rate": round(g["cannot_answer_rate"], 4),
        "cannot_answer_rate_ci": g.get("cannot_answer_rate_ci"),
        "mean_words": round(stats["words"], 2),
        "false_fact_rate": round(1 - stats["stated_correct"], 4),
        "false_fact_rate_ci": stats.get("false_fact_rate_ci"),
        "facts_stated": round(stats["facts_stated"], 4),
        "facts_stated_ci": stats.get("facts_stated_ci"),
        "parse_rate": round(stats["parse_rate"], 4),
        "acc_by_kind": kind_accuracy(g),
        "sampled_acc_after": round(s["acc"], 4),
        "sampled_acc_after_ci": s.get("acc_ci"),
        "sampled_hallucination_rate": round(s["hallucination_rate"], 4),
        "sampled_mean_words": round(ev["stats_sampled"]["words"], 2),
        "twin_judge_acc_after": round(ev["twin_judge_greedy"]["acc"], 4) if "twin_judge_greedy" in ev else None,
        "twin_judge_acc_after_ci": (ev.get("twin_judge_greedy") or {}).get("acc_ci"),
        "reward_answerer_acc_after": round(ev["reward_answerer_greedy"]["acc"], 4),
        "reward_key": key,
        "reward_first": window_mean(rewards, window, last=False),
        "reward_last": window_mean(rewards, window, last=True),
        "reward_curve": [round(r, 4) for r in rewards],
        "grpo_steps": max((h["step"] for h in history), default=0),
    }


def build_compare_metrics(out: Path, cfg: CompareConfig, status: dict[str, str], times: dict[str, float]) -> dict[str, Any]:
    before = json.loads((out / "eval" / "no_rl.json").read_text())
    rows = []
    for row in cfg.rows:
        if row in status:
            rows.append({"reward": row, "status": status[row], "acc_after": None, "hallucination_rate": None,
                         "mean_words": None, "reward_first": None, "reward_last": None, "reward_curve": []})
            continue
        ev = before if row == "no_rl" else json.loads((out / "eval" / f"{row}.json").read_text())
        history = [] if row == "no_rl" else read_history(out / "rows" / row / "grpo")
        rows.append(row_metrics(row, ev, history, base=before))
    # Curves sit beside the table so the rows stay one line each (``vlrl demo`` prints them).
    curves = {r["reward"]: r.pop("reward_curve") for r in rows}
    trained = [r for r in rows if r["reward"] != "no_rl" and r["acc_after"] is not None]
    best = max(trained, key=lambda r: r["acc_after"], default=None)
    likert_info = {}
    judge_meta = [p for p in out.glob("rows/likert_judge/recipe.yaml")]
    if judge_meta:
        spec = yaml.safe_load(judge_meta[0].read_text())["rewards"][0]["settings"]["judge"]
        meta = Path(spec.split(":", 1)[1].split("?", 1)[0]) / "warmstart.json"
        if meta.exists():
            likert_info = {k: v for k, v in json.loads(meta.read_text()).items() if k.startswith("heldout") or k in (
                "trained_on", "init", "seconds")}
    curation = json.loads((out / "data" / "curation.json").read_text())
    return {
        "method": "compare",
        "seed": cfg.seed,
        "quick": cfg.quick,
        "judge": "reader",
        "acc_before": round(before["reader_greedy"]["acc"], 4),
        "acc_before_ci": before["reader_greedy"].get("acc_ci"),
        "rows": rows,
        "reward_curves": curves,
        "best_reward": best["reward"] if best else None,
        "grpo_steps": cfg.demo.grpo_steps,
        "eval_scenes": len(before["ids"]),
        "eval_questions": sum(len(r["questions"]) for r in read_jsonl(out / "data" / "eval.jsonl")),
        "likert_judge": likert_info,
        "curation": {k: curation[k] for k in ("train", "eval", "dropped_rate")},
        "stage_seconds": times,
        # Wall time of the work, summed over resumed invocations (cached warm starts cost ~0 s),
        # split into the warm start and the run.
        **timing(times),
    }
