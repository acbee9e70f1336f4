"""Information density: how much of an image a caption conveys within a fixed number of words.

RubiCap reports CaptionQA-style curves: captions are cut to word budgets (50, 100, 200, 400 words)
and a text-only answerer answers the image's multiple-choice questions from the truncated caption
alone. A captioner that front-loads the important content keeps its accuracy at small budgets; one
that opens with filler ("This image shows a scene that...") loses it.

The scoring *is* CapRL's ``caprl_qa`` reward (built with :func:`vlrl.rewards.build_reward`, so the
answer prompt, option shuffling and "cannot answer" option are the same code that trains CapRL
models), but with evaluation settings by default (:data:`EVAL_SETTINGS`): every question of an image
asked exactly once (``every_question``, not the training reward's draws with replacement, which skip
some questions and repeat others), one round, scored exactly from the answerer's probabilities
(``mode: exact``). ``--set KEY=VALUE`` overrides any of them. This module truncates, batches,
aggregates and plots; each accuracy comes with a 95% bootstrap interval over images, and the
answerer's parse failures (answers with no readable option letter) are reported as a rate, so a
broken answerer is not mistaken for an uninformative caption. Captions come from JSONL
files (``{"image_id", "caption"}``) or from captioner specs run on the QA dataset's images.

Outputs in ``--out``: ``scores.jsonl`` (one line per captioner × budget × image, the resumable unit),
``results.json`` (accuracy per captioner and budget, with counts and mean words actually used),
``accuracy_vs_budget.png``.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from vlrl.captioning.captioner import unique_names
from vlrl.core.backends import Backend
from vlrl.core.pipeline import JsonlStore, atomic_write_json
from vlrl.core.stage import Outcome, run_stage
from vlrl.core.stats import bootstrap_mean
from vlrl.methods.rubicap.captioner import caption_counts, collect_captions
from vlrl.methods.rubicap.contestants import check_caption_file, is_caption_file_spec, split_contestant
from vlrl.methods.rubicap.sources import load_images

logger = logging.getLogger(__name__)

DEFAULT_BUDGETS = (50, 100, 200, 400)
EVAL_SETTINGS: dict[str, Any] = {"every_question": True, "mode": "exact", "rounds": 1, "draws": "fixed"}
"""``draws: fixed``: option orders do not depend on how many reward calls the evaluation is batched into."""


def truncate_words(text: str, budget: int | None) -> str:
    """The first ``budget`` whitespace-separated words (``None``: the whole caption)."""
    words = text.split()
    return " ".join(words if budget is None else words[:budget])


def parse_budgets(spec: str | Sequence[int]) -> list[int]:
    try:
        vals = [int(x) for x in spec.split(",") if x.strip()] if isinstance(spec, str) else [int(x) for x in spec]
    except (TypeError, ValueError):
        vals = []
    if not vals or any(v < 1 for v in vals):
        raise ValueError(f"--budgets {spec!r}: expected positive word counts such as 50,100,200,400")
    return sorted(set(vals))


def run_caption_qa(
    qa: str | Path,
    answerer: str | Backend,
    out: str | Path,
    *,
    captions: Sequence[str | Path] = (),
    captioners: Sequence[str | Backend] = (),
    budgets: Sequence[int] = DEFAULT_BUDGETS,
    reward_settings: dict[str, Any] | None = None,
    batch_size: int = 32,
    caption_max_tokens: int = 1024,
) -> dict[str, Any]:
    """Score every captioner at every budget (plus full length); writes results, returns them."""
    from vlrl.rewards import build_reward

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    if not captions and not captioners:
        raise ValueError("give at least one --captions FILE or --captioner SPEC")
    items = load_images(qa, out / "images")
    questions = {it.image_id: it.meta.get("questions") for it in items}
    if not any(questions.values()):
        raise ValueError(f"{qa}: no 'questions' column (expected a QA dataset from `vlrl data` CapRL curation)")
    budgets = parse_budgets(budgets)
    specs = [str(c) for c in captions] + list(captioners)
    named = [split_contestant(s) if isinstance(s, str) else (None, s) for s in specs]
    names = unique_names([s for _, s in named], [n for n, _ in named])
    for name, (_, spec) in zip(names, named, strict=True):
        if is_caption_file_spec(spec):
            check_caption_file(name, spec)
    caps = collect_captions(
        items, dict(zip(names, [s for _, s in named], strict=True)), out, None, batch_size, caption_max_tokens
    )

    settings = {**EVAL_SETTINGS, **(reward_settings or {})}
    reward = build_reward("caprl_qa", answerer=answerer, cache=str(out / "cache"), **settings)
    store = JsonlStore(out / "scores.jsonl", key_field="key")
    levels: list[int | None] = [*budgets, None]
    try:
        units = [
            (name, b, it.image_id)
            for name in names
            for b in levels
            for it in items
            if it.image_id in caps[name]
        ]

        def unit_key(unit: tuple[str, int | None, str]) -> str:
            return f"{unit[0]}::{unit[1] or 'full'}::{unit[2]}"

        def process(batch: list[tuple[str, int | None, str]]) -> list[Outcome]:
            texts = [truncate_words(caps[n][iid], b) for n, b, iid in batch]
            scores = reward.score(texts, questions=[questions[iid] for _, _, iid in batch])
            done = []
            for (n, b, iid), text, s in zip(batch, texts, scores, strict=True):
                key = unit_key((n, b, iid))
                if s.details.get("errors"):
                    # an ask failed (endpoint down, a bad reply): the score would be over a smaller
                    # question set than the image has, so it is not a result; the next run retries it
                    done.append(Outcome.fail(key, s.details.get("reason", "answerer failed"),
                                             label=f"{n} at {b or 'full'} words, {iid}"))
                    continue
                done.append(Outcome.ok(key, {"key": key, "captioner": n, "budget": b, "image_id": iid,
                                             "words": len(text.split()), "score": s.value, "details": s.details}))
            return done

        run_stage(units, key=unit_key, process=process, store=store,
                  batch_size=batch_size, desc="caption-qa", progress_by="ask",
                  failure_log="{desc}: {label}: {reason}; will retry on the next run")
        results = aggregate(list(store), names, levels, items, caps)
        _count_failed(results, units, store, unit_key)
        results["settings"] = settings
        results["caption_counts"] = caption_counts(out, names)  # empty / truncated captions per captioner
    finally:
        store.close()
    atomic_write_json(out / "results.json", results)
    try:
        plot(results, out / "accuracy_vs_budget.png")
    except Exception as e:  # a plot must never lose computed results
        logger.warning("caption-qa: could not draw the plot: %s", e)
    return results


def _count_failed(results: dict[str, Any], units: list, store: JsonlStore, unit_key: Any) -> None:
    """Add to each captioner × budget the units with no stored score (their asks failed; retried by
    the next run) to ``unscored`` and ``failed``: accuracy is never over a silently smaller set."""
    for unit in units:
        if unit_key(unit) not in store:
            cell = results["captioners"][unit[0]][str(unit[1] or "full")]
            cell["failed"] = cell.get("failed", 0) + 1
            cell["unscored"] += 1


def aggregate(rows: list[dict], names: list[str], levels: list[int | None], items, caps) -> dict[str, Any]:
    per: dict[str, Any] = {}
    for n in names:
        per[n] = {}
        for b in levels:
            mine = [r for r in rows if r["captioner"] == n and r["budget"] == b]
            vals = [r["score"] for r in mine if r["score"] is not None]
            asks = sum(int(r["details"].get("asks", 0)) for r in mine)
            parse_failures = sum(int(r["details"].get("parse_failures", 0)) for r in mine)
            per[n][str(b or "full")] = {
                "accuracy": sum(vals) / len(vals) if vals else None,
                "accuracy_ci95": bootstrap_mean(vals),
                "questions_asked": asks,
                "parse_failures": parse_failures,
                "parse_failure_rate": parse_failures / asks if asks else None,
                "scored": len(vals),
                "unscored": len(mine) - len(vals),
                "mean_words": sum(r["words"] for r in mine) / len(mine) if mine else None,
            }
        per[n]["missing_captions"] = sum(it.image_id not in caps[n] for it in items)
    return {"images": len(items), "budgets": [b for b in levels if b is not None], "captioners": per}


def results_table(results: dict[str, Any]):
    from rich.table import Table

    t = Table(title="caption-QA accuracy by word budget")
    t.add_column("captioner")
    cols = [str(b) for b in results["budgets"]] + ["full"]
    for c in cols:
        t.add_column(f"{c} words" if c != "full" else "full", justify="right")
    t.add_column("missing", justify="right")
    for name, r in results["captioners"].items():
        cells = []
        for c in cols:
            acc = r[c]["accuracy"]
            ci = r[c].get("accuracy_ci95")
            span = f" [{ci[0]:.2f}–{ci[1]:.2f}]" if ci else ""
            pf = r[c].get("parse_failure_rate")
            bad = f" pf {pf:.0%}" if pf else ""
            cells.append("—" if acc is None else f"{acc:.3f}{span} ({r[c]['mean_words']:.0f}w){bad}")
        t.add_row(name, *cells, str(r["missing_captions"]))
    return t


def plot(results: dict[str, Any], path: str | Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    budgets = results["budgets"]
    for k, (name, r) in enumerate(results["captioners"].items()):
        ys = [r[str(b)]["accuracy"] for b in budgets]
        (line,) = ax.plot(budgets, [float("nan") if y is None else y for y in ys], marker="o", label=name)
        full = r["full"]["accuracy"]
        if full is not None:
            ax.axhline(full, color=line.get_color(), linestyle="--", linewidth=0.8, alpha=0.7, zorder=k)
    ax.set_xscale("log", base=2)
    ax.set_xticks(budgets, [str(b) for b in budgets])
    ax.set_xlabel("caption word budget (dashed: full caption)")
    ax.set_ylabel("QA accuracy")
    ax.set_ylim(0, 1)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
