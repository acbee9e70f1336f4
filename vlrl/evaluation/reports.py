"""Readers and plots behind the evaluation notebooks (``notebooks/*.ipynb``).

Notebooks are for looking, not for logic: a cell that parses a results file is untested code that
drifts from the writer. So every notebook cell calls a function here, and ``tests/evaluation/test_notebooks.py``
runs the notebooks top to bottom on tiny fixtures. Three kinds of input:

* **evaluation results** — ``results.json`` of ``vlrl eval arena`` (``candidate`` + ``baselines``),
  of caption-QA (``captioners`` × word ``budgets``), and Prism-style decoupled QA (per-benchmark
  scores of one or more captioners); :func:`load_results` sorts them by kind;
* **scored rows** — the JSONL of ``vlrl reward score`` (``{"id", "reward", "details", ...}``, the
  row's own columns kept), for reward-vs-length, guard firing rates, per-question difficulty and
  the best/worst captions with their images;
* **a training run** — TRL writes ``trainer_state.json`` (whose ``log_history`` holds every logged
  step) into each ``checkpoint-N`` and, at the end, into ``output_dir``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pandas as pd

from vlrl.core.pipeline import read_jsonl
from vlrl.core.sources.rows import record_image
from vlrl.rewards.guards.core import SUMMARY_KEYS

# -- evaluation results ----------------------------------------------------------------------------------


def result_kind(results: dict[str, Any]) -> str:
    """``arena`` / ``caption_qa`` / ``prism`` / ``other``, from a results file's shape."""
    if "baselines" in results and "candidate" in results:
        return "arena"
    if "captioners" in results and "budgets" in results:
        return "caption_qa"
    if "benchmarks" in results or "prism" in str(results.get("eval", results.get("kind", ""))).lower():
        return "prism"
    if "captioners" in results and any(isinstance(v, dict) and "benchmarks" in v for v in results["captioners"].values()):
        return "prism"
    return "other"


def load_results(paths: str | Path | Iterable[str | Path]) -> dict[str, list[tuple[str, dict[str, Any]]]]:
    """Read results JSON files (a file, a folder searched recursively, or a list) grouped by kind.

    Returns ``{kind: [(label, results), ...]}``; the label is the file's folder name (or stem), made
    unique with more of its path where two would clash (:func:`unique_labels`).
    A searched folder may be a command's whole ``--out`` folder: the other JSON files there (job
    identity, stats) are of no results kind and are left out; files named explicitly are all kept.
    """
    searched = False
    if isinstance(paths, (str, Path)):
        p = Path(paths)
        files = sorted(p.rglob("*.json")) if p.is_dir() else [p]
        searched = p.is_dir()
    else:
        files = [Path(x) for x in paths]
    found: list[tuple[Path, str, dict[str, Any]]] = []
    for f in files:
        try:
            data = json.loads(f.read_text(encoding="utf-8"))
        except (OSError, ValueError) as e:
            raise ValueError(f"{f}: not a readable JSON results file ({e})") from None
        if not isinstance(data, dict):
            continue
        kind = result_kind(data)
        if searched and kind == "other":
            continue
        found.append((f, kind, data))
    labels = unique_labels([f for f, _, _ in found])
    out: dict[str, list[tuple[str, dict[str, Any]]]] = {}
    for (_, kind, data), label in zip(found, labels, strict=True):
        out.setdefault(kind, []).append((label, data))
    return out


def unique_labels(files: list[Path]) -> list[str]:
    """A label per results file: its folder's name (its stem when not named ``results.json``), with
    more of the path in front wherever two files would share one (``run-a/checkpoint-100`` and
    ``run-b/checkpoint-100``), so two runs never merge into one row."""
    def parts(f: Path) -> list[str]:
        own = f.parent.parts if f.stem == "results" else (*f.parent.parts, f.stem)
        return [x for x in own if x not in ("/", "")] or [f.stem]

    chains = [parts(f) for f in files]
    depth = [1] * len(files)
    while True:
        labels = ["/".join(c[-d:]) for c, d in zip(chains, depth, strict=True)]
        clash = {x for x in labels if labels.count(x) > 1}
        grow = [i for i, x in enumerate(labels) if x in clash and depth[i] < len(chains[i])]
        if not grow:  # whole paths that still clash (one file listed twice, x/a/results.json and x/a.json)
            seen: dict[str, int] = {}
            for i, x in enumerate(labels):
                seen[x] = seen.get(x, 0) + 1
                if seen[x] > 1:
                    labels[i] = f"{x} #{seen[x]}"
            return labels
        for i in grow:
            depth[i] += 1


def _score_of(v: Any) -> float | None:
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return float(v)
    if isinstance(v, dict):
        for k in ("score", "accuracy", "relaxed_accuracy", "anls", "acc"):
            if isinstance(v.get(k), (int, float)):
                return float(v[k])
    return None


def captioner_name(spec: str) -> str:
    """The short name other evaluations use for a captioner spec (``NAME=SPEC`` keeps ``NAME``)."""
    from vlrl.captioning.captioner import spec_name, split_named

    name, spec = split_named(spec)
    return name or spec_name(spec)


def row_names(named: list[tuple[str, str]]) -> list[str]:
    """A row name per ``(captioner, run label)``: the captioner's name, or ``name (label)`` where
    several runs of one table share it (other options, other checkpoints). Two runs are two rows,
    never one row where the later silently overwrites the earlier."""
    shared = {n for n, _ in named if sum(m == n for m, _ in named) > 1}
    return [f"{n} ({label})" if n in shared else n for n, label in named]


def prism_table(runs: list[tuple[str, dict[str, Any]]]) -> pd.DataFrame:
    """Captioner × benchmark scores (plus their mean) from Prism-style results.

    ``vlrl eval prism`` writes one ``results.json`` per captioner (``captioner`` spec, and
    ``benchmarks: {name: {"accuracy", "n", ...}}``); files holding several ``captioners`` work too.
    A row is named by its captioner (:func:`row_names`).
    """
    named: list[tuple[str, str, dict[str, Any]]] = []  # (captioner, run label, benchmarks)
    for label, r in runs:
        if "captioners" in r:
            named += [(name, label, v.get("benchmarks", v)) for name, v in r["captioners"].items()]
        else:
            spec = r.get("captioner") or r.get("model")
            named.append((captioner_name(str(spec)) if spec else label, label, r["benchmarks"]))
    rows: dict[str, dict[str, float]] = {}
    for row, (_, _, benches) in zip(row_names([(n, lb) for n, lb, _ in named]), named, strict=True):
        for bench, v in benches.items():
            s = _score_of(v)
            if s is not None:
                rows.setdefault(row, {})[bench] = s
    df = pd.DataFrame.from_dict(rows, orient="index").sort_index(axis=1)
    if not df.empty:
        df["average"] = df.mean(axis=1)
    df.index.name = "captioner"
    return df


def arena_table(runs: list[tuple[str, dict[str, Any]]]) -> pd.DataFrame:
    """One row per (candidate, baseline): win rate, score %, consistency, caption lengths (the
    candidate named by :func:`row_names`, so two runs of one candidate stay apart)."""
    rows = []
    names = row_names([(r["candidate"], label) for label, r in runs])
    for name, (label, r) in zip(names, runs, strict=True):
        for base, v in r["baselines"].items():
            rows.append(
                {
                    "candidate": name, "baseline": base, "pairs": v.get("pairs"),
                    "win_rate": v.get("win_rate"), "score_pct": v.get("score_pct"),
                    "position_consistency": v.get("position_consistency"),
                    "candidate_words": v.get("candidate_words"), "baseline_words": v.get("baseline_words"),
                    "run": label,
                }
            )
    return pd.DataFrame(rows)


def caption_qa_table(runs: list[tuple[str, dict[str, Any]]]) -> pd.DataFrame:
    """Captioner × word budget QA accuracy (``full`` = untruncated caption; rows by :func:`row_names`)."""
    named = [(name, label, [str(b) for b in r["budgets"]] + ["full"], v)
             for label, r in runs for name, v in r["captioners"].items()]
    rows: dict[str, dict[str, float | None]] = {}
    for row, (_, _, cols, v) in zip(row_names([(n, lb) for n, lb, _, _ in named]), named, strict=True):
        rows[row] = {c: (v.get(c) or {}).get("accuracy") for c in cols}
    df = pd.DataFrame.from_dict(rows, orient="index")
    df.index.name = "captioner"
    return df


def summary_table(results: dict[str, list[tuple[str, dict[str, Any]]]]) -> pd.DataFrame:
    """Side by side, one row per captioner: Prism average, arena score %, caption-QA at each budget.

    Rows line up by captioner name. A captioner with several runs of one kind has one row per run
    there (``name (label)``, :func:`row_names`), and its other evaluations stay on the plain name's
    row: which of two Prism runs an arena run goes with is not in the files."""
    parts = []
    if results.get("prism"):
        parts.append(prism_table(results["prism"])[["average"]].rename(columns={"average": "prism_avg"}))
    if results.get("arena"):
        a = arena_table(results["arena"]).groupby("candidate")["score_pct"].mean().rename("arena_score_pct")
        parts.append(a.to_frame())
    if results.get("caption_qa"):
        parts.append(caption_qa_table(results["caption_qa"]).add_prefix("capqa_"))
    if not parts:
        return pd.DataFrame()
    df = pd.concat(parts, axis=1)
    df.index.name = "captioner"
    return df


# -- scored rows (reward diagnostics) ---------------------------------------------------------------


def _caption_text(v: Any) -> str:
    if isinstance(v, list) and v and isinstance(v[-1], dict):
        c = v[-1].get("content", "")
        return c if isinstance(c, str) else " ".join(p.get("text", "") for p in c if isinstance(p, dict))
    return v if isinstance(v, str) else ""


def load_scored(path: str | Path) -> pd.DataFrame:
    """Rows of a ``vlrl reward score`` output: caption, words, reward, and each detail as a column.

    Numeric and boolean details become columns named after their key (``qa_acc``, ``guard/...``);
    ``image`` paths are resolved against the file's folder.
    """
    path = Path(path)
    rows = []
    for r in read_jsonl(path):
        caption = _caption_text(r.get("completion", r.get("caption", "")))
        row: dict[str, Any] = {
            "id": r.get("id"),
            "image_id": r.get("image_id", r.get("id")),
            "caption": caption,
            "words": len(caption.split()),
            "reward": r.get("reward"),
        }
        img = record_image(r)
        if isinstance(img, str):
            row["image"] = str(img if Path(img).is_absolute() else path.parent / img)
        for k, v in (r.get("details") or {}).items():
            if isinstance(v, (bool, int, float)) or v is None:
                row[k] = v
        if isinstance((r.get("details") or {}).get("per_question"), dict):
            row["per_question"] = r["details"]["per_question"]
        rows.append(row)
    return pd.DataFrame(rows)


def reward_by_length(df: pd.DataFrame, bins: int = 5) -> pd.DataFrame:
    """Mean reward (and count) per caption-length bin: a judge that rewards verbosity shows here."""
    d = df.dropna(subset=["reward"])
    if d.empty:
        return pd.DataFrame(columns=["words", "mean_reward", "n"])
    cut = pd.cut(d["words"], bins=min(bins, max(1, d["words"].nunique())))
    g = d.groupby(cut, observed=True)["reward"]
    out = pd.DataFrame({"mean_reward": g.mean(), "n": g.size()})
    out.index = out.index.astype(str)
    out.index.name = "words"
    return out.reset_index()


def guard_rates(df: pd.DataFrame) -> pd.Series:
    """Share of captions on which each guard fired (``guard/<name>`` detail columns; the per-family
    ``guard/<name>/<family>`` columns break a guard's rate down and are not counted as guards)."""
    cols = [c for c in df.columns if isinstance(c, str) and c.startswith("guard/") and c.count("/") == 1
            and c not in GUARD_SUMMARIES]
    rates = {c.split("/", 1)[1]: float(df[c].fillna(0).astype(float).mean()) for c in cols}
    return pd.Series(rates, name="firing_rate", dtype=float).sort_values(ascending=False)


GUARD_SUMMARIES = SUMMARY_KEYS
"""Guard details that are no guard: ``any`` is their union (see :func:`any_guard_rate`), ``penalty``
the points taken off, not a 0/1 flag, and ``doubted`` whether a hit was set aside."""


def any_guard_rate(df: pd.DataFrame) -> float | None:
    """Share of captions on which at least one guard fired; ``None`` without guard details."""
    return float(df["guard/any"].fillna(0).astype(float).mean()) if "guard/any" in df.columns else None


ACCURACY_DETAILS = ("qa_acc", "accuracy")
"""Per-caption detail columns that are an accuracy in [0, 1], in order of preference."""


def question_difficulty(df: pd.DataFrame) -> pd.DataFrame:
    """Per-question accuracy across captions (``details.per_question``: ``{question: 0..1}``).

    Rewards that do not report per-question results fall back to a per-image accuracy detail
    (:data:`ACCURACY_DETAILS`, e.g. CapRL's ``qa_acc``), never to the reward itself: a reward holds
    guard penalties and other scales, and ``1 - reward`` is no difficulty. With neither, the frame is
    empty and ``.attrs["note"]`` says why. Sorted hardest first.
    """
    if "per_question" in df.columns and df["per_question"].notna().any():
        recs = [
            {"image_id": r.image_id, "question": q, "correct": float(v)}
            for r in df.itertuples()
            if isinstance(r.per_question, dict)
            for q, v in r.per_question.items()
        ]
        g = pd.DataFrame(recs).groupby(["image_id", "question"])["correct"]
        out = pd.DataFrame({"accuracy": g.mean(), "captions": g.size()}).reset_index()
    else:
        col = next((c for c in ACCURACY_DETAILS if c in df.columns and df[c].notna().any()), None)
        if col is None:
            out = pd.DataFrame(columns=["image_id", "accuracy", "captions", "difficulty"])
            out.attrs["note"] = ("no difficulty: the rows carry neither details.per_question nor an accuracy "
                                 f"detail ({', '.join(ACCURACY_DETAILS)})")
            return out
        g = df.dropna(subset=[col]).groupby("image_id")[col]
        out = pd.DataFrame({"accuracy": g.mean(), "captions": g.size()}).reset_index()
    out["difficulty"] = 1 - out["accuracy"]
    return out.sort_values("difficulty", ascending=False, kind="stable").reset_index(drop=True)


def extremes(df: pd.DataFrame, k: int = 3) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The ``k`` highest- and lowest-rewarded captions."""
    d = df.dropna(subset=["reward"]).sort_values("reward", ascending=False, kind="stable")
    return d.head(k), d.tail(k).iloc[::-1]


def show_examples(rows: pd.DataFrame, title: str = "", width: int = 60):
    """A figure: each row's image (when it has one) beside its reward and wrapped caption."""
    import textwrap

    import matplotlib.pyplot as plt
    from PIL import Image

    n = max(1, len(rows))
    fig, axes = plt.subplots(n, 2, figsize=(9, 2.2 * n), squeeze=False, gridspec_kw={"width_ratios": [1, 3]})
    for (ax_img, ax_txt), (_, r) in zip(axes, rows.iterrows(), strict=False):
        ax_img.axis("off")
        ax_txt.axis("off")
        img = r.get("image")
        if isinstance(img, str) and Path(img).exists():
            with Image.open(img) as im:
                ax_img.imshow(im.convert("RGB"))
        caption = textwrap.fill(str(r["caption"])[:400], width)
        ax_txt.text(0, 1, f"reward {r['reward']:.3f}  ({r['words']} words)\n{caption}", va="top", fontsize=8, family="monospace")
    fig.suptitle(title)
    fig.tight_layout()
    return fig


# -- training runs ---------------------------------------------------------------------------------------

_CKPT = re.compile(r"^checkpoint-(\d+)$")


def find_trainer_state(run_dir: str | Path) -> Path:
    """``run_dir/trainer_state.json`` if the run finished, else the newest checkpoint's."""
    run_dir = Path(run_dir)
    if (run_dir / "trainer_state.json").is_file():
        return run_dir / "trainer_state.json"
    ckpts = [(int(m.group(1)), p) for p in run_dir.glob("checkpoint-*") if (m := _CKPT.match(p.name)) and (p / "trainer_state.json").is_file()]
    if not ckpts:
        raise FileNotFoundError(f"{run_dir}: no trainer_state.json here or in any checkpoint-N/ folder")
    return max(ckpts)[1] / "trainer_state.json"


def load_log_history(run_dir: str | Path) -> pd.DataFrame:
    """Training log rows (one per logged step) of a TRL run directory, or of several stage folders.

    A PTST run keeps one output folder per stage (``stage*/``); their histories are concatenated
    with a ``stage`` column and a running ``global_step``.
    """
    run_dir = Path(run_dir)
    try:
        paths = [(None, find_trainer_state(run_dir))]
    except FileNotFoundError:
        stages = sorted(p for p in run_dir.iterdir() if p.is_dir()) if run_dir.is_dir() else []
        paths = []
        for s in stages:
            try:
                paths.append((s.name, find_trainer_state(s)))
            except FileNotFoundError:
                continue
        if not paths:
            raise
    frames, offset = [], 0
    for stage, p in paths:
        hist = json.loads(p.read_text(encoding="utf-8")).get("log_history", [])
        rows = [h for h in hist if "step" in h and "train_runtime" not in h]
        df = pd.DataFrame(rows)
        if df.empty:
            continue
        if stage is not None:
            df["stage"] = stage
        df["global_step"] = df["step"] + offset
        offset = int(df["global_step"].max())
        frames.append(df)
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


CURVES = {
    "reward": ("reward", "rewards/mean", "train/reward"),
    "length": ("completions/mean_length", "completion_length", "completions/mean_terminated_length"),
    "truncation": ("completions/clipped_ratio", "completions/truncated_ratio"),
    "kl": ("kl", "objective/kl", "train/kl"),
}


def training_curves(history: pd.DataFrame) -> pd.DataFrame:
    """``global_step`` plus the reward, length, truncation and KL columns under common names."""
    out = pd.DataFrame({"global_step": history.get("global_step", history.get("step"))})
    for name, keys in CURVES.items():
        col = next((k for k in keys if k in history.columns), None)
        out[name] = history[col].values if col else float("nan")
    for c in history.columns:
        if isinstance(c, str) and c.startswith("rewards/") and c.endswith("/mean"):
            out[c] = history[c].values
    if "stage" in history.columns:
        out["stage"] = history["stage"].values
    return out.dropna(subset=["reward", "length", "truncation", "kl"], how="all").reset_index(drop=True)


EMPTY_PANEL = {
    "kl": "no KL logged: with beta = 0 (TRL's default)\nTRL builds no reference model and computes no KL",
    "truncation": "no truncation rate logged",
}


def plot_training_curves(curves: pd.DataFrame):
    """Four panels: reward (and each reward's mean), completion length, truncation rate, KL."""
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    fig, axes = plt.subplots(2, 2, figsize=(10, 6), sharex=True)
    panels = [("reward", "reward"), ("length", "mean completion length (tokens)"), ("truncation", "truncated share"), ("kl", "KL to reference")]
    for ax, (col, label) in zip(axes.flat, panels, strict=False):
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # steps are whole numbers
        if curves[col].isna().all():  # say why a panel is empty instead of drawing nothing
            ax.text(0.5, 0.5, EMPTY_PANEL.get(col, f"no {col} logged"), ha="center", va="center",
                    transform=ax.transAxes, fontsize=8, wrap=True)
        ax.plot(curves["global_step"], curves[col], marker=".", label=col)
        if col == "reward":
            for c in curves.columns:
                if c.startswith("rewards/"):
                    ax.plot(curves["global_step"], curves[c], linestyle="--", label=c.removeprefix("rewards/").removesuffix("/mean"))
            ax.legend(fontsize=7)
        ax.set_title(label)
        ax.grid(alpha=0.3)
    for ax in axes[1]:
        ax.set_xlabel("step")
    fig.tight_layout()
    return fig


# -- guards on labelled captions ------------------------------------------------------------------------


def plot_guard_eval(result: dict[str, Any]):
    """Two panels from :func:`vlrl.rewards.scoring.guard_eval_files`: each corpus as a point (false
    positives across, recall up, 95% Wilson intervals as bars) against the goal's corner, with the pooled
    captions traced across the learned guard's thresholds where the layer has it; and the pooled rate of
    every category (hacks caught; honest captions flagged)."""
    import matplotlib.pyplot as plt

    goal = result["goal"]
    corpora = result["corpora"]
    pooled = result["pooled"] or {"categories": {}}
    cats = sorted(pooled["categories"].items())  # hack/... before honest/...
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(13, max(4.5, 0.28 * len(cats) + 1.5)),
                                 gridspec_kw={"width_ratios": [1, 1]})
    ax.fill_between([0, goal["fpr"]], goal["recall"], 1.01, color="0.92")  # the goal's corner
    ax.axhline(goal["recall"], color="0.5", linestyle="--", linewidth=0.8)
    ax.axvline(goal["fpr"], color="0.5", linestyle="--", linewidth=0.8)
    for name, c in corpora.items():
        h, n = c["hacks"], c["honest"]
        if h["rate"] is None or n["rate"] is None:
            continue
        x, y = n["rate"], h["rate"]
        colour = "tab:green" if c["goal_met"] else "tab:red"  # (a file without both kinds has no point)
        # (an interval's end may miss its rate by a rounding error: a bar is never negative)
        ax.errorbar(x, y, xerr=[[max(0.0, x - n["ci95"][0])], [max(0.0, n["ci95"][1] - x)]],
                    yerr=[[max(0.0, y - h["ci95"][0])], [max(0.0, h["ci95"][1] - y)]],
                    fmt="o", color=colour, ecolor=colour, alpha=0.8, markersize=4, capsize=2, linewidth=0.8)
        ax.annotate(name.removeprefix("guard_corpus_"), (x, y), fontsize=7, xytext=(3, 3), textcoords="offset points")
    # the pooled captions at each of the learned guard's thresholds: what raising it trades
    if (table := pooled.get("learned_thresholds")) and all(v["hacks"]["n"] and v["honest"]["n"] for v in table["at"].values()):
        at = list(table["at"].items())
        ax.plot([v["honest"]["rate"] for _, v in at], [v["hacks"]["rate"] for _, v in at], "-", color="0.4",
                marker=".", linewidth=0.8, label="pooled, by the learned guard's threshold")
        for t, v in at:
            own = float(t) == table["threshold"]
            ax.annotate(t + (" (its own)" if own else ""), (v["honest"]["rate"], v["hacks"]["rate"]), fontsize=6,
                        color="0.3", xytext=(-4, -9), textcoords="offset points")
        ax.legend(fontsize=7, loc="lower right")
    ax.set_xlabel("honest captions flagged (false positives)")
    ax.set_ylabel("hacks caught (recall)")
    ax.set_title(f"each corpus; green: goal met (recall ≥ {goal['recall']:.2f}, false positives ≤ {goal['fpr']:.2f})", fontsize=9)
    ax.set_xlim(left=0)
    ax.set_ylim(top=1.01)
    rates = [v["rate"] for _, v in cats]  # (a category exists only where it has a row: never None)
    lo = [max(0.0, r - v["ci95"][0]) for r, (_, v) in zip(rates, cats, strict=True)]
    hi = [max(0.0, v["ci95"][1] - r) for r, (_, v) in zip(rates, cats, strict=True)]
    colours = ["tab:blue" if k.startswith("hack/") else "tab:orange" for k, _ in cats]
    bx.barh(range(len(cats)), rates, xerr=[lo, hi], color=colours, alpha=0.8, capsize=2)
    bx.set_yticks(range(len(cats)), [f"{k} ({v['flagged']}/{v['n']})" for k, v in cats], fontsize=7)
    bx.invert_yaxis()
    bx.set_xlim(0, 1)
    bx.set_title("pooled, by category: blue, hacks caught; orange, honest captions flagged", fontsize=9)
    fig.tight_layout()
    return fig
