"""Commands answer fast: `vlrl --help`, argument errors and `vlrl train check` import no torch/trl
(measured by what is imported, not by a clock)."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys

import pytest

from tests.support.paths import ROOT

HEAVY = ("torch", "trl", "transformers", "datasets", "numpy", "PIL")


def _imported_after(code: str) -> set[str]:
    probe = f"""
import sys, json, contextlib, io
with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
    try:
        {code}
    except SystemExit:
        pass
print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in {HEAVY!r})))
"""
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env, cwd=ROOT, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    return {m.split(".")[0] for m in json.loads(out.stdout.strip().splitlines()[-1])}


def test_help_and_argument_errors_import_nothing_heavy():
    assert _imported_after("from vlrl.cli import run; run('--help')") == set()
    assert _imported_after("from vlrl.cli import run; run('caption', '--bogus')") == set()
    assert _imported_after("from vlrl.cli import run; run('data', 'qa-curate', '--help')") == set()


def test_train_check_imports_neither_torch_nor_trl():
    # --no-probe reads only what the recipe says, in about 2 s; the full check also builds TRL's config
    # as training does (and probes backends), which imports TRL (#30 finding 11)
    got = _imported_after("from vlrl.cli import run; run('train', 'check', '--no-probe', '--recipe', "
                          "'train/recipes/tiny/caprl_tiny.yaml')")
    assert not got & {"torch", "trl", "transformers"}, got


@pytest.mark.parametrize("method,cls", [("grpo", "GRPOConfig"), ("sft", "SFTConfig")])
def test_trainer_keys_read_from_source_match_the_real_config(method, cls):
    trl = pytest.importorskip("trl")
    from vlrl.training.trl_fields import source_fields
    from vlrl.training.validation import config_fields

    real = {f.name for f in dataclasses.fields(getattr(trl, cls))}
    module = "trl.trainer.sft_config" if method == "sft" else "trl.trainer.grpo_config"
    assert source_fields(module, cls) == real
    assert config_fields(method) == real


def test_a_warning_repeated_every_step_is_shown_once():
    code = """
import warnings
from vlrl.cli import show_warnings_once
show_warnings_once()
for step in range(5):
    with warnings.catch_warnings():  # what libraries do inside a training step
        warnings.warn("`foo` is deprecated", FutureWarning)
    warnings.warn("another one", UserWarning)
"""
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""), "PYTHONWARNINGS": ""}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert out.stderr.count("is deprecated") == 1 and out.stderr.count("another one") == 1, out.stderr
