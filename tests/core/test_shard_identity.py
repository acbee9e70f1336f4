"""One identity across shards (finding 5 of #24): every shard written into one ``--out`` must share
the job's settings and its shard count, or ``load_dataset(OUT)`` mixes rows made two ways and
counts images twice (700 rows for 300 images). Each refusal names the change as ``setting: old → new``."""

from __future__ import annotations

from tests.support.fake_openai import FakeOpenAI
from tests.support.long_commands import FAIL_FAST, answer, images, run


def _caption(root, spec, *extra):
    return run(["caption", "--images", str(images(root, 6)), "--model", spec, "--out", str(root / "out"), "--no-progress",
                *FAIL_FAST, *extra])


def test_caption_shards_share_settings_and_layout(tmp_path):
    with FakeOpenAI(reply=answer) as srv:
        spec = srv.spec()
        assert _caption(tmp_path, spec).returncode == 0
        res = _caption(tmp_path, spec, "--shard", "0/2")  # an unsharded run, then shards of it
        assert res.returncode == 2 and "shards: 1 → 2" in res.stderr, res.stderr[-2000:]
    with FakeOpenAI(reply=answer) as srv:
        spec = srv.spec()
        other = tmp_path / "b"
        assert _caption(other, spec, "--shard", "0/2").returncode == 0
        res = _caption(other, spec, "--shard", "1/2", "--prompt", "Say what you see.")
        assert res.returncode == 2 and "prompt:" in res.stderr and "→ 'Say what you see.'" in res.stderr, res.stderr[-2000:]
        res = _caption(other, spec, "--shard", "0/3")
        assert res.returncode == 2 and "shards: 2 → 3" in res.stderr, res.stderr[-2000:]
        assert _caption(other, spec, "--shard", "1/2").returncode == 0  # the same settings: the other half
    assert len(list((other / "out" / "captions").glob("*.jsonl"))) >= 2


def test_qa_curate_and_teacher_captions_shards_are_one_job(tmp_path):
    with FakeOpenAI(reply=answer) as srv:
        spec = srv.spec()
        imgs = str(images(tmp_path, 4))
        curate = ["data", "qa-curate", "--images", imgs, "--vlm", spec, "--answerer", spec, "--out", str(tmp_path / "qa"),
                  "--rounds", "1", "--max-attempts", "1", "--quiet", *FAIL_FAST]
        first = run([*curate, "--per-image", "1", "--shard", "0/2"])
        assert first.returncode in (0, 1), first.stderr[-2000:]  # 1: this half alone may keep no question
        res = run([*curate, "--per-image", "2", "--shard", "1/2"])
        assert res.returncode == 2 and "per_image: 1 → 2" in res.stderr, res.stderr[-2000:]
        teach = ["data", "teacher-captions", "--images", imgs, "--teacher", f"t={spec}", "--out", str(tmp_path / "t"),
                 "--min-words", "1", *FAIL_FAST]
        assert run(teach).returncode == 0
        res = run([*teach, "--shard", "0/2"])
        assert res.returncode == 2 and "shards: 1 → 2" in res.stderr, res.stderr[-2000:]
