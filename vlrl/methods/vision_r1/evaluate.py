"""MathVista-style reasoning evaluation with the same answer extraction as the HFRRF reward.

Each benchmark item (``image``, ``question``, ``answer``, optional ``choices`` and a grouping
field such as ``task``/``category``) is asked once: the model sees the image and the question and
is told to think in ``<think></think>`` and answer in ``<answer></answer>``. The answer is read with
:func:`vlrl.methods.vision_r1.reward.extract_answer` and judged with ``check_answer`` — the functions
the training reward uses — so an accuracy gain in eval means what the reward meant in training.

Deliberately **no retrying until the output is well-formed**: a retry loop turns format failures
into silent extra samples and inflates accuracy (pass@k dressed as pass@1). Instead three numbers
are reported side by side:

* ``accuracy`` — correct answers over all items, the answer read as HFRRF's ``extract_answer`` reads
  it (last ``<answer>`` block, else ``\\boxed{}`` / "the answer is"); no answer counts as wrong.
  ``accuracy_strict_format`` also requires the exact format (what HFRRF would pay);
* ``format_failure_rate`` — items whose output is not exactly one think block then one answer
  block (truncated outputs included);
* completion length statistics (tokens: mean, median, p90, max) and the truncation rate, since
  PTST's point is accuracy at shorter length.

Resumable: predictions go to ``predictions.jsonl`` keyed by item id; generation uses the response
cache in ``<out>/cache``.
"""

from __future__ import annotations

import logging
import statistics
from collections import defaultdict
from pathlib import Path
from typing import Any

from vlrl.core.backends import ChatRequest, SamplingParams, load_backend
from vlrl.core.pipeline import JsonlStore, Quarantine, atomic_write_json
from vlrl.core.prompts import render
from vlrl.core.stage import Outcome, run_stage
from vlrl.methods.vision_r1.cold_start import choice_lines

logger = logging.getLogger(__name__)

GROUP_FIELDS = ("task", "category", "question_type", "subject", "source")


def score_output(text: str, gold: Any, choices: Any = None, truncated: bool = False) -> dict[str, Any]:
    """Per-item verdict: format, extracted answer, strict and lenient correctness."""
    from vlrl.methods.vision_r1.reward import check_answer, extract_answer, split_think_answer

    format_ok = (not truncated) and split_think_answer(text or "") is not None
    pred = extract_answer(text or "")
    correct_any = bool(check_answer(pred, gold, choices)) if pred is not None else False
    return {
        "format_ok": format_ok,
        "pred": pred,
        "correct": correct_any and (pred is not None),
        "correct_strict_format": correct_any and format_ok,
        "truncated": truncated,
    }


def _length_stats(lengths: list[int]) -> dict[str, float]:
    if not lengths:
        return {}
    s = sorted(lengths)
    return {
        "mean": statistics.fmean(s),
        "median": statistics.median(s),
        "p90": s[min(len(s) - 1, int(0.9 * len(s)))],
        "max": s[-1],
    }


def summarize(rows: list[dict[str, Any]]) -> dict[str, Any]:
    n = len(rows)
    if not n:
        return {"n": 0}
    ok = [r for r in rows if r["format_ok"]]
    out: dict[str, Any] = {
        "n": n,
        "accuracy": sum(r["correct"] for r in rows) / n,
        "accuracy_strict_format": sum(r["correct_strict_format"] for r in rows) / n,
        "format_failure_rate": 1 - len(ok) / n,
        "accuracy_when_formatted": (sum(r["correct"] for r in ok) / len(ok)) if ok else None,
        "no_answer_rate": sum(r["pred"] is None for r in rows) / n,
        "truncation_rate": sum(r["truncated"] for r in rows) / n,
        "errors": sum(bool(r.get("error")) for r in rows),
        "completion_tokens": _length_stats([r["completion_tokens"] for r in rows if r.get("completion_tokens")]),
        "completion_chars": _length_stats([len(r.get("output") or "") for r in rows]),
    }
    groups: dict[str, list] = defaultdict(list)
    for r in rows:
        if r.get("group") is not None:
            groups[str(r["group"])].append(r)
    if groups:
        out["by_group"] = {g: {"n": len(v), "accuracy": sum(x["correct"] for x in v) / len(v),
                               "format_failure_rate": 1 - sum(x["format_ok"] for x in v) / len(v)} for g, v in sorted(groups.items())}
    return out


def evaluate_reasoning(
    model: Any,
    bench: str,
    out: str | Path,
    *,
    max_tokens: int = 4096,
    temperature: float = 0.0,
    batch_size: int = 16,
    limit: int | None = None,
    prompt: str = "reasoning_eval",
    group_by: str | None = None,
    seed: int = 0,
) -> dict[str, Any]:
    """Evaluate ``model`` (backend spec or Backend) on ``bench`` (JSONL/dataset/``builtin:tiny_math``)."""
    from vlrl.core.sources.rows import iter_source, open_record_image, record_image

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    preds = JsonlStore(out / "predictions.jsonl")
    quarantine = Quarantine(out / "quarantine.jsonl")
    backend = load_backend(model, cache=out / "cache")
    sp = SamplingParams(max_tokens=max_tokens, temperature=temperature, seed=seed)
    root = None if bench.startswith("builtin:") else str(Path(bench).parent)
    wanted: list[str] = []

    def items():
        for i, rec in enumerate(iter_source(bench, cache_dir=out / "_data")):
            if limit is not None and len(wanted) >= limit:
                return
            rid = str(rec.get("id", rec.get("pid", i)))
            wanted.append(rid)
            yield rid, rec

    def process(batch: list[tuple[str, dict]]) -> list[Outcome]:
        done, reqs, metas = [], [], []
        for rid, rec in batch:
            q = rec.get("question") or rec.get("query")
            if record_image(rec) is None or not isinstance(q, str) or rec.get("answer") is None:
                done.append(Outcome.fail(rid, "item needs an image, a question and an answer"))
                continue
            img, why = open_record_image(rec, root, rid)
            if why is not None:
                done.append(Outcome.fail(rid, why))
                continue
            text = render(prompt, question=q, choices=choice_lines(rec.get("choices")))
            reqs.append(ChatRequest([{"role": "user", "content": [{"type": "image", "image": img}, {"type": "text", "text": text}]}],
                                    sp, id=rid))
            group = rec.get(group_by) if group_by else next((rec[f] for f in GROUP_FIELDS if rec.get(f) is not None), None)
            metas.append((rid, rec, group))
        for (rid, rec, group), res in zip(metas, backend.chat(reqs), strict=True):
            # A backend error is no prediction: committed as a wrong answer, it would lower the
            # accuracy without a word and a rerun would keep it. It is left unscored, counted, and
            # retried by the next run.
            if not res.ok:
                done.append(Outcome.retry(rid, res.error or "the backend failed"))
                continue
            truncated = bool(res.finish_reasons) and res.finish_reasons[0] == "length"
            verdict = score_output(res.text if res.ok else "", rec["answer"], rec.get("choices"), truncated)
            done.append(Outcome.ok(rid, {"id": rid, "answer": rec["answer"], "output": res.text if res.ok else None,
                                         "completion_tokens": res.completion_tokens, "group": group, "error": res.error,
                                         **verdict}))
        return done

    try:
        counts = run_stage(items(), key=lambda x: x[0], process=process, store=preds, quarantine=quarantine,
                           batch_size=batch_size, desc="eval reasoning", progress_by="request")
        keep = set(wanted)
        rows = [r for r in preds if r["id"] in keep]
        metrics = {**summarize(rows), "model": getattr(backend, "model", str(model)), "bench": bench,
                   "quarantined": len(quarantine), "unscored": counts.failed, "max_tokens": max_tokens,
                   "temperature": temperature}
        atomic_write_json(out / "metrics.json", metrics)
    finally:
        preds.close()
        quarantine.close()
        backend.close()
    return metrics
