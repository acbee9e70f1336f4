"""``report.html`` of ``vlrl demo --method vision-r1``: one self-contained page (plots inlined)."""

from __future__ import annotations

import html
import json
from pathlib import Path
from typing import Any

from vlrl.core.pipeline import read_jsonl
from vlrl.demos.shapes.kit.report import png, thumb


def _plots(metrics: dict[str, Any], history: list[dict], single: list[dict]) -> dict[str, str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    def reward(h):
        return h.get("rewards/hfrrf/mean", h["reward"])

    out = {}
    fig, ax = plt.subplots(1, 2, figsize=(10, 3.2))
    for k in sorted({h["stage"] for h in history}):
        hs = [h for h in history if h["stage"] == k]
        ax[0].plot([h["step"] for h in hs], [reward(h) for h in hs], lw=1, label=f"PTST stage {k}")
        ax[1].plot([h["step"] for h in hs], [h.get("completions/mean_length", float("nan")) for h in hs], lw=1)
    ax[0].plot([h["step"] for h in single], [reward(h) for h in single], lw=1, color="C7", alpha=0.8,
               label="single-stage GRPO")
    ax[1].plot([h["step"] for h in single], [h.get("completions/mean_length", float("nan")) for h in single], lw=1,
               color="C7", alpha=0.8)
    ax[0].set_ylim(0, 1.02)
    ax[0].set_title("hfrrf reward (mean over sampled completions)")
    ax[0].legend(fontsize=8)
    ax[1].set_title("completion length (tokens)")
    for a in ax:
        a.set_xlabel("RL step")
    out["training"] = png(fig)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(7, 3.2))
    cols = [("accuracy", "acc_before", "acc_after", "single_stage_acc_after"),
            ("format rate", "format_before", "format_after", "single_stage_format_after")]
    for j, (label, colour) in enumerate((("after SFT cold start (before RL)", "C7"), ("after PTST", "C0"),
                                         ("after single-stage GRPO", "C1"))):
        ax.bar([i + (j - 1) * 0.27 for i in range(len(cols))], [metrics[c[j + 1]] for c in cols], width=0.27,
               color=colour, label=label)
    ax.set_xticks(range(len(cols)), [c[0] for c in cols])
    ax.set_ylim(0, 1.05)
    ax.legend(fontsize=8)
    ax.set_title("held-out problems (greedy, one try each)")
    out["eval"] = png(fig)
    plt.close(fig)
    return out


def _pass_table(m: dict[str, Any]) -> str:
    """Rows: model × problem kind; columns: greedy accuracy, then pass@k for each k measured."""
    acc = {"before": m["acc_by_kind_before"], "ptst": m["acc_by_kind_after"], "single": m["acc_by_kind_single"]}
    total = {"before": m["acc_before"], "ptst": m["acc_after"], "single": m["single_stage_acc_after"]}
    ks = sorted({k for t in m.get("pass_at_k", {}).values() for k in t}, key=lambda k: int(k.split("@")[1]))
    head = "".join(f"<th>{k}</th>" for k in ks)
    rows = []
    for name, label in (("before", "before RL"), ("ptst", "after PTST"), ("single", "after single-stage")):
        for kind in ["all", *sorted(acc[name])]:
            table = m["pass_at_k"].get(name, {}) if kind == "all" else m["pass_at_k_by_kind"].get(name, {}).get(kind, {})
            greedy = total[name] if kind == "all" else acc[name][kind]
            rows.append(f"<tr><td>{label}</td><td>{kind}</td><td>{greedy}</td>"
                        + "".join(f"<td>{table.get(k, '')}</td>" for k in ks) + "</tr>")
    chance = m.get("chance_pass_at_k") or {}
    for name, label in (("uniform", "guesser, uniform over the answer space"),
                        ("scene_guesser", "guesser that reads the scene right and guesses the step")):
        if name in chance:
            rows.append(f"<tr><td>{label}</td><td>all</td><td></td>"
                        + "".join(f"<td>{chance[name].get(k, '')}</td>" for k in ks) + "</tr>")
    return f"<table><tr><th>model</th><th>kind</th><th>greedy</th>{head}</tr>{''.join(rows)}</table>"


def _share_table(m: dict[str, Any]) -> str:
    """How often the samples are right on the problems greedy gets right and on those it gets wrong: whether
    the pass@8 gap is made of near-ties or of rare right samples."""
    share = m.get("sampled_right_share") or {}
    if not any(share.values()):  # no samples drawn
        return ""

    def cell(t: dict[str, Any], where: str) -> str:
        v, n = t.get(f"where_greedy_{where}"), t.get(f"problems_where_greedy_{where}")
        return "" if v is None else f"{v:.2f} ({n})"

    rows = "".join(f"<tr><td>{label}</td><td>{cell(t, 'right')}</td><td>{cell(t, 'wrong')}</td></tr>"
                   for name, label in (("before", "before RL"), ("ptst", "after PTST"), ("single", "after single-stage"))
                   if (t := share.get(name)))
    return ("<p>Mean share of right samples on the problems (how many) the greedy answer gets right and on those it "
            "gets wrong. Where greedy is wrong, a share near one half is a near-tie; a small share is a right answer "
            "the policy rarely samples.</p><table><tr><th>model</th><th>greedy right</th>"
            f"<th>greedy wrong</th></tr>{rows}</table>")


def write_report(out: Path, cfg, metrics: dict[str, Any], evals: dict[str, dict], history: list[dict],
                 single: list[dict], info: dict[str, Any], n_examples: int = 12) -> Path:
    plots = _plots(metrics, history, single)
    rows = list(read_jsonl(out / "data" / "eval.jsonl"))
    preds = {name: {p["id"]: p for p in read_jsonl(out / "eval" / name / "predictions.jsonl")}
             for name in ("before", "ptst", "single")}

    def cell(name: str, rid: str) -> str:
        p = preds[name].get(rid, {})
        mark = "✔" if p.get("correct") else "✘"
        return f"<td><small>{html.escape(p.get('output') or '')}</small><br>{mark}</td>"

    ex = "".join(
        f"<tr><td><img src='data:image/png;base64,{thumb(out / 'data' / r['image'])}'></td>"
        f"<td>{html.escape(r['question'])}<br><b>{html.escape(r['answer'])}</b></td>"
        + cell("before", r["id"]) + cell("ptst", r["id"]) + cell("single", r["id"]) + "</tr>"
        for r in rows[:n_examples]
    )
    m = metrics
    keys = ["acc_before", "acc_after", "gain", "single_stage_acc_after", "format_before", "format_after",
            "acc_formatted_before", "acc_formatted_after", "truncation_before", "truncation_after",
            "mean_tokens_before", "mean_tokens_after", "pass8_minus_greedy_before", "pass8_minus_greedy_after",
            "reward_first", "reward_last", "warm_start_seconds", "run_seconds", "wall_seconds", "seed"]
    table = "".join(f"<tr><th>{k}</th><td>{m.get(k)}{' ' + str(m[k + '_ci']) if m.get(k + '_ci') else ''}</td></tr>"
                    for k in keys)
    passk = _pass_table(m)
    cs = m["cold_start"]
    sft_ex = "".join(f"<li><code>{html.escape(e['question'])}</code> → <code>{html.escape(e['response'])}</code></li>"
                     for e in info.get("examples", [])[:4])
    overthink = (f" and, like an R1-style reasoner, <b>overthought</b>: it re-stated its step 0 to {cfg.reasoner_rechecks} "
                 "extra times (<code>--rechecks</code>), a habit the student learns and PTST's short first cap "
                 "penalises") if cfg.reasoner_rechecks else ""
    routes = (f" by one of {cfg.reasoner_styles} routes per question kind, slipping for a reason on "
              f"{cfg.reasoner_slip:.0%} of problems (miscounting under clutter, comparing the wrong pair)"
              if cfg.reasoner_styles > 1 or cfg.reasoner_slip else "")
    page = f"""<!doctype html><html><head><meta charset="utf-8"><title>vlrl demo — shapes-world Vision-R1</title>
<style>body{{font-family:sans-serif;max-width:1100px;margin:2em auto}}td,th{{padding:4px 8px;border-bottom:1px solid #ddd;
vertical-align:top;text-align:left}}table{{border-collapse:collapse}}</style></head><body>
<h1>vlrl demo: Vision-R1 in the shapes world</h1>
<p>A tiny Qwen2.5-VL ({'quick' if cfg.quick else 'full'} run, seed {cfg.seed}), first warm-started as a shapes
captioner, then cold-started by <b>modality bridging</b>: a rule-based stand-in VLM (pixel reader that mis-perceives
{cfg.vlm_error_rate:.0%} of images) wrote a pseudo chain of thought and a description; a rule-based text reasoner solved
each problem from the description alone{routes}{overthink}; {cs['kept']} of {cs['total']} samples were answered correctly and kept
(rejected: {html.escape(json.dumps(cs['reject_reasons']))}); SFT ({m['sft']['global_step']} steps) on those chains.
Then PTST with the hard format+result reward <code>hfrrf</code>: {html.escape(json.dumps(m['ptst_stages']))}, at
{m['prompts_per_step']} prompts per step. Beside it, single-stage GRPO from the same SFT student at the same number of
steps and sampled completions: {html.escape(json.dumps(m['single_stage']))}.</p>
<p><b>"Before" is after the SFT cold start, before any RL.</b> Accuracy: {m['eval_problems']} held-out problems on scenes
never used in training, greedy, one try each, the answer read and checked against the generated gold answer by HFRRF's own
code; format rate: the output is exactly one <code>&lt;think&gt;</code> block then one <code>&lt;answer&gt;</code>
block. <code>acc_formatted</code> is accuracy among well-formed outputs only: a gain there is better answers, a gain in
accuracy alone can be outputs that now stop within the length cap.</p>
<table>{table}</table>
<p>Accuracy by question kind — before: {m['acc_by_kind_before']}; after PTST: {m['acc_by_kind_after']}; after single-stage:
{m['acc_by_kind_single']}.</p>
<h2>Greedy accuracy beside pass@k</h2>
<p>pass@k: the chance that at least one of k answers sampled at the rollout temperature
(T={m.get('sample_temperature')}) is right, estimated without bias from {m.get('eval_samples')} samples per held-out
problem. GRPO with an outcome reward can only reinforce answers the policy samples, so greedy accuracy far below pass@8
before RL is room to learn; sharpening shows as greedy rising towards pass@8.</p>
{passk}
{_share_table(m)}
<p>Held-out split: {html.escape(json.dumps(m.get('splits')))} (problems skipped because their (layout, question) pair or
image is in the cold start's or the RL problems).</p>
<p>Trained on: {''.join(f"<br><b>{html.escape(k)}</b>: {html.escape(v)}" for k, v in m.get('trained_on', {}).items())}</p>
<h2>Cold-start examples (SFT targets)</h2><ul>{sft_ex}</ul>
<h2>Training</h2><img src="data:image/png;base64,{plots['training']}">
<h2>Held-out evaluation</h2><img src="data:image/png;base64,{plots['eval']}">
<h2>Examples</h2>
<table><tr><th>image</th><th>question / gold</th><th>before RL</th><th>after PTST</th><th>after single-stage</th></tr>
{ex}</table>
<h2>All metrics</h2><pre>{html.escape(json.dumps(m, indent=1))}</pre>
</body></html>"""
    path = out / "report.html"
    path.write_text(page, encoding="utf-8")
    return path
