"""``report.html`` of ``vlrl demo --compare``, and the verdicts on the papers' claims.

The verdicts are fixed rules over the measured table (:func:`claims`, :func:`hack_verdict`),
applied to every row whatever the numbers are, so the report cannot be steered toward a story:

* two rates are compared through their 95% bootstrap intervals over scenes: intervals that overlap
  are **not distinguishable**; otherwise a difference counts only beyond ``MARGIN`` (:func:`compare`);
* a judge is "biased" when, on held-out (image, caption) pairs, it overrates captions with
  mis-stated facts by more than ``BIAS_POINTS`` on its 1–10 scale (mean error against the oracle);
* a reward is "hacked" when the row's own reward rose by at least ``REWARD_RISE`` while the
  reader's accuracy shows no gain over the warm start beyond ``MARGIN``, or the captions state more
  false facts than the warm start's beyond ``MARGIN`` (``false_fact_rate``: the world's parser against
  the scene). Checked on every trained row, not only the Likert row.
"""

from __future__ import annotations

import html
import json
from pathlib import Path
from typing import Any

from vlrl.core.pipeline import read_jsonl
from vlrl.demos.shapes.kit.report import ci_text, marked_caption, png

MARGIN = 0.03
REWARD_RISE = 0.05
BIAS_POINTS = 1.0
NOT_DISTINGUISHABLE = "not distinguishable"


def _row(metrics: dict[str, Any], name: str) -> dict[str, Any] | None:
    r = next((r for r in metrics["rows"] if r["reward"] == name), None)
    return r if r is not None and r.get("acc_after") is not None else None


def compare(a: float, a_ci: list[float] | None, b: float, b_ci: list[float] | None, margin: float = MARGIN) -> str:
    """``higher`` / ``lower`` (beyond ``margin``), ``within margin``, or ``not distinguishable``
    (the two 95% intervals overlap, or one is missing)."""
    if not a_ci or not b_ci or (a_ci[0] <= b_ci[1] and b_ci[0] <= a_ci[1]):
        return NOT_DISTINGUISHABLE
    if a - b > margin:
        return "higher"
    if b - a > margin:
        return "lower"
    return "within margin"


def hack_verdict(row: dict[str, Any], base: dict[str, Any]) -> dict[str, str]:
    """The "reward gets hacked" rule for one trained row against the warm start (``base``)."""
    rise = (row.get("reward_last") or 0) - (row.get("reward_first") or 0)
    acc = compare(row["acc_after"], row.get("acc_after_ci"), base["acc_after"], base.get("acc_after_ci"))
    false = compare(row.get("false_fact_rate") or 0, row.get("false_fact_rate_ci"),
                    base.get("false_fact_rate") or 0, base.get("false_fact_rate_ci"))
    if rise < REWARD_RISE:
        verdict = "not hacked (its reward did not rise)"
    elif acc in ("lower", "within margin") or false == "higher":
        verdict = "hacked"
    elif acc == "higher" and false in ("lower", "within margin"):
        verdict = "not hacked"
    else:
        verdict = NOT_DISTINGUISHABLE
    evidence = (f"{row['reward']}: own reward {row.get('reward_first')} → {row.get('reward_last')} (rise {rise:+.3f}); "
                f"reader accuracy {ci_text(base['acc_after'], base.get('acc_after_ci'))} → "
                f"{ci_text(row['acc_after'], row.get('acc_after_ci'))} ({acc}); false facts stated "
                f"{ci_text(base.get('false_fact_rate'), base.get('false_fact_rate_ci'))} → "
                f"{ci_text(row.get('false_fact_rate'), row.get('false_fact_rate_ci'))} ({false}); mean words "
                f"{base.get('mean_words')} → {row.get('mean_words')}.")
    return {"verdict": verdict, "evidence": evidence}


def claims(metrics: dict[str, Any]) -> list[dict[str, str]]:
    """Each claim with ``verdict`` (reproduced / not reproduced / not distinguishable / not tested)
    and the numbers behind it."""
    nr = _row(metrics, "no_rl") or {"acc_after": metrics["acc_before"], "acc_after_ci": metrics.get("acc_before_ci")}
    out = []
    lik, qa, rub, rou = (_row(metrics, n) for n in ("likert_judge", "caprl_qa_exact", "rubicap_rubric", "rouge_l"))

    # CapRL: judge rewards can be biased or hacked (two claims: the judge's bias, the policy's hack)
    judge = metrics.get("likert_judge") or {}
    err = judge.get("heldout_mean_error_by_kind") or {}
    c = {"paper": "CapRL", "claim": "A holistic (Likert) judge is biased: it overrates captions that state false facts."}
    if "corrupted" not in err:
        c.update(verdict="not tested", evidence="no held-out agreement of the Likert judge was recorded")
    else:
        c.update(verdict="reproduced" if err["corrupted"] > BIAS_POINTS else "not reproduced",
                 evidence=(f"mean score error against the oracle on held-out pairs, by caption kind: {json.dumps(err)} "
                           f"(points on the 1-10 scale, no interval recorded; exact agreement {judge.get('heldout_exact')}, "
                           f"Spearman {judge.get('heldout_spearman')})."))
    out.append(c)
    # the hacking rule, on every trained row (the paper's claim is about the Likert row)
    for r in metrics["rows"]:
        if r["reward"] == "no_rl":
            continue
        c = {"paper": "CapRL" if r["reward"] == "likert_judge" else "(rule on every row)",
             "claim": f"The {r['reward']} reward gets hacked: its score rises without the captions becoming more "
                      "useful or more truthful."}
        if _row(metrics, r["reward"]) is None:
            c.update(verdict="not tested", evidence=f"the {r['reward']} row did not run: {r.get('status')}")
        else:
            c.update(hack_verdict(r, nr))
        out.append(c)

    def better(a, a_name, b, b_name, paper, claim):
        c = {"paper": paper, "claim": claim}
        if a is None or b is None:
            missing = a_name if a is None else b_name
            row = next((r for r in metrics["rows"] if r["reward"] == missing), None)
            c.update(verdict="not tested", evidence=f"{missing} row: {row.get('status') if row else 'not run'}")
            return c
        cmp = compare(a["acc_after"], a.get("acc_after_ci"), b["acc_after"], b.get("acc_after_ci"))
        verdict = {"higher": "reproduced", NOT_DISTINGUISHABLE: NOT_DISTINGUISHABLE}.get(cmp, "not reproduced")
        c.update(verdict=verdict, evidence=(
            f"reader accuracy {a_name} {ci_text(a['acc_after'], a.get('acc_after_ci'))} vs {b_name} "
            f"{ci_text(b['acc_after'], b.get('acc_after_ci'))} (difference {a['acc_after'] - b['acc_after']:+.3f}: {cmp}); "
            f"wrong-option rate {a['hallucination_rate']} vs {b['hallucination_rate']}."))
        return c

    out.append(better(qa, "caprl_qa_exact", lik, "likert_judge", "CapRL",
                      "The QA-utility reward (caprl_qa) trains better captions than a Likert judge reward."))
    out.append(better(rub, "rubicap_rubric", lik, "likert_judge", "RubiCap",
                      "Rubric rewards (rubicap_rubric) train better captions than a Likert judge."))
    out.append(better(rub, "rubicap_rubric", rou, "rouge_l", "RubiCap",
                      "Rubric rewards (rubicap_rubric) train better captions than ROUGE-L against a reference caption."))
    return out


# -- the page ----------------------------------------------------------------------------------


def _plots(metrics: dict[str, Any]) -> dict[str, str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = {}
    fig, ax = plt.subplots(figsize=(8, 3.4))
    curves = metrics.get("reward_curves") or {r["reward"]: r.get("reward_curve") for r in metrics["rows"]}
    for name, curve in curves.items():
        if curve:
            ax.plot(range(1, len(curve) + 1), curve, lw=1, label=name)
    ax.set_xlabel("GRPO step")
    ax.set_ylabel("the row's own reward (mean)")
    ax.legend(fontsize=8)
    ax.set_title("reward over steps (each row's reward on its own scale)")
    out["rewards"] = png(fig)
    plt.close(fig)

    rows = [r for r in metrics["rows"] if r.get("acc_after") is not None]
    fig, ax = plt.subplots(1, 3, figsize=(13, 3.4))
    names = [r["reward"].replace("_", "\n", 1) for r in rows]
    for a, key, title in ((ax[0], "acc_after", "held-out QA accuracy (reader)"),
                          (ax[1], "hallucination_rate", "wrong-option rate (reader)"),
                          (ax[2], "mean_words", "mean caption length (words)")):
        vals = [r[key] for r in rows]
        cis = [r.get(key + "_ci") or [v, v] for r, v in zip(rows, vals, strict=True)]
        a.bar(range(len(rows)), vals, color=["C7"] + [f"C{i}" for i in range(len(rows) - 1)], capsize=2,
              yerr=[[v - c[0] for v, c in zip(vals, cis, strict=True)], [c[1] - v for v, c in zip(vals, cis, strict=True)]])
        a.set_xticks(range(len(rows)), names, fontsize=7)
        a.set_title(title, fontsize=9)
    ax[0].axhline(metrics["acc_before"], color="k", lw=0.6, ls="--")
    out["table"] = png(fig)
    plt.close(fig)
    return out


def write_compare_report(out: Path, cfg, metrics: dict[str, Any], n_examples: int = 6) -> Path:
    metrics["claims"] = claims(metrics)
    plots = _plots(metrics)
    cols = ("acc_after", "gain", "hallucination_rate", "cannot_answer_rate", "false_fact_rate", "twin_judge_acc_after")
    plain = ("mean_words", "reward_first", "reward_last")
    head = "".join(f"<th>{c}</th>" for c in ("reward", *cols, *plain, "status"))
    body = []
    for r in metrics["rows"]:
        body.append("<tr><td><b>" + html.escape(r["reward"]) + "</b></td>"
                    + "".join(f"<td>{'' if r.get(c) is None else ci_text(r.get(c), r.get(c + '_ci'))}</td>" for c in cols)
                    + "".join(f"<td>{'' if r.get(c) is None else r.get(c)}</td>" for c in plain)
                    + f"<td>{html.escape(str(r.get('status')))}</td></tr>")
    kinds = sorted({k for r in metrics["rows"] for k in (r.get("acc_by_kind") or {})})
    by_kind = ("<tr><th>reward</th>" + "".join(f"<th>{html.escape(k)}</th>" for k in kinds) + "</tr>" + "".join(
        "<tr><td>" + html.escape(r["reward"]) + "</td>" + "".join(
            f"<td>{(r.get('acc_by_kind') or {}).get(k, '')}</td>" for k in kinds) + "</tr>"
        for r in metrics["rows"] if r.get("acc_by_kind")))
    verdicts = "".join(
        f"<tr><td>{html.escape(c['paper'])}</td><td>{html.escape(c['claim'])}</td><td><b>{html.escape(c['verdict'])}</b></td>"
        f"<td><small>{html.escape(c['evidence'])}</small></td></tr>" for c in metrics["claims"])
    ex = _examples(out, metrics, n_examples)
    lj = metrics.get("likert_judge") or {}
    page = f"""<!doctype html><html><head><meta charset="utf-8"><title>vlrl demo --compare</title>
<style>body{{font-family:sans-serif;max-width:1150px;margin:2em auto}}td,th{{padding:4px 8px;border-bottom:1px solid #ddd;
vertical-align:top;text-align:left}}table{{border-collapse:collapse}}mark{{background:#f7b0b0}}</style></head><body>
<h1>vlrl demo --compare: caption rewards side by side in the shapes world</h1>
<p>{'Quick' if cfg.quick else 'Full'} run, seed {cfg.seed}. Every row starts from the same warm-start captioner and trains
{cfg.demo.grpo_steps} GRPO steps ({cfg.demo.images_per_step} images × {cfg.demo.num_generations} captions per step) with the
same seed, the same length/repetition guards and the same grammar format reward; only the main reward differs. Every row
is graded by a <b>rule-based reader of the world's grammar that learned nothing</b>, checked against the scenes, on
{metrics['eval_questions']} curated questions of {metrics['eval_scenes']} evaluation scenes whose layouts no model trained on.
<code>twin_judge_acc_after</code> is the <code>caprl_qa</code> reward answerer's twin (same data, seed
{cfg.seed + cfg.demo.judge_seed_offset}, never a reward): a second reader of the reward's own kind, not an independent one.
Accuracy before RL: <b>{ci_text(metrics['acc_before'], metrics.get('acc_before_ci'))}</b>. Every rate has its 95%
bootstrap interval over scenes in brackets; gain is paired with the warm start on the same questions. Hallucination: the
caption settles a question on the wrong option; <code>false_fact_rate</code>: the share of stated facts that are false,
read with the world's grammar against the scene; "cannot answer": the caption left the fact out.</p>
<table><tr>{head}</tr>{''.join(body)}</table>
<h3>Reader accuracy per question kind (greedy captions)</h3><table>{by_kind}</table>
<p><small>Likert judge: a tiny VLM initialised from a captioner of another seed, trained on {html.escape(str(lj.get('trained_on')))};
held-out agreement with that oracle: exact {lj.get('heldout_exact')}, within ±1 {lj.get('heldout_within1')},
Spearman {lj.get('heldout_spearman')}, unparseable answers {lj.get('heldout_failure_rate')}.</small></p>
<h2>The papers' claims</h2>
<p>Fixed rules, applied to every row: two rates whose 95% intervals overlap are <b>not distinguishable</b>; otherwise a
difference counts beyond {MARGIN}. A judge is biased when it overrates captions with mis-stated facts by more than
{BIAS_POINTS} points; a reward is hacked when it rises by at least {REWARD_RISE} while the reader's accuracy shows no
gain over the warm start beyond {MARGIN}, or the captions state more false facts than the warm start's (beyond {MARGIN}).
One seed{' and the quick budget' if cfg.quick else ''}: read the verdicts as what this run shows, not as a test of the papers at scale.</p>
<table><tr><th>paper</th><th>claim</th><th>verdict</th><th>numbers</th></tr>{verdicts}</table>
<h2>Reward over steps</h2><img src="data:image/png;base64,{plots['rewards']}">
<h2>Held-out evaluation</h2><img src="data:image/png;base64,{plots['table']}">
<h2>Examples (greedy captions of evaluation scenes; <mark>wrong facts</mark> marked against the scene)</h2>{ex}
<p>Wall time: warm start {metrics.get('warm_start_seconds')} s, run {metrics.get('run_seconds')} s.</p>
<h2>All metrics</h2><pre>{html.escape(json.dumps(metrics, indent=1))}</pre>
</body></html>"""
    path = out / "report.html"
    path.write_text(page, encoding="utf-8")
    return path


def _examples(out: Path, metrics: dict[str, Any], n: int) -> str:
    evs = {}
    for r in metrics["rows"]:
        p = out / "eval" / f"{r['reward']}.json"
        if r.get("acc_after") is not None and p.exists():
            evs[r["reward"]] = json.loads(p.read_text())
    if not evs:
        return ""
    rows = {r["id"]: r for r in read_jsonl(out / "data" / "eval.jsonl")}
    first = next(iter(evs.values()))
    head = "<tr><th>truth</th>" + "".join(f"<th>{html.escape(k)}</th>" for k in evs) + "</tr>"
    lines = []
    for i, rid in enumerate(first["ids"][:n]):
        cells = "".join(f"<td>{marked_caption(ev['captions']['greedy'][i], rows[rid]['scene'])}</td>" for ev in evs.values())
        lines.append(f"<tr><td>{html.escape(rows[rid]['caption_full'])}</td>{cells}</tr>")
    return f"<table>{head}{''.join(lines)}</table>"
