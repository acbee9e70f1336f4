"""Video Prism (`vlrl eval prism --videos`): each benchmark video is captioned, and its questions are
answered from the caption alone, with image Prism's scoring and mean / best-of-N reporting.

The captioner watches the clip it is sent (a red square crossing the frame, written by FFmpeg): of
two sampled captions per video, the first says where the square goes and the second gets it wrong,
so the mean is half the best-of-N. The reader answers from the caption text only.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap

from tests.support.jobs import child_env
from tests.support.long_commands import VLRL
from tests.support.videos import make_motion_video, motion_of
from vlrl.core.backends import Backend, ChatResult

WAYS = ["left", "right", "up", "down"]


class WatchingCaptioner(Backend):
    kind = "watching-captioner"

    def __init__(self):
        super().__init__("cap")

    def _chat(self, requests):
        out = []
        for r in requests:
            clip = next(p["video"] for p in r.messages[0]["content"] if p.get("type") == "video")
            text = next(p["text"] for p in r.messages[0]["content"] if p.get("type") == "text")
            assert "video" in text  # the video captioning prompt
            way = motion_of(clip)
            wrong = "up" if way != "up" else "down"
            caps = [f"A red square moves {way}. The clip lasts {clip.duration:.0f} seconds.",
                    f"A red square moves {wrong}. The clip lasts {clip.duration:.0f} seconds."][: r.sampling.n]
            out.append(ChatResult(texts=caps, finish_reasons=["stop"] * len(caps)))
        return out

    def _score_choices(self, requests):
        raise NotImplementedError


class Reader(Backend):
    kind = "reader"

    def __init__(self):
        super().__init__("reader")

    def _chat(self, requests):
        out = []
        for r in requests:
            c = r.messages[0]["content"]
            text = c if isinstance(c, str) else "".join(p.get("text", "") for p in c)
            caption = text.split("<description>")[1].split("</description>")[0]
            opts = re.findall(r"^([A-Z])\. (.*)$", text, re.M)
            if opts:
                out.append(ChatResult(texts=[" " + next((L for L, o in opts if f"moves {o}" in caption), "A")]))
            else:
                out.append(ChatResult(texts=[re.search(r"lasts (\d+) seconds", caption).group(1)]))
        return out

    def _score_choices(self, requests):
        raise NotImplementedError


def _bench(tmp_path):
    d = tmp_path / "bench"
    d.mkdir()
    make_motion_video(d / "r.mp4", "right")
    make_motion_video(d / "l.mp4", "left", seconds=3.0)
    (d / "bad.mp4").write_bytes(b"not a video at all")
    rows = [{"id": "q1", "video": "r.mp4", "benchmark": "MVBench", "question": "Which way does the square move?",
             "options": WAYS, "answer": "B"},
            {"id": "q2", "videos": ["l.mp4"], "benchmark": "MVBench", "question": "Which way does the square move?",
             "options": WAYS, "answer": "A"},
            {"id": "q3", "video": "l.mp4", "benchmark": "Video-MME", "question": "How many seconds long is it?", "answer": "3"},
            {"id": "q4", "video": "bad.mp4", "benchmark": "Video-MME", "question": "What happens?", "answer": "x"}]
    (d / "bench.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return d / "bench.jsonl"


def test_video_prism_scores_like_image_prism_with_mean_and_best_of_n(tmp_path):
    from vlrl.methods.caprl.prism import evaluate_prism

    res = evaluate_prism(WatchingCaptioner(), Reader(), _bench(tmp_path), tmp_path / "out", media="video",
                         captions_per_image=2, progress=False)
    assert res["images"] == 3 and res["n"] == 4 and res["errors"] == 1
    mv, mme = res["benchmarks"]["MVBench"], res["benchmarks"]["Video-MME"]
    assert (mv["accuracy"], mv["best_of_n"]) == (0.5, 1.0)  # right caption, then wrong caption
    assert (mme["accuracy"], mme["best_of_n"]) == (0.5, 0.5) and mme["by_type"] == {"exact": 0.0, "numeric": 1.0}
    preds = {p["id"]: p for p in map(json.loads, (tmp_path / "out" / "predictions.jsonl").read_text().splitlines())}
    assert preds["q1"]["scores"] == [1.0, 0.0] and "not a readable video" in preds["q4"]["error"]


def test_eval_prism_videos_cli(tmp_path):
    (tmp_path / "vprism.py").write_text(textwrap.dedent('''
        from tests.methods.caprl.test_prism_videos import Reader, WatchingCaptioner
        def _reply(b):
            return lambda messages, sampling: b._chat([type("R", (), {"messages": messages, "sampling": sampling})()])[0].texts[0]
        def cap():
            return _reply(WatchingCaptioner())
        def reader():
            return _reply(Reader())
    '''))
    env = child_env(PYTHONPATH=f"{tmp_path}:{':'.join(sys.path)}")
    cmd = [VLRL, "eval", "prism", "--videos", str(_bench(tmp_path)), "--captioner", "py:vprism:cap", "--answerer", "py:vprism:reader",
           "--out", str(tmp_path / "out"), "--quiet"]
    res = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]  # the unreadable video is an input problem, not a backend failure
    results = json.loads((tmp_path / "out" / "results.json").read_text())
    assert results["benchmarks"]["MVBench"]["accuracy"] == 1.0 and results["benchmarks"]["Video-MME"]["accuracy"] == 0.5
    both = subprocess.run(cmd + ["--bench", "x"], capture_output=True, text=True, env=env, timeout=300)
    assert both.returncode == 2 and "--bench or --videos" in both.stderr
