"""``vlrl demo --method rubicap``: the RubiCap loop in the shapes world, judged like the CapRL demo.

Stages (each leaves a marker under ``DIR/state``; an interrupted run resumes where it stopped):

1. **warm start** — the CapRL demo's captioner, full-caption baseline captioner, reward answerer
   (used only by the text-only QA filter) and twin judge answerer
   (:func:`vlrl.demos.shapes.tiny_models.warmstart.build_all`), plus the tiny rubric judge
   (:mod:`vlrl.demos.shapes.tiny_models.rubric_judge`); all cached, all trained on the world's
   training layouts;
2. **data** and **curation** — the CapRL demo's scenes and curated questions
   (:func:`vlrl.demos.shapes.caprl.runner.make_data`, :func:`~vlrl.demos.shapes.caprl.runner.curate`), so the
   held-out QA evaluation is the same as CapRL's;
3. **rubrics** — a committee of three rule-based teachers with distinct error profiles (terse:
   omissions; careless: wrong attributes; dreamer: invented shapes) captions every image through
   the real teacher-captions code (:func:`vlrl.methods.rubicap.teachers.run_teacher_committee`);
   the warm-start captioner writes the student captions and the rule-based writer writes rubrics,
   both through the real synthesis code (:func:`vlrl.methods.rubicap.synthesis.build_rubrics`,
   schema and strictness checks included). Training images get a ``rubrics`` column; held-out
   images get rubrics too, only to measure the rubric judge;
4. **evaluation before RL** — the CapRL demo's evaluation (greedy and sampled captions, every
   curated question, the rule-based reader as the headline and the twin judge beside it, with
   intervals), plus the rubric judge's verdict accuracy against the world oracle on the held-out
   images' rubrics (plotted before and after RL in the report);
5. **GRPO** — ``DIR/recipe.yaml`` run by :func:`vlrl.training.grpo.run_grpo` (``vlrl train grpo``)
   with the ``rubicap_rubric`` reward (``per_rubric``, the tiny judge through ``hf:``, greedy)
   behind the same guards as the CapRL demo, plus the demo's grammar format reward;
6. **evaluation after RL**, ``metrics.json`` and ``report.html``.

No QA judge is a reward here: the reward is the rubric judge, a different model trained on
different data (:mod:`vlrl.demos.shapes.tiny_models.rubric_judge` says what), and the headline QA
judge is the rule-based reader, which learned nothing.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vlrl.core.pipeline import atomic_write_json, read_jsonl, write_jsonl
from vlrl.demos.shapes.caprl import runner as caprl
from vlrl.demos.shapes.kit import world as W
from vlrl.demos.shapes.kit.base import DemoError, hf_spec, open_run
from vlrl.demos.shapes.kit.cache import job_process_setup
from vlrl.demos.shapes.kit.history import read_history, window_mean
from vlrl.demos.shapes.kit.recipes import run_recipe
from vlrl.demos.shapes.kit.rewards import grammar_reward_block
from vlrl.demos.shapes.standins.committee import COMMITTEE
from vlrl.demos.shapes.tiny_models.rubric_judge import JudgeConfig, build_rubric_judge, oracle_verdict
from vlrl.demos.shapes.tiny_models.warmstart import WarmStart, build_all

logger = logging.getLogger(__name__)

STAND_INS = "py:vlrl.demos.shapes.standins.committee"
RUBRIC_FIELDS = ("id", "criterion", "pass_rule", "severity", "weight", "kind")


@dataclass(frozen=True)
class RubicapConfig(caprl.DemoConfig):
    """The CapRL demo's settings (world, warm start, GRPO shape, evaluation) plus RubiCap's parts."""

    method: str = "rubicap"
    teachers: tuple[tuple[str, str, float], ...] = COMMITTEE
    judge: JudgeConfig = field(default_factory=JudgeConfig)

    @classmethod
    def make(cls, seed: int = 0, quick: bool = False) -> RubicapConfig:
        # Fewer steps than CapRL's demo: each step asks the judge ~5 rubrics x 32 captions (about
        # 170 prompts of ~230 tokens), and the rubric reward rises within ~20 steps anyway.
        if quick:
            return cls(seed=seed, quick=True, grpo_steps=30, eval_scenes=60)
        return cls(seed=seed, grpo_steps=100, eval_scenes=100)


def teacher_specs(cfg) -> list[str]:
    """``NAME=py:...`` specs of the committee (a plain CapRL ``DemoConfig`` gets the default one)."""
    return [f"{name}={STAND_INS}:teacher?profile={profile}&rate={rate}&name={name}"
            for name, profile, rate in getattr(cfg, "teachers", COMMITTEE)]


def judge_spec(judge_dir: Path) -> str:
    return hf_spec(judge_dir, 256)


def rubicap_reward_block(judge_dir: Path, cfg) -> dict[str, Any]:
    """The recipe's ``rewards[]`` entry: ``rubicap_rubric`` judged per rubric by the tiny judge.

    Greedy, one word per verdict (``max_tokens`` 4 bounds a judge that forgot to stop), no
    corrective retries (a tiny judge cannot read a correction; a failed verdict drops the sample's
    rubric score), and the CapRL demo's guards against loops and run-ons.
    """
    return {
        "name": "rubicap_rubric",
        "settings": {"judge": judge_spec(judge_dir), "per_rubric": True, "temperature": 0.0, "max_tokens": 4,
                     "max_retries": 0, "on_judge_failure": "drop", "seed": cfg.seed},
        "guards": {"policy": "veto", "min_words": 3, "max_words": 8 * caprl.max_items(cfg.warm.world),
                   "repetition": {"max_consecutive": 2}},
    }


def _build_judge_job(seed: int, cache_dir: str, cfg: JudgeConfig) -> str:
    job_process_setup()
    return str(build_rubric_judge(seed, Path(cache_dir), cfg))


def warm_start(cfg: RubicapConfig, cache: Path) -> tuple[WarmStart, Path]:
    """The CapRL warm starts and the rubric judge, the judge trained in its own process meanwhile."""
    from concurrent.futures import ProcessPoolExecutor
    from multiprocessing import get_context

    from vlrl.demos.shapes.tiny_models.rubric_judge import judge_dir

    final = judge_dir(cfg.seed, cache, cfg.judge)
    full = getattr(cfg, "full_caption_baseline", False)
    if (final / "warmstart.json").exists():
        return build_all(cfg.warm, cfg.seed, caprl.judge_seed(cfg), cache, full_caption=full), final
    with ProcessPoolExecutor(max_workers=1, mp_context=get_context("spawn")) as ex:
        fut = ex.submit(_build_judge_job, cfg.seed, str(cache), cfg.judge)
        ws = build_all(cfg.warm, cfg.seed, caprl.judge_seed(cfg), cache, full_caption=full)
        return ws, Path(fut.result())


# -- rubrics -----------------------------------------------------------------------------------


def _rubrics_for(out: Path, cfg, ws: WarmStart, split: str) -> dict[str, list[dict[str, Any]]]:
    """Teacher committee, student captions and the writer over one split; ``{scene id: rubrics}``."""
    from vlrl.core.sources import ImageItem
    from vlrl.methods.rubicap.synthesis import build_rubrics
    from vlrl.methods.rubicap.teachers import run_teacher_committee

    rows = list(read_jsonl(out / "data" / f"{split}.jsonl"))
    work = out / "rubrics" / split
    work.mkdir(parents=True, exist_ok=True)
    items = [ImageItem.from_path(r["id"], str((out / "data" / r["image"]).resolve())) for r in rows]
    run_teacher_committee(items, teacher_specs(cfg), work / "teachers", min_words=3)
    # the student is the warm-start captioner, asked exactly as at GRPO time and in evaluation
    prompt = work / "student_prompt.jinja"
    prompt.write_text(W.CAPTION_PROMPT + "\n")
    build_rubrics(work / "teachers", f"hf:{ws.captioner}?device=cpu&dtype=float32&batch_size=64",
                  f"{STAND_INS}:writer", work / "synthesis", student_prompt_file=prompt, with_image=False,
                  student_max_tokens=cfg.max_completion_length, max_retries=0, seed=cfg.seed)
    return {r["image_id"]: [{k: rub.get(k) for k in RUBRIC_FIELDS} for rub in r["rubrics"]]
            for r in read_jsonl(work / "synthesis" / "rubrics.jsonl")}


def prepare_rubric_data(out: Path, cfg, ws: WarmStart) -> Path:
    """Write ``DIR/data/rubicap_train.jsonl`` (the curated GRPO rows that got rubrics, with a
    ``rubrics`` column) from a demo folder where the CapRL-style data stage has run; return it."""
    out = Path(out)
    rubrics = _rubrics_for(out, cfg, ws, "train")
    rows = [{**r, "rubrics": rubrics[r["id"]]} for r in read_jsonl(out / "data" / "train.jsonl") if r["id"] in rubrics]
    if not rows:
        raise DemoError("rubric synthesis gave no training image a rubric set; see DIR/rubrics/train/synthesis")
    path = out / "data" / "rubicap_train.jsonl"
    write_jsonl(path, rows)
    stats = json.loads((out / "rubrics" / "train" / "synthesis" / "stats.json").read_text())
    atomic_write_json(out / "data" / "rubicap_train_stats.json",
                      {"rows": len(rows), **{k: stats.get(k) for k in ("images", "accepted", "solved", "rejected",
                                                                       "rubrics", "rubrics_by_severity",
                                                                       "mean_rubrics_per_image")}})
    return path


def prepare_eval_rubrics(out: Path, cfg, ws: WarmStart) -> Path:
    """Rubrics of the held-out images (only to measure the rubric judge, never trained on)."""
    rubrics = _rubrics_for(out, cfg, ws, "eval")
    path = out / "data" / "rubicap_eval_rubrics.json"
    atomic_write_json(path, rubrics)
    return path


# -- the rubric judge's verdict accuracy -------------------------------------------------------


def verdict_accuracy(judge_dir: Path, cfg, captions: list[str], ids: list[str],
                     rubrics: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """The judge's per-rubric verdicts, through the reward, against the world oracle."""
    from vlrl.rewards import build_reward

    block = rubicap_reward_block(judge_dir, cfg)
    reward = build_reward(block["name"], **block["settings"])
    inner = getattr(reward, "inner", reward)
    inner.keep_verdicts = True
    pairs = [(c, rubrics[i]) for c, i in zip(captions, ids, strict=True) if i in rubrics]
    from vlrl.demos.shapes.kit.judging import interval

    scores = inner.score([c for c, _ in pairs], rubrics=[r for _, r in pairs])
    n = right = failed = 0
    by_kind: dict[str, list[int]] = {}
    per: list[tuple[int, int]] = []  # (right, verdicts) per caption: the interval resamples images
    for (cap, rset), s in zip(pairs, scores, strict=True):
        got = (s.details or {}).get("verdicts")
        if got is None:
            failed += len(rset) if (cap or "").strip() else 0
            continue
        r_here = 0
        for r in rset:
            ok = int(got[r["id"]] == oracle_verdict(r["criterion"], cap))
            n += 1
            right += ok
            r_here += ok
            by_kind.setdefault(r.get("kind") or "criterion", []).append(ok)
        per.append((r_here, len(rset)))
    return {"acc": round(right / n, 4) if n else None, "verdicts": n, "failed": failed,
            "acc_ci": interval([a for a, _ in per], [b for _, b in per], getattr(cfg, "seed", 0)),
            "by_kind": {k: round(sum(v) / len(v), 4) for k, v in by_kind.items()}}


def evaluate(model_dir: Path, out: Path, cfg, ws: WarmStart, judge_dir: Path) -> dict[str, Any]:
    res = caprl.evaluate(model_dir, out, cfg, ws.judge, ws.answerer)
    rubrics = json.loads((out / "data" / "rubicap_eval_rubrics.json").read_text())
    for kind in ("greedy", "sampled"):
        res[f"rubric_judge_{kind}"] = verdict_accuracy(judge_dir, cfg, res["captions"][kind], res["ids"], rubrics)
    return res


# -- the whole demo ----------------------------------------------------------------------------


def run_rubicap_demo(out: str | Path = "runs/demo-rubicap", seed: int = 0, quick: bool = False, force: bool = False,
                     cache_dir: str | Path | None = None, config: RubicapConfig | None = None) -> dict[str, Any]:
    """Run (or resume, or reuse) the RubiCap demo in ``out``; returns the metrics."""
    cfg = config or RubicapConfig.make(seed=seed, quick=quick)
    run = open_run(out, cfg, force, cache_dir)
    if run.reused is not None:
        return run.reused
    out, stages = run.out, run.stages
    ws, judge_dir = stages.timed("warm_start", lambda: warm_start(cfg, run.cache))
    answerer_spec = hf_spec(ws.answerer, 256)

    stages.run("data", lambda: caprl.make_data(out, cfg))
    stages.run("curate", lambda: caprl.curate(out, cfg, answerer_spec))
    stages.run("rubrics", lambda: (prepare_rubric_data(out, cfg, ws), prepare_eval_rubrics(out, cfg, ws)))
    stages.run("eval_before", lambda: atomic_write_json(out / "eval" / "before.json",
                                                   evaluate(ws.captioner, out, cfg, ws, judge_dir)))
    if ws.full_captioner is not None:
        stages.run("eval_full_sft", lambda: atomic_write_json(
            out / "eval" / "full_sft.json", caprl.evaluate(ws.full_captioner, out, cfg, ws.judge, ws.answerer)))
    stages.run("grpo", lambda: run_recipe(write_recipe(out, cfg, ws, judge_dir)))
    stages.run("eval_after", lambda: atomic_write_json(out / "eval" / "after.json",
                                                  evaluate(out / "grpo", out, cfg, ws, judge_dir)))

    before = json.loads((out / "eval" / "before.json").read_text())
    after = json.loads((out / "eval" / "after.json").read_text())
    history = read_history(out / "grpo")
    curation = json.loads((out / "data" / "curation.json").read_text())
    full_sft = caprl.load_full_sft(out)
    metrics = build_metrics(cfg, before, after, history, curation, stages.times, judge_dir, out, full_sft=full_sft)
    from vlrl.demos.shapes.kit.report import write_report

    write_report(out, cfg, metrics, before, after, history, full_sft=full_sft, **report_parts(metrics))
    atomic_write_json(out / "metrics.json", metrics)
    return metrics


def write_recipe(out: Path, cfg, ws: WarmStart, judge_dir: Path) -> Path:
    """The CapRL demo's recipe with the rubric reward and the rubric training rows."""
    return caprl.write_recipe(out, cfg, ws.captioner, ws.answerer, rewards=[
        rubicap_reward_block(judge_dir, cfg), grammar_reward_block(),
    ], source=out / "data" / "rubicap_train.jsonl")


def build_metrics(cfg, before: dict, after: dict, history: list[dict], curation: dict, times: dict[str, float],
                  judge_dir: Path, out: Path, window: int = 5, full_sft: dict | None = None) -> dict[str, Any]:
    m = caprl.build_metrics(cfg, before, after, history, curation, times, window=window, full_sft=full_sft)
    rewards = [h["rewards/rubicap_rubric/mean"] for h in history if h.get("rewards/rubicap_rubric/mean") is not None]
    m["method"] = "rubicap"
    m["reward_first"] = window_mean(rewards, window, last=False)
    m["reward_last"] = window_mean(rewards, window, last=True)
    # Drop the CapRL reward answerer's accuracies under their old names: here it is no reward.
    for k in [k for k in m if k.startswith("reward_answerer_")]:
        m[k.replace("reward_answerer_", "filter_answerer_")] = m.pop(k)
    info = json.loads((Path(judge_dir) / "warmstart.json").read_text())
    m["judge_verdict_acc_heldout"] = info.get("heldout_acc")
    for when, ev in (("before", before), ("after", after)):
        for kind in ("greedy", "sampled"):
            r = ev[f"rubric_judge_{kind}"]
            m[f"judge_verdict_acc_{kind}_{when}"] = r["acc"]
            m[f"judge_verdict_acc_{kind}_{when}_ci"] = r.get("acc_ci")
            m[f"judge_verdict_by_kind_{kind}_{when}"] = r["by_kind"]
    m["judge_verdict_acc"] = m["judge_verdict_acc_greedy_after"]
    m["rubric_data"] = json.loads((out / "data" / "rubicap_train_stats.json").read_text())
    return m


def agreement_plot(m: dict[str, Any]) -> str:
    """Bar chart (base64 PNG) of the rubric judge's agreement with the world oracle on the held-out
    images' rubrics, graded on the policy's captions before and after RL, overall and per rubric kind."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from vlrl.demos.shapes.kit.report import png

    fig, ax = plt.subplots(1, 2, figsize=(11, 3.2))
    for j, (when, col) in enumerate((("before", "C7"), ("after", "C0"))):
        vals = [m.get(f"judge_verdict_acc_{k}_{when}") or 0 for k in ("greedy", "sampled")]
        cis = [m.get(f"judge_verdict_acc_{k}_{when}_ci") or [v, v] for k, v in zip(("greedy", "sampled"), vals, strict=True)]
        err = [[v - c[0] for v, c in zip(vals, cis, strict=True)], [c[1] - v for v, c in zip(vals, cis, strict=True)]]
        ax[0].bar([i + (j - 0.5) * 0.38 for i in range(2)], vals, width=0.38, color=col, yerr=err, capsize=2,
                  label=f"{when} RL")
        kinds = sorted(set(m.get("judge_verdict_by_kind_greedy_before") or {}) | set(m.get("judge_verdict_by_kind_greedy_after") or {}))
        by = m.get(f"judge_verdict_by_kind_greedy_{when}") or {}
        ax[1].bar([i + (j - 0.5) * 0.38 for i in range(len(kinds))], [by.get(k, 0) for k in kinds], width=0.38,
                  color=col, label=f"{when} RL")
        ax[1].set_xticks(range(len(kinds)), kinds, fontsize=8)
    if m.get("judge_verdict_acc_heldout") is not None:
        ax[0].axhline(m["judge_verdict_acc_heldout"], color="k", lw=0.6, ls="--", label="on its own held-out pairs")
    ax[0].set_xticks(range(2), ["greedy captions", "sampled captions"], fontsize=8)
    for a, t in ((ax[0], "judge-oracle agreement (95% intervals over images)"), (ax[1], "by rubric kind (greedy)")):
        a.set_ylim(0, 1.02)
        a.set_title(t, fontsize=9)
        a.legend(fontsize=7)
    out = png(fig)
    plt.close(fig)
    return out


def report_parts(m: dict[str, Any]) -> dict[str, Any]:
    """What the shared report page says differently for RubiCap."""
    import html

    from vlrl.demos.shapes.kit.report import ci_text

    intro = (
        "<p>A tiny Qwen2.5-VL captioner trained with GRPO against the <code>rubicap_rubric</code> reward: rubrics "
        "written per image from a committee of three rule-based teachers (terse, careless, dreamer) by a rule-based "
        "writer (stand-ins for VLM teachers and an LLM writer), graded per rubric by a <b>tiny rubric judge</b> "
        "(its own tokenizer; trained on oracle-labelled rewrites of synthetic scenes of the training layouts, never on "
        "this policy's captions). Accuracy: every curated question of the evaluation scenes (layouts held out of every "
        "model's training), answered from the caption by a <b>rule-based reader of the world's grammar that learned "
        "nothing</b>; the CapRL demo's twin judge answerer is shown beside it.</p>")
    rows = "".join(
        f"<tr><th>{html.escape(k)}</th><td>{ci_text(m.get(k), m.get(k + '_ci'))}</td></tr>"
        for k in ("judge_verdict_acc_heldout", "judge_verdict_acc_greedy_before", "judge_verdict_acc_greedy_after",
                  "judge_verdict_acc_sampled_before", "judge_verdict_acc_sampled_after"))
    extra = (f"<h2>Rubric judge (verdicts against the world oracle)</h2>"
             f"<img src=\"data:image/png;base64,{agreement_plot(m)}\"><table>{rows}</table>"
             f"<p>Rubric data: {html.escape(json.dumps(m.get('rubric_data')))}</p>")
    return {"title": "RubiCap", "intro_html": intro, "reward_key": "rubicap_rubric", "extra_html": extra,
            "answerer_label": "filter_answerer"}
