"""Captions from several captioners (models or captions files) for RubiCap's arena and caption-QA.

The captioning itself is :func:`vlrl.captioning.captioner.caption_images`; this module adds the
resumable per-contestant loop those two evaluations share: a ``captions.jsonl`` keyed by
``image_id::name``, and a ``caption_failures.jsonl`` with one reason per missing caption.
"""

from __future__ import annotations

import logging
from pathlib import Path

from tqdm.auto import tqdm

from vlrl.captioning.captioner import caption_images, captions_from_file, is_captions_file
from vlrl.core.backends import Backend, SamplingParams, load_backend
from vlrl.core.pipeline import JsonlStore, batched
from vlrl.core.prompts import render
from vlrl.core.sources import ImageItem

logger = logging.getLogger(__name__)


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
            if not todo:
                continue
            if is_captions_file(spec):
                chunks = [(todo, captions_from_file(spec, todo))]
                backend = None
            else:
                try:
                    backend = load_backend(spec, cache=out / "cache")
                except Exception as e:  # this contestant is missing; the others still run
                    logger.error("captioner %s could not be loaded: %s", name, e)
                    for it in todo:
                        failures.append(
                            {
                                "key": f"{it.image_id}::{name}",
                                "image_id": it.image_id,
                                "model": name,
                                "reason": f"captioner could not be loaded: {e}",
                            }
                        )
                    continue
                chunks = (
                    (b, caption_images(backend, b, prompt, SamplingParams(max_tokens=max_tokens), min_words=1))
                    for b in batched(todo, batch_size)
                )
            try:
                n_batches = 1 if backend is None else -(-len(todo) // batch_size)
                for batch, outcomes in tqdm(chunks, desc=f"captions {name}", unit="batch", total=n_batches):
                    for it, oc in zip(batch, outcomes, strict=True):
                        key = f"{it.image_id}::{name}"
                        if oc.caption is not None:
                            store.append({"key": key, "image_id": it.image_id, "model": name, "caption": oc.caption})
                        else:
                            logger.warning("captioner %s: %s: %s", name, it.image_id, oc.reason)
                            failures.append({"key": key, "image_id": it.image_id, "model": name, "reason": oc.reason})
            finally:
                if backend is not None:
                    backend.close()
        caps: dict[str, dict[str, str]] = {n: {} for n in contestants}
        for rec in store:
            if rec["model"] in caps:
                caps[rec["model"]][rec["image_id"]] = rec["caption"]
        return caps
    finally:
        store.close()
        failures.close()
