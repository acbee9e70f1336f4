"""``report.html`` of ``vlrl demo``: one self-contained page (plots and images inlined as base64).

It shows what a reader needs to believe the run: the reward and caption length over GRPO steps,
held-out accuracy before/after as judged by the rule-based reader (the headline judge, which
learned nothing: :mod:`vlrl.demos.shapes.kit.judging`), by the reward answerer's twin and by the
reward answerer, each with its 95% interval over scenes; accuracy per question kind; the
hallucination and "cannot answer" rates; the full-caption SFT baseline; the wall time split into
warm start and run; and example images with their captions before and after RL, wrong facts marked.
"""

from __future__ import annotations

import base64
import html
import io
import json
from pathlib import Path
from typing import Any

from vlrl.core.pipeline import read_jsonl


def png(fig) -> str:
    """A matplotlib figure as base64 PNG, for inlining in a self-contained page."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90, bbox_inches="tight")
    return base64.b64encode(buf.getvalue()).decode()


def _plots(metrics: dict[str, Any], history: list[dict[str, Any]], reward_key: str = "caprl_qa",
           answerer: str = "reward_answerer") -> dict[str, str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = {}
    steps = [h["step"] for h in history]
    fig, ax = plt.subplots(1, 2, figsize=(10, 3.2))
    ax[0].plot(steps, [h.get(f"rewards/{reward_key}/mean", h["reward"]) for h in history], lw=1,
               label=f"mean reward ({reward_key})")
    if any("shapes_grammar/parse_ok" in h for h in history):
        ax[0].plot(steps, [h.get("shapes_grammar/parse_ok", float("nan")) for h in history], lw=0.8, alpha=0.7,
                   label="captions in grammar")
    zero = [h.get("frac_reward_zero_std") for h in history]
    if any(z is not None for z in zero):
        ax[0].plot(steps, [z if z is not None else float("nan") for z in zero], lw=0.8, alpha=0.6,
                   label="groups with zero reward spread")
    ax[0].set_xlabel("GRPO step")
    ax[0].set_ylim(0, 1.02)
    ax[0].legend(fontsize=8)
    ax[0].set_title("reward")
    ax[1].plot(steps, [h.get("completions/mean_length", float("nan")) for h in history], lw=1, color="C2")
    ax[1].set_xlabel("GRPO step")
    ax[1].set_ylabel("tokens")
    ax[1].set_title("caption length")
    out["training"] = png(fig)
    plt.close(fig)

    fig, ax = plt.subplots(1, 2, figsize=(12, 3.6))
    groups = [(w, k) for w, k in (("reader", "greedy"), ("reader", "sampled"), ("twin_judge", "greedy"),
                                  (answerer, "greedy")) if f"{w}_{k}_acc_before" in metrics]
    short = answerer.replace("_answerer", " ans.")
    labels = [f"{ {'reader': 'reader', 'twin_judge': 'twin judge'}.get(w, short)}\n{k}" for w, k in groups]
    x = range(len(groups))
    whens = [("before", "C7"), ("after", "C0")] + ([("full_sft", "C2")] if "reader_greedy_acc_full_sft" in metrics else [])
    width = 0.8 / len(whens)
    for j, (when, col) in enumerate(whens):
        vals = [metrics[f"{w}_{k}_acc_{when}"] for w, k in groups]
        cis = [metrics.get(f"{w}_{k}_acc_{when}_ci") or [v, v] for (w, k), v in zip(groups, vals, strict=True)]
        err = [[v - c[0] for v, c in zip(vals, cis, strict=True)], [c[1] - v for v, c in zip(vals, cis, strict=True)]]
        label = {"before": "warm start (before RL)", "after": "after RL", "full_sft": "full-caption SFT"}[when]
        ax[0].bar([i + (j - (len(whens) - 1) / 2) * width for i in x], vals, width=width, color=col, label=label,
                  yerr=err, capsize=2)
    ax[0].set_xticks(list(x), labels, fontsize=8)
    ax[0].set_ylim(0, 1)
    ax[0].set_title("held-out caption-QA accuracy (95% intervals over scenes)")
    ax[0].legend(fontsize=8)
    # Hallucination two ways: the judge picking a wrong concrete option (includes the judge's own
    # errors), and the share of stated facts that are false according to the caption grammar.
    cols = [("reader:\nwrong", lambda c, w: metrics[f"reader_{c}_hallucination_{w}"]),
            ("false\nfacts", lambda c, w: 1 - metrics[f"captions_{c}_stated_correct_{w}"]),
            ("reader:\nomitted", lambda c, w: metrics[f"reader_{c}_cannot_answer_{w}"])]
    ticks = [(lab, c, fn) for lab, fn in cols for c in ("greedy", "sampled")]
    for j, (when, col) in enumerate((("before", "C7"), ("after", "C3"))):
        ax[1].bar([i + (j - 0.5) * 0.38 for i in range(len(ticks))], [fn(c, when) for _, c, fn in ticks],
                  width=0.38, color=col, label=f"{when} RL")
    ax[1].set_xticks(range(len(ticks)), [f"{lab}\n{c}" for lab, c, _ in ticks], fontsize=7)
    ax[1].set_ylim(0, 1)
    ax[1].set_title("hallucination and omission")
    ax[1].legend(fontsize=8)
    out["accuracy"] = png(fig)
    plt.close(fig)
    return out


def thumb(path: Path, scale: int = 3) -> str:
    """An image file enlarged ``scale`` times (nearest neighbour: the pixels stay visible), as base64 PNG."""
    from PIL import Image

    img = Image.open(path).convert("RGB")
    img = img.resize((img.width * scale, img.height * scale), Image.NEAREST)
    buf = io.BytesIO()
    img.save(buf, format="PNG")
    return base64.b64encode(buf.getvalue()).decode()


def marked_caption(caption: str, scene_dict: dict[str, Any]) -> str:
    """The caption as HTML with every wrong stated fact highlighted (checked against the scene)."""
    from vlrl.demos.shapes.kit import world as W
    from vlrl.demos.shapes.kit.judging import fact_marks

    pieces = fact_marks(caption, W.Scene.from_dict(scene_dict))
    if pieces is None:
        return f"{html.escape(caption)} <small><i>(outside the grammar: answers nothing)</i></small>"
    return "".join(f"<mark>{html.escape(t)}</mark>" if wrong else html.escape(t) for t, wrong in pieces)


def ci_text(value: float | None, ci: list[float] | None) -> str:
    """``0.812 [0.781, 0.840]`` (or just the value without an interval)."""
    if value is None:
        return "n/a"
    return f"{value:.3f}" + (f" [{ci[0]:.3f}, {ci[1]:.3f}]" if ci else "")


def judges_table(m: dict[str, Any], answerer: str = "reward_answerer") -> str:
    """Accuracy / wrong-option / cannot-answer rates per judge, caption kind and checkpoint, with intervals."""
    whens = ["before", "after"] + (["full_sft"] if "reader_greedy_acc_full_sft" in m else [])
    names = {"before": "warm start", "after": "after RL", "full_sft": "full-caption SFT (no RL)"}
    judges = {"reader": "rule-based reader (headline; learned nothing)",
              "twin_judge": "twin judge (the reward answerer's twin: same data, other seed)",
              answerer: answerer.replace("_", " ") + " (the reward's own reader)" if answerer == "reward_answerer"
              else answerer.replace("_", " ")}
    head = "<tr><th>judge</th><th>captions</th><th>rate</th>" + "".join(f"<th>{names[w]}</th>" for w in whens) + "</tr>"
    body = []
    for who, label in judges.items():
        for kind in ("greedy", "sampled"):
            for short in ("acc", "hallucination", "cannot_answer"):
                if f"{who}_{kind}_{short}_before" not in m:
                    continue
                cells = "".join(f"<td>{ci_text(m.get(f'{who}_{kind}_{short}_{w}'), m.get(f'{who}_{kind}_{short}_{w}_ci'))}</td>"
                                for w in whens)
                body.append(f"<tr><td>{html.escape(label)}</td><td>{kind}</td><td>{short}</td>{cells}</tr>")
    return f"<table>{head}{''.join(body)}</table>"


def kinds_table(m: dict[str, Any]) -> str:
    """The reader's accuracy per question kind (greedy captions)."""
    cols = [("before", "acc_by_kind_before"), ("after RL", "acc_by_kind_after")]
    if m.get("acc_by_kind_full_sft"):
        cols.append(("full-caption SFT", "acc_by_kind_full_sft"))
    kinds = sorted(set().union(*(m.get(k) or {} for _, k in cols)))
    head = "<tr><th>question kind</th>" + "".join(f"<th>{n}</th>" for n, _ in cols) + "</tr>"
    rows = "".join("<tr><td>" + html.escape(k) + "</td>" + "".join(
        f"<td>{(m.get(key) or {}).get(k, '')}</td>" for _, key in cols) + "</tr>" for k in kinds)
    return f"<table>{head}{rows}</table>"


def write_report(out: Path, cfg, metrics: dict[str, Any], before: dict, after: dict,
                 history: list[dict[str, Any]], n_examples: int = 10, title: str = "CapRL",
                 intro_html: str | None = None, reward_key: str = "caprl_qa", extra_html: str = "",
                 answerer_label: str = "reward_answerer", full_sft: dict | None = None) -> Path:
    """The page; ``title``, ``intro_html``, ``reward_key``, ``extra_html`` and ``answerer_label``
    let the other shapes demos (RubiCap) reuse it for their own reward."""
    plots = _plots(metrics, history, reward_key, answerer_label)
    rows = {r["id"]: r for r in read_jsonl(out / "data" / "eval.jsonl")}
    ex = []
    for i, rid in enumerate(before["ids"][:n_examples]):
        r = rows[rid]
        sb, sa = before["reader_greedy"]["per_scene"][i], after["reader_greedy"]["per_scene"][i]
        fs = (f"<td>{marked_caption(full_sft['captions']['greedy'][i], r['scene'])}</td>" if full_sft else "")
        ex.append(
            f"<tr><td><img src='data:image/png;base64,{thumb(out / 'data' / r['image'])}'></td>"
            f"<td>{html.escape(r['caption_full'])}</td>"
            f"<td>{marked_caption(before['captions']['greedy'][i], r['scene'])}<br><small>reader acc {sb:.2f}</small></td>"
            f"<td>{marked_caption(after['captions']['greedy'][i], r['scene'])}<br><small>reader acc {sa:.2f}</small></td>{fs}"
            f"<td><small>{marked_caption(before['captions']['sampled'][i], r['scene'])}<br>→ "
            f"{marked_caption(after['captions']['sampled'][i], r['scene'])}</small></td></tr>"
        )
    m = metrics
    keys = [("accuracy before RL (reader)", ci_text(m.get("acc_before"), m.get("acc_before_ci"))),
            ("accuracy after RL (reader)", ci_text(m.get("acc_after"), m.get("acc_after_ci"))),
            ("gain (paired interval)", ci_text(m.get("gain"), m.get("gain_ci")))]
    if "acc_full_sft" in m:
        keys += [("full-caption SFT, no RL (reader)", ci_text(m["acc_full_sft"], m.get("acc_full_sft_ci"))),
                 ("after RL minus full-caption SFT", ci_text(m.get("gain_over_full_sft"), m.get("gain_over_full_sft_ci")))]
    keys += [(k, m.get(k)) for k in ("reward_first", "reward_last", "grpo_steps", "seed", "quick")]
    keys += [("wall time: warm start / run / total (s)",
              f"{m.get('warm_start_seconds')} / {m.get('run_seconds')} / {m.get('wall_seconds')}")]
    table = "".join(f"<tr><th>{html.escape(str(k))}</th><td>{html.escape(str(v))}</td></tr>" for k, v in keys)
    cur = m.get("curation", {})
    intro = intro_html if intro_html is not None else f"""<p>A tiny Qwen2.5-VL captioner ({'quick' if cfg.quick else 'full'} run, seed {cfg.seed}) trained with GRPO against the
<code>caprl_qa</code> reward (exact mode, tiny text answerer, guards on). Accuracy: every curated question of
{len(before['ids'])} evaluation scenes, answered from the caption by a <b>rule-based reader of the world's grammar
that learned nothing</b> and checked against the scene's truth. The evaluation scenes' layouts are held out of every
model's training (captioner, answerers, GRPO), so no evaluation image equals a training image.
The warm start RL begins from was SFT'd on captions with each attribute dropped with p={cfg.warm.drop_p}
after {cfg.warm.full_caption_steps} full-caption steps: its "before" is low by design.</p>"""
    cap_head = "<th>full-caption SFT</th>" if full_sft else ""
    page = f"""<!doctype html><html><head><meta charset="utf-8"><title>vlrl demo — shapes-world {title}</title>
<style>body{{font-family:sans-serif;max-width:1100px;margin:2em auto}}td,th{{padding:4px 8px;border-bottom:1px solid #ddd;
vertical-align:top;text-align:left}}table{{border-collapse:collapse}}mark{{background:#f7b0b0}}</style></head><body>
<h1>vlrl demo: {title} in the shapes world</h1>
{intro}
<table>{table}</table>
<p>QA curation (text-only filter, no caption): {cur.get('train', {}).get('kept')} of {cur.get('train', {}).get('questions')}
training questions kept; dropped by kind: {html.escape(json.dumps({k: v['dropped'] for k, v in cur.get('by_kind', {}).items()}))}.</p>
<h2>Training</h2><img src="data:image/png;base64,{plots['training']}">
<h2>Held-out evaluation</h2><img src="data:image/png;base64,{plots['accuracy']}">
{judges_table(m, answerer_label)}
<h3>Reader accuracy per question kind (greedy captions)</h3>{kinds_table(m)}
{extra_html}
<h2>Examples (greedy captions; sampled in the last column; <mark>wrong facts</mark> marked against the scene)</h2>
<table><tr><th>image</th><th>full caption (truth)</th><th>before RL</th><th>after RL</th>{cap_head}<th>sampled before → after</th></tr>
{''.join(ex)}</table>
<h2>All metrics</h2><pre>{html.escape(json.dumps(m, indent=1))}</pre>
</body></html>"""
    path = out / "report.html"
    path.write_text(page, encoding="utf-8")
    return path
