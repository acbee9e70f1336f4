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


def pass_at_k(n: int, c: int, k: int) -> float:
    """The unbiased pass@k of one problem from ``n`` samples of which ``c`` are correct:
    ``1 - C(n-c, k) / C(n, k)``, the chance that k samples drawn without replacement hold a correct one."""
    import math

    if k > n:
        raise ValueError(f"pass@{k} needs at least {k} samples, got {n}")
    return 1.0 if n - c < k else 1.0 - math.comb(n - c, k) / math.comb(n, k)


def _pass_table(rows: list[dict[str, Any]], ks: tuple[int, ...]) -> dict[str, float]:
    sampled = [r for r in rows if r.get("samples")]
    if not sampled:
        return {}
    n = min(r["samples"] for r in sampled)
    return {f"pass@{k}": sum(pass_at_k(r["samples"], r["samples_correct"], k) for r in sampled) / len(sampled)
            for k in ks if k <= n}


def _sampled_right_share(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The mean share of right samples on the problems the greedy answer gets right and on those it gets
    wrong, with how many problems each. pass@k above greedy accuracy says that a right answer is sampled;
    this says how often: a greedy error whose right answer is half the samples is a near-tie that
    sharpening may turn, one whose right answer is a fifth of them is not (the Vision-R1 demo's are of the
    second kind, and RL there made them rarer still: docs/demo-vision-r1.md)."""
    out: dict[str, Any] = {}
    for name, want in (("where_greedy_right", True), ("where_greedy_wrong", False)):
        part = [r for r in rows if r.get("samples") and bool(r["correct"]) == want]
        out[name] = sum(r["samples_correct"] / r["samples"] for r in part) / len(part) if part else None
        out[f"problems_{name}"] = len(part)
    return out


def summarize(rows: list[dict[str, Any]], pass_ks: tuple[int, ...] = (1, 4, 8)) -> dict[str, Any]:
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
    if table := _pass_table(rows, pass_ks):
        # RL on an outcome reward can only reinforce answers the policy samples: greedy accuracy far
        # below pass@k at the rollout temperature is what GRPO can lift; equal, there is nothing to push.
        out["pass_at_k"] = table
        out["sampled_right_share"] = _sampled_right_share(rows)
    groups: dict[str, list] = defaultdict(list)
    for r in rows:
        if r.get("group") is not None:
            groups[str(r["group"])].append(r)
    if groups:
        out["by_group"] = {g: {"n": len(v), "accuracy": sum(x["correct"] for x in v) / len(v),
                               "format_failure_rate": 1 - sum(x["format_ok"] for x in v) / len(v),
                               **({"pass_at_k": t} if (t := _pass_table(v, pass_ks)) else {})}
                           for g, v in sorted(groups.items())}
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
    samples: int = 0,
    sample_temperature: float = 1.0,
    pass_ks: tuple[int, ...] = (1, 4, 8),
) -> dict[str, Any]:
    """Evaluate ``model`` (backend spec or Backend) on ``bench`` (JSONL/dataset/``builtin:tiny_math``).

    ``samples`` > 0 also draws that many answers per item at ``sample_temperature`` (the rollout
    temperature) and reports ``pass_at_k`` for each k of ``pass_ks`` up to ``samples``, unbiased
    (:func:`pass_at_k`), overall and per group, beside the greedy accuracy."""
    if samples and samples < max(min(pass_ks), 1):
        raise ValueError(f"--samples {samples}: pass@k needs at least k samples (k = {', '.join(map(str, pass_ks))})")
    from vlrl.core.sources.rows import iter_source, open_record_image, record_image

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    preds = JsonlStore(out / "predictions.jsonl")
    quarantine = Quarantine(out / "quarantine.jsonl")
    backend = load_backend(model, cache=out / "cache")
    sp = SamplingParams(max_tokens=max_tokens, temperature=temperature, seed=seed)
    sp_many = SamplingParams(max_tokens=max_tokens, temperature=sample_temperature, seed=seed, n=samples) if samples else None
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
        many = backend.chat([ChatRequest(r.messages, sp_many, id=f"{r.id}/samples") for r in reqs]) if sp_many else None
        for k, ((rid, rec, group), res) in enumerate(zip(metas, backend.chat(reqs), strict=True)):
            # A backend error is no prediction: committed as a wrong answer, it would lower the
            # accuracy without a word and a rerun would keep it. It is left unscored, counted, and
            # retried by the next run.
            if not res.ok or (many is not None and not many[k].ok):
                done.append(Outcome.retry(rid, (res.error if not res.ok else many[k].error) or "the backend failed"))
                continue
            extra = {}
            if many is not None:
                fins = list(many[k].finish_reasons) + [""] * len(many[k].texts)
                extra = {"samples": len(many[k].texts), "samples_correct": sum(
                    bool(score_output(t, rec["answer"], rec.get("choices"), f == "length")["correct"])
                    for t, f in zip(many[k].texts, fins, strict=False))}
            truncated = bool(res.finish_reasons) and res.finish_reasons[0] == "length"
            verdict = score_output(res.text if res.ok else "", rec["answer"], rec.get("choices"), truncated)
            done.append(Outcome.ok(rid, {"id": rid, "answer": rec["answer"], "output": res.text if res.ok else None,
                                         "completion_tokens": res.completion_tokens, "group": group, "error": res.error,
                                         **verdict, **extra}))
        return done

    try:
        counts = run_stage(items(), key=lambda x: x[0], process=process, store=preds, quarantine=quarantine,
                           batch_size=batch_size, desc="eval reasoning", progress_by="request")
        keep = set(wanted)
        rows = [r for r in preds if r["id"] in keep]
        metrics = {**summarize(rows, pass_ks), "model": getattr(backend, "model", str(model)), "bench": bench,
                   "quarantined": len(quarantine), "unscored": counts.failed, "max_tokens": max_tokens,
                   "temperature": temperature, **({"samples": samples, "sample_temperature": sample_temperature}
                                                  if samples else {})}
        atomic_write_json(out / "metrics.json", metrics)
    finally:
        preds.close()
        quarantine.close()
        backend.close()
    return metrics
