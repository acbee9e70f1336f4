"""Captions from several captioners (models or captions files) for RubiCap's arena and caption-QA.

The captioning itself is :func:`vlrl.captioning.captioner.caption_images`; this module adds the
resumable per-contestant loop those two evaluations share: a ``captions.jsonl`` keyed by
``image_id::name``, and a ``caption_failures.jsonl`` with one reason per missing caption.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

from vlrl.captioning.captioner import CaptionOutcome, caption_images, captions_from_file, is_captions_file
from vlrl.core.backends import Backend, SamplingParams, load_backend
from vlrl.core.outputs import OutputCounts
from vlrl.core.pipeline import JsonlStore
from vlrl.core.prompts import render
from vlrl.core.sources import ImageItem
from vlrl.core.stage import Outcome, run_stage

logger = logging.getLogger(__name__)


def caption_pairs(
    name: str,
    spec: str | Backend,
    todo: Sequence[ImageItem],
    captions: JsonlStore,
    failures: JsonlStore,
    *,
    role: str,
    field: str,
    prompt: str,
    sampling: SamplingParams,
    batch_size: int,
    min_words: int,
    cache: Path | None,
) -> None:
    """Caption ``todo`` with one captioner (a model spec, a backend or a captions file), resumably.

    Each ``(image, name)`` pair ends as one row keyed ``image_id::name``: ``{"caption"}`` in
    ``captions`` or ``{"reason"}`` in ``failures``; ``field`` names the captioner column (``teacher``,
    ``model``). A captioner that cannot be loaded fails all its pairs and the others still run.
    Failures are retried by the next run (the stage loop, :func:`vlrl.core.stage.run_stage`, is told
    ``retry_quarantined``): a teacher that was down yesterday may answer today.
    """

    def outcomes(batch: list[ImageItem], results: Sequence[CaptionOutcome]) -> list[Outcome]:
        done = []
        for it, oc in zip(batch, results, strict=True):
            row = {"key": f"{it.image_id}::{name}", "image_id": it.image_id, field: name}
            # truncated: the caption stopped at the length limit (counted in the job's stats)
            done.append(Outcome.ok(row["key"], {**row, "caption": oc.caption, "truncated": oc.truncated}) if oc.caption is not None
                        else Outcome.fail(row["key"], oc.reason or "no caption", label=it.image_id,
                                          image_id=it.image_id, **{field: name}))
        return done

    backend: Backend | None = None
    if is_captions_file(spec):
        def process(batch: list[ImageItem]) -> list[Outcome]:
            return outcomes(batch, captions_from_file(spec, batch))
    else:
        try:
            backend = load_backend(spec, cache=cache)
        except Exception as e:  # this captioner is missing; the others still run
            reason = f"{role} could not be loaded: {type(e).__name__}: {e}"
            logger.error("%s %s: %s", role, name, reason)

            def process(batch: list[ImageItem]) -> list[Outcome]:
                return outcomes(batch, [CaptionOutcome(None, reason)] * len(batch))
        else:
            def process(batch: list[ImageItem]) -> list[Outcome]:
                return outcomes(batch, caption_images(backend, batch, prompt, sampling, min_words=min_words))
    try:
        run_stage(todo, key=lambda it: f"{it.image_id}::{name}", process=process, store=captions,
                  quarantine=failures, retry_quarantined=True, batch_size=batch_size, desc=f"{role} {name}",
                  progress_by="item")  # one request per caption: the bar moves per caption
    finally:
        if backend is not None:
            backend.close()


def collect_captions(
    items: list[ImageItem],
    contestants: dict[str, str | Backend],
    out: Path,
    prompt_file,
    batch_size: int,
    max_tokens: int,
) -> dict[str, dict[str, str]]:
    """``name → image_id → caption`` for every contestant (model or captions file), resumably."""
    store = JsonlStore(out / "captions.jsonl", key_field="key")
    failures = JsonlStore(out / "caption_failures.jsonl", key_field="key")
    prompt = render(prompt_file or "teacher_caption.jinja")
    try:
        for name, spec in contestants.items():
            todo = [it for it in items if f"{it.image_id}::{name}" not in store]
            if todo:
                caption_pairs(name, spec, todo, store, failures, role="captioner", field="model", prompt=prompt,
                              sampling=SamplingParams(max_tokens=max_tokens), batch_size=batch_size, min_words=1,
                              cache=out / "cache")
        caps: dict[str, dict[str, str]] = {n: {} for n in contestants}
        for rec in store:
            if rec["model"] in caps:
                caps[rec["model"]][rec["image_id"]] = rec["caption"]
        return caps
    finally:
        store.close()
        failures.close()


def caption_counts(out: Path, names: Sequence[str], limit_flag: str = "--caption-max-tokens") -> dict[str, dict[str, int]]:
    """Per captioner, how many of its captions in ``out/captions.jsonl`` are empty (whitespace only)
    or stopped at the length limit, with one warning per captioner over the share
    (:class:`vlrl.core.outputs.OutputCounts`): an evaluation of a broken captioner's newlines must say
    so beside its scores."""
    counts = {n: OutputCounts(f"captions of {n}", limit_flag) for n in names}
    store = JsonlStore(out / "captions.jsonl", key_field="key")
    try:
        for rec in store:
            if rec.get("model") in counts:
                counts[rec["model"]].add(rec.get("caption"), truncated=bool(rec.get("truncated")))
    finally:
        store.close()
    for c in counts.values():
        c.check()
    return {n: {"captions": c.seen, **c.as_dict()} for n, c in counts.items()}
