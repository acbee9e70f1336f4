"""`vlrl data qa-curate --videos`: MCQs about each video, kept only when they need the video.

The question-writing VLM sits at the backend seam and really watches the clip it is given (a red
square crossing the frame, made by FFmpeg): it asks which way the square moves, which no single
frame answers, and a common-sense question. The filter keeps the first (the VLM answers it from the
video, a blind answerer cannot) and drops the second, exactly as for images; a hostile file is
quarantined; the dataset carries each video's bytes, and `data export --format caprl` writes the
public video rows (`videos`, `reward_model.ground_truth`), read back as published.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

from tests.support.curate import letter_of, prompt_text
from tests.support.jobs import child_env
from tests.support.long_commands import VLRL
from tests.support.videos import make_motion_video, motion_of
from vlrl.core.backends import Backend, ChatResult

WAYS = ["left", "right", "up", "down"]


def _video(messages):
    content = messages[0]["content"]
    return next((p["video"] for p in content if p.get("type") == "video"), None) if isinstance(content, list) else None


class WatchingVLM(Backend):
    kind = "watching-vlm"

    def __init__(self):
        super().__init__("vlm")

    def _chat(self, requests):
        out = []
        for r in requests:
            text, clip = prompt_text(r.messages), _video(r.messages)
            assert clip is not None and "image" not in text.split("Question")[0].lower()  # told it is a video
            if "Write" in text:
                way = motion_of(clip)
                out.append(ChatResult(texts=[
                    "Question 1: Which way does the red square move?\n" + "\n".join(f"{L}. {o}" for L, o in zip("ABCD", WAYS, strict=True))
                    + f"\nAnswer: {'ABCD'[WAYS.index(way)]}\n\n"
                    "Question 2: What colour is the sky on a clear day?\nA. blue\nB. pink\nC. black\nAnswer: A\n"]))
            else:
                out.append(ChatResult(texts=[f" {letter_of(text, motion_of(clip) if 'square' in text else 'blue')}"]))
        return out

    def _score_choices(self, requests):
        raise NotImplementedError


class BlindAnswerer(Backend):
    """Knows the sky is blue; guesses 'up' for the square (never right here)."""

    kind = "blind"

    def __init__(self):
        super().__init__("text")

    def _chat(self, requests):
        out = []
        for r in requests:
            text = prompt_text(r.messages)
            assert _video(r.messages) is None
            out.append(ChatResult(texts=[f" {letter_of(text, 'blue' if 'sky' in text else 'up')}"]))
        return out

    def _score_choices(self, requests):
        raise NotImplementedError


def _videos(tmp_path):
    d = tmp_path / "clips"
    d.mkdir()
    make_motion_video(d / "r.mp4", "right")
    make_motion_video(d / "l.webm", "left", codec="libvpx-vp9")
    (d / "cut.mp4").write_bytes(make_motion_video(tmp_path / "whole.mp4").read_bytes()[:300])
    return d


def test_qa_curate_videos_keeps_questions_that_need_the_video(tmp_path):
    import datasets

    from vlrl.methods.caprl.curate import CurateConfig, curate

    stats = curate(_videos(tmp_path), WatchingVLM(), BlindAnswerer(), tmp_path / "qa",
                   CurateConfig(per_image=5, rounds=4, batch_size=2, media="video"), progress=False)
    assert (stats["images"], stats["images_done"], stats["images_quarantined"]) == (3, 2, 1)
    assert "not a readable video" in next(iter(stats["quarantine_reasons"]))
    assert stats["kept"] == 2 and stats["drop_reasons"] == {"text_acc_too_high": 2}
    assert stats["settings"]["prompt"] == "caprl_qa_generate_video"
    ds = datasets.load_from_disk(str(tmp_path / "qa" / "dataset"))
    assert sorted(ds["id"]) == ["l.webm", "r.mp4"] and "video" in ds.column_names and "image" not in ds.column_names
    for row in ds:
        (q,) = row["questions"]
        assert q["options"]["ABCD".index(q["answer"])] == ("right" if row["id"] == "r.mp4" else "left")
        assert row["video"]["bytes"] == (tmp_path / "clips" / row["id"]).read_bytes()
    _export_and_read_back(tmp_path)


def _export_and_read_back(tmp_path):
    """`data export --format caprl` on the video dataset: the public rows, read back by the readers
    of the public data (the reward's ground truth, the video decoded from the row's bytes)."""
    from vlrl.core.sources import load_any_dataset, open_source
    from vlrl.core.sources.rows import iter_source, record_prompt

    res = subprocess.run([VLRL, "data", "export", "--format", "caprl", "--input", str(tmp_path / "qa" / "dataset"),
                          "--out", str(tmp_path / "public.parquet")], capture_output=True, text=True, env=child_env(), timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    assert json.loads(res.stdout)["rows"] == 2
    rows = {r["id"]: r for r in iter_source(str(tmp_path / "public.parquet"))}
    r = rows["r.mp4"]
    assert "image" not in r and r["data_source"] == "video_caption_rl"
    assert r["reward_model"]["ground_truth"][0]["choices"] == ["A) left", "B) right", "C) up", "D) down"]
    assert r["questions"] == r["reward_model"]["ground_truth"] and record_prompt(r) == "Please describe this video in detail."
    assert r["prompt"][0]["content"].startswith("<video>")
    assert r["videos"][0]["bytes"] == (tmp_path / "clips" / "r.mp4").read_bytes()
    assert r["extra_info"] == {"index": r["extra_info"]["index"], "video_path": str((tmp_path / "clips" / "r.mp4").resolve())}
    clips = {it.image_id: it.open() for it in open_source(tmp_path / "public.parquet", media="video")}
    assert motion_of(clips["r.mp4"]) == "right" and motion_of(clips["l.webm"]) == "left"
    assert len(load_any_dataset(tmp_path / "public.parquet", media="video").load_image(0).frames) >= 4


def test_qa_curate_videos_cli_with_py_models(tmp_path):
    """The real command with `--videos` and py: reply functions (the same watching rule)."""
    (tmp_path / "vidqa.py").write_text(textwrap.dedent('''
        from tests.methods.caprl.test_qa_curate_videos import BlindAnswerer, WatchingVLM
        def vlm():
            b = WatchingVLM()
            return lambda messages, sampling: b._chat([type("R", (), {"messages": messages})()])[0].texts[0]
        def blind():
            b = BlindAnswerer()
            return lambda messages, sampling: b._chat([type("R", (), {"messages": messages})()])[0].texts[0]
    '''))
    env = child_env(PYTHONPATH=f"{tmp_path}:{':'.join(sys.path)}")
    cmd = [VLRL, "data", "qa-curate", "--videos", str(_videos(tmp_path)), "--vlm", "py:vidqa:vlm", "--answerer", "py:vidqa:blind",
           "--out", str(tmp_path / "qa"), "--quiet"]
    res = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    stats = json.loads(res.stdout)
    assert (stats["images_done"], stats["images_quarantined"], stats["kept"]) == (2, 1, 2)
    both = subprocess.run(cmd[:3] + ["--images", "x"] + cmd[3:], capture_output=True, text=True, env=env, timeout=300)
    assert both.returncode == 2 and "--images or --videos" in both.stderr
