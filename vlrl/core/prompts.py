"""The one prompt renderer: ``.jinja`` files beside the code that uses them, rendered with jinja2.

Prompts are data, not code, so a user can swap a teacher, judge or answerer prompt with a recipe
setting or ``--prompt-file`` without touching Python, and a prompt change reads as a plain-text diff.
Every module renders through here so all prompts share one set of rules:

- each owner keeps its templates in a ``prompts/`` folder next to its code
  (``vlrl/methods/caprl/prompts/``, ``vlrl/captioning/prompts/``, ...); bundled names are unique
  across the package, so a template is named by its stem (``"caprl_answer"``), its file name
  (``"caprl_answer.jinja"``) or a path to the user's own file (any suffix); an existing file path
  wins over a bundled name;
- ``StrictUndefined``: a template naming a missing variable fails loudly instead of rendering "";
- ``trim_blocks``/``lstrip_blocks``: ``{% ... %}`` lines leave no stray blank lines or indents;
- :func:`render` strips the result, so a trailing newline in the file never reaches a model.

Inline templates (a recipe's prompt string, ``vlrl caption --prompt``) go through
:func:`from_string` and get the same rules.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Any

import jinja2

PACKAGE_DIR = Path(__file__).resolve().parent.parent
"""The ``vlrl`` package: bundled templates are the ``*/prompts/*.jinja`` files below it."""


class PromptNotFoundError(FileNotFoundError, ValueError):
    """No such template file, and no bundled template of that name.

    Both a ``FileNotFoundError`` and a ``ValueError``, so callers that validate settings with
    ``except ValueError`` (recipe checks, reward builders) report it like any other bad setting.
    """


@lru_cache(maxsize=1)
def bundled_templates() -> dict[str, Path]:
    """Every bundled template by file name. Two owners shipping the same name is a packaging bug."""
    found: dict[str, Path] = {}
    for path in sorted(PACKAGE_DIR.glob("**/prompts/*.jinja")):
        if path.name in found:
            raise RuntimeError(f"prompt template {path.name!r} is bundled twice: {found[path.name]} and {path}")
        found[path.name] = path
    return found


def template_path(name: str) -> Path:
    """The file of a bundled template, by stem or file name."""
    if not name.endswith(".jinja"):
        name += ".jinja"
    try:
        return bundled_templates()[name]
    except KeyError:
        raise PromptNotFoundError(f"prompt template {name!r} is not bundled with vlrl") from None


@lru_cache(maxsize=1)
def _env() -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.FunctionLoader(_load_bundled),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=False,
        trim_blocks=True,
        lstrip_blocks=True,
    )


def _load_bundled(name: str) -> str | None:
    path = bundled_templates().get(name)
    return path.read_text(encoding="utf-8") if path else None


@lru_cache(maxsize=64)
def _file_template(path: str, mtime_ns: int) -> jinja2.Template:
    # Keyed on mtime so an edited prompt file is picked up, while per-sample renders don't reread it.
    return _env().from_string(Path(path).read_text(encoding="utf-8"))


def from_string(text: str) -> jinja2.Template:
    """An inline template (e.g. a recipe's prompt string) with the same rules as the prompt files."""
    return _env().from_string(text)


def load_template(name_or_path: str | Path) -> jinja2.Template:
    """A template by stem or file name in ``vlrl/core/prompts`` (``"teacher_caption"``) or by file path."""
    p = Path(name_or_path)
    if p.is_file():
        p = p.resolve()
        return _file_template(str(p), p.stat().st_mtime_ns)
    name = str(name_or_path)
    if not name.endswith(".jinja"):
        name += ".jinja"
    try:
        return _env().get_template(name)
    except jinja2.TemplateNotFound:
        raise PromptNotFoundError(
            f"prompt template {str(name_or_path)!r} is neither a file nor a template bundled with vlrl"
        ) from None


def render(name_or_path: str | Path, **variables: Any) -> str:
    """Render a template (see :func:`load_template`) and strip surrounding whitespace."""
    return load_template(name_or_path).render(**variables).strip()


__all__ = ["PromptNotFoundError", "bundled_templates", "from_string", "load_template", "render", "template_path"]
