"""``report.html`` of ``vlrl demo --compare``, and the verdicts on the papers' claims.

The verdicts are fixed rules over the measured table (:func:`claims`), written before any run and
applied whatever the numbers are, so the report cannot be steered toward a story:

* a difference in held-out accuracy counts only beyond ``MARGIN`` (about two standard errors of
  one row's accuracy on the quick run's held-out questions; rows share the eval set);
* a judge is "biased" when, on held-out (image, caption) pairs, it overrates captions with
  mis-stated facts by more than ``BIAS_POINTS`` on its 1–10 scale (mean error against the oracle);
* a reward is "hacked" when the row's own reward rose by at least ``REWARD_RISE`` while the
  QA judge saw no accuracy gain beyond ``MARGIN``, or the captions state more false facts
  than the warm start's by more than ``MARGIN`` (``false_fact_rate``: the world's parser against the
  scene, so the QA judge's own mistakes, which grow with every fact a caption states, do not count).
"""

from __future__ import annotations

import html
import json
from pathlib import Path
from typing import Any

from vlrl.core.pipeline import read_jsonl
from vlrl.demos.shapes.kit.report import png

MARGIN = 0.03
REWARD_RISE = 0.05
BIAS_POINTS = 1.0


def _row(metrics: dict[str, Any], name: str) -> dict[str, Any] | None:
    r = next((r for r in metrics["rows"] if r["reward"] == name), None)
    return r if r is not None and r.get("acc_after") is not None else None


def _fmt(x: float | None) -> str:
    return "n/a" if x is None else f"{x:+.3f}"


def claims(metrics: dict[str, Any]) -> list[dict[str, str]]:
    """Each claim with ``verdict`` (reproduced / not reproduced / not tested) and the numbers behind it."""
    base = metrics["acc_before"]
    nr = _row(metrics, "no_rl") or {}
    out = []

    def gain(r):
        return r["acc_after"] - base

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
                           f"(points on the 1-10 scale; exact agreement {judge.get('heldout_exact')}, "
                           f"Spearman {judge.get('heldout_spearman')})."))
    out.append(c)
    c = {"paper": "CapRL", "claim": "A Likert judge reward gets hacked: its score rises without the captions becoming "
         "more useful or more truthful."}
    if lik is None:
        c.update(verdict="not tested", evidence="the likert_judge row did not run")
    else:
        rise = (lik["reward_last"] or 0) - (lik["reward_first"] or 0)
        false_up = lik.get("false_fact_rate", 0) - nr.get("false_fact_rate", 0) > MARGIN
        hacked = rise >= REWARD_RISE and (gain(lik) <= MARGIN or false_up)
        c.update(
            verdict="reproduced" if hacked else "not reproduced",
            evidence=(f"Likert reward {lik['reward_first']} → {lik['reward_last']} (rise {rise:+.3f}); judge accuracy "
                      f"gain {_fmt(gain(lik))}; false facts stated {nr.get('false_fact_rate')} → {lik.get('false_fact_rate')}; "
                      f"QA judge's wrong-option rate {nr.get('hallucination_rate')} → {lik['hallucination_rate']}; "
                      f"mean words {nr.get('mean_words')} → {lik['mean_words']}."),
        )
    out.append(c)

    # CapRL: the QA reward beats the judge reward
    c = {"paper": "CapRL", "claim": "The QA-utility reward (caprl_qa) trains better captions than a Likert judge reward."}
    if lik is None or qa is None:
        c.update(verdict="not tested", evidence="a needed row did not run")
    else:
        d = qa["acc_after"] - lik["acc_after"]
        c.update(verdict="reproduced" if d > MARGIN else "not reproduced",
                 evidence=f"held-out accuracy caprl_qa exact {qa['acc_after']} vs Likert {lik['acc_after']} (difference {d:+.3f}).")
    out.append(c)

    # RubiCap: rubrics beat Likert judging and reference overlap
    for other, label in ((lik, "a Likert judge"), (rou, "ROUGE-L against a reference caption")):
        name = "likert_judge" if other is lik else "rouge_l"
        c = {"paper": "RubiCap", "claim": f"Rubric rewards (rubicap_rubric) train better captions than {label}."}
        rrow = next((r for r in metrics["rows"] if r["reward"] == "rubicap_rubric"), None)
        if rub is None:
            reason = rrow.get("status") if rrow else "the row was not run"
            c.update(verdict="not tested", evidence=f"rubicap_rubric row: {reason}")
        elif other is None:
            c.update(verdict="not tested", evidence=f"the {name} row did not run")
        else:
            d = rub["acc_after"] - other["acc_after"]
            c.update(verdict="reproduced" if d > MARGIN else "not reproduced",
                     evidence=f"held-out accuracy rubicap_rubric {rub['acc_after']} vs {name} {other['acc_after']} "
                              f"(difference {d:+.3f}); hallucination {rub['hallucination_rate']} vs {other['hallucination_rate']}.")
        out.append(c)
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
    for a, key, title in ((ax[0], "acc_after", "held-out QA accuracy (judge)"),
                          (ax[1], "hallucination_rate", "hallucination rate (judge)"),
                          (ax[2], "mean_words", "mean caption length (words)")):
        a.bar(range(len(rows)), [r[key] for r in rows], color=["C7"] + [f"C{i}" for i in range(len(rows) - 1)])
        a.set_xticks(range(len(rows)), names, fontsize=7)
        a.set_title(title, fontsize=9)
    ax[0].axhline(metrics["acc_before"], color="k", lw=0.6, ls="--")
    out["table"] = png(fig)
    plt.close(fig)
    return out


def write_compare_report(out: Path, cfg, metrics: dict[str, Any], n_examples: int = 6) -> Path:
    metrics["claims"] = claims(metrics)
    plots = _plots(metrics)
    cols = ("acc_after", "hallucination_rate", "cannot_answer_rate", "mean_words", "false_fact_rate",
            "reward_first", "reward_last")
    head = "".join(f"<th>{c}</th>" for c in ("reward", "gain", *cols, "status"))
    body = []
    for r in metrics["rows"]:
        g = None if r.get("acc_after") is None else r["acc_after"] - metrics["acc_before"]
        body.append("<tr><td><b>" + html.escape(r["reward"]) + "</b></td><td>" + _fmt(g) + "</td>"
                    + "".join(f"<td>{'' if r.get(c) is None else r.get(c)}</td>" for c in cols)
                    + f"<td>{html.escape(str(r.get('status')))}</td></tr>")
    verdicts = "".join(
        f"<tr><td>{html.escape(c['paper'])}</td><td>{html.escape(c['claim'])}</td><td><b>{html.escape(c['verdict'])}</b></td>"
        f"<td><small>{html.escape(c['evidence'])}</small></td></tr>" for c in metrics["claims"])
    ex = _examples(out, metrics, n_examples)
    lj = metrics.get("likert_judge") or {}
    page = f"""<!doctype html><html><head><meta charset="utf-8"><title>vlrl demo --compare</title>
<style>body{{font-family:sans-serif;max-width:1150px;margin:2em auto}}td,th{{padding:4px 8px;border-bottom:1px solid #ddd;
vertical-align:top;text-align:left}}table{{border-collapse:collapse}}</style></head><body>
<h1>vlrl demo --compare: caption rewards side by side in the shapes world</h1>
<p>{'Quick' if cfg.quick else 'Full'} run, seed {cfg.seed}. Every row starts from the same warm-start captioner and trains
{cfg.demo.grpo_steps} GRPO steps ({cfg.demo.images_per_step} images × {cfg.demo.num_generations} captions per step) with the
same seed, the same length/repetition guards and the same grammar format reward; only the main reward differs. Every row
is graded by one <b>QA judge answerer</b> (the <code>caprl_qa</code> reward answerer's twin: a tiny answerer trained on the same data with seed {cfg.seed + cfg.demo.judge_seed_offset},
never a reward) on {metrics['eval_questions']} curated questions of {metrics['eval_scenes']} held-out scenes, both option
orders. Accuracy before RL: <b>{metrics['acc_before']}</b>. Hallucination: the judge picks a wrong concrete option
(the caption said something false, or the judge misread a true caption); <code>false_fact_rate</code>: the share of
stated facts that are false, read with the world's grammar against the scene (the truth, with no judge in between);
"cannot answer": the caption left the fact out.</p>
<table><tr>{head}</tr>{''.join(body)}</table>
<p><small>Likert judge: a tiny VLM initialised from a captioner of another seed, trained on {html.escape(str(lj.get('trained_on')))};
held-out agreement with that oracle: exact {lj.get('heldout_exact')}, within ±1 {lj.get('heldout_within1')},
Spearman {lj.get('heldout_spearman')}, unparseable answers {lj.get('heldout_failure_rate')}.</small></p>
<h2>The papers' claims</h2>
<p>Fixed rules: an accuracy difference counts beyond {MARGIN}; a judge is biased when it overrates captions with
mis-stated facts by more than {BIAS_POINTS} points; a reward is hacked when it rises by at least {REWARD_RISE} while
the QA judge sees no gain beyond {MARGIN}, or the captions state more false facts than the warm start's (beyond {MARGIN}). One seed{' and the quick budget' if cfg.quick else ''}:
read the verdicts as what this run shows, not as a test of the papers at scale.</p>
<table><tr><th>paper</th><th>claim</th><th>verdict</th><th>numbers</th></tr>{verdicts}</table>
<h2>Reward over steps</h2><img src="data:image/png;base64,{plots['rewards']}">
<h2>Held-out evaluation</h2><img src="data:image/png;base64,{plots['table']}">
<h2>Examples (greedy captions of held-out scenes)</h2>{ex}
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
        cells = "".join(f"<td>{html.escape(ev['captions']['greedy'][i])}</td>" for ev in evs.values())
        lines.append(f"<tr><td>{html.escape(rows[rid]['caption_full'])}</td>{cells}</tr>")
    return f"<table>{head}{''.join(lines)}</table>"
