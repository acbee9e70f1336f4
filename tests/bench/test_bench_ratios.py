"""The project's two measured claims, guarded in CI as ratios measured side by side in one run.

* ``vlrl bench caption``: batched ``vlrl caption`` against one image per ``generate`` (goal ≥ 8× at
  one thread; issue #33 found it at 1× with nothing failing);
* ``vlrl bench reward``: ``caprl_qa`` exact mode against sample mode, captions per second (goal ≥ 5×).

Both sides of each ratio run on the same machine at the same time, so a loaded CI box slows both
alike; the floors are far below the goals and only an order-of-magnitude regression fails. Sizes are
small to keep this under a minute. The measured ratios are written to the CI log as
:class:`BenchRatio` warnings (pytest's warnings summary, shown by ``make test``).
"""

from __future__ import annotations

import warnings

import pytest

CAPTION_FLOOR = 3.0
REWARD_FLOOR = 2.5


class BenchRatio(UserWarning):
    """A measured benchmark ratio, reported in the test log (not a problem)."""


def _report(name: str, ratio: float, floor: float, detail: str) -> None:
    line = f"{name}: {ratio:.2f}x (floor {floor}x; {detail})"
    print(line)
    warnings.warn(line, BenchRatio, stacklevel=2)


@pytest.mark.slow
def test_batched_captioning_is_much_faster_than_one_image_at_a_time(tmp_path):
    from vlrl.bench.caption import bench_caption

    res = bench_caption(n_images=64, batch_size=32, max_tokens=32, large_factor=2, workdir=tmp_path, threads=1)
    _report("bench caption speedup", res["speedup"], CAPTION_FLOOR,
            f"{res['batched_images_per_s']:.1f} vs {res['single_images_per_s']:.1f} img/s, 64 images, 1 thread")
    assert res["speedup"] >= CAPTION_FLOOR, res


@pytest.fixture
def one_thread():
    """In-process benches at one torch thread, as the caption bench's children run (``--threads 1``):
    on a small shared machine more threads oversubscribe the cores and slow both sides erratically."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.mark.slow
def test_exact_reward_is_much_faster_than_sampled(one_thread):
    from vlrl.bench.reward import bench_reward

    res = bench_reward(n_captions=16, repeats=2, questions_per_caption=8, rounds=1, rounds_list=(1,))
    ratio = res["throughput_ratio"]
    _report("bench reward exact/sample", ratio, REWARD_FLOOR,
            f"{res['exact']['captions_per_s']:.1f} vs {res['sample']['captions_per_s']:.1f} captions/s, rounds 1")
    assert ratio >= REWARD_FLOOR, res


@pytest.mark.slow
def test_every_other_batched_path_hands_the_model_whole_batches(one_thread):
    """No timing: each pipeline of ``vlrl bench paths`` passes the backend more than one request per call."""
    from vlrl.bench.paths import bench_paths

    res = bench_paths(images=4)["paths"]
    per_call = {f"{name} {role}": r["batched"]["requests_per_call"] for name, roles in res.items() for role, r in roles.items()}
    speedups = {f"{name} {role}": r["speedup"] for name, roles in res.items() for role, r in roles.items()}
    print(f"bench paths speedups: {speedups}")
    warnings.warn(f"bench paths speedups (batched vs one at a time, 4 images): {speedups}", BenchRatio, stacklevel=1)
    assert set(res) == {"qa-curate", "teacher-captions", "prism", "caption-qa", "reward-exact"}
    assert all(n is not None and n > 1 for n in per_call.values()), per_call


@pytest.mark.slow
def test_video_captioning_bench_compares_the_same_work_with_flat_memory(tmp_path):
    """``vlrl bench caption --videos``, small: both sides see the same prompt tokens per video, and peak
    RSS on twice the videos stays within 10%. The speedup is reported, not held to a floor: with a
    tiny model on CPU the vision prefill, which batching does not shorten, dominates (docs/benchmarks.md)."""
    from vlrl.bench.caption import bench_caption

    res = bench_caption(n_images=8, batch_size=4, max_tokens=8, large_factor=2, workdir=tmp_path, threads=1, media="video")
    _report("bench caption --videos speedup", res["speedup"], 0.0,
            f"{res['batched_images_per_s']:.1f} vs {res['single_images_per_s']:.1f} videos/s, 8 videos, 1 thread")
    assert res["batched_prompt_tokens"] == res["single_prompt_tokens"] > 100, res
    assert res["peak_rss_mb_large"] <= 1.10 * res["peak_rss_mb_small"], res
