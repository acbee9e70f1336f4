"""Prism-style decoupled evaluation: how much of a benchmark can be answered from the caption?

The captioner describes each benchmark image once; a text-only answerer, which never sees the
image, answers every benchmark question about that image from the caption alone. Accuracy then
measures the caption's *information*, not the captioner's own reasoning — the evaluation CapRL
reports (ChartQA, InfoVQA, MMStar, MMMU ...).

Scoring by question type:

* ``mc`` — the first option letter of the answer (greedy, after "The answer is"), exact match.
* ``numeric`` — relaxed accuracy (ChartQA): the first number in the answer is right when within
  5% of the gold number (exact for a gold of 0), with percent scaling (``45%`` matches ``0.45``
  when either side carries a ``%``; ``numeric_scales="public"`` tries ×0.01 and ×100 on every
  number, as the public CapRL evaluation does); non-numeric predictions fall back to exact match.
* ``exact`` — exact match after case and whitespace normalisation (years and integers where the
  benchmark says so: a year-like gold answer such as ``2019`` is never "within 5%" of ``2000``).
* ``text`` — ANLS, for the benchmarks that score with it (InfoVQA/DocVQA): ``1 - normalised edit
  distance`` to the closest gold answer, counted as 0 when the distance is 0.5 or more. Numeric
  answers of those benchmarks are text too, as they score them. A text answer of any other
  benchmark is ``exact``: ChartQA's relaxed accuracy (and the public CapRL evaluation) needs an
  exact match for non-numeric answers, so "Democrats" against "Democrat" is wrong, not 0.889.

Several captions per image (``captions_per_image``, sampled) are each used to answer every question
of the image; results report the mean over captions and the best-of-N. ``answer_mode="reason"``
lets the answerer think first and give its final answer in ``\boxed{}``, checked with math-verify
(symbolic and numeric equivalence) before the type's own metric.

The bring-your-own benchmark format is documented in ``docs/prism.md``.
"""

from __future__ import annotations

import json
import logging
import statistics
from collections import defaultdict
from pathlib import Path
from typing import Any

from vlrl.captioning.captioner import caption_images
from vlrl.core.backends import ChatRequest, SamplingParams, load_backend
from vlrl.core.identity import check_identity, read_identity
from vlrl.core.outputs import OutputCounts
from vlrl.core.pipeline import JsonlStore, atomic_write_json, read_jsonl, write_jsonl
from vlrl.core.progress import request_bar
from vlrl.core.prompts import render
from vlrl.core.stage import Outcome, run_stage
from vlrl.methods.caprl.ask import Ask, ask
from vlrl.methods.caprl.mcq import MCQError, normalize_mcq, parse_letter, present
from vlrl.methods.caprl.prism_metrics import (  # the metrics live there; their names stay importable here
    QUESTION_TYPES,
    anls,
    boxed_answer,
    exact_match,
    parse_number,
    plain_answer,
    question_type,
    relaxed_accuracy,
    score_short,
    short_answer,
    verified,
)
from vlrl.methods.caprl.qa_dataset import bench_rows, dataset_folder, is_curated

logger = logging.getLogger(__name__)

STATE_CAPTIONS = "state/captions.jsonl"

PRESETS: dict[str, dict[str, Any]] = {
    # The public CapRL evaluation: 4 captions sampled at T=1.0 per image, a reasoning answerer at
    # T=1.0 with 2,048 tokens giving a \boxed{} answer, ×0.01/×100 tried on every number.
    "caprl_public": {"captions_per_image": 4, "caption_temperature": 1.0, "answer_mode": "reason",
                     "answer_temperature": 1.0, "reason_max_tokens": 2048, "numeric_scales": "public"},
}
"""``eval prism --preset``: settings left at their defaults take the preset's values."""
STATE_CAPTIONS_IDENTITY = "state/captions.identity.json"
STATE_BAD_IMAGES = "state/bad_images.jsonl"



# -- evaluation ---------------------------------------------------------------------------------


def _media(row: dict[str, Any]) -> Any:
    """A bench row's image, else its video cell (the first of a ``videos`` list; a struct's bytes or path)."""
    if row.get("image") is not None:
        return row["image"]
    from vlrl.core.sources.rows import record_video

    v = record_video(row)
    if isinstance(v, (list, tuple)):
        v = v[0] if v else None
    return v.get("video", v) if isinstance(v, dict) and "bytes" not in v and "path" not in v else v


def _image_key(row: dict[str, Any], i: int) -> str:
    v = _media(row)
    path = v.get("path") if isinstance(v, dict) else v
    data = v.get("bytes") if isinstance(v, dict) else v if isinstance(v, bytes) else None
    if data:
        import hashlib

        return "sha1:" + hashlib.sha1(data).hexdigest()
    return str(path) if path else f"row{i}"


def open_bench(bench: str | Path, media: str = "image") -> tuple[list[dict[str, Any]], Any]:
    """Rows of a benchmark and a function loading row ``i``'s image.

    A JSONL/JSON file is read directly (answers may mix numbers and strings, which one Arrow column
    cannot hold); image paths are relative to the file's folder. A ``vlrl data qa-curate`` output
    (its folder or ``dataset/``) gives one multiple-choice row per curated question
    (:func:`vlrl.methods.caprl.qa_dataset.bench_rows`). Anything else goes through
    :func:`vlrl.core.sources.load_any_dataset` (parquet, ``save_to_disk``, imagefolder).

    ``media="video"`` (``--videos``): rows name a video (``video``/``videos``/``video_path``), loaded as
    the frames Qwen's video rules pick (:func:`vlrl.core.video.load_video_value`), under the same
    root rules.
    """
    from vlrl.core.images import load_image
    from vlrl.core.pipeline import read_jsonl
    from vlrl.core.sources import load_any_dataset
    from vlrl.core.video import load_video_value

    path = Path(bench)
    if path.is_file() and path.suffix.lower() in (".jsonl", ".json"):
        if path.suffix.lower() == ".json":
            rows = json.loads(path.read_text(encoding="utf-8"))
        else:
            rows = list(read_jsonl(path))
        root = path.parent

        def load(i: int):
            v = _media(rows[i])
            rid = str(rows[i].get("id") or i)
            if media == "video":
                return load_video_value(v, root=root if isinstance(v, str) else None, record=rid)
            return load_image(v, record=rid) if isinstance(v, dict) else load_image(v, root=root, record=rid)

    elif is_curated(bench):  # a qa-curate dataset: each curated question is one multiple-choice row
        source = load_any_dataset(dataset_folder(bench), media=media)
        rows, origin = bench_rows([source.dataset[i] for i in range(len(source))])

        def load(i: int):
            return source.load_image(origin[i])

    else:
        source = load_any_dataset(bench, media=media)
        rows = [source.dataset[i] for i in range(len(source))]
        load = source.load_image
    for lineno, row in enumerate(rows, 1):
        if not isinstance(row, dict) or not row.get("question") or row.get("answer") in (None, "") or not _media(row):
            raise ValueError(f"{bench}: record {lineno} needs '{media}', 'question' and 'answer' (see docs/prism.md)")
    return rows, load


def evaluate_prism(
    captioner: str,
    answerer: str,
    bench: str | Path,
    out: str | Path,
    *,
    limit: int | None = None,
    caption_max_tokens: int = 2048,
    answer_max_tokens: int = 32,
    cache: bool = True,
    progress: bool = True,
    captions_per_image: int = 1,
    caption_temperature: float = 0.7,
    answer_mode: str = "direct",
    reason_max_tokens: int = 1024,
    seed: int = 0,
    answer_temperature: float = 0.0,
    numeric_scales: str = "percent",
    media: str = "image",
) -> dict[str, Any]:
    """Run the evaluation; writes ``captions.jsonl``, ``predictions.jsonl`` and ``results.json``.
    ``media="video"``: the bench's rows name videos, captioned with the video prompt (video Prism).

    ``captions_per_image`` > 1 samples that many captions per image at ``caption_temperature`` and
    answers every question once per caption (mean and best-of-N are reported); one caption is
    greedy. ``answer_mode="reason"`` lets the answerer reason and box its final answer.
    """
    if numeric_scales not in ("percent", "public"):
        raise ValueError(f"numeric scales {numeric_scales!r}: use percent or public")
    if answer_mode not in ("direct", "reason"):
        raise ValueError(f"answer mode {answer_mode!r}: use direct or reason")
    if captions_per_image < 1:
        raise ValueError(f"captions per image must be >= 1, got {captions_per_image}")
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    rows, load_row_image = open_bench(bench, media)
    rows = rows if limit is None else rows[:limit]
    cache_dir = out / "cache" if cache else None
    cap_b = load_backend(captioner, cache=cache_dir)
    ans_b = load_backend(answerer, cache=cache_dir)

    # 1. captions per distinct image (greedy; or N samples), through the keyed stage loop: each
    # caption is committed as it comes (state/captions.jsonl), so a killed run resumes without
    # captioning an image twice even with --no-cache; an unreadable image is quarantined (bad
    # input: --retry-quarantined tries it again); a captioner failure is never stored, so the next
    # run asks again.
    first_row: dict[str, int] = {}
    for i, row in enumerate(rows):
        first_row.setdefault(_image_key(row, i), i)
    keys = list(first_row)
    prompt = render("caption_video" if media == "video" else "caption_default")
    n = captions_per_image
    sampling = SamplingParams(max_tokens=caption_max_tokens, temperature=caption_temperature if n > 1 else 0.0, n=n,
                              seed=seed if n > 1 else None)
    # The stored captions are reused only by a run that would have written the same ones: a library
    # call with another captioner or caption settings on the same folder is refused, as the CLI's job
    # identity refuses it (one place can call this without the other).
    made_by = {"captioner": cap_b.identity(), "prompt": prompt, "max_tokens": caption_max_tokens, "n": n,
               "temperature": sampling.temperature, "seed": sampling.seed}
    made_by_path = out / STATE_CAPTIONS_IDENTITY
    if (stored := read_identity(made_by_path)) is not None:
        check_identity(stored, made_by, where=str(out), what="eval prism captions")
    else:
        atomic_write_json(made_by_path, made_by)
    done = JsonlStore(out / STATE_CAPTIONS, key_field="image")
    bad = JsonlStore(out / STATE_BAD_IMAGES, key_field="image")
    errors: dict[str, str] = {}

    def caption_batch(chunk: list[str]) -> list[Outcome]:
        loaders = [lambda k=k: load_row_image(first_row[k]) for k in chunk]
        outcomes = []
        for k, oc in zip(chunk, caption_images(cap_b, loaders, prompt, sampling, ids=chunk, min_words=None), strict=True):
            if oc.caption is not None:
                caps = list(oc.captions) if oc.captions else [oc.caption]
                truncs = list(oc.truncations) if oc.truncations else [oc.truncated]
                outcomes.append(Outcome.ok(k, {"image": k, "captions": caps, "truncations": truncs}))
            elif oc.reason.startswith("bad image: "):
                outcomes.append(Outcome.fail(k, f"{media}: {oc.reason.removeprefix('bad image: ')}"))
            else:
                errors[k] = f"captioner: {oc.reason}"
                outcomes.append(Outcome.retry(k, errors[k]))
        return outcomes

    run_stage(keys, key=str, process=caption_batch, store=done, quarantine=bad, batch_size=32, desc="captions",
              stable_batches=True, failure_log="{label}: {reason}", progress=progress, progress_by="item")
    done.close()
    bad.close()
    captions: dict[str, list[str]] = {}
    truncated: dict[str, list[bool]] = {}
    for rec in read_jsonl(out / STATE_CAPTIONS, on_error="skip"):
        captions[rec["image"]], truncated[rec["image"]] = rec["captions"], rec["truncations"]
    for rec in read_jsonl(out / STATE_BAD_IMAGES, on_error="skip"):
        errors.setdefault(rec["image"], rec["reason"])
    def caption_lines():
        for k in keys:
            caps = captions.get(k) or [None]
            line = {"image": k, "caption": caps[0], "truncated": (truncated.get(k) or [False])[0], "error": errors.get(k)}
            if n > 1:
                line.update(captions=captions.get(k, []), truncations=truncated.get(k, []))
            yield line

    write_jsonl(out / "captions.jsonl", caption_lines())

    # 2. answer every question from each of its image's captions
    preds: list[dict[str, Any]] = []
    for i, row in enumerate(rows):
        rec = {"id": str(row.get("id") or i), "benchmark": str(row.get("benchmark") or "default"),
               "type": question_type(row), "question": row["question"], "answer": row["answer"], "prediction": None,
               "score": 0.0, "best": 0.0, "error": None}
        k = _image_key(row, i)
        if k not in captions:
            rec["error"] = errors.get(k, "no caption")
        preds.append(rec)
    per_caption = _answer_all(rows, preds, [captions.get(_image_key(r, i)) for i, r in enumerate(rows)], ans_b,
                              answer_mode=answer_mode, max_tokens=answer_max_tokens if answer_mode == "direct" else reason_max_tokens,
                              temperature=answer_temperature, seed=seed, scales=numeric_scales, progress=progress)
    for rec, outcomes in zip(preds, per_caption, strict=True):
        if not outcomes:
            continue
        scores = [o["score"] for o in outcomes]
        rec.update(prediction=outcomes[0]["prediction"], raw=outcomes[0]["raw"], score=statistics.fmean(scores),
                   best=max(scores), error=next((o["error"] for o in outcomes if o["error"]), None))
        if n > 1:
            rec["predictions"] = [o["prediction"] for o in outcomes]
            rec["scores"] = scores
        if rec["error"]:
            logger.warning("question %s: answerer failed: %s", rec["id"], rec["error"])
    write_jsonl(out / "predictions.jsonl", preds)

    # 3. accuracy per benchmark and overall (errors count as wrong, and are counted)
    by_bench: dict[str, list[dict]] = defaultdict(list)
    for p in preds:
        by_bench[p["benchmark"]].append(p)
    benchmarks = {
        name: {
            "n": len(ps),
            "accuracy": statistics.fmean(p["score"] for p in ps),
            "best_of_n": statistics.fmean(p["best"] for p in ps),
            "errors": sum(p["error"] is not None for p in ps),
            "by_type": {t: statistics.fmean(p["score"] for p in ps if p["type"] == t) for t in sorted({p["type"] for p in ps})},
        }
        for name, ps in sorted(by_bench.items())
    }
    all_caps = [t for k in keys for t in truncated.get(k, [])]
    health = OutputCounts("prism captions", f"--caption-max-tokens (now {caption_max_tokens})")
    for k in keys:  # empty and truncated captions: counted in results.json, one warning when too many
        for text, cut in zip(captions.get(k, []), truncated.get(k, []), strict=False):
            health.add(text, truncated=cut)
    health.check()
    results = {
        "captioner": str(captioner),
        "answerer": str(answerer),
        "bench": str(bench),
        "n": len(preds),
        "images": len(keys),
        "captions_per_image": n,
        "answer_mode": answer_mode,
        "overall": statistics.fmean(p["score"] for p in preds) if preds else None,
        "best_of_n": statistics.fmean(p["best"] for p in preds) if preds else None,
        "macro": statistics.fmean(b["accuracy"] for b in benchmarks.values()) if benchmarks else None,
        "errors": sum(p["error"] is not None for p in preds),
        "truncated_captions": sum(all_caps),
        "truncated_rate": (sum(all_caps) / len(all_caps)) if all_caps else None,
        "empty_captions": health.empty,
        "benchmarks": benchmarks,
    }
    atomic_write_json(out / "results.json", results)
    cap_b.close()
    if ans_b is not cap_b:
        ans_b.close()
    return results


def _answer_all(rows: list[dict], preds: list[dict], caps: list[list[str] | None], ans_b: Any, *,
                answer_mode: str, max_tokens: int, temperature: float = 0.0, seed: int = 0,
                scales: str = "percent", progress: bool = False) -> list[list[dict[str, Any]]]:
    """Per row, one ``{prediction, score, error, raw}`` per caption of its image (none: no caption).
    ``temperature`` is the reasoning answerer's (the direct answers are greedy)."""
    out: list[list[dict[str, Any]]] = [[] for _ in rows]
    mc_asks, mc_at, chat_reqs, chat_at = [], [], [], []
    for i, (row, rec, cs) in enumerate(zip(rows, preds, caps, strict=True)):
        if not cs or rec["error"]:
            continue
        mcq = pres = None
        if rec["type"] == "mc":
            try:
                mcq = normalize_mcq({"question": row["question"], "options": row.get("options"), "answer": row["answer"]})
            except MCQError as e:
                rec["error"] = f"bad question: {e}"
                continue
            pres = present(mcq, None, abstain=None)
        for c, caption in enumerate(cs):
            options = pres.lines() if pres else []
            question = mcq.question if mcq else row["question"]
            if answer_mode == "reason":
                text = render("prism_reason", caption=caption, question=question, options=options)
                sp = SamplingParams(max_tokens=max_tokens, temperature=temperature, seed=seed if temperature > 0 else None)
                chat_reqs.append(ChatRequest([{"role": "user", "content": text}], sp, id=f"{rec['id']}/caption{c}"))
                chat_at.append((i, pres))
            elif pres is not None:
                text = render("prism_answer", caption=caption, question=question, options=options)
                mc_asks.append(Ask([{"role": "user", "content": text}], pres, id=f"{rec['id']}/caption{c}"))
                mc_at.append(i)
            else:
                text = render("prism_answer", caption=caption, question=question, options=[])
                chat_reqs.append(ChatRequest([{"role": "user", "content": text}], SamplingParams(max_tokens=max_tokens),
                                             id=f"{rec['id']}/caption{c}"))
                chat_at.append((i, None))
    with request_bar("answers", len(mc_asks) + len(chat_reqs), unit="ask", enabled=progress):
        mc_answers = ask(ans_b, mc_asks, mode="sample", temperature=0.0, max_tokens=10) if mc_asks else []
        chat_answers = ans_b.chat(chat_reqs) if chat_reqs else []
    for i, a in zip(mc_at, mc_answers, strict=True):
        out[i].append({"prediction": a.letter, "score": a.correct or 0.0, "error": a.error, "raw": a.text})
    for (i, pres), res in zip(chat_at, chat_answers, strict=True):
        if not res.ok:
            out[i].append({"prediction": None, "score": 0.0, "error": res.error, "raw": None})
            continue
        row, qtype = rows[i], preds[i]["type"]
        golds = row.get("answers") or [row["answer"]]
        if answer_mode == "reason":
            boxed = boxed_answer(res.text)
            if boxed is None:
                out[i].append({"prediction": None, "score": 0.0, "error": None, "raw": res.text, "note": "no \\boxed{} answer"})
                continue
            if pres is not None:
                letter = parse_letter(boxed, pres.letters)
                out[i].append({"prediction": letter, "score": float(letter == pres.gold), "error": None, "raw": res.text})
                continue
            score = 1.0 if verified(boxed, golds) else score_short(plain_answer(boxed), golds, qtype, scales)
            out[i].append({"prediction": boxed, "score": score, "error": None, "raw": res.text})
        else:
            p = short_answer(res.text)
            out[i].append({"prediction": p, "score": score_short(p, golds, qtype, scales), "error": None, "raw": res.text})
    return out


__all__ = ["PRESETS", "QUESTION_TYPES", "anls", "boxed_answer", "evaluate_prism", "exact_match", "open_bench", "parse_number",
           "question_type", "relaxed_accuracy", "score_short", "short_answer", "verified"]
