"""Shared fixtures: offline tiny models and the real servers on them, built once per test session."""

from __future__ import annotations

import os
from collections.abc import Iterator

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
