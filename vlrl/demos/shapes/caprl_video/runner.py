"""``vlrl demo --method caprl-video``: CapRL on clips of the shapes world in motion, judged by a reader that needs no training.

Stages (markers under ``DIR/state``, so an interrupted run resumes; the image demo's machinery,
:mod:`vlrl.demos.shapes.kit.base`):

1. **warm start** (cached, :mod:`.models`): a tokenizer, a tiny Qwen2.5-VL video captioner
   fine-tuned on attribute-dropped captions of clips, and the tiny text reward answerer;
2. **data**: clips for GRPO and held-out evaluation, written as lossless MP4 files (4 frames of
   56×56), with their MCQs (:mod:`.world`);
3. **evaluation before RL**: greedy and sampled captions of the held-out clips through the ``hf:``
   backend (the frames ``vlrl caption --videos`` shows a model), judged by the **rule reader**:
   :func:`~vlrl.demos.shapes.caprl_video.world.parse_caption` then
   :func:`~vlrl.demos.shapes.caprl_video.world.answer_from_caption`, a strict reader of the world's
   grammar that answers each question from what the caption states (a caption it cannot parse
   answers nothing). It is written code, not a model; it is never the reward. The reward
   answerer's own accuracy (the project's caption-QA evaluation) is reported beside it;
4. **GRPO** (``DIR/recipe.yaml``, run by ``vlrl train grpo``'s code on video rows, TRL's own
   generation) with ``caprl_qa`` (exact mode, the tiny answerer) behind the anti-hacking guards and
   the world's grammar as a format reward;
5. **evaluation after RL**, ``metrics.json`` and ``report.html`` (frames beside their captions).

There is no QA-curation stage: every question is asked. (The image demo's text-only filter drops
nothing in its world; whether it would drop any of this world's questions is not measured.)
"""

from __future__ import annotations

import html
import json
import logging
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vlrl.core.pipeline import atomic_write_json, read_jsonl, write_jsonl
from vlrl.demos.shapes.caprl_video import world as V
from vlrl.demos.shapes.caprl_video.models import VideoWarmConfig, build_all
from vlrl.demos.shapes.kit.base import DemoSettings, hf_spec, open_run, timing
from vlrl.demos.shapes.kit.history import CALLBACK, read_history, window_mean
from vlrl.demos.shapes.kit.recipes import grpo_trainer, run_recipe, save_recipe
from vlrl.demos.shapes.kit.rewards import grammar_reward_block

logger = logging.getLogger(__name__)

PARSER = "vlrl.demos.shapes.caprl_video.world:parse_caption"
KINDS = ("way", "shape", "colour_start", "colour_end", "change", "enter_count", "first", "still_shape")


@dataclass(frozen=True)
class VideoDemoConfig(DemoSettings):
    seed: int = 0
    quick: bool = False
    grpo_steps: int = 150
    clips_per_step: int = 4
    num_generations: int = 8
    max_completion_length: int = 24
    learning_rate: float = 2e-4
    temperature: float = 1.0
    questions_per_caption: int = 4
    rounds: int = 2
    eval_clips: int = 100
    warm: VideoWarmConfig = field(default_factory=VideoWarmConfig)

    @classmethod
    def make(cls, seed: int = 0, quick: bool = False) -> VideoDemoConfig:
        if quick:
            return cls(seed=seed, quick=True, grpo_steps=60, eval_clips=60)
        return cls(seed=seed)


# -- data --------------------------------------------------------------------------------------


def make_data(out: Path, cfg: VideoDemoConfig) -> None:
    """Write the GRPO and held-out clips (``data/videos``) and their rows (``data/{train,eval}.jsonl``).

    GRPO's clips come from the training configurations, the held-out ones from the others
    (:func:`data_clips`)."""
    data = out / "data"
    for split, clips in data_clips(cfg).items():
        rng = random.Random(f"video-demo-questions/{split}/{cfg.seed}")
        rows = []
        for clip in clips:
            V.write_video(clip, data / "videos" / f"{clip.id}.mp4")
            rows.append({"id": clip.id, "video": f"videos/{clip.id}.mp4", "clip": clip.to_dict(),
                         "caption_full": V.full_caption(clip), "questions": [q.to_dict() for q in V.questions(clip, rng)]})
        write_jsonl(data / f"{split}.jsonl", rows)


def data_clips(cfg: VideoDemoConfig) -> dict[str, list[V.ClipFacts]]:
    """GRPO's clips (``"train"``: training configurations) and the held-out clips (``"eval"``: held-out
    configurations only, a share ``cfg.warm.heldout_layouts`` of all), so no held-out clip shows what any
    model trained on."""
    return {split: V.make_clips(n, cfg.seed, prefix=f"{split}-", split=split, heldout=cfg.warm.heldout_layouts)
            for split, n in (("train", cfg.grpo_steps * cfg.clips_per_step), ("eval", cfg.eval_clips))}


# -- evaluation --------------------------------------------------------------------------------


def caption_clips(model_dir: str | Path, out: Path, rows: list[dict[str, Any]], cfg: VideoDemoConfig) -> dict[str, list[str]]:
    """Greedy and sampled captions (one each) of the held-out clips, through the ``hf:`` backend."""
    from vlrl.captioning.captioner import caption_images
    from vlrl.core.backends import SamplingParams, load_backend

    backend = load_backend(hf_spec(model_dir, 64))
    try:
        caps = {}
        for name, sp in (("greedy", SamplingParams(max_tokens=cfg.max_completion_length, temperature=0.0)),
                         ("sampled", SamplingParams(max_tokens=cfg.max_completion_length, temperature=cfg.temperature,
                                                    top_k=0, seed=cfg.seed))):
            loaders = [lambda p=out / "data" / r["video"]: V.load_clip(p) for r in rows]
            outcomes = caption_images(backend, loaders, V.CAPTION_PROMPT, sp, ids=[r["id"] for r in rows], min_words=None)
            caps[name] = [oc.caption.strip() if oc.caption is not None else "" for oc in outcomes]
        return caps
    finally:
        backend.close()


def rule_judge(captions: list[str], rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The judge: the strict grammar reader answers every question from each caption.

    ``acc``: share of questions answered right; ``hallucination_rate``: answered wrong (the caption
    states something false); ``cannot_answer_rate``: the caption does not say (or does not parse).
    """
    right = wrong = total = parsed = 0
    by_kind: dict[str, list[int]] = {}
    per_clip = []
    for cap, r in zip(captions, rows, strict=True):
        facts = V.parse_caption(cap)
        parsed += facts is not None
        ok = 0
        for q in r["questions"]:
            ans = V.answer_from_caption(facts, q)
            hit = ans == q["answer"]
            right += hit
            ok += hit
            wrong += ans is not None and not hit
            total += 1
            by_kind.setdefault(q["kind"], [0, 0])
            by_kind[q["kind"]][0] += hit
            by_kind[q["kind"]][1] += 1
        per_clip.append(ok / max(1, len(r["questions"])))
    return {"acc": right / max(1, total), "hallucination_rate": wrong / max(1, total),
            "cannot_answer_rate": (total - right - wrong) / max(1, total), "parse_rate": parsed / max(1, len(rows)),
            "by_kind": {k: round(v[0] / v[1], 4) for k, v in sorted(by_kind.items())}, "per_clip": per_clip,
            "questions": total}


def evaluate(model_dir: str | Path, out: Path, cfg: VideoDemoConfig, answerer_dir: Path) -> dict[str, Any]:
    from vlrl.core.backends import load_backend
    from vlrl.demos.shapes.caprl.runner import judge

    rows = list(read_jsonl(out / "data" / "eval.jsonl"))
    caps = caption_clips(model_dir, out, rows, cfg)
    result: dict[str, Any] = {"captions": caps, "ids": [r["id"] for r in rows]}
    for kind, c in caps.items():
        result[f"judge_{kind}"] = rule_judge(c, rows)
    backend = load_backend(hf_spec(answerer_dir, 256))
    try:
        for kind, c in caps.items():
            result[f"reward_answerer_{kind}"] = judge(backend, c, rows, cfg.warm.answerer.answer_prompt)
    finally:
        backend.close()
    return result


# -- GRPO --------------------------------------------------------------------------------------


def recipe_dict(out: Path, cfg: VideoDemoConfig, captioner: Path, answerer: Path) -> dict[str, Any]:
    """The demo's GRPO recipe: the image demo's settings, on video rows."""
    return {
        "method": "grpo",
        "model": {"path": str(captioner), "dtype": "float32"},
        "data": {"source": str(out / "data" / "train.jsonl"), "prompt": V.CAPTION_PROMPT, "video": dict(V.VIDEO_SPEC)},
        "rewards": [{
            "name": "caprl_qa",
            "settings": {
                "answerer": hf_spec(answerer, 256),
                "mode": "exact",
                "questions_per_caption": cfg.questions_per_caption,
                "rounds": cfg.rounds,
                "prompt": cfg.warm.answerer.answer_prompt,
                "seed": cfg.seed,
                "temperature": 1.0,
                "draws": "per_step",
                "min_letter_mass": 0.0,
            },
            # the longest honest caption of this world has 15 words. The learned guard is off: it learned from
            # natural captions, and 5 of the 4,056 true partial captions of this grammar score as hacks ("a
            # square moves and turns yellow and a square is there."), which the veto would zero
            "guards": {"policy": "veto", "min_words": 3, "max_words": 18, "repetition": {"max_consecutive": 2},
                       "learned": False},
        }, grammar_reward_block(PARSER)],
        "trainer": grpo_trainer(out / "grpo", cfg.seed, cfg.learning_rate, cfg.temperature, max_steps=cfg.grpo_steps,
                                per_device_train_batch_size=cfg.clips_per_step * cfg.num_generations,
                                num_generations=cfg.num_generations, max_completion_length=cfg.max_completion_length,
                                use_vllm=False),
        "callbacks": [CALLBACK],
    }


# -- the whole demo ----------------------------------------------------------------------------


def run_video_demo(out: str | Path = "runs/demo-caprl-video", seed: int = 0, quick: bool = False, force: bool = False,
                   cache_dir: str | Path | None = None, config: VideoDemoConfig | None = None) -> dict[str, Any]:
    """Run (or resume, or reuse) the video demo in ``out``; returns the metrics."""
    cfg = config or VideoDemoConfig.make(seed=seed, quick=quick)
    run = open_run(out, cfg, force, cache_dir)
    if run.reused is not None:
        return run.reused
    out, stages = run.out, run.stages
    ws = stages.timed("warm_start", lambda: build_all(cfg.warm, cfg.seed, run.cache))
    stages.run("data", lambda: make_data(out, cfg))
    stages.run("eval_before", lambda: atomic_write_json(out / "eval" / "before.json",
                                                        evaluate(ws.captioner, out, cfg, ws.answerer)))
    stages.run("grpo", lambda: run_recipe(save_recipe(recipe_dict(out, cfg, ws.captioner, ws.answerer),
                                                      out / "recipe.yaml")))
    stages.run("eval_after", lambda: atomic_write_json(out / "eval" / "after.json",
                                                       evaluate(out / "grpo", out, cfg, ws.answerer)))
    before = json.loads((out / "eval" / "before.json").read_text())
    after = json.loads((out / "eval" / "after.json").read_text())
    history = read_history(out / "grpo")
    metrics = build_metrics(cfg, before, after, history, stages.times, ws)
    write_report(out, cfg, metrics, before, after, history)
    atomic_write_json(out / "metrics.json", metrics)
    return metrics


def build_metrics(cfg: VideoDemoConfig, before: dict, after: dict, history: list[dict], times: dict[str, float], ws,
                  window: int = 5) -> dict[str, Any]:
    rewards = [h.get("rewards/caprl_qa/mean", h["reward"]) for h in history]
    m: dict[str, Any] = {
        "method": "caprl-video",
        "seed": cfg.seed,
        "quick": cfg.quick,
        "acc_before": round(before["judge_greedy"]["acc"], 4),
        "acc_after": round(after["judge_greedy"]["acc"], 4),
        "reward_first": window_mean(rewards, window, last=False),
        "reward_last": window_mean(rewards, window, last=True),
        "reward_window_steps": window,
        "grpo_steps": len(history) and max(h["step"] for h in history),
        **timing(times),
    }
    m["gain"] = round(m["acc_after"] - m["acc_before"], 4)
    for who in ("judge", "reward_answerer"):
        for kind in ("greedy", "sampled"):
            for when, ev in (("before", before), ("after", after)):
                r = ev[f"{who}_{kind}"]
                m[f"{who}_{kind}_acc_{when}"] = round(r["acc"], 4)
                m[f"{who}_{kind}_hallucination_{when}"] = round(r["hallucination_rate"], 4)
                m[f"{who}_{kind}_cannot_answer_{when}"] = round(r["cannot_answer_rate"], 4)
    for when, ev in (("before", before), ("after", after)):
        m[f"judge_greedy_by_kind_{when}"] = ev["judge_greedy"]["by_kind"]
        m[f"captions_greedy_parse_rate_{when}"] = round(ev["judge_greedy"]["parse_rate"], 4)
        m[f"captions_greedy_words_{when}"] = round(
            sum(len(c.split()) for c in ev["captions"]["greedy"]) / max(1, len(ev["captions"]["greedy"])), 2)
    zero = [h.get("frac_reward_zero_std") for h in history if h.get("frac_reward_zero_std") is not None]
    m["frac_reward_zero_std_mean"] = round(sum(zero) / len(zero), 4) if zero else None
    m["judge"] = ("rule reader: the world's grammar parser and answer_from_caption (written code, no training, "
                  "never the reward)")
    m["trained_on"] = {name: json.loads((Path(p) / "warmstart.json").read_text()).get("trained_on")
                       for name, p in (("captioner", ws.captioner), ("reward_answerer", ws.answerer))}
    m["trained_on"]["policy"] = (f"GRPO with caprl_qa on {cfg.grpo_steps * cfg.clips_per_step} clips of the training "
                                 f"configurations")
    m["heldout_layouts"] = cfg.warm.heldout_layouts
    m["stage_seconds"] = times
    return m


# -- report ------------------------------------------------------------------------------------


def write_report(out: Path, cfg: VideoDemoConfig, metrics: dict[str, Any], before: dict, after: dict,
                 history: list[dict[str, Any]], n_examples: int = 10) -> Path:
    """``report.html``: reward over steps, accuracy by question kind, and clips' frames beside their captions."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from vlrl.demos.shapes.kit.report import png, thumb

    fig, ax = plt.subplots(1, 2, figsize=(11, 3.2))
    steps = [h["step"] for h in history]
    ax[0].plot(steps, [h.get("rewards/caprl_qa/mean", h["reward"]) for h in history], lw=1, label="caprl_qa reward")
    ax[0].set_xlabel("GRPO step")
    ax[0].set_ylim(0, 1.02)
    ax[0].legend(fontsize=8)
    kinds = [k for k in KINDS if k in metrics["judge_greedy_by_kind_before"]]
    x = range(len(kinds))
    for j, (when, col) in enumerate((("before", "C7"), ("after", "C0"))):
        ax[1].bar([i + (j - 0.5) * 0.38 for i in x], [metrics[f"judge_greedy_by_kind_{when}"][k] for k in kinds],
                  width=0.38, color=col, label=f"{when} RL")
    ax[1].set_xticks(list(x), kinds, fontsize=7, rotation=20)
    ax[1].set_ylim(0, 1)
    ax[1].set_title("held-out accuracy by question (rule reader, greedy)")
    ax[1].legend(fontsize=8)
    plot = png(fig)
    plt.close(fig)

    rows = {r["id"]: r for r in read_jsonl(out / "data" / "eval.jsonl")}
    strips = out / "eval" / "frames"
    strips.mkdir(parents=True, exist_ok=True)
    ex = []
    for i, rid in enumerate(before["ids"][:n_examples]):
        r = rows[rid]
        path = strips / f"{rid}.png"
        V.filmstrip(V.ClipFacts.from_dict(r["clip"]), scale=1).save(path)
        sb, sa = before["judge_greedy"]["per_clip"][i], after["judge_greedy"]["per_clip"][i]
        ex.append(f"<tr><td><img src='data:image/png;base64,{thumb(path, 2)}'></td>"
                  f"<td>{html.escape(r['caption_full'])}</td>"
                  f"<td>{html.escape(before['captions']['greedy'][i])}<br><small>reader acc {sb:.2f}</small></td>"
                  f"<td>{html.escape(after['captions']['greedy'][i])}<br><small>reader acc {sa:.2f}</small></td></tr>")
    keys = ["acc_before", "acc_after", "gain", "reward_first", "reward_last", "grpo_steps", "wall_seconds",
            "warm_start_seconds", "run_seconds", "heldout_layouts", "seed"]
    table = "".join(f"<tr><th>{k}</th><td>{metrics.get(k)}</td></tr>" for k in keys)
    trained = "".join(f"<li><b>{html.escape(k)}</b>: {html.escape(str(v))}</li>" for k, v in metrics["trained_on"].items())
    page = f"""<!doctype html><html><head><meta charset="utf-8"><title>vlrl demo — CapRL on video</title>
<style>body{{font-family:sans-serif;max-width:1100px;margin:2em auto}}td,th{{padding:4px 8px;border-bottom:1px solid #ddd;
vertical-align:top;text-align:left}}table{{border-collapse:collapse}}</style></head><body>
<h1>vlrl demo: CapRL on clips of the shapes world in motion</h1>
<p>A tiny Qwen2.5-VL video captioner ({'quick' if cfg.quick else 'full'} run, seed {cfg.seed}; 4 frames of 56×56 a clip)
trained with GRPO against the <code>caprl_qa</code> reward (a tiny text answerer). Accuracy: every question about
{len(before['ids'])} held-out clips (of configurations no model trained on), answered from the greedy caption by the <b>rule reader</b> (the world's grammar
parser: written code, no training, never the reward).</p>
<table>{table}</table>
<h2>What each model was trained on</h2><ul>{trained}</ul>
<h2>Training and held-out accuracy</h2><img src="data:image/png;base64,{plot}">
<h2>Examples: frames 0-3, and greedy captions before and after RL</h2>
<table><tr><th>frames</th><th>full caption (truth)</th><th>before RL</th><th>after RL</th></tr>{''.join(ex)}</table>
<h2>All metrics</h2><pre>{html.escape(json.dumps(metrics, indent=1))}</pre>
</body></html>"""
    path = out / "report.html"
    path.write_text(page, encoding="utf-8")
    return path
