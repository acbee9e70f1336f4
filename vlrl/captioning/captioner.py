"""The one "caption these images" function, and the small helpers every captioning caller shares.

Corpus captioning, the CapRL smoke check, Prism, RubiCap's teachers, students, arena contestants
and caption-QA captioners, and the demo all do the same thing: attach an image to a prompt, send a
*batch* to the backend, and sort each answer into "a caption" or "missing, because ...". Doing it in
one place means one policy for the things that go wrong:

* an image that cannot be decoded is a one-line reason on *its* record, never a crashed batch;
* a backend error on one request is a reason on that request's record;
* an answer that is empty, a refusal ("I'm sorry, I can't...") or too short to be a description is a
  reason too, when the caller asks for that check (``min_words``);
* an answer cut off by the token budget is kept but flagged ``truncated`` (``finish_reason ==
  "length"``), so a caption that stops mid-sentence can be counted instead of passing unnoticed.

Several captions per image (``n``) come from one request with ``SamplingParams.n`` samples, so the
response cache and the backend's batching treat them as one unit.

A precomputed captions file can stand in for a model anywhere a captioner spec is accepted: a spec
ending in ``.jsonl`` that names an existing file is read as ``{"image_id", "caption"}`` rows.
"""

from __future__ import annotations

import dataclasses
import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vlrl.core.backends import Backend, ChatRequest, SamplingParams
from vlrl.core.images import ImageLoadError
from vlrl.core.pipeline import read_jsonl
from vlrl.core.sources import ID_COLUMNS, ImageItem
from vlrl.core.video import media_part

logger = logging.getLogger(__name__)

_REFUSAL = re.compile(
    r"^\W*(i'?m sorry|i am sorry|sorry[,.]|i apologi[sz]e|i cannot|i can'?t|i can not|i am unable|i'?m unable|"
    r"i'?m not able|i am not able|as an ai\b|unable to (view|see|process|describe))",
    re.IGNORECASE,
)


@dataclass
class CaptionOutcome:
    """One image's answer: ``caption`` or the ``reason`` it is missing, plus what the backend said."""

    caption: str | None
    reason: str | None = None
    """Why ``caption`` is missing (``None`` when it is present)."""
    truncated: bool = False
    """The (first) caption stopped at the token budget (``finish_reason == "length"``)."""
    captions: list[str] = field(default_factory=list)
    """Every usable sample when ``n > 1`` (``captions[0] == caption``)."""
    truncations: list[bool] = field(default_factory=list)
    """``truncated`` for each entry of ``captions``."""
    finish_reason: str | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached: bool = False

    @property
    def ok(self) -> bool:
        return self.caption is not None


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


def load_one(item: ImageItem, max_pixels: int | None = None, max_image_pixels: Any = "default") -> tuple[ImageItem, Any, str | None]:
    """Decode one item; returns (item, image, None) or (item, None, reason). Never raises.

    ``max_pixels`` is the Qwen resize budget; ``max_image_pixels`` the decompression-bomb limit
    (``"default"``: the loader's; ``None``: no limit)."""
    try:
        limit = {} if max_image_pixels == "default" else {"max_pixels_limit": max_image_pixels}
        return item, item.open(max_pixels=max_pixels, **limit), None
    except ImageLoadError as e:
        return item, None, e.reason
    except Exception as e:  # noqa: BLE001 - a bad file is a reason on its record, never a crash
        return item, None, " ".join(f"{type(e).__name__}: {e}".split())


def _resolve(image: Any, max_pixels: int | None) -> Any:
    """What goes into the request: items and loaders are decoded here (raising), the rest as is."""
    if isinstance(image, ImageItem):
        return image.open(max_pixels=max_pixels)
    if callable(image):
        return image()
    return image


def caption_images(
    backend: Backend,
    images: Sequence[ImageItem | Any],
    prompt: str | Sequence[str],
    sampling: SamplingParams | None = None,
    *,
    n: int | None = None,
    min_words: int | None = 3,
    ids: Sequence[str] | None = None,
    max_pixels: int | None = None,
    raise_backend_errors: bool = False,
) -> list[CaptionOutcome]:
    """Caption ``images`` with one batched ``chat()`` call; one outcome per image, in order.

    ``images`` holds :class:`ImageItem` (decoded here), zero-argument loaders (called here), or
    anything a backend accepts as an image (a PIL image, a path). ``prompt`` is one text or one per
    image. ``n`` captions per image (default: ``sampling.n``) come from one request's samples; use a
    temperature above 0 for them to differ. ``min_words=None`` keeps any answer the backend returned, empty included (corpus
    captioning records what the model said); a number applies :func:`check_caption`.

    Never raises on a bad image or answer. A backend whose ``chat`` itself raises makes every
    outcome of the batch missing with that reason, unless ``raise_backend_errors`` (a job that should
    stop when its model is gone).
    """
    sampling = sampling or SamplingParams(max_tokens=512, temperature=0.0)
    if n is not None and n != sampling.n:
        sampling = dataclasses.replace(sampling, n=n)
    prompts = [prompt] * len(images) if isinstance(prompt, str) else list(prompt)
    if len(prompts) != len(images):
        raise ValueError(f"{len(prompts)} prompts for {len(images)} images")
    names = [str(i) for i in ids] if ids is not None else [
        im.image_id if isinstance(im, ImageItem) else f"image {i}" for i, im in enumerate(images)
    ]
    outcomes: list[CaptionOutcome | None] = [None] * len(images)
    requests: list[ChatRequest] = []
    slots: list[int] = []
    for i, im in enumerate(images):
        try:
            image = _resolve(im, max_pixels)
        except Exception as e:  # noqa: BLE001 - unreadable image: this record only
            reason = str(e) if isinstance(e, ImageLoadError) else " ".join(f"{type(e).__name__}: {e}".split())
            outcomes[i] = CaptionOutcome(None, f"bad image: {reason}")
            continue
        content = [media_part(image), {"type": "text", "text": prompts[i]}]
        requests.append(ChatRequest([{"role": "user", "content": content}], sampling, id=names[i]))
        slots.append(i)
    if requests:
        try:
            results = backend.chat(requests)
            if len(results) != len(requests):
                raise RuntimeError(f"{len(results)} results for {len(requests)} requests")
        except Exception as e:
            if raise_backend_errors:
                raise
            logger.warning("captioner %s failed on a batch of %d: %s", getattr(backend, "model", "?"), len(requests), e)
            for i in slots:
                outcomes[i] = CaptionOutcome(None, f"backend raised: {type(e).__name__}: {e}")
            results = []
        for i, res in zip(slots, results, strict=False):
            outcomes[i] = _outcome(res, min_words)
    return [o if o is not None else CaptionOutcome(None, "not attempted") for o in outcomes]


def _outcome(res: Any, min_words: int | None) -> CaptionOutcome:
    usage = {"prompt_tokens": res.prompt_tokens, "completion_tokens": res.completion_tokens, "cached": res.cached}
    if not res.ok:
        return CaptionOutcome(None, f"backend error: {res.error}", **usage)
    texts = list(res.texts) or [""]
    reasons = list(res.finish_reasons)[: len(texts)] + [""] * (len(texts) - len(res.finish_reasons))
    kept: list[tuple[str, str]] = []
    first_reason = None
    for text, fr in zip(texts, reasons, strict=True):
        why = None if min_words is None else check_caption(text, min_words)
        if why is None:
            kept.append((text if min_words is None else text.strip(), fr))
        elif first_reason is None:
            first_reason = why
    if not kept:
        return CaptionOutcome(None, first_reason, finish_reason=reasons[0] or None, **usage)
    caps = [t for t, _ in kept]
    cuts = [fr == "length" for _, fr in kept]
    return CaptionOutcome(caps[0], None, cuts[0], caps, cuts, kept[0][1] or None, **usage)


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
    """``"gpt=openai:http://h/v1@gpt"`` or ``"mine=caps.jsonl"`` → (name, spec); a bare spec → (None, spec).

    A named captions file counts as named too: read as a bare spec, ``mine=caps.jsonl`` would be
    neither a file nor a backend, and its run would go on with no captions at all.
    """
    head, sep, rest = arg.partition("=")
    if sep and re.fullmatch(r"[A-Za-z0-9_.\-]+", head) and (":" in rest or rest.endswith(".jsonl")):
        return head, rest
    return None, arg


def is_captions_file(spec: str | Backend) -> bool:
    return isinstance(spec, str) and spec.endswith(".jsonl") and Path(spec).is_file()


def read_captions(path: str | Path) -> dict[str, str]:
    """``image_id → caption`` from a JSONL captions file (fields ``image_id``/``id`` and ``caption``)."""
    out: dict[str, str] = {}
    for n, row in enumerate(read_jsonl(path), 1):
        image_id = next((str(row[f]) for f in ID_COLUMNS if row.get(f) is not None), None)
        caption = row.get("caption", row.get("text", row.get("reference")))
        if image_id is None or not isinstance(caption, str):
            raise ValueError(f"{path}: row {n} needs 'image_id' and a string 'caption'")
        out[image_id] = caption
    return out


def captions_from_file(path: str | Path, items: Sequence[ImageItem]) -> list[CaptionOutcome]:
    """Outcomes for ``items`` read from a captions file instead of a model."""
    caps = read_captions(path)
    return [
        CaptionOutcome(caps[it.image_id], captions=[caps[it.image_id]], truncations=[False])
        if it.image_id in caps
        else CaptionOutcome(None, f"no caption in {path}")
        for it in items
    ]


__all__ = [
    "CaptionOutcome",
    "caption_images",
    "captions_from_file",
    "check_caption",
    "is_captions_file",
    "load_one",
    "read_captions",
    "spec_name",
    "split_named",
    "unique_names",
]
