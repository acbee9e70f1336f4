"""Prompt templates are data: ``.jinja`` files in ``vlrl/prompts/`` rendered with jinja2.

Keeping prompts out of the code lets a user swap a teacher or judge prompt with ``--prompt-file``
without touching Python, and keeps the diff of a prompt change readable. ``StrictUndefined`` makes a
template that names a missing variable fail loudly instead of silently rendering an empty string.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Any

import jinja2

PROMPTS_DIR = Path(__file__).resolve().parent.parent / "prompts"


@lru_cache(maxsize=1)
def _env() -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(PROMPTS_DIR)),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=False,
        trim_blocks=True,
        lstrip_blocks=True,
    )


def load_template(name_or_path: str | Path) -> jinja2.Template:
    """A template by its name in ``vlrl/prompts`` (``"teacher_caption.jinja"``) or by file path."""
    p = Path(name_or_path)
    if p.is_file():
        return _env().from_string(p.read_text(encoding="utf-8"))
    try:
        return _env().get_template(str(name_or_path))
    except jinja2.TemplateNotFound:
        raise FileNotFoundError(
            f"prompt template {str(name_or_path)!r} is neither a file nor in {PROMPTS_DIR}"
        ) from None


def render(name_or_path: str | Path, **variables: Any) -> str:
    return load_template(name_or_path).render(**variables).strip()
