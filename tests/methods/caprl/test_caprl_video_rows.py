"""CapRL++'s public video rows (CapRL-Video-QA-20K's shape) through the ``caprl_qa`` reward.

The rows are the image set's with ``videos`` (the encoded files) instead of ``image``; the reward
reads the same ``reward_model.ground_truth`` and gives the same values for the same captions: only
the answerer's prompt says it reads a video's description.
"""

from __future__ import annotations

import json

from tests.methods.caprl.test_caprl_public_data import TRUTH, public_rows, read_choice, write_parquet
from tests.support.scripted import Scripted
from tests.support.videos import make_motion_video
from vlrl.rewards import build_reward


def video_rows(tmp_path, n=2):
    raw = make_motion_video(tmp_path / "clip.mp4").read_bytes()
    return [{"id": f"v-{i}", "videos": [{"bytes": raw, "path": None}],
             "prompt": [{"role": "user", "content": "<video> Please describe this video in detail."}],
             "data_source": "video_caption_rl", "reward_model": {"ground_truth": TRUTH}} for i in range(n)]


def test_caprl_qa_scores_video_rows_as_it_scores_image_rows(tmp_path):
    from vlrl.rewards.scoring import score_rows_file

    captions = ["The sign says 惠州市 and the logo is Red.", "A clip."]
    results = {}
    for media, rows in (("video", video_rows(tmp_path)), ("image", public_rows(2))):
        rows = [dict(r, completion=c) for r, c in zip(rows, captions, strict=True)]
        write_parquet(rows, tmp_path / f"{media}.parquet")
        seen = []

        def choose(r, seen=seen):
            seen.append(r.messages[-1]["content"])
            return read_choice(r)

        reward = build_reward("caprl_qa", answerer=Scripted("reader", choose=choose), mode="exact", questions="all", rounds=2)
        summary = score_rows_file(reward, tmp_path / f"{media}.parquet", tmp_path / f"{media}.jsonl", progress=False)
        assert summary["errors"] == 0
        results[media] = [json.loads(x)["reward"] for x in (tmp_path / f"{media}.jsonl").read_text().splitlines()]
        assert all(f"a description of {'a video' if media == 'video' else 'an image'}:" in s for s in seen)
    assert results["video"] == results["image"] == [1.0, 0.0]
