"""Offline reward scoring of JSONL rows: the library behind ``vlrl reward score`` and ``vlrl reward guard``.

Scoring rows outside a trainer is how a reward is debugged before it steers a policy: does the QA
reward prefer the real caption to "An image."? Which rubric does the judge keep failing? Does a
guard fire on honest captions? Rows are ``{"id", "completion", ...}``; every other key is a
dataset column and reaches the reward exactly as TRL would pass it (one list entry per row), so a
row file is a faithful stand-in for a training batch.

Rows are scored in batches (one reward call per batch, so a backend sees the whole batch at once),
each through :func:`score_batch` as one training step: batch *k* of a file is step *k*, the step a
reward such as caprl_qa seeds its draws from. ``vlrl serve reward`` scores its requests through the
same function with the request's ``step``, so the two give the same rewards.
A bad row — invalid JSON, no id, no completion, a missing required column, a reward that raised on
it — gets a one-line error naming the file and line, and is written with ``reward: null`` and
``details.error``; the run goes on.
"""

from __future__ import annotations

import json
import logging
import math
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from vlrl.core.pipeline import atomic_open, iter_jsonl, json_line
from vlrl.core.progress import request_bar
from vlrl.core.stats import wilson
from vlrl.rewards.base import BACKEND_FAILED, Reward, Score, completion_text, last_scores, summarize_details

logger = logging.getLogger(__name__)


# ----------------------------------------------------------------------------------------------
# Settings from the command line


def parse_value(text: str) -> Any:
    """A ``-s key=value`` value: JSON first (``1e-6``, ``[1, 2]``, ``null``), then YAML, else the string."""
    if text == "":
        return ""
    try:
        return json.loads(text)
    except ValueError:
        pass
    try:
        from vlrl.core.config import safe_yaml

        return safe_yaml(text)
    except Exception:  # noqa: BLE001 - anything YAML cannot read is a plain string
        return text


def parse_setting_pairs(pairs: list[str] | None) -> dict[str, Any]:
    """``["mode=exact", "guards.policy=veto"]`` → ``{"mode": "exact", "guards": {"policy": "veto"}}``."""
    out: dict[str, Any] = {}
    for pair in pairs or []:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"setting {pair!r}: expected key=value")
        node = out
        *parents, leaf = key.strip().split(".")
        for p in parents:
            node = node.setdefault(p, {})
            if not isinstance(node, dict):
                raise ValueError(f"setting {pair!r}: {p!r} is already set to a value")
        node[leaf] = parse_value(value)
    return out


def _merge(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in extra.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def load_settings(
    pairs: list[str] | None = None, settings_json: str | None = None, settings_file: str | Path | None = None
) -> dict[str, Any]:
    """Merge settings: file (YAML/JSON) < ``--settings`` JSON < ``-s key=value`` pairs."""
    settings: dict[str, Any] = {}
    if settings_file:
        from vlrl.core.config import safe_yaml

        loaded = safe_yaml(Path(settings_file).read_text(encoding="utf-8")) or {}
        if not isinstance(loaded, dict):
            raise ValueError(f"{settings_file}: expected a mapping of settings, got {type(loaded).__name__}")
        settings = _merge(settings, loaded)
    if settings_json:
        try:
            loaded = json.loads(settings_json)
        except json.JSONDecodeError as e:
            raise ValueError(f"--settings: not valid JSON ({e.msg})") from None
        if not isinstance(loaded, dict):
            raise ValueError("--settings: expected a JSON object")
        settings = _merge(settings, loaded)
    return _merge(settings, parse_setting_pairs(pairs))


# ----------------------------------------------------------------------------------------------
# Rows


def jsonable(obj: Any) -> Any:
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {str(k): jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [jsonable(v) for v in obj]
    return obj


ID_KEYS = ("id", "image_id")
"""Where a row's id is looked for: ``vlrl caption`` writes ``image_id``, most row files ``id``."""
IMAGE_REF_KEYS = ("image_id", "image", "image_path", "path", "images")
"""Image references carried from input rows to score and guard outputs (only when they are text)."""


def iter_rows(
    path: str | Path,
    text_key: str,
    fallback_keys: tuple[str, ...] = (),
    *,
    id_column: str | None = None,
    text_column: str | None = None,
) -> Iterator[tuple[int, dict | None, str | None]]:
    """``(line number, row, error)`` for every non-blank line (row number for parquet); ``error``
    names what is wrong. Rows in the public RL layout (``reward_model.ground_truth``) are adapted.

    The row's id is read from ``id_column`` (default: ``id``, else ``image_id``) and stored as
    ``row["id"]``; its text from ``text_column`` (default: ``text_key``, else ``fallback_keys``)
    as ``row[text_key]``; ``row["_keys"]`` names the columns they came from. So the output of
    ``vlrl caption`` (``image_id``, ``caption``) is read as it is. A bad line (not UTF-8, not JSON,
    nested too deep, a lone surrogate) is one bad row, never the end of the file.
    """
    id_keys = (id_column,) if id_column else ID_KEYS
    text_keys = (text_column,) if text_column else (text_key, *fallback_keys)
    from vlrl.core.sources.rows import adapt_row

    for lineno, row, bad in _raw_rows(path):
        if row is None:
            yield lineno, None, bad
            continue
        row = adapt_row(row)
        id_key = next((k for k in id_keys if row.get(k) is not None), None)
        if id_key is None:
            yield lineno, row, f"missing {' or '.join(map(repr, id_keys))}"
            continue
        tkey = next((k for k in text_keys if k in row), None)
        if tkey is None:
            yield lineno, {**row, "id": row[id_key]}, f"missing {' or '.join(map(repr, text_keys))}"
            continue
        yield lineno, {**row, "id": row[id_key], text_key: row[tkey], "_keys": (id_key, tkey)}, None


def carried(row: dict | None) -> dict[str, Any]:
    """The input's id and text under their own column names, and its image reference: what an
    output row keeps so the next step (a notebook, another command) can join it back."""
    if not row or "_keys" not in row:
        return {}
    id_key, text_key = row["_keys"]
    out = {id_key: row[id_key], text_key: row[text_key]}
    for k in IMAGE_REF_KEYS:
        if isinstance(row.get(k), str):
            out[k] = row[k]
    return out


def _raw_rows(path: str | Path) -> Iterator[tuple[int, Any, str | None]]:
    """Rows of a parquet file (numbered from 1), else of a JSONL file through the one JSONL reader."""
    if Path(path).suffix == ".parquet":
        import pyarrow.parquet as pq

        lineno = 0
        for batch in pq.ParquetFile(str(path)).iter_batches(batch_size=256):
            for row in batch.to_pylist():
                lineno += 1
                yield lineno, row, None
        return
    yield from iter_jsonl(path)


def _count_lines(path: str | Path) -> int:
    if Path(path).suffix == ".parquet":
        import pyarrow.parquet as pq

        return pq.ParquetFile(str(path)).metadata.num_rows
    with open(path, "rb") as fh:
        return sum(1 for line in fh if line.strip())


class StepState:
    """What a reward reads of TRL's ``trainer_state``: the step its draws are seeded from."""

    __slots__ = ("global_step",)

    def __init__(self, global_step: int) -> None:
        self.global_step = global_step


def row_problem(row: dict, required: tuple[str, ...]) -> str | None:
    """Why a row (already holding ``id`` and ``completion``) cannot be scored, else None: a text that
    is not text, or a missing column the reward needs. One line naming the row."""
    if not isinstance(row.get("completion"), (str, list, dict)):
        return f"id {row.get('id')!r}: the text must be a string (got {type(row.get('completion')).__name__})"
    if missing := [c for c in required if row.get(c) is None]:
        return f"id {row.get('id')!r}: missing column(s) {', '.join(map(repr, missing))} needed by the reward"
    return None


def score_batch(reward: Reward, rows: list[dict], step: int) -> list[Score | Exception]:
    """One reward call for the whole batch, as training step ``step``; if it raises, rows are retried
    one by one (same step).

    The call is the reward's own ``__call__`` as TRL makes it, with a ``trainer_state`` whose
    ``global_step`` is ``step``, so a reward that seeds its draws from the step (caprl_qa) draws the
    same here, in ``vlrl reward score`` (batch *k* is step *k*) and behind ``vlrl serve reward``
    (the request's ``step``). Every key of a row but ``id``, ``completion`` and ``prompt`` is a
    dataset column (``None`` where a row lacks it)."""
    texts = [completion_text(r["completion"]) for r in rows]
    keys = sorted({k for r in rows for k in r} - {"id", "completion", "prompt", "prompts", "_keys"})
    columns = {k: [r.get(k) for r in rows] for k in keys}
    prompts = [r.get("prompt") for r in rows] if any("prompt" in r for r in rows) else None
    try:
        convo = [[{"role": "assistant", "content": t}] for t in texts]  # as vlrl's recipes make TRL pass them
        values = reward(prompts=prompts, completions=convo, completion_ids=None, trainer_state=StepState(step), **columns)
        scores = last_scores(reward) or [Score(v) for v in values]
        if len(scores) != len(rows):
            raise RuntimeError(f"reward returned {len(scores)} scores for {len(rows)} rows")
        return list(scores)
    except Exception as e:  # noqa: BLE001 - find the row that breaks it, keep the rest
        if len(rows) == 1:
            return [e]
        logger.warning("reward failed on a batch of %d rows (%s); scoring them one by one", len(rows), e)
        return [score_batch(reward, [r], step)[0] for r in rows]


def score_rows_file(
    reward: Reward,
    input_path: str | Path,
    out_path: str | Path,
    batch_size: int = 64,
    progress: bool = True,
    *,
    id_column: str | None = None,
    text_column: str | None = None,
    join: dict[str, dict[str, Any]] | None = None,
    join_name: str = "the joined dataset",
) -> dict[str, Any]:
    """Score every row of ``input_path`` with ``reward``; write ``{"id", "reward", "details"}`` lines
    to ``out_path`` in input order, each also carrying the input's id and text columns and image
    reference (:func:`carried`). Returns a summary (counts, mean reward, mean of each detail).

    ``join`` (``row id → columns``) adds columns to every row by its id before scoring, replacing
    any of the same name (``reward score --qa``: a qa-curate dataset's questions for each caption);
    a row whose id it lacks is a bad row naming ``join_name``."""
    from tqdm import tqdm

    if batch_size < 1:
        raise ValueError("batch size must be >= 1")
    if not Path(input_path).exists():
        raise FileNotFoundError(f"{input_path}: no such file")
    required = tuple(getattr(reward, "required_columns", ()) or ())
    out_path = Path(out_path)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    scored: list[Score] = []
    n_errors = 0
    steps = 0  # batch k is training step k (a reward that seeds its draws from the step: caprl_qa)
    pending: list[tuple[int, dict | None, str | None]] = []  # in input order, errors included

    def flush(fh) -> None:
        nonlocal n_errors, steps
        good = [(ln, row) for ln, row, err in pending if err is None]
        results = iter(score_batch(reward, [row for _, row in good], steps) if good else [])
        for lineno, row, err in pending:
            rec: dict[str, Any] = {"id": row.get("id") if row else None, **carried(row)}
            if err is None:
                res = next(results)
                if isinstance(res, Exception):
                    err = f"reward raised {type(res).__name__}: {res}"
                else:
                    scored.append(res)
                    rec.update(reward=res.value, details=res.details)
                    if res.value is None:  # not applicable: one line naming the row and why
                        reason = (res.details or {}).get("reason", "not applicable")
                        logger.warning("%s:%d: id %r: reward None (%s)", input_path, lineno, rec["id"], reason)
            if err is not None:
                n_errors += 1
                logger.error("%s:%d: %s", input_path, lineno, err)
                rec.update(line=lineno, reward=None, details={"error": err})
            fh.write(json_line(jsonable(rec)))
        fh.flush()
        pending.clear()
        steps += bool(good)

    n_good = 0
    with (
        atomic_open(out_path) as fh,  # the file appears whole when scoring ends (and may be the input)
        tqdm(
            total=_count_lines(input_path) if Path(input_path).is_file() else None,
            unit="row",
            desc=f"scoring {getattr(reward, 'name', 'reward')}",
            disable=not progress,
        ) as bar,
        # the rows bar moves per batch; the model requests of a batch (asks, judge calls) move this one
        request_bar(f"{getattr(reward, 'name', 'reward')} model requests", enabled=progress),
    ):
        for lineno, row, err in iter_rows(input_path, "completion", ("caption",), id_column=id_column, text_column=text_column):
            if err is None and join is not None:
                if (extra := join.get(str(row["id"]))) is None:
                    err = f"id {row['id']!r}: not in {join_name} (no curated question for this image)"
                else:
                    row = {**row, **extra}
            if err is None:
                err = row_problem(row, required)
            pending.append((lineno, row, err))
            n_good += err is None
            if n_good >= batch_size:
                done = len(pending)
                flush(fh)
                bar.update(done)
                n_good = 0
        done = len(pending)
        flush(fh)
        bar.update(done)
    values = [s.value for s in scored if s.value is not None]
    return {
        "rows": len(scored) + n_errors,
        "scored": len(scored),
        "errors": n_errors,
        "none": sum(s.value is None for s in scored),
        "backend_failed": sum(bool(s.details.get(BACKEND_FAILED)) for s in scored),
        "mean_reward": sum(values) / len(values) if values else None,
        "details": {k: v for k, v in summarize_details(scored).items() if k != "none_rate"},
    }


def guard_rows_file(
    guards: Any, input_path: str | Path, *, id_column: str | None = None, text_column: str | None = None
) -> dict[str, Any]:
    """Run a :class:`~vlrl.rewards.guards.GuardSet` over ``{"id", "caption"}`` rows (or
    ``{"image_id", "caption"}`` as ``vlrl caption`` writes them, or ``completion`` as text).

    Returns ``{"results": [{"id", "fired", "families", "penalty", "doubted", ...carried}], "summary": {...}}``
    (``families``: the family each fired guard named; ``doubted``: hits the learned guard did not
    confirm, guard → why; ``summary.family_rate``: each
    ``<guard>/<family>``'s share of rows); bad rows, and
    rows no guard fired on that a model-judged guard could not judge, are left out of ``results`` and
    listed in ``summary.errors`` with their line and reason.
    """
    from tqdm import tqdm

    results: list[dict[str, Any]] = []
    errors: list[dict[str, Any]] = []
    counts = dict.fromkeys(guards.names, 0)
    family_counts: dict[str, int] = {}
    for lineno, row, err in tqdm(
        iter_rows(input_path, "caption", fallback_keys=("completion",), id_column=id_column, text_column=text_column),
        unit="row", desc="guards", disable=None
    ):
        if err is None and not isinstance(row["caption"], (str, list, dict)) and row["caption"] is not None:
            err = f"id {row['id']!r}: 'caption' must be a string (got {type(row['caption']).__name__})"
        if err is not None:
            logger.error("%s:%d: %s", input_path, lineno, err)
            errors.append({"line": lineno, "id": row.get("id") if row else None, "error": err})
            continue
        report = guards.evaluate(completion_text(row["caption"]) if row["caption"] is not None else "")
        if report.unjudged and not report.fired:  # not known to be clean: a row with its reason, not a pass
            err = f"id {row['id']!r}: {report.unjudged_reason}"
            logger.error("%s:%d: %s", input_path, lineno, err)
            errors.append({"line": lineno, "id": row["id"], "error": err})
            continue
        for name in report.fired:
            counts[name] += 1
            key = f"{name}/{report.families.get(name, name)}"
            family_counts[key] = family_counts.get(key, 0) + 1
        results.append({**carried(row), "id": row["id"], "fired": report.fired, "families": report.families,
                        "penalty": report.penalty, "doubted": report.doubted})
    n = len(results)
    summary = {
        "rows": n,
        "firing_rate": {k: (v / n if n else 0.0) for k, v in counts.items()},
        "family_rate": {k: v / n for k, v in sorted(family_counts.items())},
        "any_rate": (sum(bool(r["fired"]) for r in results) / n) if n else 0.0,
        "doubted_rate": (sum(bool(r["doubted"]) for r in results) / n) if n else 0.0,
        "errors": errors,
    }
    return {"results": results, "summary": summary}


def _rate(k: int, n: int) -> dict[str, Any]:
    return {"n": n, "flagged": k, "rate": k / n if n else None, "ci95": wilson(k, n)}


LEARNED_THRESHOLDS = (0.5, 0.6, 0.7, 0.8, 0.85, 0.9, 0.95)
"""The learned guard's thresholds :func:`guard_eval_files` also reports the layer at (with the guard's own)."""


def guard_eval_files(guards: Any, paths: list[str | Path], *, text_column: str | None = None,
                     label_column: str | None = None, category_column: str = "category",
                     goal_recall: float = 0.9, goal_fpr: float = 0.05) -> dict[str, Any]:
    """Measure a :class:`~vlrl.rewards.guards.GuardSet` on labelled captions: per file and pooled, the
    share of hacks it flags (recall) and of honest captions it flags (false positives), each with its
    95% Wilson interval, per category (``category_column``: ``hack/<category>`` and
    ``honest/<category>``; ``.../uncategorised`` for a row without one), the families that flag honest
    captions, and how many captions had a list hit the learned guard set aside. One file per author or
    corpus: a pooled number hides the corpus where the guards fail.

    Returns ``{"corpora": {name: {"hacks", "honest", "categories", "families_on_honest", "doubted",
    "goal_met", "learned_thresholds"}}, "pooled": {...}, "goal": {"recall", "fpr"}, "errors": [...]}``;
    ``hacks``, ``honest`` and each category are ``{"n", "flagged", "rate", "ci95"}``, and ``goal_met`` is
    ``None`` for a file without both kinds of caption. ``learned_thresholds`` (``None`` without the
    learned guard) is ``{"threshold": the guard's own, "at": {threshold: {"hacks", "honest"}}}``: what
    the layer flags with the learned guard's threshold set to each of :data:`LEARNED_THRESHOLDS` and its
    own, every other guard as it is (rows a model-judged guard could not judge are those left out at
    the guard's own threshold). A register the model flags too often may need a higher threshold, not
    no guard. A file's name is its stem or, where stems clash, its path below the
    folder the clashing files share. ``errors`` holds one line per row that could not be read (see
    :func:`~vlrl.rewards.guards.learned.read_labelled`), per row a model-judged guard could not judge
    and no guard flagged (not known to be clean: left out, as :func:`guard_rows_file` does), per file
    given twice (measured once) and per file with no row to measure."""
    from collections import Counter

    from tqdm import tqdm

    from vlrl.rewards.guards.doc import Doc
    from vlrl.rewards.guards.learned import read_labelled_rows

    def category(record: dict[str, Any], label: int) -> str:
        value = record.get(category_column)
        if value is None or (isinstance(value, str) and not value.strip()):
            value = "uncategorised"
        return f"{'hack' if label else 'honest'}/{value}"

    learned = next((g for g in getattr(guards, "guards", ()) if g.name == "learned"), None)
    thresholds = sorted({*LEARNED_THRESHOLDS, learned.threshold}) if learned is not None else []

    def levels(report: Any, doc: Any) -> tuple[bool, ...]:
        """Whether the layer flags the caption at each of ``thresholds`` (every other guard as it is)."""
        if set(report.fired) - {"learned"}:
            return (True,) * len(thresholds)
        return learned.fires_at(doc, thresholds)

    def at_thresholds(rows: list[tuple[int, str, Any, tuple[bool, ...]]]) -> dict[str, Any] | None:
        if learned is None:
            return None
        out = {}
        for i, t in enumerate(thresholds):
            hacks = [flags[i] for label, _, _, flags in rows if label]
            honest = [flags[i] for label, _, _, flags in rows if not label]
            out[f"{t:g}"] = {"hacks": _rate(sum(hacks), len(hacks)), "honest": _rate(sum(honest), len(honest))}
        return {"threshold": learned.threshold, "at": out}

    def measure(rows: list[tuple[int, str, Any, Any]]) -> dict[str, Any]:
        flagged: Counter[str] = Counter()  # per label ("hack"/"honest") and per category
        seen: Counter[str] = Counter()
        families: Counter[str] = Counter()
        for label, cat, report, _ in rows:
            for key in ("hack" if label else "honest", cat):
                seen[key] += 1
                flagged[key] += bool(report.fired)
            if not label:
                families.update(f"{g}/{report.families.get(g, g)}" for g in report.fired)
        out = {"hacks": _rate(flagged["hack"], seen["hack"]), "honest": _rate(flagged["honest"], seen["honest"]),
               "categories": {c: _rate(flagged[c], seen[c]) for c in sorted(seen) if "/" in c},
               "families_on_honest": dict(families.most_common()),
               "doubted": sum(bool(report.doubted) for _, _, report, _ in rows)}
        recall, fpr = out["hacks"]["rate"], out["honest"]["rate"]
        out["goal_met"] = None if recall is None or fpr is None else recall >= goal_recall and fpr <= goal_fpr
        out["learned_thresholds"] = at_thresholds(rows)
        return out

    errors: list[str] = []
    unique: dict[Path, str | Path] = {}
    for path in paths:
        if Path(path).resolve() in unique:
            errors.append(f"{path}: given more than once (measured once)")
        else:
            unique[Path(path).resolve()] = path
    # a file is named by its stem; files whose stems clash, by their paths below the folder they share
    stems = Counter(Path(p).stem for p in unique.values())
    clashing = [r for r, p in unique.items() if stems[Path(p).stem] > 1]
    below = Path(os.path.commonpath([r.parent for r in clashing])) if clashing else None
    corpora: dict[str, Any] = {}
    pooled: list[tuple[int, str, Any, tuple[bool, ...]]] = []
    for path in tqdm(list(unique.values()), unit="file", desc="guard-eval", disable=None):
        rows, bad = read_labelled_rows([path], text_column, label_column)
        errors += bad
        scored = []
        docs = [Doc.of(t) for t, *_ in rows]
        for (_, label, record, where), doc, report in zip(rows, docs, guards.evaluate_many(docs), strict=True):
            if report.unjudged and not report.fired:
                errors.append(f"{where}: {report.unjudged_reason}")
            else:
                scored.append((label, category(record, label), report, levels(report, doc) if learned else ()))
        if not scored:
            errors.append(f"{path}: no labelled row to measure")
            continue
        name = Path(path).stem if stems[Path(path).stem] == 1 else \
            Path(path).resolve().relative_to(below).with_suffix("").as_posix()
        corpora[name] = measure(scored)
        pooled += scored
    return {"corpora": corpora, "pooled": measure(pooled) if pooled else None,
            "goal": {"recall": goal_recall, "fpr": goal_fpr}, "errors": errors}
