"""Captioning a list of images with one backend, the way every RubiCap stage needs it.

Teachers, the student, arena contestants and caption-QA captioners all do the same thing: render a
prompt, attach the image, send a *batch* to the backend, and sort each answer into "a caption" or
"missing, because ...". Missing is explicit — an empty answer, a refusal ("I'm sorry, I can't..."), a
backend error (timeout, HTTP 500) or an answer too short to be a description — so a bad teacher shows
up in the statistics instead of as silently empty rows.

A precomputed captions file can stand in for a model anywhere a captioner spec is accepted: a spec
ending in ``.jsonl`` that names an existing file is read as ``{"image_id", "caption"}`` rows.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from tqdm.auto import tqdm

from vlrl.core.backends import Backend, ChatRequest, SamplingParams, load_backend
from vlrl.core.pipeline import JsonlStore, batched
from vlrl.core.prompts import render
from vlrl.methods.rubicap.sources import ImageItem, open_item, read_captions

logger = logging.getLogger(__name__)

_REFUSAL = re.compile(
    r"^\W*(i'?m sorry|i am sorry|sorry[,.]|i apologi[sz]e|i cannot|i can'?t|i can not|i am unable|i'?m unable|"
    r"i'?m not able|i am not able|as an ai\b|unable to (view|see|process|describe))",
    re.IGNORECASE,
)


@dataclass
class CaptionOutcome:
    caption: str | None
    reason: str | None = None
    """Why ``caption`` is missing (``None`` when it is present)."""


def check_caption(text: str, min_words: int = 3) -> str | None:
    """Reason a model answer is not a usable caption, or ``None`` when it is."""
    if not text or not text.strip():
        return "empty answer"
    if _REFUSAL.match(text.strip()[:200]):
        return "refusal"
    n = len(text.split())
    if n < min_words:
        return f"too short ({n} words < {min_words})"
    return None


def spec_name(spec: str | Backend) -> str:
    """A short readable name for a captioner spec (model folder or served model name)."""
    if isinstance(spec, Backend):
        return str(spec.model)
    s = str(spec)
    if s.endswith(".jsonl"):
        return Path(s).stem
    target = s.split(":", 1)[-1].split("?", 1)[0]
    if "@" in target:
        return target.rsplit("@", 1)[1].replace("/", "_")
    return Path(target.rstrip("/")).name or target


def unique_names(specs: Sequence[str | Backend], names: Sequence[str | None] | None = None) -> list[str]:
    """Names for specs (``NAME=SPEC`` given names win), made unique with ``-2``, ``-3`` suffixes."""
    out: list[str] = []
    for i, spec in enumerate(specs):
        base = (names[i] if names else None) or spec_name(spec)
        name, k = base, 2
        while name in out:
            name, k = f"{base}-{k}", k + 1
        out.append(name)
    return out


def split_named(arg: str) -> tuple[str | None, str]:
    """``"gpt=openai:http://h/v1@gpt"`` → ("gpt", spec); a bare spec → (None, spec)."""
    head, sep, rest = arg.partition("=")
    if sep and re.fullmatch(r"[A-Za-z0-9_.\-]+", head) and ":" in rest:
        return head, rest
    return None, arg


def is_captions_file(spec: str | Backend) -> bool:
    return isinstance(spec, str) and spec.endswith(".jsonl") and Path(spec).is_file()


def caption_images(
    backend: Backend,
    items: Sequence[ImageItem],
    prompt: str,
    sampling: SamplingParams | None = None,
    min_words: int = 3,
) -> list[CaptionOutcome]:
    """Caption ``items`` with one batched ``chat()`` call. Never raises on a bad image or answer."""
    sampling = sampling or SamplingParams(max_tokens=512, temperature=0.0)
    outcomes: list[CaptionOutcome | None] = [None] * len(items)
    requests: list[ChatRequest] = []
    slots: list[int] = []
    for i, it in enumerate(items):
        try:
            image = open_item(it)
        except Exception as e:  # unreadable image: this record only
            outcomes[i] = CaptionOutcome(None, f"bad image: {e}")
            continue
        content = [{"type": "image", "image": image}, {"type": "text", "text": prompt}]
        requests.append(ChatRequest([{"role": "user", "content": content}], sampling, id=it.image_id))
        slots.append(i)
    if requests:
        try:
            results = backend.chat(requests)
            if len(results) != len(requests):
                raise RuntimeError(f"{len(results)} results for {len(requests)} requests")
        except Exception as e:  # the backend itself broke: every request of the batch is missing
            logger.warning("captioner %s failed on a batch of %d: %s", getattr(backend, "model", "?"), len(requests), e)
            for i in slots:
                outcomes[i] = CaptionOutcome(None, f"backend raised: {type(e).__name__}: {e}")
            return [o for o in outcomes if o is not None]
        for i, res in zip(slots, results, strict=True):
            if not res.ok:
                outcomes[i] = CaptionOutcome(None, f"backend error: {res.error}")
                continue
            reason = check_caption(res.text, min_words)
            outcomes[i] = CaptionOutcome(None, reason) if reason else CaptionOutcome(res.text.strip())
    return [o if o is not None else CaptionOutcome(None, "not attempted") for o in outcomes]


def captions_from_file(path: str | Path, items: Sequence[ImageItem]) -> list[CaptionOutcome]:
    caps = read_captions(path)
    return [
        CaptionOutcome(caps[it.image_id]) if it.image_id in caps else CaptionOutcome(None, f"no caption in {path}")
        for it in items
    ]


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
