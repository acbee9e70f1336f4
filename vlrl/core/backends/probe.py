"""One pre-flight probe for every backend spec: can this backend serve, asked in seconds?

A long job (``vlrl caption``, QA curation, reward scoring) and a training run (a recipe's reward
backends) both want to know, before hours of work or a 7B policy load, whether the models they name
answer at all. Both ask :func:`probe_backend`, so a spec that one accepts the other accepts too, and
the answer is phrased once. The probe follows the backend seam: the spec is split by
:func:`~vlrl.core.backends.parse_spec` (the grammar every backend is built from), and each backend
kind has its probe here, checking what that backend will need when it is built:

* ``hf:PATH``: the local folder exists, holds ``config.json`` and the config loads (no weights are
  read). The hub is never asked, because :class:`~vlrl.core.backends.hf.HFBackend` never downloads;
  ``hf:tiny:ARCH`` is built on first use and passes.
* ``openai:URL@MODEL``: ``GET URL/models`` answers within ``timeout`` with a JSON model list that
  names MODEL, sent with the same ``Authorization`` the backend will send.
* ``py:``: passes (its factory is imported when the backend is built).

When the two earlier probes disagreed, the stricter answer was kept: a hub id for ``hf:`` fails
(the backend would refuse it anyway), a server whose ``/models`` answers 404 fails (its model
cannot be checked), and an ``openai:`` spec without ``@MODEL`` fails here instead of later.

Every message passes through :func:`~vlrl.core.redact.redact`: a server may echo the API key in an
error body, and probe messages end in logs and terminal output.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vlrl.core.backends.base import Backend, BackendError
from vlrl.core.redact import redact

PROBE_TIMEOUT_S = 5.0


@dataclass(frozen=True)
class ProbeResult:
    """What a probe found: ``problem`` is None when the backend can serve, else one redacted line."""

    spec: str
    problem: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "spec", redact(self.spec))
        if self.problem is not None:
            object.__setattr__(self, "problem", redact(self.problem))

    @property
    def ok(self) -> bool:
        return self.problem is None

    def raise_for_problem(self) -> None:
        """Raise :class:`BackendError` with the one line (jobs print it and exit 2)."""
        if self.problem is not None:
            raise BackendError(self.problem)


def probe_backend(spec: Any, timeout: float = PROBE_TIMEOUT_S) -> ProbeResult:
    """Probe a backend spec (``hf:``, ``openai:``, ``py:``, ``NAME=SPEC`` or a captions ``.jsonl``).

    A ready :class:`Backend` object, or anything that is not a spec string, passes: it was built
    already, or it is not a model.
    """
    if isinstance(spec, Backend) or not isinstance(spec, str):
        return ProbeResult(str(getattr(spec, "model", type(spec).__name__)))
    head, sep, rest = spec.partition("=")
    if sep and re.fullmatch(r"[A-Za-z0-9_.\-]+", head):  # NAME=SPEC (teachers and captioners are named)
        spec = rest
    if spec.endswith(".jsonl"):  # a captions file standing in for a model
        ok = Path(spec).expanduser().is_file()
        return ProbeResult(spec, None if ok else f"captions file '{spec}' does not exist")
    if ":" not in spec:
        return ProbeResult(spec)
    from vlrl.core.backends import parse_spec

    try:
        kind, target, opts = parse_spec(spec)
    except ValueError as e:
        return ProbeResult(spec, str(e))
    if kind == "hf":
        return ProbeResult(spec, probe_hf_folder(target))
    if kind == "openai":
        base_url, at, model = target.rpartition("@")
        if not at or not base_url:
            return ProbeResult(spec, f"backend spec {spec!r}: expected 'openai:BASE_URL@MODEL'")
        return ProbeResult(spec, probe_openai_server(base_url, model, opts.get("api_key_env", "OPENAI_API_KEY"), timeout))
    return ProbeResult(spec)


def probe_hf_folder(target: str) -> str | None:
    """None when ``target`` is a local model folder whose config loads (or a ``tiny:`` model)."""
    if target.startswith("tiny:"):
        return None  # built on first use from a fixed config (vlrl.core.tiny)
    p = Path(target).expanduser()
    if not p.is_dir():
        return (f"hf:{target}: no such model folder ('{target}' does not exist; the hub is not used); "
                "point the spec at a saved model (a folder with config.json)")
    if not (p / "config.json").is_file():
        return f"hf:{target}: not a model folder (no config.json)"
    try:
        from transformers import AutoConfig

        AutoConfig.from_pretrained(str(p))
    except Exception as e:  # noqa: BLE001 - any failure to read the config is the one line we print
        first = str(e).strip().splitlines()[0][:200] if str(e).strip() else ""
        return f"hf:{target}: its config does not load ({type(e).__name__}: {first})"
    return None


def probe_openai_server(base_url: str, model: str, api_key_env: str, timeout: float = PROBE_TIMEOUT_S) -> str | None:
    """None when ``GET BASE_URL/models`` lists ``model``; else why not and what to do.

    stdlib ``urllib``: one GET needs no client library, and a probe must not depend on the openai
    SDK's transport.
    """
    import urllib.error
    import urllib.request

    base_url = base_url.rstrip("/")
    url = f"{base_url}/models"
    # the same header the backend sends (its client falls back to "EMPTY" when the variable is unset)
    req = urllib.request.Request(url, headers={"Authorization": f"Bearer {os.environ.get(api_key_env) or 'EMPTY'}"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:  # noqa: S310 - user-given server URL
            status, body = resp.status, resp.read(2_000_000)
    except urllib.error.HTTPError as e:
        status, body = e.code, e.read(2000)
    except (urllib.error.URLError, OSError, ValueError) as e:
        reason = getattr(e, "reason", e)
        return f"openai:{base_url}: server not reachable (no answer from {url}: {reason}); start the server or fix the URL"
    if status in (401, 403):
        return f"openai:{base_url}: the server refused the API key (HTTP {status}); check ${api_key_env}"
    if status >= 400:
        text = body[:200].decode("utf-8", "replace").strip()
        return (f"openai:{base_url}: GET /models answered HTTP {status}{': ' + text if text else ''}; "
                f"check the URL (it ends in /v1) and ${api_key_env}")
    try:
        data = json.loads(body.decode("utf-8", "replace"))
        ids = [m.get("id") for m in data.get("data", []) if isinstance(m, dict)]
    except (ValueError, AttributeError, TypeError):
        return f"openai:{base_url}: {url} did not return JSON with a model list; is this an OpenAI-compatible /v1 URL?"
    if model not in ids:
        shown = ", ".join(map(str, ids[:8])) + (" …" if len(ids) > 8 else "")
        return f"openai:{base_url}: serves no model {model!r} (it serves: {shown or 'none'}); fix the model name after '@'"
    return None


__all__ = ["PROBE_TIMEOUT_S", "ProbeResult", "probe_backend", "probe_hf_folder", "probe_openai_server"]
