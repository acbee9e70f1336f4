"""Naming and pre-flight of the models (or caption files) an arena, a teacher committee or a
caption-QA run compares.

A contestant is a backend spec (``hf:...``, ``openai:...``), optionally named (``NAME=SPEC``), or a
JSONL file of captions made elsewhere (``FILE.jsonl`` or ``NAME=FILE.jsonl``, rows
``{"image_id", "caption"}``). A file contestant is recognised by its suffix and checked before any
model loads: a file that is missing, unreadable or empty would otherwise leave a run with no
captions at all that still exits 0, so it is an error that stops the run.
"""

from __future__ import annotations

import re
from pathlib import Path

from vlrl.captioning.captioner import read_captions, split_named


def split_contestant(arg: str) -> tuple[str | None, str]:
    """``NAME=SPEC`` / ``NAME=FILE.jsonl`` → (name, spec) (see :func:`vlrl.captioning.captioner.split_named`)."""
    return split_named(arg)


def is_caption_file_spec(spec: object) -> bool:
    """Whether a contestant spec names a captions file (whether or not it exists)."""
    return isinstance(spec, str) and spec.endswith(".jsonl") and not re.match(r"^[a-z_]+:", spec)


def check_caption_file(name: str, spec: str) -> int:
    """Read a captions file contestant; returns how many captions it holds. Raises ``ValueError``."""
    path = Path(spec)
    if not path.is_file():
        raise ValueError(f"{name}: captions file {spec} not found")
    try:
        caps = read_captions(path)
    except (OSError, ValueError) as e:
        raise ValueError(f"{name}: captions file {spec} cannot be read: {e}") from None
    if not caps:
        raise ValueError(f"{name}: captions file {spec} holds no captions")
    return len(caps)


__all__ = ["check_caption_file", "is_caption_file_spec", "split_contestant"]
