"""Prism-style decoupled evaluation: how much of a benchmark can be answered from the caption?

The captioner describes each benchmark image once; a text-only answerer, which never sees the
image, answers every benchmark question about that image from the caption alone. Accuracy then
measures the caption's *information*, not the captioner's own reasoning — the evaluation CapRL
reports (ChartQA, InfoVQA, MMStar, MMMU ...).

Scoring by question type:

* ``mc`` — the first option letter of the answer (greedy, after "The answer is"), exact match.
* ``numeric`` — relaxed accuracy (ChartQA): the first number in the answer is right when within
  5% of the gold number (exact for a gold of 0); non-numeric predictions fall back to exact match.
* ``text`` — ANLS (InfoVQA/DocVQA): ``1 - normalised edit distance`` to the closest gold answer,
  counted as 0 when the distance is 0.5 or more.

The bring-your-own benchmark format is documented in ``docs/prism.md``.
"""

from __future__ import annotations

import json
import logging
import re
import statistics
from collections import defaultdict
from pathlib import Path
from typing import Any

from vlrl.captioning.captioner import caption_images
from vlrl.core.backends import ChatRequest, SamplingParams, load_backend
from vlrl.core.pipeline import atomic_write_json
from vlrl.core.prompts import render
from vlrl.methods.caprl.ask import Ask, ask
from vlrl.methods.caprl.mcq import MCQError, normalize_mcq, present

logger = logging.getLogger(__name__)

_NUMBER = re.compile(r"[-+]?\d[\d,]*\.?\d*(?:e[-+]?\d+)?|[-+]?\.\d+", re.I)


# -- metrics ------------------------------------------------------------------------------------


def parse_number(text: Any) -> float | None:
    """First number in ``text`` (``"1,234.5"``, ``"45%"``, ``"$3"``); ``None`` if there is none."""
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        return float(text)
    m = _NUMBER.search(str(text or ""))
    if not m:
        return None
    try:
        return float(m.group(0).replace(",", ""))
    except ValueError:
        return None


def _norm(s: Any) -> str:
    return " ".join(str(s).strip().lower().rstrip(".").split())


def relaxed_accuracy(pred: str, gold: Any, tolerance: float = 0.05) -> float:
    g, p = parse_number(gold), parse_number(pred)
    if g is None or p is None:
        return float(_norm(pred) == _norm(gold))
    if g == 0:
        return float(p == 0)
    return float(abs(p - g) / abs(g) <= tolerance)


def _levenshtein(a: str, b: str) -> int:
    prev = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        cur = [i]
        for j, cb in enumerate(b, 1):
            cur.append(min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (ca != cb)))
        prev = cur
    return prev[-1]


def anls(pred: str, golds: list[Any], threshold: float = 0.5) -> float:
    """Average normalised Levenshtein similarity against the closest gold answer."""
    p = _norm(pred)
    best = 0.0
    for g in golds:
        g = _norm(g)
        if not p and not g:
            return 1.0
        nl = _levenshtein(p, g) / max(len(p), len(g), 1)
        best = max(best, 1.0 - nl if nl < threshold else 0.0)
    return best


def question_type(row: dict[str, Any]) -> str:
    declared = row.get("type")
    if declared in ("mc", "numeric", "text"):
        return declared
    if row.get("options"):
        return "mc"
    return "numeric" if parse_number(row.get("answer")) is not None and re.fullmatch(r"[\s\d.,%$+\-e]+", str(row.get("answer"))) else "text"


def short_answer(text: str) -> str:
    """The answer part of a free-text reply: first line, "The answer is" and trailing dot removed."""
    line = (text or "").strip().splitlines()[0] if (text or "").strip() else ""
    line = re.sub(r"^\s*(the\s+)?(final\s+)?answer\s*(is)?\s*:?\s*", "", line, flags=re.I)
    return line.strip().rstrip(".").strip()


# -- evaluation ---------------------------------------------------------------------------------


def _image_key(row: dict[str, Any], i: int) -> str:
    v = row.get("image")
    path = v.get("path") if isinstance(v, dict) else v
    if isinstance(v, dict) and v.get("bytes"):
        import hashlib

        return "sha1:" + hashlib.sha1(v["bytes"]).hexdigest()
    return str(path) if path else f"row{i}"


def open_bench(bench: str | Path) -> tuple[list[dict[str, Any]], Any]:
    """Rows of a benchmark and a function loading row ``i``'s image.

    A JSONL/JSON file is read directly (answers may mix numbers and strings, which one Arrow column
    cannot hold); image paths are relative to the file's folder. Anything else goes through
    :func:`vlrl.core.sources.load_any_dataset` (parquet, ``save_to_disk``, imagefolder).
    """
    from vlrl.core.images import load_image
    from vlrl.core.pipeline import read_jsonl
    from vlrl.core.sources import load_any_dataset

    path = Path(bench)
    if path.is_file() and path.suffix.lower() in (".jsonl", ".json"):
        if path.suffix.lower() == ".json":
            rows = json.loads(path.read_text(encoding="utf-8"))
        else:
            rows = list(read_jsonl(path))
        root = path.parent

        def load(i: int):
            v = rows[i].get("image")
            rid = str(rows[i].get("id") or i)
            return load_image(v, record=rid) if isinstance(v, dict) else load_image(v, root=root, record=rid)

    else:
        source = load_any_dataset(bench)
        rows = [source.dataset[i] for i in range(len(source))]
        load = source.load_image
    for lineno, row in enumerate(rows, 1):
        if not isinstance(row, dict) or not row.get("question") or row.get("answer") in (None, "") or not row.get("image"):
            raise ValueError(f"{bench}: record {lineno} needs 'image', 'question' and 'answer' (see docs/prism.md)")
    return rows, load


def evaluate_prism(
    captioner: str,
    answerer: str,
    bench: str | Path,
    out: str | Path,
    *,
    limit: int | None = None,
    caption_max_tokens: int = 512,
    answer_max_tokens: int = 32,
    cache: bool = True,
    progress: bool = True,
) -> dict[str, Any]:
    """Run the evaluation; writes ``captions.jsonl``, ``predictions.jsonl`` and ``results.json``."""
    from tqdm import tqdm

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    rows, load_row_image = open_bench(bench)
    rows = rows if limit is None else rows[:limit]
    cache_dir = out / "cache" if cache else None
    cap_b = load_backend(captioner, cache=cache_dir)
    ans_b = load_backend(answerer, cache=cache_dir)

    # 1. one caption per distinct image
    first_row: dict[str, int] = {}
    for i, row in enumerate(rows):
        first_row.setdefault(_image_key(row, i), i)
    captions: dict[str, str | None] = {}
    errors: dict[str, str] = {}
    keys = list(first_row)
    prompt = render("caption_default")
    sampling = SamplingParams(max_tokens=caption_max_tokens)
    for start in tqdm(range(0, len(keys), 32), desc="captions", disable=not progress):
        chunk = keys[start : start + 32]
        loaders = [lambda k=k: load_row_image(first_row[k]) for k in chunk]
        for k, oc in zip(chunk, caption_images(cap_b, loaders, prompt, sampling, ids=chunk, min_words=None), strict=True):
            if oc.caption is not None:
                captions[k] = oc.caption
                continue
            bad_image = oc.reason.startswith("bad image: ")
            errors[k] = f"image: {oc.reason.removeprefix('bad image: ')}" if bad_image else f"captioner: {oc.reason}"
            logger.warning("%s: %s", k, errors[k])
    with open(out / "captions.jsonl", "w", encoding="utf-8") as fh:
        for k in keys:
            fh.write(json.dumps({"image": k, "caption": captions.get(k), "error": errors.get(k)}, ensure_ascii=False) + "\n")

    # 2. answer every question from its image's caption: MC through ask(), short answers by chat
    preds: list[dict[str, Any]] = []
    mc_asks, mc_idx, sa_reqs, sa_idx = [], [], [], []
    for i, row in enumerate(rows):
        k = _image_key(row, i)
        qtype = question_type(row)
        rec = {"id": str(row.get("id") or i), "benchmark": str(row.get("benchmark") or "default"), "type": qtype,
               "question": row["question"], "answer": row["answer"], "prediction": None, "score": 0.0, "error": None}
        preds.append(rec)
        if k not in captions:
            rec["error"] = errors.get(k, "no caption")
            continue
        if qtype == "mc":
            try:
                mcq = normalize_mcq({"question": row["question"], "options": row.get("options"), "answer": row["answer"]})
            except MCQError as e:
                rec["error"] = f"bad question: {e}"
                continue
            pres = present(mcq, None, abstain=None)
            text = render("prism_answer", caption=captions[k], question=mcq.question, options=pres.lines())
            mc_asks.append(Ask([{"role": "user", "content": text}], pres, id=rec["id"]))
            mc_idx.append(i)
        else:
            text = render("prism_answer", caption=captions[k], question=row["question"], options=[])
            sa_reqs.append(ChatRequest([{"role": "user", "content": text}], SamplingParams(max_tokens=answer_max_tokens), id=rec["id"]))
            sa_idx.append(i)
    for i, a in zip(mc_idx, ask(ans_b, mc_asks, mode="sample", temperature=0.0, max_tokens=10) if mc_asks else [], strict=False):
        preds[i].update(prediction=a.letter, score=a.correct or 0.0, error=a.error, raw=a.text)
        if a.error:
            logger.warning("question %s: answerer failed: %s", preds[i]["id"], a.error)
    for i, res in zip(sa_idx, ans_b.chat(sa_reqs) if sa_reqs else [], strict=False):
        if not res.ok:
            preds[i]["error"] = res.error
            logger.warning("question %s: answerer failed: %s", preds[i]["id"], res.error)
            continue
        p = short_answer(res.text)
        row = rows[i]
        golds = row.get("answers") or [row["answer"]]
        score = max(relaxed_accuracy(p, g) for g in golds) if preds[i]["type"] == "numeric" else anls(p, golds)
        preds[i].update(prediction=p, score=score, raw=res.text)
    with open(out / "predictions.jsonl", "w", encoding="utf-8") as fh:
        for p in preds:
            fh.write(json.dumps(p, ensure_ascii=False, default=str) + "\n")

    # 3. accuracy per benchmark and overall (errors count as wrong, and are counted)
    by_bench: dict[str, list[dict]] = defaultdict(list)
    for p in preds:
        by_bench[p["benchmark"]].append(p)
    benchmarks = {
        name: {
            "n": len(ps),
            "accuracy": statistics.fmean(p["score"] for p in ps),
            "errors": sum(p["error"] is not None for p in ps),
            "by_type": {t: statistics.fmean(p["score"] for p in ps if p["type"] == t) for t in sorted({p["type"] for p in ps})},
        }
        for name, ps in sorted(by_bench.items())
    }
    results = {
        "captioner": str(captioner),
        "answerer": str(answerer),
        "bench": str(bench),
        "n": len(preds),
        "images": len(keys),
        "overall": statistics.fmean(p["score"] for p in preds) if preds else None,
        "macro": statistics.fmean(b["accuracy"] for b in benchmarks.values()) if benchmarks else None,
        "errors": sum(p["error"] is not None for p in preds),
        "benchmarks": benchmarks,
    }
    atomic_write_json(out / "results.json", results)
    cap_b.close()
    if ans_b is not cap_b:
        ans_b.close()
    return results
