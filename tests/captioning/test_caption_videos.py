"""`vlrl caption --videos`: a folder of videos captioned like images, hostile files quarantined.

The model is a ``py:`` reply function that describes what it is given (frame count and how the
red bar grows), so each record can be checked against the video it came from; a tiny Qwen2.5-VL
runs the same folder in process. A rerun resumes with nothing captioned twice.
"""

from __future__ import annotations

import json
import sys
import textwrap

from tests.support.jobs import child_env
from tests.support.long_commands import VLRL
from tests.support.videos import make_video


def _folder(tmp_path):
    d = tmp_path / "videos"
    d.mkdir()
    make_video(d / "a.mp4", seconds=3.0)
    make_video(d / "b.webm", seconds=2.0, codec="libvpx-vp9")
    (d / "empty.mp4").write_bytes(b"")
    (d / "notes.txt").write_text("not a video")
    return d


def _py_model(tmp_path):
    (tmp_path / "vidcap.py").write_text(textwrap.dedent('''
        def factory():
            def reply(messages, sampling):
                part = next(p for p in messages[-1]["content"] if p["type"] == "video")
                clip = part["video"]
                return f"{len(clip.frames)} frames over {clip.duration:.1f} s"
            return reply
    '''))
    return "py:vidcap:factory"


def _run(tmp_path, *argv):
    import subprocess

    env = child_env(PYTHONPATH=f"{tmp_path}:{':'.join(sys.path)}")
    return subprocess.run([VLRL, "caption", *argv], capture_output=True, text=True, env=env, timeout=300)


def _records(out):
    return [json.loads(line) for p in sorted((out / "captions").glob("*.jsonl")) for line in p.read_text().splitlines()]


def test_caption_videos_records_frames_and_quarantines_bad_files(tmp_path):
    src, out = _folder(tmp_path), tmp_path / "out"
    res = _run(tmp_path, "--videos", str(src), "--model", _py_model(tmp_path), "--out", str(out), "--no-progress")
    assert res.returncode == 0, res.stderr[-2000:]
    recs = {r["video_id"]: r for r in _records(out)}
    assert set(recs) == {"a.mp4", "b.webm"}
    assert recs["a.mp4"]["caption"] == "6 frames over 3.0 s" and recs["a.mp4"]["frames"] == 6
    assert recs["a.mp4"]["fps"] == 2.0 and len(recs["a.mp4"]["frame_times"]) == 6
    assert recs["b.webm"]["video"].endswith("b.webm") and recs["b.webm"]["frames"] == 4
    quarantined = [json.loads(line) for line in (out / "quarantine.jsonl").read_text().splitlines()]
    assert [(q.get("image_id"), "empty file" in json.dumps(q)) for q in quarantined] == [("empty.mp4", True)]
    again = _run(tmp_path, "--videos", str(src), "--model", _py_model(tmp_path), "--out", str(out), "--no-progress")
    assert again.returncode == 0 and len(_records(out)) == 2  # resumed: nothing twice
    other = _run(tmp_path, "--images", str(src), "--model", _py_model(tmp_path), "--out", str(out), "--no-progress")
    assert other.returncode == 2  # the same folder as images is another job


def test_caption_videos_with_a_tiny_qwen_vl_in_process(tmp_path):
    from vlrl.core.tiny import make_tiny

    model = make_tiny("qwen2_5_vl", tmp_path / "vlm", seed=0)
    src, out = _folder(tmp_path), tmp_path / "out"
    res = _run(tmp_path, "--videos", str(src), "--model", f"hf:{model}?device=cpu&dtype=float32", "--out", str(out),
               "--max-tokens", "4", "--no-progress")
    assert res.returncode == 0, res.stderr[-2000:]
    recs = _records(out)
    assert {r["video_id"] for r in recs} == {"a.mp4", "b.webm"} and all(r["prompt_tokens"] > 40 for r in recs)


def test_images_and_videos_are_one_or_the_other(tmp_path):
    res = _run(tmp_path, "--model", "py:x:y", "--out", str(tmp_path / "o"))
    assert res.returncode == 2 and "--images or --videos" in res.stderr


def test_caption_videos_from_a_parquet_manifest_with_bytes_and_paths(tmp_path):
    """CapRL++'s layout: a parquet `videos` column (bytes or a relative path); a path out of the
    manifest's folder is quarantined with the reason, never opened."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    src = _folder(tmp_path)
    outside = make_video(tmp_path / "outside.mp4", seconds=2.0)
    table = pa.table({"id": ["inline", "path", "escape"],
                      "videos": [[{"bytes": (src / "a.mp4").read_bytes(), "path": None}], [{"bytes": None, "path": "b.webm"}],
                                 [{"bytes": None, "path": str(outside)}]]})
    pq.write_table(table, src / "rows.parquet")
    out = tmp_path / "out"
    res = _run(tmp_path, "--videos", str(src / "rows.parquet"), "--model", _py_model(tmp_path), "--out", str(out), "--no-progress")
    assert res.returncode == 0, res.stderr[-2000:]
    recs = {r["video_id"]: r for r in _records(out)}
    assert recs["inline"]["caption"] == "6 frames over 3.0 s" and recs["path"]["frames"] == 4
    quarantined = [json.loads(line) for line in (out / "quarantine.jsonl").read_text().splitlines()]
    assert [q.get("image_id") for q in quarantined] == ["escape"] and "escapes the dataset root" in json.dumps(quarantined)


def test_video_sampling_flags_choose_the_frames_and_are_part_of_the_job(tmp_path):
    """--video-nframes / --video-fps are qwen-vl-utils' keys: the frames change, and a rerun with
    other sampling into the same folder is another job (refused)."""
    src, out = _folder(tmp_path), tmp_path / "out"
    res = _run(tmp_path, "--videos", str(src), "--model", _py_model(tmp_path), "--out", str(out), "--no-progress",
               "--video-nframes", "8")
    assert res.returncode == 0, res.stderr[-2000:]
    assert {r["video_id"]: r["frames"] for r in _records(out)} == {"a.mp4": 8, "b.webm": 8}
    other = _run(tmp_path, "--videos", str(src), "--model", _py_model(tmp_path), "--out", str(out), "--no-progress",
                 "--video-fps", "1")
    assert other.returncode == 2
    bad = _run(tmp_path, "--images", str(src), "--model", _py_model(tmp_path), "--out", str(tmp_path / "o2"), "--video-fps", "1")
    assert bad.returncode == 2 and "--videos only" in bad.stderr
