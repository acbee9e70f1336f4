"""Export a vlrl QA dataset in the layout CapRL publishes its QA training data in.

The public rows (verl's RL layout) are one image each::

    {"id": ..., "image": {"bytes": b"...", "path": None},
     "prompt": [{"role": "user", "content": "<image> " + the captioning prompt}],
     "data_source": "image_caption_rl",
     "reward_model": {"ground_truth": [{"question": ..., "choices": ["A) ...", ...], "answer": "C"}]}}

CapRL++'s video QA set (CapRL-Video-QA-20K) has the same ``reward_model.ground_truth`` with a
``videos`` column instead of ``image``: a curated *video* dataset (``qa-curate --videos``) exports to
``{"videos": [{"bytes", "path"}], "prompt": "<video> ...", "data_source": "video_caption_rl", ...}``.

Exporting into that shape lets a vlrl-curated set feed code written for the public data, and the
same readers (``vlrl train grpo``, ``vlrl reward score``, ``vlrl reward smoke``) read it back
directly. Rows are written in batches (parquet: a streaming writer), so the export holds one batch of
images in memory, never the corpus. A row whose image cannot be read or that has no valid question
is skipped with a one-line reason.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from vlrl.core.pipeline import atomic_open
from vlrl.methods.caprl.mcq import LETTERS, MCQError, coerce_questions, normalize_mcq

logger = logging.getLogger(__name__)

PUBLIC_DATA_SOURCE = "image_caption_rl"
VIDEO_DATA_SOURCE = "video_caption_rl"
"""vlrl's ``data_source`` for exported video rows (readers key on ``videos``, not on this name)."""


def public_ground_truth(questions: Any) -> tuple[list[dict[str, Any]], list[str]]:
    """vlrl MCQs → the public ``[{question, choices: ["A) text", ...], answer: letter}]`` (+ reasons
    for the ones that could not be converted)."""
    out, reasons = [], []
    try:
        items = coerce_questions(questions)
    except MCQError as e:
        return [], [str(e)]
    for item in items:
        try:
            m = normalize_mcq(item)
        except MCQError as e:
            reasons.append(str(e))
            continue
        out.append({"question": m.question, "choices": [f"{LETTERS[i]}) {o}" for i, o in enumerate(m.options)],
                    "answer": m.answer_letter})
    return out, reasons


def public_prompt(media: str = "image") -> str:
    """The public rows' user turn: ``<image>`` and CapRL's captioning prompt (the one template), or
    ``<video>`` and the video captioning prompt."""
    from vlrl.core.prompts import render

    return f"<video> {render('caption_video')}" if media == "video" else f"<image> {render('caption_default')}"


def export_caprl(src: str, out: str | Path, *, prompt: str | None = None, data_source: str | None = None,
                 batch_rows: int = 256) -> dict[str, Any]:
    """Write ``src`` (a QA dataset with ``questions`` and an image or video column) to ``out``
    (``.parquet`` with the media's bytes, or ``.jsonl`` with their paths). Returns counts. ``prompt``
    defaults to :func:`public_prompt`, ``data_source`` to the image or video rows' name."""
    from vlrl.core.images import load_image
    from vlrl.core.sources import load_any_dataset
    from vlrl.core.sources.dataset import find_image_column

    source = load_any_dataset(src)
    if source.image_column is None and find_image_column(source.dataset.column_names, "video"):
        source = load_any_dataset(src, media="video")
    video = source.media == "video"
    prompt = prompt or public_prompt(source.media)
    data_source = data_source or (VIDEO_DATA_SOURCE if video else PUBLIC_DATA_SOURCE)
    media_key = "videos" if video else "image"
    cols = source.dataset.column_names
    if "questions" not in cols:
        raise ValueError(f"{src}: no 'questions' column (expected the output of `vlrl data qa-curate`)")
    out = Path(out)
    if out.suffix not in (".parquet", ".jsonl"):
        raise ValueError(f"--out {out}: use a .parquet or .jsonl file")
    jsonl = out.suffix == ".jsonl"
    written, skipped = 0, 0
    writer: Any = None
    batch: list[dict[str, Any]] = []

    def flush(fh: Any) -> None:
        nonlocal writer
        if not batch:
            return
        if jsonl:
            for row in batch:
                fh.write(json.dumps(row, ensure_ascii=False) + "\n")
        else:
            import pyarrow as pa
            import pyarrow.parquet as pq

            table = pa.Table.from_pylist(batch, schema=_schema(media_key))
            if writer is None:
                writer = pq.ParquetWriter(fh, table.schema)
            writer.write_table(table)
        batch.clear()

    # atomic: a reader never sees half an export, and a failed one leaves ``out`` as it was
    with atomic_open(out, "w" if jsonl else "wb") as fh:
        try:
            for i in range(len(source)):
                row = source.dataset[i]
                rid = str(row.get("id") or i)
                truth, reasons = public_ground_truth(row.get("questions"))
                if not truth:
                    logger.warning("export: row %s skipped: no valid question (%s)", rid, reasons[0] if reasons else "none")
                    skipped += 1
                    continue
                try:
                    image = _image_value(source, i, row, inline=not jsonl, load_image=load_image)
                except Exception as e:  # noqa: BLE001 - one unreadable image is one skipped row
                    logger.warning("export: row %s skipped: %s", rid, " ".join(str(e).split())[:200])
                    skipped += 1
                    continue
                out_row = {"id": rid, media_key: [image] if video else image, "prompt": [{"role": "user", "content": prompt}],
                           "data_source": data_source, "reward_model": {"ground_truth": truth}}
                if video:  # CapRL++'s reward reads the video from extra_info.video_path (docs/verl.md)
                    out_row["extra_info"] = {"index": written, "video_path": _video_path(source, row, image)}
                batch.append(out_row)
                written += 1
                if len(batch) >= batch_rows:
                    flush(fh)
            flush(fh)
        finally:
            if writer is not None:
                writer.close()  # the parquet footer; the file itself is closed by atomic_open
        if written == 0:
            raise ValueError(f"{src}: no row could be exported ({skipped} skipped)")
    return {"rows": written, "skipped": skipped, "out": str(out)}


def _image_value(source: Any, i: int, row: dict[str, Any], *, inline: bool, load_image: Any) -> dict[str, Any]:
    """``{"bytes", "path"}``: the original file's bytes (parquet) or its absolute path (JSONL)."""
    import io

    value = row.get(source.image_column) if source.image_column else None
    data = value.get("bytes") if isinstance(value, dict) else None
    path = value.get("path") if isinstance(value, dict) else value
    if isinstance(path, str) and path and not Path(path).is_absolute():
        path = str((source.base / path).resolve())
    if not inline:
        if not path:
            raise ValueError(f"row has no {source.media} path (export to .parquet to carry its bytes)")
        source.load_image(i)  # fails here, with its reason, if the file is unreadable
        return {"bytes": None, "path": path}
    if source.media == "video":  # the file as it is: checked by decoding it, never re-encoded
        source.load_image(i)
        return {"bytes": bytes(data) if data else Path(path).read_bytes(), "path": None}
    if data:
        load_image(data, record=str(i))
        return {"bytes": bytes(data), "path": None}
    img = source.load_image(i)
    raw = Path(path).read_bytes() if path and Path(path).is_file() else None
    if raw is None:
        buf = io.BytesIO()
        img.save(buf, format="PNG")
        raw = buf.getvalue()
    return {"bytes": raw, "path": None}


def _video_path(source: Any, row: dict[str, Any], cell: dict[str, Any]) -> str | None:
    """The video file a reward server reads: the row's ``video_path`` (``qa-curate --videos`` records
    the source file), else the exported path (JSONL), else None (a video known only as bytes)."""
    return row.get("video_path") or cell.get("path") or None


def _schema(media_key: str = "image"):
    import pyarrow as pa

    cell = pa.struct([("bytes", pa.binary()), ("path", pa.string())])
    extra = [("extra_info", pa.struct([("index", pa.int64()), ("video_path", pa.string())]))] if media_key == "videos" else []
    return pa.schema([
        ("id", pa.string()),
        (media_key, pa.list_(cell) if media_key == "videos" else cell),
        ("prompt", pa.list_(pa.struct([("role", pa.string()), ("content", pa.string())]))),
        ("data_source", pa.string()),
        ("reward_model", pa.struct([("ground_truth", pa.list_(pa.struct([
            ("question", pa.string()), ("choices", pa.list_(pa.string())), ("answer", pa.string())])))])),
        *extra,
    ])
