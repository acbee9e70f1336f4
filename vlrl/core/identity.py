"""Run identity: what decides that an output folder holds *this* run, and how a rerun is compared.

Every long-lived output folder in vlrl (a dataset job's ``OUT/job.json``, ``vlrl caption``'s
manifest, a training run's ``recipe.resolved.json``, Prism's ``made_by.json``) is resumed by
rerunning the same command, so each must answer the same question before any work: were the
settings that decide what the outputs *mean* the same last time? One mechanism answers it:

* **An identity is a flat JSON dict** of those settings: local paths and ``hf:`` folders resolved
  (:func:`resolve_source`, so ``out/`` and ``/abs/out`` are one job), ready backends named
  ``KIND:MODEL`` (:func:`backend_identity`), run-only flags left out (:func:`job_settings`); a
  nested document (a resolved recipe) is flattened to dotted keys with :func:`flatten`, minus the
  keys that may change between reruns (:func:`without_keys`).
* **It is stored as plain JSON** beside the outputs and read back with :func:`read_identity`
  (None when there is none or it cannot be read: a folder that holds no identity constrains
  nothing). Stored files keep their existing layout, so old run folders resume unchanged.
* **A rerun is compared key by key** (:func:`identity_changes`) and refused with every change
  shown ``old → new`` (:func:`check_identity`); what differs is shown, never only a hash.
* **A short digest** (:func:`digest`) names a configuration where a name is needed (a cache key,
  a demo's marker file): the SHA-1 of its canonical JSON.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from vlrl.core.backends import spec_identity

logger = logging.getLogger(__name__)

SPEC_KINDS = ("hf:", "openai:", "py:")


class JobMismatch(ValueError):
    """The output folder holds the work of a job with other settings."""


# -- what goes into an identity -------------------------------------------------------------------


def resolve_source(value: Any) -> Any:
    """An existing local path (or a glob of them) resolved to an absolute path; anything else as is.

    A backend spec (``hf:``, ``openai:``, ``py:``, also as ``NAME=SPEC``) becomes its
    :func:`~vlrl.core.backends.spec_identity`: the ``hf:`` folder resolved, the options that can change
    outputs kept and sorted, the run-only ones (concurrency, timeouts, retries) dropped. URLs and
    model names stay untouched, so the identity of a job never depends on the directory it was
    started from.
    """
    if isinstance(value, (list, tuple)):
        return [resolve_source(v) for v in value]
    if not isinstance(value, str) or not value:
        return value
    if value.startswith(SPEC_KINDS):
        return spec_identity(value, resolve_source)
    name, eq, rest = value.partition("=")
    if eq and rest.startswith(SPEC_KINDS) and ":" not in name:  # NAME=SPEC (a committee member, a captioner)
        return f"{name}={spec_identity(rest, resolve_source)}"
    if "://" in value:
        return value
    p = Path(value).expanduser()
    if p.exists():
        return str(p.resolve())
    if any(ch in value for ch in "*?{["):  # a glob or {000..009} pattern of tar shards
        return os.path.abspath(str(p))
    return value


def backend_identity(spec: Any) -> Any:
    """A backend spec for a job identity: a path-resolved spec string, or ``KIND:MODEL`` of a ready backend."""
    if isinstance(spec, str):
        return resolve_source(spec)
    if hasattr(spec, "model") and hasattr(spec, "kind"):
        return f"{spec.kind}:{spec.model}"
    if spec is None or isinstance(spec, (bool, int, float, dict)):
        return spec
    return resolve_source(str(spec)) if isinstance(spec, Path) else type(spec).__name__


SETTINGS_IGNORED = frozenset({
    "out", "force", "retry_quarantined", "max_consecutive_failures", "quiet", "progress", "batch_size", "limit",
    "loaders", "no_cache", "cache", "max_samples", "max_image_pixels",
})
"""Command parameters that change how a job runs, not what its outputs mean."""


def job_settings(params: dict[str, Any], ignore: Iterable[str] = ()) -> dict[str, Any]:
    """A job identity from a command's parameters: paths and ``hf:`` specs resolved, run-only flags left out."""
    skip = SETTINGS_IGNORED | set(ignore)
    return {k: backend_identity(v) if not isinstance(v, (list, tuple)) else [backend_identity(x) for x in v]
            for k, v in sorted(params.items()) if k not in skip and v is not None}


def flatten(obj: Any, prefix: str = "") -> dict[str, Any]:
    """A nested JSON document as one level of dotted keys (``{"a": {"b": 1}}`` → ``{"a.b": 1}``);
    an empty dict stays a value, so removing every key of a block is still a change."""
    if isinstance(obj, dict):
        out: dict[str, Any] = {}
        for k, v in obj.items():
            out.update(flatten(v, f"{prefix}{k}."))
        return out or {prefix.rstrip("."): {}}
    return {prefix.rstrip("."): obj}


def without_keys(flat: dict[str, Any], ignored: Iterable[str]) -> dict[str, Any]:
    """``flat`` minus the keys in ``ignored``; an entry ending in ``.`` drops every key under it."""
    ignored = tuple(ignored)
    return {k: v for k, v in flat.items()
            if not any(k == ig or (ig.endswith(".") and k.startswith(ig)) for ig in ignored)}


def digest(obj: Any, length: int = 12) -> str:
    """The first ``length`` hex digits of the SHA-1 of ``obj``'s canonical JSON (keys sorted,
    anything not JSON as its ``str``): a short, stable name for a configuration."""
    return hashlib.sha1(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()[:length]


# -- stored identities ----------------------------------------------------------------------------


def read_identity(path: str | Path, block: str | None = None) -> dict[str, Any] | None:
    """The identity stored in JSON file ``path`` (its ``block`` entry when given), or None.

    None when the file does not exist, and also when it cannot be read (logged): an identity that
    cannot be read constrains nothing, as with a folder that never had one.
    """
    path = Path(path)
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        found = data.get(block) if block is not None else data
    except (OSError, ValueError, AttributeError):
        logger.warning("%s is unreadable; cannot tell which run %s holds", path, path.parent)
        return None
    return found if isinstance(found, dict) else None


def _short(v: Any, width: int = 70) -> str:
    s = json.dumps(v, ensure_ascii=False, default=str, sort_keys=True) if not isinstance(v, str) else repr(v)
    return s if len(s) <= width else s[: width - 1] + "…"


_UNSET = "<unset>"


def identity_changes(old: dict[str, Any], new: dict[str, Any], *, shared_only: bool = True) -> list[str]:
    """``key: old → new`` for every setting that differs: among the keys present in both (a job's
    settings gain keys across versions), or across all keys with ``shared_only=False`` (a training
    run's resolved recipe, where a key set on one side only is a real difference)."""
    keys = [k for k in new if k in old] if shared_only else sorted(set(old) | set(new))
    return [
        f"{k}: {_short(old.get(k, _UNSET))} → {_short(new.get(k, _UNSET))}"
        for k in keys
        if _canonical(old.get(k, _UNSET)) != _canonical(new.get(k, _UNSET))
    ]


def _canonical(v: Any) -> Any:
    """A stored value as today's identity would hold it: spec strings written before their options
    were normalised (``?concurrency=16`` kept, options unsorted) compare equal to the same spec now,
    so an old folder resumes; every other value is compared as stored."""
    if isinstance(v, str) and "?" in v and (v.startswith(SPEC_KINDS) or "=" in v.split(":", 1)[0]):
        return resolve_source(v)
    if isinstance(v, list):
        return [_canonical(x) for x in v]
    return v


def check_identity(stored: dict[str, Any] | None, settings: dict[str, Any], *, where: str, what: str = "vlrl") -> None:
    """Refuse when ``stored`` (the identity of the work already in the folder) differs from ``settings``."""
    if not stored:
        return
    changes = identity_changes(stored, settings)
    if changes:
        raise JobMismatch(
            f"{where}: holds the work of a different job ({what}; changed: {', '.join(c.split(':', 1)[0] for c in changes)}):\n  "
            + "\n  ".join(changes)
            + "\nrerun with the original settings, use a new --out, or pass --force to start over"
        )


__all__ = [
    "SETTINGS_IGNORED",
    "JobMismatch",
    "backend_identity",
    "check_identity",
    "digest",
    "flatten",
    "identity_changes",
    "job_settings",
    "read_identity",
    "resolve_source",
    "without_keys",
]
