"""Backends: one spec string chooses the model behind any CLI flag.

Spec grammar (options after ``?`` are ``key=value`` pairs joined by ``&``):

* ``hf:PATH[?device=cpu&dtype=float32&batch_size=16]`` — in-process ``transformers`` (VLM or text
  LM, chosen from the folder's config).
* ``openai:BASE_URL@MODEL[?concurrency=16&timeout=60&max_retries=4&api_key_env=OPENAI_API_KEY
  &logprobs=auto|on|off&prefix_mode=auto|assistant|user&image_format=png|jpeg]`` —
  any OpenAI-compatible server (``vllm serve``, SGLang, ``transformers serve``, OpenAI). The API key
  is read from the environment variable named by ``api_key_env`` (default ``OPENAI_API_KEY``), never
  from the spec, so it never lands in logs, caches or shell history.

* ``py:package.module:factory[?key=value&...]`` — Python code as a model (a rule-based teacher, a
  scripted writer, a test double): the factory gets the options as keyword arguments and returns a
  :class:`Backend` or a reply function ``(messages, sampling) -> str | list[str]``
  (:mod:`vlrl.core.backends.python`).

``load_backend(spec, cache=DIR_OR_FILE)`` wraps the backend in the persistent response cache.

**Options are part of a job's identity.** A spec names the model *and* how it answers, so every
option that can change what comes back (``dtype``, ``device``, ``logprobs``, ``prefix_mode``,
``image_format``, ``sample_tokens``, ``logprobs_evidence``, and every ``py:`` option: vlrl cannot
know what a factory does with them) is kept in the identity a long job stores
(:func:`spec_identity`), and a rerun with another value into the same ``--out`` is refused. Only
the options listed in :data:`RUN_ONLY_OPTIONS` are left out: they change how requests are sent
(in flight at once, waited for, retried, batched), never what a request returns.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from urllib.parse import parse_qsl, urlencode

from vlrl.core.backends.base import (
    Accounting,
    Backend,
    BackendError,
    ChatRequest,
    ChatResult,
    ChoiceRequest,
    ChoiceResult,
    SamplingParams,
)
from vlrl.core.backends.cache import CachedBackend, ResponseCache
from vlrl.core.redact import find_credential, redact, register_secret_env

__all__ = [
    "Accounting",
    "Backend",
    "BackendError",
    "CachedBackend",
    "ChatRequest",
    "ChatResult",
    "ChoiceRequest",
    "ChoiceResult",
    "ResponseCache",
    "SamplingParams",
    "load_backend",
    "RUN_ONLY_OPTIONS",
    "parse_spec",
    "spec_identity",
]

RUN_ONLY_OPTIONS: dict[str, frozenset[str]] = {
    "openai": frozenset({"concurrency", "timeout", "max_retries", "api_key_env", "backoff", "backoff_max", "retry_after_max"}),
    "hf": frozenset({"batch_size"}),  # like a job's own --batch-size: how many go through generate at once
    "py": frozenset(),
}
"""Per backend kind, the spec options that cannot change outputs, left out of a job's identity."""


def parse_spec(spec: str) -> tuple[str, str, dict[str, str]]:
    """Split ``kind:target?opts`` into (kind, target, options). Raises ``ValueError`` with the fix.

    A credential anywhere in the spec (``?api_key=``, ``@model&api_key=``, ``sk-...``, ``user:pw@``)
    is refused: it would become part of a model name and land in every record; the spec is echoed
    redacted in every message."""
    if ":" not in spec:
        raise ValueError(
            f"backend spec {redact(spec)!r} has no kind; use 'hf:PATH' or 'openai:http://HOST:PORT/v1@MODEL'"
        )
    kind, rest = spec.split(":", 1)
    target, _, query = rest.partition("?")
    opts = dict(parse_qsl(query, keep_blank_values=True))
    if kind not in ("hf", "openai", "py"):
        raise ValueError(f"backend spec {redact(spec)!r}: unknown kind {kind!r} (expected 'hf', 'openai' or 'py')")
    if "api_key" in opts or find_credential(spec) or _url_userinfo(kind, target):
        raise ValueError(
            f"backend spec {redact(spec)!r} holds credentials; never put an API key in a backend spec, "
            "name its environment variable with api_key_env="
        )
    if kind == "openai":
        register_secret_env(opts.get("api_key_env", "OPENAI_API_KEY"))  # its value is masked wherever text is written
    return kind, target, opts


def spec_identity(spec: str, resolve: Callable[[str], str] | None = None) -> str:
    """``spec`` as a job identity holds it: options that can change outputs kept and sorted (so
    ``?b=1&a=2`` and ``?a=2&b=1`` are one job), :data:`RUN_ONLY_OPTIONS` dropped, and the ``hf:``
    folder passed through ``resolve`` (the identity's path resolution). Idempotent, so a stored
    identity can be normalised again; a string that does not parse as a spec is returned as is."""
    try:
        kind, target, opts = parse_spec(spec)
    except ValueError:
        return spec
    if kind == "hf" and resolve is not None:
        target = resolve(target)
    kept = sorted((k, v) for k, v in opts.items() if k not in RUN_ONLY_OPTIONS[kind])
    return f"{kind}:{target}" + ("?" + urlencode(kept, safe="/:@") if kept else "")


def _url_userinfo(kind: str, target: str) -> bool:
    """Whether an ``openai:`` base URL carries ``TOKEN@`` or ``user:password@`` before its host: a
    token alone has no shape a pattern knows, so it is refused by position, before pre-flight
    could echo the URL."""
    if kind != "openai" or "@" not in target:
        return False
    from urllib.parse import urlsplit

    return "@" in urlsplit(target.rsplit("@", 1)[0]).netloc


def load_backend(spec: str | Backend, cache: str | Path | ResponseCache | None = None) -> Backend:
    """Build a backend from a spec string (or pass a ready backend through), optionally cached."""
    if isinstance(spec, Backend):
        backend = spec
    else:
        kind, target, opts = parse_spec(spec)
        if kind == "hf":
            from vlrl.core.backends.hf import HFBackend

            backend = HFBackend.from_spec(target, **opts)
        elif kind == "py":
            from vlrl.core.backends.python import load_python_backend

            backend = load_python_backend(target, opts)
        else:
            from vlrl.core.backends.openai_http import OpenAIBackend

            if "@" not in target:
                raise ValueError(f"backend spec {redact(spec)!r}: expected 'openai:BASE_URL@MODEL'")
            base_url, model = target.rsplit("@", 1)
            backend = OpenAIBackend.from_spec(base_url, model, **opts)
    if cache is not None and not isinstance(backend, CachedBackend):
        if not isinstance(cache, ResponseCache):
            cache = Path(cache)
            if cache.suffix != ".sqlite":
                cache = cache / "responses.sqlite"
        backend = CachedBackend(backend, cache)
    return backend
