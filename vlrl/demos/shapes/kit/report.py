"""``report.html`` of ``vlrl demo``: one self-contained page (plots and images inlined as base64).

It shows what a reader needs to believe the run: the reward and caption length over GRPO steps,
held-out accuracy before/after as judged by the judge answerer (and by the reward answerer),
the hallucination and "cannot answer" rates, and example images with their captions before and
after RL.
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
    groups = [("judge", "greedy"), ("judge", "sampled"), (answerer, "greedy"), (answerer, "sampled")]
    short = answerer.replace("_answerer", " ans.")
    labels = [f"{'judge' if w == 'judge' else short}\n{k}" for w, k in groups]
    x = range(len(groups))
    for j, (when, col) in enumerate((("before", "C7"), ("after", "C0"))):
        vals = [metrics[f"{w}_{k}_acc_{when}"] for w, k in groups]
        ax[0].bar([i + (j - 0.5) * 0.38 for i in x], vals, width=0.38, color=col, label=f"{when} RL")
    ax[0].set_xticks(list(x), labels, fontsize=8)
    ax[0].set_ylim(0, 1)
    ax[0].set_title("held-out caption-QA accuracy")
    ax[0].legend(fontsize=8)
    # Hallucination two ways: the judge picking a wrong concrete option (includes the judge's own
    # errors), and the share of stated facts that are false according to the caption grammar.
    cols = [("judge:\nwrong", lambda c, w: metrics[f"judge_{c}_hallucination_{w}"]),
            ("false\nfacts", lambda c, w: 1 - metrics[f"captions_{c}_stated_correct_{w}"]),
            ("judge:\nomitted", lambda c, w: metrics[f"judge_{c}_cannot_answer_{w}"])]
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


def write_report(out: Path, cfg, metrics: dict[str, Any], before: dict, after: dict,
                 history: list[dict[str, Any]], n_examples: int = 10, title: str = "CapRL",
                 intro_html: str | None = None, reward_key: str = "caprl_qa", extra_html: str = "",
                 answerer_label: str = "reward_answerer") -> Path:
    """The page; ``title``, ``intro_html``, ``reward_key``, ``extra_html`` and ``answerer_label``
    let the other shapes demos (RubiCap) reuse it for their own reward."""
    plots = _plots(metrics, history, reward_key, answerer_label)
    rows = {r["id"]: r for r in read_jsonl(out / "data" / "eval.jsonl")}
    ex = []
    for i, rid in enumerate(before["ids"][:n_examples]):
        r = rows[rid]
        sb, sa = before["judge_greedy"]["per_scene"][i], after["judge_greedy"]["per_scene"][i]
        ex.append(
            f"<tr><td><img src='data:image/png;base64,{thumb(out / 'data' / r['image'])}'></td>"
            f"<td>{html.escape(r['caption_full'])}</td>"
            f"<td>{html.escape(before['captions']['greedy'][i])}<br><small>judge acc {sb:.2f}</small></td>"
            f"<td>{html.escape(after['captions']['greedy'][i])}<br><small>judge acc {sa:.2f}</small></td>"
            f"<td><small>{html.escape(before['captions']['sampled'][i])}<br>→ {html.escape(after['captions']['sampled'][i])}</small></td></tr>"
        )
    m = metrics
    keys = ["acc_before", "acc_after", "gain", "reward_first", "reward_last", "grpo_steps", "wall_seconds", "seed"]
    table = "".join(f"<tr><th>{k}</th><td>{m.get(k)}</td></tr>" for k in keys)
    cur = m.get("curation", {})
    intro = intro_html if intro_html is not None else f"""<p>A tiny Qwen2.5-VL captioner ({'quick' if cfg.quick else 'full'} run, seed {cfg.seed}) trained with GRPO against the
<code>caprl_qa</code> reward (exact mode, tiny text answerer, guards on). Accuracy: every curated question of
{len(before['ids'])} held-out scenes, both option orders, answered from the caption by a <b>judge answerer trained with
another seed and never used as reward</b>.</p>"""
    page = f"""<!doctype html><html><head><meta charset="utf-8"><title>vlrl demo — shapes-world {title}</title>
<style>body{{font-family:sans-serif;max-width:1100px;margin:2em auto}}td,th{{padding:4px 8px;border-bottom:1px solid #ddd;
vertical-align:top;text-align:left}}table{{border-collapse:collapse}}</style></head><body>
<h1>vlrl demo: {title} in the shapes world</h1>
{intro}
<table>{table}</table>
<p>QA curation (text-only filter, no caption): {cur.get('train', {}).get('kept')} of {cur.get('train', {}).get('questions')}
training questions kept; dropped by kind: {html.escape(json.dumps({k: v['dropped'] for k, v in cur.get('by_kind', {}).items()}))}.</p>
<h2>Training</h2><img src="data:image/png;base64,{plots['training']}">
<h2>Held-out evaluation</h2><img src="data:image/png;base64,{plots['accuracy']}">
{extra_html}
<h2>Examples (greedy captions; sampled in the last column)</h2>
<table><tr><th>image</th><th>full caption (truth)</th><th>before RL</th><th>after RL</th><th>sampled before → after</th></tr>
{''.join(ex)}</table>
<h2>All metrics</h2><pre>{html.escape(json.dumps(m, indent=1))}</pre>
</body></html>"""
    path = out / "report.html"
    path.write_text(page, encoding="utf-8")
    return path
