"""From vlrl records to the rows TRL's trainers read.

vlrl datasets are records with an ``image`` (path, HF image feature or bytes), an optional caption
``prompt`` or a reasoning ``question``, and whatever the rewards need: ``questions`` (CapRL MCQs),
``rubrics`` (RubiCap criteria), ``answer`` (Vision-R1 ground truth), ``choices``. TRL's
``GRPOTrainer`` wants a *conversational* ``prompt`` column plus an ``image`` column, and hands every
other column to the reward functions as keyword arguments.

Two choices keep that faithful:

* The prompt stays conversational (``[{"role": "user", "content": text}]``): TRL inserts the image
  part itself and applies the processor's chat template, so training sees exactly the template a
  model served later sees. Pre-templated strings would make TRL refuse multimodal input.
* Reward columns are stored as JSON text in Arrow and decoded on access (``with_transform``). Arrow
  would otherwise unify heterogeneous records (MCQs with 3 and 5 options, rubric dicts with optional
  fields) into padded structs; decoding gives each reward exactly the objects the dataset holds.
  Images are stored as paths and opened on access with :func:`vlrl.core.images.load_image`, the loader
  every other vlrl stage uses, so training pixels equal evaluation pixels.

Records are read and taken apart by :func:`vlrl.core.sources.rows.read_row` (the one adapter from
any record layout to id, images and reward columns); this module only turns those parts into TRL's
columns. ``builtin:tiny_captions[:N]`` and ``builtin:tiny_math[:N]`` generate a few
small images with MCQs, rubrics and numeric answers, so the tiny CPU recipes run with nothing
prepared.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from pathlib import Path
from typing import Any

from vlrl.core.sources.rows import IMAGE_KEYS, Row, iter_rows, source_columns

logger = logging.getLogger(__name__)


def dataset_columns(data) -> set[str]:
    """Column names a source will give the trainer, read cheaply (:func:`source_columns`): the
    source's own, plus ``prompt`` (always built), ``image`` (when it has any image column) and
    ``video`` (when it has a video column)."""
    from vlrl.core.sources.columns import VIDEO_COLUMNS

    cols = source_columns(data.source)
    out = cols | {"prompt"}
    if cols & set(IMAGE_KEYS):
        out.add("image")
    if cols & set(VIDEO_COLUMNS):
        out.add("video")
    return out


# -- adapting to TRL ---------------------------------------------------------------------------------


def load_processor(path: str, data=None):
    """The policy's processor with the recipe's pixel budget (``data.min_pixels`` / ``data.max_pixels``).

    Qwen-VL processors resize every image so its pixel count falls in [min_pixels, max_pixels];
    Qwen2.5-VL's default upper bound is about 12.8 MP, i.e. up to 16K visual tokens for one large
    image, which dominates memory in a real run. The budget travels with the recipe so generation and
    the loss see the same number of image tokens.
    """
    from transformers import AutoProcessor

    kwargs = {k: getattr(data, k) for k in ("min_pixels", "max_pixels") if getattr(data, k, None) is not None}
    return AutoProcessor.from_pretrained(path, **kwargs)


def user_text(row: Row, default_prompt: str) -> str:
    """The user turn: the record's own prompt, else the recipe prompt rendered with the record's fields.

    The recipe prompt is a jinja template, so a reasoning recipe can say
    ``"{{ question }}\\nThink inside <think></think>, answer inside <answer></answer>."``.
    """
    if row.prompt is not None:
        return row.prompt
    rec = row.record
    if default_prompt.endswith(".jinja"):  # a template by name (bundled) or path
        from vlrl.core.prompts import render

        return render(default_prompt, **rec)
    if "{{" in default_prompt or "{%" in default_prompt:
        from vlrl.core.prompts import from_string

        return from_string(default_prompt).render(**rec).strip()
    q = rec.get("question")
    if isinstance(q, str) and q.strip():
        return f"{q}\n{default_prompt}" if default_prompt else q
    return default_prompt


def _materialize_image(img: Any, cache: Path, rid: str) -> str:
    """Paths stay paths; PIL images and HF image features are written once under ``cache``."""
    if isinstance(img, (str, Path)):
        return str(img)
    if isinstance(img, dict) and img.get("path") and not img.get("bytes"):
        return str(img["path"])
    from vlrl.core.images import load_image

    pil = load_image(img, record=rid)
    digest = hashlib.sha1(pil.tobytes()).hexdigest()[:16]
    path = cache / f"{digest}.png"
    if not path.exists():
        cache.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.png")
        pil.save(tmp)
        os.replace(tmp, path)
    return str(path)


def image_root(data) -> Path | None:
    """The folder relative image paths resolve against: ``data.image_root``, else the data file's."""
    if data.image_root:
        return Path(data.image_root)
    return Path(data.source).parent if not data.source.startswith("builtin:") else None


def resolve_images(imgs: list[Any], cache: Path, rid: str, root: Path | None) -> list[str]:
    """Materialize, anchor relative paths at ``root`` and probe every image of one record."""
    out = []
    for img in imgs:
        p = _materialize_image(img, cache, rid)
        if root is not None and not Path(p).is_absolute():
            p = str(root / p)
        _probe_image(p)
        out.append(p)
    return out


def resolve_video(value: Any, cache: Path, rid: str, root: Path | None, spec: Any = None) -> str:
    """A record's video as one file path the trainer re-reads, checked now by decoding it.

    A path resolves under ``root`` (the data file's folder): relative or absolute, a symlink or path
    out of it is refused, as for every video source. Bytes (CapRL++'s parquet rows) are written once
    under ``cache``, named by their digest."""
    from vlrl.core.video import load_video_value, video_value

    raw = video_value(value)
    if isinstance(raw, bytes):
        path = cache / f"{hashlib.sha1(raw).hexdigest()[:16]}.video"
        if not path.exists():
            cache.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(f".{path.name}.{os.getpid()}")
            tmp.write_bytes(raw)
            os.replace(tmp, path)
        value, root = str(path), None
    clip = load_video_value(value, root=root, record=rid, spec=spec)  # found now, not inside the trainer
    clip.close()
    return clip.meta["path"]


def chat_prompt(data, text: str) -> list[dict[str, str]]:
    """The conversational prompt TRL templates: the recipe's system turn, if any, then the user's."""
    prompt = [{"role": "system", "content": data.system_prompt}] if data.system_prompt else []
    prompt.append({"role": "user", "content": text})
    return prompt


def image_columns(paths: list[list[str]]) -> dict[str, list]:
    """``image`` (one path per row) when every row has one image, else ``images`` (a list per row):
    TRL's trainers read either, and insert one image placeholder per image into the user turn."""
    if all(len(p) == 1 for p in paths):
        return {"image": [p[0] for p in paths]}
    return {"images": paths}


def video_spec(data) -> Any:
    """The recipe's video sampling (``data.video``) as a :class:`vlrl.core.video.VideoSpec`."""
    from vlrl.core.video import VideoSpec

    settings = dict(getattr(data, "video", None) or {})
    try:
        return VideoSpec(**settings).check()
    except TypeError as e:
        raise ValueError(f"data.video: {e} (keys: fps, nframes, min_frames, max_frames, min_pixels, max_pixels, "
                         "total_pixels, max_seconds, max_source_pixels)") from None
    except ValueError as e:
        raise ValueError(f"data.video: {e}") from None


def _probe_image(path: str) -> None:
    """Cheap check (file header only) that ``path`` is an image: a missing or non-image file would
    otherwise fail later, inside the trainer's data loader, after the models are loaded."""
    from PIL import Image

    if not Path(path).is_file():
        raise ValueError(f"image {path} not found")
    try:
        with Image.open(path):
            pass
    except Exception as e:  # noqa: BLE001 - hostile headers raise all sorts of things
        raise ValueError(f"image {path} is not a readable image ({e.__class__.__name__})") from None


def to_trl_dataset(data, cache_dir: str | Path | None = None, *, messages_column: str | None = None):
    """Build the ``datasets.Dataset`` GRPOTrainer trains on (``prompt`` + ``image`` + reward columns).

    Bad records (no image, unreadable template field) are skipped with one warning line each.
    Records whose ``rubrics`` column is an empty set (an image the rubric writer found solved) are
    left out and counted: every rollout on them would score ``None`` and teach nothing.
    """
    import datasets

    cache = Path(cache_dir or Path.home() / ".cache" / "vlrl")
    root = image_root(data)
    rows: dict[str, list] = {"prompt": [], "image": [], "video": [], "_extra": []}
    spec = video_spec(data)
    empty_rubrics = 0
    for row in iter_rows(data.source, cache_dir=cache):
        if data.max_samples is not None and len(rows["prompt"]) >= data.max_samples:
            break
        rec = row.record
        if "rubrics" in rec and rec["rubrics"] in ([], "[]", (), None, ""):
            empty_rubrics += 1
            continue
        if row.video is not None and not row.images:
            try:
                text = user_text(row, data.prompt if data.prompt != "caption_default.jinja" else "caption_video.jinja")
                vid = resolve_video(row.video, cache / "dataset_videos", row.id, root, spec)
            except Exception as e:  # noqa: BLE001 - one bad record is skipped, never fatal
                logger.warning("record %s: %s; skipped", row.id, getattr(e, "reason", None) or e)
                continue
            rows["prompt"].append(chat_prompt(data, text))
            rows["video"].append(vid)
            rows["_extra"].append(row.columns)
            continue
        if not row.images:
            logger.warning("record %s: no image or video (expected one of %s); skipped", row.id, IMAGE_KEYS)
            continue
        try:
            text = user_text(row, data.prompt)
            # found now, not as a crash in the trainer's data loader
            img = resolve_images(row.images, cache / "dataset_images", row.id, root)
        except Exception as e:  # noqa: BLE001 - one bad record is skipped, never fatal
            logger.warning("record %s: %s; skipped", row.id, e)
            continue
        rows["prompt"].append(chat_prompt(data, text))
        rows["image"].append(img)
        rows["_extra"].append(row.columns)
    if empty_rubrics:
        logger.warning("dataset %s: %d records with an empty rubric set left out", data.source, empty_rubrics)
    if not rows["prompt"]:
        raise ValueError(f"data.source {data.source!r}: no usable records")
    if rows["image"] and rows["video"]:
        raise ValueError(f"data.source {data.source!r}: {len(rows['image'])} image rows and {len(rows['video'])} video rows; "
                         "a training set holds one kind (split it into two runs or two datasets)")
    keys = sorted({k for e in rows["_extra"] for k in e})
    media = {"video": rows["video"]} if rows["video"] else image_columns(rows["image"])
    table = {"prompt": rows["prompt"], **media}
    for k in keys:
        table[k] = [json.dumps(e.get(k), ensure_ascii=False, default=str) for e in rows["_extra"]]
    ds = datasets.Dataset.from_dict(table)
    logger.info("dataset %s: %d rows, reward columns %s", data.source, len(ds), keys)
    return ds.with_transform(DecodeColumns(keys))


class DecodeColumns:
    """``with_transform`` hook: JSON reward columns → objects, image paths → PIL (vlrl's loader)."""

    def __init__(self, keys: list[str]) -> None:
        self.keys = keys

    def __call__(self, batch: dict[str, list]) -> dict[str, list]:
        from vlrl.core.images import load_image

        out = dict(batch)
        for k in self.keys:
            if k in out:
                out[k] = [json.loads(v) if isinstance(v, str) else v for v in out[k]]
        if "image" in out:
            out["image"] = [load_image(p) if isinstance(p, str) else p for p in out["image"]]
        if "images" in out:
            out["images"] = [[load_image(p) if isinstance(p, str) else p for p in row] for row in out["images"]]
        return out
