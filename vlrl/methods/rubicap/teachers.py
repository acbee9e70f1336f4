"""The teacher committee: several strong VLMs caption every image, once, offline.

RubiCap's rubrics rest on *consensus*: a fact counts as near ground truth only when at least two
teachers describe it. That needs several independent captions per image, from any mix of served
models (``openai:``) and local ones (``hf:``). The job is built to run for hours on many teachers:

* **Teacher by teacher.** One backend is loaded at a time (local teachers can be large), closed
  before the next.
* **Exactly once.** Each (image, teacher) caption is one line in ``captions.jsonl`` keyed
  ``image_id::teacher``; a killed run, rerun with the same command, skips what is written. Every
  model call goes through the response cache in ``<out>/cache``, so a unit that was in flight when
  the job died is replayed for free.
* **Captions made elsewhere.** ``NAME=FILE.jsonl`` (rows ``{"image_id", "caption"}``) makes a
  teacher of a file of captions, e.g. from a served model run on another machine; a missing or
  malformed file stops the run before any model loads.
* **One bad teacher never stops the others.** A teacher that cannot be loaded, raises, times out,
  refuses or answers with nothing has its missing captions written to ``failures.jsonl`` with the
  reason, and is retried on the next run (failures are never cached).

Outputs in ``--out``: ``teacher_captions.jsonl`` (one row per image: ``image_id``, ``image``,
``teacher_captions`` {teacher: caption}, ``missing`` {teacher: reason}), ``stats.json`` (with
``empty`` and ``truncated`` counts, overall and per teacher, and one warning when too many;
:mod:`vlrl.core.outputs`),
``meta.json`` (teacher names and specs, prompt), and the working files above.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from vlrl.captioning.captioner import unique_names
from vlrl.core.backends import Backend, SamplingParams
from vlrl.core.outputs import OutputCounts
from vlrl.core.pipeline import JsonlStore, atomic_write_json, in_shard, parse_shard, read_jsonl, write_jsonl
from vlrl.core.prompts import render
from vlrl.core.sources import ImageItem
from vlrl.methods.rubicap.captioner import caption_pairs
from vlrl.methods.rubicap.contestants import check_caption_file, is_caption_file_spec, split_contestant
from vlrl.methods.rubicap.sources import load_images

logger = logging.getLogger(__name__)

DEFAULT_PROMPT = "teacher_caption.jinja"
EMPTY_REASON = "empty answer"  # vlrl.captioning.captioner.check_caption's reason for whitespace only


def pair_key(image_id: str, teacher: str) -> str:
    return f"{image_id}::{teacher}"


def run_teacher_committee(
    images: str | Path | Sequence[ImageItem],
    teachers: Sequence[str | Backend],
    out: str | Path,
    *,
    prompt_file: str | Path | None = None,
    batch_size: int = 16,
    max_tokens: int = 512,
    temperature: float = 0.0,
    min_words: int = 3,
    shard: str | None = None,
) -> dict[str, Any]:
    """Caption every image with every teacher; returns (and writes) the statistics."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    items = list(images) if not isinstance(images, (str, Path)) else load_images(images, out / "images")
    part = parse_shard(shard)
    items = [it for it in items if in_shard(it.image_id, part)]
    named = [split_contestant(t) if isinstance(t, str) else (None, t) for t in teachers]
    names = unique_names([s for _, s in named], [n for n, _ in named])
    for name, (_, spec) in zip(names, named, strict=True):
        if is_caption_file_spec(spec):
            check_caption_file(name, spec)  # NAME=FILE.jsonl: captions made elsewhere; a bad file stops here
    prompt = render(prompt_file or DEFAULT_PROMPT)
    sampling = SamplingParams(max_tokens=max_tokens, temperature=temperature)
    atomic_write_json(
        out / "meta.json",
        {
            "teachers": {
                n: (s if isinstance(s, str) else f"<{type(s).__name__} {s.model}>")
                for n, (_, s) in zip(names, named, strict=True)
            },
            "prompt": prompt,
            "sampling": sampling.to_dict(),
        },
    )

    captions = JsonlStore(out / "captions.jsonl", key_field="key")
    failures = JsonlStore(out / "failures.jsonl", key_field="key")
    try:
        for name, (_, spec) in zip(names, named, strict=True):
            todo = [it for it in items if pair_key(it.image_id, name) not in captions]
            if not todo:
                logger.info("teacher %s: all %d captions already written", name, len(items))
                continue
            caption_pairs(name, spec, todo, captions, failures, role="teacher", field="teacher", prompt=prompt,
                          sampling=sampling, batch_size=batch_size, min_words=min_words, cache=out / "cache")
        stats = _write_dataset(out, items, names, captions, failures)
    finally:
        captions.close()
        failures.close()
    return stats


def _write_dataset(
    out: Path, items: list[ImageItem], names: list[str], captions: JsonlStore, failures: JsonlStore
) -> dict[str, Any]:
    caps: dict[str, dict[str, str]] = {}
    health = OutputCounts("teacher captions", "--max-tokens")
    per_teacher = {n: {"captioned": 0, "missing": 0, "empty": 0, "truncated": 0, "reasons": Counter()} for n in names}
    for rec in captions:
        caps.setdefault(rec["image_id"], {})[rec["teacher"]] = rec["caption"]
        if rec["teacher"] in per_teacher:
            per_teacher[rec["teacher"]]["truncated"] += bool(rec.get("truncated"))
            health.add(rec["caption"], truncated=bool(rec.get("truncated")))
    reasons: dict[tuple[str, str], str] = {}
    for rec in failures:
        reasons[(rec["image_id"], rec["teacher"])] = rec["reason"]
        if rec["teacher"] in per_teacher and _reason_kind(rec["reason"]) == EMPTY_REASON:
            per_teacher[rec["teacher"]]["empty"] += 1  # an answer of whitespace only: missing, and counted as empty
            health.add("")
    coverage = Counter()

    def rows() -> Iterator[dict[str, Any]]:  # streamed: counts are kept as the rows go out
        for it in items:
            got = {n: caps[it.image_id][n] for n in names if n in caps.get(it.image_id, {})}
            missing = {n: reasons.get((it.image_id, n), "not attempted") for n in names if n not in got}
            for n in names:
                if n in got:
                    per_teacher[n]["captioned"] += 1
                else:
                    per_teacher[n]["missing"] += 1
                    per_teacher[n]["reasons"][_reason_kind(missing[n])] += 1
            coverage[len(got)] += 1
            row = {"image_id": it.image_id, "image": it.path, "teacher_captions": got, "missing": missing}
            if it.meta:
                row["meta"] = it.meta
            yield row

    write_jsonl(out / "teacher_captions.jsonl", rows())
    stats = {
        "images": len(items),
        "teachers": names,
        "per_teacher": {n: {**v, "reasons": dict(v["reasons"])} for n, v in per_teacher.items()},
        "images_by_caption_count": {str(k): coverage[k] for k in sorted(coverage)},
        "images_with_consensus_possible": sum(v for k, v in coverage.items() if k >= 2),
        **health.as_dict(),
    }
    health.check()
    atomic_write_json(out / "stats.json", stats)
    return stats


def _reason_kind(reason: str) -> str:
    """Group reasons for the statistics ("backend error: timeout after 60s" → "backend error")."""
    return reason.split(":", 1)[0].split("(", 1)[0].strip()


def read_teacher_dataset(path: str | Path) -> list[dict[str, Any]]:
    """Rows of a teacher-captions folder (or its ``teacher_captions.jsonl``)."""
    p = Path(path)
    if p.is_dir():
        p = p / "teacher_captions.jsonl"
    if not p.exists():
        raise FileNotFoundError(f"{p}: not found; run `vlrl data teacher-captions` first")
    return list(read_jsonl(p))
