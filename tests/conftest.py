"""Shared fixtures: offline tiny models built once per test session."""

from __future__ import annotations

import os

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
