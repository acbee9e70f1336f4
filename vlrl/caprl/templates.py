"""Render the ``.jinja`` prompt files of ``vlrl/prompts`` (prompts are data, not code).

A template is named by its file stem (``"caprl_answer"``) or given as a path to a user's own
``.jinja`` file, so a recipe can swap a prompt without touching code.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import jinja2

PROMPT_DIR = Path(__file__).resolve().parent.parent / "prompts"


@functools.lru_cache(maxsize=64)
def _template(name: str) -> jinja2.Template:
    path = Path(name)
    if path.suffix != ".jinja" or not path.exists():
        path = PROMPT_DIR / f"{name}.jinja"
    if not path.exists():
        raise ValueError(f"prompt template {name!r} not found (looked for {path})")
    env = jinja2.Environment(keep_trailing_newline=False, trim_blocks=True, lstrip_blocks=True,
                             undefined=jinja2.StrictUndefined)
    return env.from_string(path.read_text(encoding="utf-8"))


def render(name: str, **variables: Any) -> str:
    """Render template ``name`` (stem in ``vlrl/prompts`` or a ``.jinja`` path) and strip it."""
    return _template(name).render(**variables).strip()
