"""Record rows: the training, cold-start and evaluation inputs read as plain dicts.

A row source is a JSONL/JSON/parquet file, a ``save_to_disk`` folder, or ``builtin:tiny_captions[:N]`` /
``builtin:tiny_math[:N]`` / ``builtin:tiny_videos[:N]``, which generate a few small images (or clips of
a moving square) with MCQs, rubrics and numeric answers so the tiny CPU recipes run with nothing
prepared. :func:`record_image` finds a row's image and
:func:`load_record_image` decodes it through the one loader, :func:`vlrl.core.images.load_image`.

:func:`read_row` is the one adapter from a record to its parts (id, images, the other columns),
whatever layout it came in (vlrl's, or the public RL layout :func:`adapt_row` reads), and
:func:`record_prompt` finds its own user text; :func:`source_columns` names a source's columns
without reading it all.
"""

from __future__ import annotations

import json
import os
import random
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vlrl.core.sources.columns import IMAGE_LIST_COLUMNS, RECORD_IMAGE_COLUMNS, VIDEO_COLUMNS

IMAGE_KEYS = RECORD_IMAGE_COLUMNS
BUILTINS = ("tiny_captions", "tiny_math", "tiny_videos")
BUILTIN_COLUMNS = {"tiny_captions": ("id", "image", "questions", "rubrics"),
                   "tiny_math": ("id", "image", "question", "answer", "response"),
                   "tiny_videos": ("id", "video", "questions")}
_WAYS = ("left", "right", "up", "down")
_COLORS = {"red": (220, 40, 40), "green": (40, 170, 60), "blue": (40, 80, 220), "yellow": (230, 210, 40)}
_SHAPES = ("circle", "square", "triangle")


# -- built-in tiny datasets ----------------------------------------------------------------------


def _draw(shape: str, color: str, size: int = 56):
    from PIL import Image, ImageDraw

    img = Image.new("RGB", (size, size), "white")
    d = ImageDraw.Draw(img)
    m = size // 5
    box = (m, m, size - m, size - m)
    if shape == "circle":
        d.ellipse(box, fill=_COLORS[color])
    elif shape == "square":
        d.rectangle(box, fill=_COLORS[color])
    else:
        d.polygon([(size // 2, m), (size - m, size - m), (m, size - m)], fill=_COLORS[color])
    return img


def _write_motion(path: Path, color: str, way: str, frames: int = 8, size: int = 56) -> None:
    """A small clip of a coloured square crossing a white frame towards ``way`` (H.264 in MP4)."""
    import av
    import numpy as np

    side = size // 4
    with av.open(str(path), "w", format="mp4") as out:
        stream = out.add_stream("libx264", rate=4)
        stream.width = stream.height = size
        stream.pix_fmt = "yuv420p"
        for k in range(frames):
            t = round(k * (size - side) / (frames - 1))
            x, y = {"right": (t, (size - side) // 2), "left": (size - side - t, (size - side) // 2),
                    "down": ((size - side) // 2, t), "up": ((size - side) // 2, size - side - t)}[way]
            arr = np.full((size, size, 3), 255, dtype=np.uint8)
            arr[y : y + side, x : x + side] = _COLORS[color]
            for packet in stream.encode(av.VideoFrame.from_ndarray(arr, format="rgb24")):
                out.mux(packet)
        for packet in stream.encode():
            out.mux(packet)


def _video_record(name: str, i: int, rng: random.Random, root: Path) -> dict[str, Any]:
    """A ``tiny_videos`` record: a moving square and two MCQs (which way it moves needs more than one frame)."""
    color, way = rng.choice(list(_COLORS)), rng.choice(_WAYS)
    path = root / f"{name}-{i:04d}-{color}-{way}.mp4"
    if not path.exists():  # written aside then renamed: concurrent ranks never read half a file
        tmp = path.with_name(f".{path.stem}.{os.getpid()}.mp4")
        _write_motion(tmp, color, way)
        os.replace(tmp, path)
    ways, colors = list(_WAYS), list(_COLORS)
    rng.shuffle(ways)
    rng.shuffle(colors)
    return {"id": f"{name}-{i}", "video": str(path), "questions": [
        {"question": "Which way does the square move?", "options": ways, "answer": "ABCD"[ways.index(way)]},
        {"question": "What color is the square?", "options": colors, "answer": "ABCD"[colors.index(color)]}]}


def builtin_records(name: str, n: int, root: Path, seed: int = 0) -> list[dict[str, Any]]:
    """Generate ``n`` records of a built-in dataset, writing their images (videos) under ``root``."""
    if name not in BUILTINS:
        raise ValueError(f"unknown built-in dataset {name!r}; available: {', '.join(BUILTINS)}")
    rng = random.Random(seed)
    root.mkdir(parents=True, exist_ok=True)
    if name == "tiny_videos":
        return [_video_record(name, i, rng, root) for i in range(n)]
    records = []
    for i in range(n):
        shape, color = rng.choice(_SHAPES), rng.choice(list(_COLORS))
        path = root / f"{name}-{i:04d}-{color}-{shape}.png"
        if not path.exists():  # write aside then rename: concurrent ranks never read half a file
            tmp = path.with_name(f".{path.name}.{os.getpid()}.png")
            _draw(shape, color).save(tmp)
            os.replace(tmp, path)
        if name == "tiny_captions":
            colors = [color] + rng.sample([c for c in _COLORS if c != color], 2)
            shapes = [shape] + [s for s in _SHAPES if s != shape]
            rng.shuffle(colors)
            rng.shuffle(shapes)
            records.append({
                "id": f"{name}-{i}",
                "image": str(path),
                "questions": [
                    {"question": "What color is the shape?", "options": colors, "answer": "ABC"[colors.index(color)]},
                    {"question": "Which shape is shown?", "options": shapes, "answer": "ABC"[shapes.index(shape)]},
                ],
                "rubrics": [
                    {"criterion": f"The caption names the shape as a {shape}.", "weight": 3.0, "severity": "critical"},
                    {"criterion": f"The caption states that the shape is {color}.", "weight": 2.0, "severity": "important"},
                    {"criterion": "The caption mentions the white background.", "weight": 1.0, "severity": "minor"},
                ],
            })
        else:
            sides = {"circle": 0, "square": 4, "triangle": 3}[shape]
            k = rng.randint(2, 5)
            records.append({
                "id": f"{name}-{i}",
                "image": str(path),
                "question": f"The image shows a {color} shape. How many sides does it have, multiplied by {k}?",
                "answer": str(sides * k),
                "response": f"<think>A {shape} has {sides} sides, and {sides} × {k} = {sides * k}.</think>"
                f"<answer>{sides * k}</answer>",
            })
    return records


# -- reading sources -------------------------------------------------------------------------------


def parse_builtin(source: str) -> tuple[str, int]:
    """``builtin:NAME[:N]`` → ``(NAME, N)``; ``N`` defaults to 8."""
    name, _, n = source.removeprefix("builtin:").partition(":")
    return name, int(n) if n else 8


def source_columns(source: str) -> set[str]:
    """The column names of a source's records, read cheaply: a built-in's are known, a schema-backed
    source (dataset folder, parquet) has uniform columns so one record is enough, and a JSON/JSONL
    file is read for its first 50 records. Raises ``ValueError`` for an unknown built-in or a source
    with no records."""
    if source.startswith("builtin:"):
        name, _ = parse_builtin(source)
        if name not in BUILTINS:
            raise ValueError(f"unknown built-in dataset {name!r}; available: {', '.join(BUILTINS)}")
        return set(BUILTIN_COLUMNS[name])
    uniform = Path(source).is_dir() or Path(source).suffix == ".parquet"
    cols: set[str] = set()
    for i, rec in enumerate(iter_source(source)):
        cols |= set(rec)
        if uniform or i >= 49:
            break
    else:
        if not cols:  # an empty source has no columns: say so instead of listing what is missing
            raise ValueError(f"{source!r} holds no records; point data.source at a non-empty dataset")
    return cols


def adapt_row(rec: Any) -> Any:
    """A row in the public RL layout (verl's, which CapRL publishes its QA data in) made readable.

    Such rows carry the reward's ground truth as ``reward_model.ground_truth`` and the prompt as chat
    messages with an ``<image>`` placeholder. The ground truth is exposed as ``questions`` (the column
    vlrl's QA rewards read) when the row has none; everything else is left as it is. Lists of
    ``{question, choices: ["A) text", ...], answer: letter}`` are read by the MCQ normaliser as they
    are.
    """
    if not isinstance(rec, dict) or "questions" in rec:
        return rec
    rm = rec.get("reward_model")
    if isinstance(rm, str):
        try:
            rm = json.loads(rm)
        except json.JSONDecodeError:
            return rec
    truth = rm.get("ground_truth") if isinstance(rm, dict) else None
    if isinstance(truth, str):
        try:
            truth = json.loads(truth)
        except json.JSONDecodeError:
            return rec
    if isinstance(truth, (list, dict)):
        rec = {**rec, "questions": truth}
    return rec


def prompt_text(prompt: Any) -> str | None:
    """The user's text of a row's prompt: a string, or chat messages (the last user turn), with the
    ``<image>`` / ``<video>`` placeholder of the public layout removed (the media travels in its own column)."""
    if isinstance(prompt, list):
        users = [m for m in prompt if isinstance(m, dict) and m.get("role") == "user"]
        content = users[-1].get("content") if users else None
        if isinstance(content, list):
            content = " ".join(p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") == "text")
        prompt = content
    if not isinstance(prompt, str):
        return None
    text = prompt.replace("<image>", " ").replace("<video>", " ").strip()
    return " ".join(text.split(" ")).strip() or None


def iter_source(source: str, cache_dir: str | Path | None = None) -> Iterator[dict[str, Any]]:
    """Records of a JSONL/JSON/parquet file, a ``save_to_disk`` folder or a ``builtin:`` generator
    (rows in the public RL layout adapted by :func:`adapt_row`)."""
    for rec in _iter_source(source, cache_dir):
        yield adapt_row(rec)


def _iter_source(source: str, cache_dir: str | Path | None = None) -> Iterator[dict[str, Any]]:
    if source.startswith("builtin:"):
        name, n = parse_builtin(source)
        root = Path(cache_dir or Path.home() / ".cache" / "vlrl") / "builtin_data" / f"{name}-{n}"
        yield from builtin_records(name, n, root)
        return
    p = Path(source)
    if not p.exists():
        raise ValueError(f"{source!r} does not exist (expected a .jsonl/.json/.parquet file, a dataset folder or builtin:NAME)")
    if p.is_dir():
        import datasets

        if (p / "dataset_info.json").exists() or (p / "state.json").exists() or (p / "dataset_dict.json").exists():
            from vlrl.core.sources import load_disk_dataset

            ds, _ = load_disk_dataset(p)
        else:
            ds = datasets.load_dataset(str(p), split="train")
        yield from ds
        return
    if p.suffix == ".parquet":
        import datasets

        yield from datasets.Dataset.from_parquet(str(p))
        return
    if p.suffix == ".json":
        data = json.loads(p.read_text())
        yield from (data if isinstance(data, list) else data.get("data", []))
        return
    from vlrl.core.pipeline import read_jsonl

    yield from read_jsonl(p)


def record_image(rec: dict[str, Any]) -> Any:
    """A record's (first) image: the first image column it has (:data:`IMAGE_KEYS`), as stored."""
    for key in IMAGE_KEYS:
        v = rec.get(key)
        if v is None:
            continue
        if key in IMAGE_LIST_COLUMNS:
            return v[0] if isinstance(v, list) and v else None
        return v
    return None


def record_images(rec: dict[str, Any]) -> list[Any]:
    """Every image of a record: all of ``images`` (a list), else the one :func:`record_image` finds."""
    many = rec.get("images")
    if isinstance(many, (list, tuple)) and len(many) > 1:
        return [x for x in many if x is not None]
    one = record_image(rec)
    return [] if one is None else [one]


def record_prompt(rec: dict[str, Any]) -> str | None:
    """The record's own user text: a non-blank ``prompt`` string as it is, or the user's text of chat
    messages (:func:`prompt_text`); ``None`` when the record brings none."""
    own = rec.get("prompt")
    if isinstance(own, str) and own.strip():
        return own
    if isinstance(own, list):  # chat messages (the public RL layout: "<image> Please describe ...")
        return prompt_text(own)
    return None


@dataclass
class Row:
    """A record taken apart by :func:`read_row`."""

    id: str
    """The record's ``id``, else its position in the source."""
    record: dict[str, Any]
    """The record as read (public RL layout adapted), for templates and method-specific columns."""
    images: list[Any]
    """Every image, as stored (paths, bytes, HF image features or PIL images); empty when it has none."""
    columns: dict[str, Any]
    """Every column but the images and the prompt, ``id`` included: what rewards read."""
    prompt: str | None = None
    """The record's own user text (:func:`record_prompt`); ``None`` when it brings none."""
    video: Any = None
    """The record's video as stored (a path, bytes, a struct, or CapRL++'s ``videos`` list; see
    :func:`vlrl.core.video.video_value`); ``None`` when it has none."""


def record_video(rec: dict[str, Any]) -> Any:
    """A record's video cell: the first video column it has (:data:`VIDEO_COLUMNS`), as stored."""
    return next((rec[k] for k in VIDEO_COLUMNS if rec.get(k) not in (None, [], "")), None)


def read_row(rec: dict[str, Any], index: int) -> Row:
    """The one adapter from a record (already through :func:`adapt_row`) to its parts."""
    rid = str(rec.get("id", index))
    columns = {k: v for k, v in rec.items() if k not in IMAGE_KEYS and k not in VIDEO_COLUMNS and k != "prompt"}
    columns.setdefault("id", rid)
    return Row(id=rid, record=rec, images=record_images(rec), columns=columns, prompt=record_prompt(rec),
               video=record_video(rec))


def iter_rows(source: str, cache_dir: str | Path | None = None) -> Iterator[Row]:
    """:func:`iter_source`'s records, each taken apart by :func:`read_row`."""
    for i, rec in enumerate(iter_source(source, cache_dir=cache_dir)):
        yield read_row(rec, i)


def load_record_image(src: Any, root: str | None, record: str) -> Any:
    """Decode a record's image (from :func:`record_image`) through the one loader.

    A relative path must stay inside ``root`` (the data file's folder); an absolute path, bytes or a
    PIL image was named explicitly and loads as it is. Raises ``ImageLoadError``.
    """
    from vlrl.core.images import load_image

    relative = isinstance(src, str) and not Path(src).is_absolute()
    return load_image(src, root=root if relative else None, record=record)


def open_record_image(rec: dict[str, Any], root: str | None, record: str) -> tuple[Any, str | None]:
    """``(image, None)``, or ``(None, reason)`` for a row with no image or one that cannot be read.

    Never raises: jobs quarantine the row with the reason and go on.
    """
    from vlrl.core.images import ImageLoadError

    src = record_image(rec)
    if src is None:
        return None, "record has no image"
    try:
        return load_record_image(src, root, record), None
    except ImageLoadError as e:
        return None, e.reason
