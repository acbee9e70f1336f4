"""Captions from several captioners (models or captions files) for RubiCap's arena and caption-QA.

The captioning itself is :func:`vlrl.captioning.captioner.caption_images`; this module adds the
resumable per-contestant loop those two evaluations share: a ``captions.jsonl`` keyed by
``image_id::name``, and a ``caption_failures.jsonl`` with one reason per missing caption.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

from tqdm.auto import tqdm

from vlrl.captioning.captioner import CaptionOutcome, caption_images, captions_from_file, is_captions_file
from vlrl.core.backends import Backend, SamplingParams, load_backend
from vlrl.core.pipeline import JsonlStore, batched
from vlrl.core.prompts import render
from vlrl.core.sources import ImageItem

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
    """

    def record(it: ImageItem, oc: CaptionOutcome) -> None:
        row = {"key": f"{it.image_id}::{name}", "image_id": it.image_id, field: name}
        if oc.caption is not None:
            captions.append({**row, "caption": oc.caption})
        else:
            logger.warning("%s %s: %s: %s", role, name, it.image_id, oc.reason)
            failures.append({**row, "reason": oc.reason})

    if is_captions_file(spec):
        for it, oc in zip(todo, captions_from_file(spec, todo), strict=True):
            record(it, oc)
        return
    try:
        backend = load_backend(spec, cache=cache)
    except Exception as e:  # this captioner is missing; the others still run
        reason = f"{role} could not be loaded: {type(e).__name__}: {e}"
        logger.error("%s %s: %s", role, name, reason)
        for it in todo:
            record(it, CaptionOutcome(None, reason))
        return
    try:
        for batch in tqdm(list(batched(todo, batch_size)), desc=f"{role} {name}", unit="batch"):
            for it, oc in zip(batch, caption_images(backend, batch, prompt, sampling, min_words=min_words), strict=True):
                record(it, oc)
    finally:
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
