"""Rubric synthesis: turn teacher consensus and the student's own failures into weighted rubrics.

For each image (RubiCap, offline, once per student):

1. The **student** captions the image (``student.jsonl``, keyed by image id). ``--student`` may also
   be a JSONL captions file ``{"image_id", "caption"}`` made elsewhere (e.g. by ``vlrl caption``).
2. The **rubric writer** reads the teacher captions (under neutral labels T1, T2, ... assigned in a
   fresh random order per image, so it can neither favour a named model nor learn that T1 is always
   the same one), the student caption and, when its backend is a VLM (or ``with_image=True``), the
   image itself, as in the paper. It answers in JSON: consensus facts with ids (each backed by at
   least two teachers), the student's deficiencies by severity, each citing the fact ids it rests
   on or the student's own words for a hallucination, one binary, self-contained rubric per
   deficiency (pitfalls for hallucinations), and an explicit ``student_meets_all``.
3. The answer is validated (:mod:`.schema`, strict: no defaults); an answer cut off by the length
   limit is rejected outright; JSON that merely fails to parse is repaired with ``json_repair``; an
   answer that still does not validate goes back to the writer with the error quoted, up to
   ``max_retries`` times; after that the image is *rejected* with the reason.

Images with fewer than two teacher captions cannot have consensus and are rejected up front without
a writer call. An image the writer explicitly declares solved (``student_meets_all: true``) has
nothing to train on: it goes to ``solved.jsonl``, is counted apart from failures, and never reaches
the training data (every rollout on it would score ``None``).

Outputs in ``--out``: ``rubrics.jsonl`` (one row per image with a non-empty rubric set: ``image_id``,
``image``, ``rubrics``, ``consensus_facts``, ``deficiencies``, ``unlinked`` (deficiencies dropped for
lack of evidence, with reasons), ``student_caption``, ``teacher_captions``, ``teacher_labels``,
``writer`` audit info), ``solved.jsonl``, ``rejected.jsonl`` (``image_id``, ``reason``, raw answers),
``stats.json``.
Rerunning the same command resumes: accepted images are skipped, rejected ones are retried (their
paid calls replay from the cache, so a deterministic reject costs nothing twice).
"""

from __future__ import annotations

import logging
import random
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from vlrl.captioning.captioner import caption_images, captions_from_file, is_captions_file
from vlrl.core.backends import Backend, ChatRequest, SamplingParams, load_backend
from vlrl.core.images import load_image
from vlrl.core.pipeline import JsonlStore, atomic_write_json, in_shard, parse_shard
from vlrl.core.prompts import render
from vlrl.core.sources import ImageItem
from vlrl.core.stage import Outcome, run_stage
from vlrl.judge.structured import chat_structured
from vlrl.methods.rubicap.schema import validate_writer_output, writer_schema
from vlrl.methods.rubicap.teachers import DEFAULT_PROMPT, read_teacher_dataset

logger = logging.getLogger(__name__)

WRITER_PROMPT = "rubric_writer.jinja"


def build_rubrics(
    teachers_dir: str | Path,
    student: str | Backend,
    writer: str | Backend,
    out: str | Path,
    *,
    with_image: bool | None = None,
    student_prompt_file: str | Path | None = None,
    writer_prompt_file: str | Path | None = None,
    batch_size: int = 16,
    max_retries: int = 2,
    student_max_tokens: int = 512,
    writer_max_tokens: int = 2048,
    min_teachers: int = 2,
    shard: str | None = None,
    seed: int = 0,
) -> dict[str, Any]:
    """Write ``rubrics.jsonl`` for every image of a teacher-captions folder; returns the stats.

    ``with_image``: ``None`` shows the image to the writer when its backend is known to be a VLM
    (a local ``hf:`` model with a vision tower); pass ``True`` for a served VLM. ``seed`` fixes the
    per-image teacher label order (so a rerun replays its writer calls from the cache).
    """
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    part = parse_shard(shard)
    rows = [r for r in read_teacher_dataset(teachers_dir) if in_shard(str(r["image_id"]), part)]
    student_prompt = render(student_prompt_file or DEFAULT_PROMPT)
    writer_template = writer_prompt_file or WRITER_PROMPT

    store = JsonlStore(out / "rubrics.jsonl", key_field="image_id")
    solved = JsonlStore(out / "solved.jsonl", key_field="image_id")
    rejected = JsonlStore(out / "rejected.jsonl", key_field="image_id")
    students = JsonlStore(out / "student.jsonl", key_field="image_id")
    stu_backend = wri_backend = None
    student_caps = {rec["image_id"]: rec["caption"] for rec in students}
    try:
        todo = [r for r in rows if str(r["image_id"]) not in store and str(r["image_id"]) not in solved]
        few = [r for r in todo if len(r.get("teacher_captions") or {}) < min_teachers]
        todo = [r for r in todo if len(r.get("teacher_captions") or {}) >= min_teachers]
        if todo:
            stu_backend = (
                _StudentFile(student) if is_captions_file(student) else load_backend(student, cache=out / "cache")
            )
            wri_backend = load_backend(writer, cache=out / "cache")
            if with_image is None:
                with_image = backend_is_vlm(wri_backend)
                logger.info("rubric writer %s: %s", wri_backend.model,
                            "a VLM, it sees the image" if with_image else "text only (pass --with-image for a served VLM)")

        def no_consensus(batch: list[dict]) -> list[Outcome]:  # rejected without a model call
            return [Outcome.fail(str(r["image_id"]), f"only {len(r.get('teacher_captions') or {})} teacher "
                                 f"caption(s); consensus needs {min_teachers}") for r in batch]

        def process(batch: list[dict]) -> list[Outcome]:
            failed = _student_captions(stu_backend, batch, student_prompt, student_max_tokens, students, student_caps)
            ready = [r for r in batch if str(r["image_id"]) in student_caps]
            return failed + _write_rubrics(wri_backend, ready, student_caps, writer_template, with_image,
                                           writer_max_tokens, max_retries, store, solved, seed)

        # rejected images are retried by every rerun (a deterministic reject replays from the cache)
        stage = {"key": lambda r: str(r["image_id"]), "store": store, "done": [solved], "quarantine": rejected,
                 "retry_quarantined": True, "batch_size": batch_size, "failure_log": "{key}: rejected: {reason}"}
        run_stage(few, process=no_consensus, desc="no consensus", progress=False, **stage)
        run_stage(todo, process=process, desc="rubrics", progress_by="request", **stage)
        stats = _stats(rows, store, solved, rejected)
    finally:
        for b in (stu_backend, wri_backend):
            if b is not None:
                b.close()
        store.close()
        solved.close()
        rejected.close()
        students.close()
    atomic_write_json(out / "stats.json", stats)
    return stats


def _student_captions(
    backend: Backend,
    batch: list[dict],
    prompt: str,
    max_tokens: int,
    students: JsonlStore,
    student_caps: dict[str, str],
) -> list[Outcome]:
    need = [r for r in batch if str(r["image_id"]) not in student_caps]
    if not need:
        return []
    items = [ImageItem.from_path(str(r["image_id"]), r["image"]) for r in need]
    if isinstance(backend, _StudentFile):
        outcomes = captions_from_file(backend.path, items)
    else:
        # min_words=1: a terse student caption is exactly what rubrics are for, not a failure.
        outcomes = caption_images(backend, items, prompt, SamplingParams(max_tokens=max_tokens), min_words=1)
    failed = []
    for it, oc in zip(items, outcomes, strict=True):
        if oc.caption is not None:
            students.append({"image_id": it.image_id, "caption": oc.caption})
            student_caps[it.image_id] = oc.caption
        else:
            failed.append(Outcome.fail(it.image_id, f"student caption missing: {oc.reason}"))
    return failed


class _StudentFile:
    """Stand-in for a student backend when its captions were made elsewhere (``--student FILE.jsonl``)."""

    def __init__(self, path: str) -> None:
        self.path = path

    def close(self) -> None:
        pass


def _write_rubrics(
    backend: Backend,
    rows: list[dict],
    student_caps: dict[str, str],
    template: str | Path,
    with_image: bool,
    max_tokens: int,
    max_retries: int,
    store: JsonlStore,
    solved: JsonlStore,
    seed: int = 0,
) -> list[Outcome]:
    """One writer call per row (answers validated, retried with the error quoted); an outcome each."""
    done: list[Outcome] = []
    if not rows:
        return done
    requests, label_maps, live = [], [], []
    labels_of: dict[str, dict[str, str]] = {}
    for r in rows:
        iid = str(r["image_id"])
        labels = teacher_labels(r["teacher_captions"], iid, seed)
        prompt = render(
            template,
            teachers=[{"label": lab, "caption": r["teacher_captions"][name]} for lab, name in labels.items()],
            student=student_caps[iid],
            with_image=with_image,
        )
        content: list[dict[str, Any]] = [{"type": "text", "text": prompt}]
        if with_image:
            try:
                content.insert(0, {"type": "image", "image": load_image(r["image"], record=iid)})
            except Exception as e:
                done.append(Outcome.fail(iid, f"bad image: {e}"))
                continue
        # the built-in prompt's answer goes out as structured output; a custom prompt may ask for more keys
        schema = writer_schema(list(labels)) if str(template) == WRITER_PROMPT else None
        requests.append(
            ChatRequest([{"role": "user", "content": content}], SamplingParams(max_tokens=max_tokens), id=iid,
                        json_schema=schema)
        )
        label_maps.append(labels)
        labels_of[iid] = labels
        live.append(r)
    results = chat_structured(
        backend,
        requests,
        lambda obj, i: validate_writer_output(obj, label_maps[i], student=student_caps[str(live[i]["image_id"])]),
        max_retries=max_retries,
        reject_truncated=True,
    )
    for r, res in zip(live, results, strict=True):
        iid = str(r["image_id"])
        if not res.ok:
            done.append(Outcome.fail(iid, f"rubric writer: {res.error}", attempts=res.attempts, raw=res.raw,
                                     prompt_tokens=res.prompt_tokens, completion_tokens=res.completion_tokens))
            continue
        v = res.value
        row = {
            "image_id": iid,
            "image": r["image"],
            "rubrics": v["rubrics"],
            "consensus_facts": v["consensus_facts"],
            "deficiencies": v["deficiencies"],
            "unlinked": v["unlinked"],
            "student_meets_all": v["student_meets_all"],
            "student_caption": student_caps[iid],
            "teacher_captions": r["teacher_captions"],
            "teacher_labels": labels_of[iid],
            "writer": {"attempts": res.attempts, "repaired": res.repaired, "dropped_facts": v["dropped_facts"],
                       "prompt_tokens": res.prompt_tokens, "completion_tokens": res.completion_tokens},
        }
        for u in v["unlinked"]:
            logger.info("%s: deficiency %s dropped: %s", iid, u["id"], u["reason"])
        done.append(Outcome.ok(iid, row, to=store if v["rubrics"] else solved))
    return done


def teacher_labels(captions: dict[str, str], image_id: str, seed: int = 0) -> dict[str, str]:
    """Neutral labels T1..Tn → teacher names, in a random order drawn afresh for every image.

    The order is a function of ``(seed, image_id)``: random across images (the writer cannot learn
    which label is the strongest teacher), reproducible across reruns (cached calls replay).
    """
    names = sorted(captions)
    random.Random(f"{seed}:{image_id}").shuffle(names)
    return {f"T{i}": name for i, name in enumerate(names, 1)}


def backend_is_vlm(backend: Backend) -> bool:
    """Whether a backend is known to read images (local models report it; served ones cannot)."""
    while backend is not None:
        if getattr(backend, "is_vlm", None) is not None:
            return bool(backend.is_vlm)
        backend = getattr(backend, "inner", None)
    return False


def _stats(rows: Sequence[dict], store: JsonlStore, solved: JsonlStore, rejected: JsonlStore) -> dict[str, Any]:
    accepted = list(store)
    solved_rows = list(solved)
    n_solved = len(solved_rows)
    reasons = Counter()
    for rec in rejected:
        if rec["image_id"] not in store and rec["image_id"] not in solved:
            reasons[": ".join(p.strip() for p in rec["reason"].split(":")[:2])] += 1  # "rubric writer: invalid output"
    sev = Counter(r["severity"] for row in accepted for r in row["rubrics"])
    n_acc = len(accepted)
    return {
        "images": len(rows),
        "accepted": n_acc,
        "rejected": sum(reasons.values()),
        "rejected_by_reason": dict(reasons),
        "solved": n_solved,
        "empty_rubric_sets": n_solved,
        "training_images": n_acc,
        "unlinked_deficiencies": sum(len(r.get("unlinked", [])) for r in accepted),
        "pitfall_rubrics": sum(r["weight"] < 0 for row in accepted for r in row["rubrics"]),
        "rubrics": sum(sev.values()),
        "rubrics_by_severity": dict(sev),
        "mean_rubrics_per_image": (sum(sev.values()) / n_acc) if n_acc else 0.0,
        "mean_consensus_facts": (sum(len(r["consensus_facts"]) for r in accepted) / n_acc) if n_acc else 0.0,
        "repaired": sum(bool(r["writer"]["repaired"]) for r in accepted),
        "retried": sum(r["writer"]["attempts"] > 1 for r in accepted),
        # what the writer cost, rejected answers included (older rows without counts add 0)
        "writer_tokens": {
            k: sum(r["writer"].get(k, 0) for r in accepted + solved_rows)
            + sum(r.get(k, 0) for r in rejected if r["image_id"] not in store and r["image_id"] not in solved)
            for k in ("prompt_tokens", "completion_tokens")
        },
    }
