"""Video decoding: Qwen's frame rules, frame times, bounded memory, and hostile files refused.

Every file here is made on the spot with FFmpeg (PyAV) or PIL: real containers and codecs (H.264
in MP4, VP9 in WebM, MPEG-4 in MKV, animated GIF), and the hostile inputs a corpus of millions of
videos holds: an empty file, a truncated one, a PNG named .mp4, audio only, random bytes, and
limits on duration and frame size. Each must be refused with a one-line reason, never a crash.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from PIL import Image

from tests.support.videos import make_video
from vlrl.core.video import VideoLoadError, VideoSpec, iter_video_files, load_video


def qwen_nframes(seconds, fps, **ele):
    from qwen_vl_utils.vision_process import smart_nframes

    return smart_nframes({"fps": 2.0, **ele} if "nframes" not in ele else ele, total_frames=int(seconds * fps), video_fps=fps)


@pytest.mark.parametrize("name, codec, container", [("a.mp4", "libx264", None), ("b.webm", "libvpx-vp9", None),
                                                     ("c.mkv", "mpeg4", None)])
def test_frames_follow_qwen_rules_with_their_times(tmp_path, name, codec, container):
    clip = load_video(make_video(tmp_path / name, codec=codec, container=container))
    assert len(clip.frames) == qwen_nframes(3.0, 10) == 6  # 3 s at 2 fps
    assert all(f.size == clip.frames[0].size and f.size[0] % 28 == 0 and f.size[1] % 28 == 0 for f in clip.frames)
    assert clip.times == sorted(clip.times) and clip.times[0] == pytest.approx(0.0, abs=0.11)
    assert clip.times[-1] == pytest.approx(2.9, abs=0.11)  # first and last frame kept, as qwen-vl-utils picks
    assert clip.sample_fps == pytest.approx(2.0) and clip.source_fps == pytest.approx(10.0)
    bars = [np.asarray(f)[:, :, 0].mean() for f in clip.frames]
    assert bars == sorted(bars) and bars[0] < bars[-1]  # the frames are the video's, in order


def test_nframes_and_budgets_are_settings(tmp_path):
    path = make_video(tmp_path / "a.mp4", seconds=4.0)
    assert len(load_video(path, VideoSpec(nframes=8)).frames) == qwen_nframes(4.0, 10, nframes=8) == 8
    small = load_video(path, VideoSpec(min_pixels=28 * 28, max_pixels=28 * 28 * 2)).frames[0]
    assert small.size[0] * small.size[1] <= 28 * 28 * 2


def test_an_animated_gif_is_a_video(tmp_path):
    frames = [Image.new("RGB", (40, 30), (10 * k, 0, 0)) for k in range(20)]
    frames[0].save(tmp_path / "g.gif", save_all=True, append_images=frames[1:], duration=100, loop=0)
    clip = load_video(tmp_path / "g.gif")
    assert len(clip.frames) >= 2 and len(clip.frames) % 2 == 0


def test_a_long_video_keeps_only_its_sampled_frames(tmp_path):
    clip = load_video(make_video(tmp_path / "long.mp4", seconds=30.0, fps=25, size=(320, 240)))
    assert len(clip.frames) == qwen_nframes(30.0, 25) == 60  # never the 750 decoded frames
    assert clip.total_frames == 750


def _hostile(tmp_path):
    good = make_video(tmp_path / "good.mp4", seconds=3.0)
    cases = {}
    (tmp_path / "empty.mp4").write_bytes(b"")
    cases["empty.mp4"] = "empty file"
    data = good.read_bytes()
    (tmp_path / "truncated.mp4").write_bytes(data[: len(data) // 3])  # its index (moov) is at the end: lost
    cases["truncated.mp4"] = "not a readable video"
    front = make_video(tmp_path / "front.mp4", seconds=6.0, options={"movflags": "faststart"}).read_bytes()
    (tmp_path / "cut.mp4").write_bytes(front[: len(front) // 2])  # index first, half the frames gone
    cases["cut.mp4"] = "truncated"
    Image.new("RGB", (32, 32), "red").save(tmp_path / "image.mp4", format="PNG")
    cases["image.mp4"] = "an image, not a video"
    (tmp_path / "random.mkv").write_bytes(np.random.default_rng(0).bytes(4096))
    cases["random.mkv"] = "not a readable video"
    import av

    with av.open(str(tmp_path / "audio.mp4"), "w") as out:
        s = out.add_stream("aac", rate=16000)
        for k in range(20):
            frame = av.AudioFrame.from_ndarray(np.zeros((1, 1024), dtype=np.float32), format="fltp", layout="mono")
            frame.sample_rate, frame.pts = 16000, k * 1024
            for packet in s.encode(frame):
                out.mux(packet)
        for packet in s.encode():
            out.mux(packet)
    cases["audio.mp4"] = "no video stream"
    return good, cases


def test_hostile_files_are_refused_with_one_line_reasons(tmp_path):
    good, cases = _hostile(tmp_path)
    for name, why in cases.items():
        with pytest.raises(VideoLoadError) as e:
            load_video(tmp_path / name)
        assert "\n" not in e.value.reason and why in e.value.reason, (name, e.value.reason)
        assert e.value.record.endswith(name)
    assert load_video(good).frames  # the good one beside them still loads


def test_duration_and_frame_size_limits_refuse_before_decoding(tmp_path):
    path = make_video(tmp_path / "a.mp4", seconds=3.0)
    with pytest.raises(VideoLoadError, match="over max_seconds"):
        load_video(path, VideoSpec(max_seconds=1.0))  # how a 10-hour stream is refused, with the default 3 h
    with pytest.raises(VideoLoadError, match="exceed max_source_pixels"):
        load_video(path, VideoSpec(max_source_pixels=1000))


def test_video_folders_are_listed_like_image_folders(tmp_path):
    make_video(tmp_path / "b.mp4")
    (tmp_path / "sub").mkdir()
    make_video(tmp_path / "sub" / "a.webm", codec="libvpx-vp9")
    (tmp_path / "notes.txt").write_text("x")
    (tmp_path / ".hidden.mp4").write_bytes(b"")
    assert list(iter_video_files(tmp_path)) == ["b.mp4", "sub/a.webm"]
    assert math.isfinite(load_video(tmp_path / "sub" / "a.webm").duration)


@pytest.mark.parametrize("kind", ["qwen2_5_vl", "qwen3_vl"])
def test_the_hf_backend_feeds_video_to_qwen_vl_models(tmp_path, kind, request):
    """A video part reaches a tiny Qwen2.5-VL / Qwen3-VL as video inputs (pixel_values_videos,
    video_grid_thw; Qwen2.5-VL's second_per_grid_ts from the sampled frame rate), and the response
    cache keys on the video's content."""
    from vlrl.core.backends import ChatRequest, SamplingParams, load_backend
    from vlrl.core.tiny import make_tiny

    model = make_tiny(kind, tmp_path / kind, seed=0)
    backend = load_backend(f"hf:{model}?device=cpu&dtype=float32", cache=tmp_path / "cache")
    seen = []
    inner = backend.inner
    original = inner._encode

    def spy(texts, images):
        enc = original(texts, images)
        seen.append({k: v for k, v in enc.items() if "video" in k or k == "second_per_grid_ts"})
        return enc

    inner._encode = spy
    a = make_video(tmp_path / "a.mp4", seconds=2.0)
    b = make_video(tmp_path / "b.mp4", seconds=2.0, size=(48, 64))

    def req(path):
        return ChatRequest([{"role": "user", "content": [{"type": "video", "video": str(path)},
                                                         {"type": "text", "text": "Describe the video."}]}],
                           SamplingParams(max_tokens=3), id=path.name)

    try:
        first = backend.chat([req(a)])
        again = backend.chat([req(a)])
        other = backend.chat([req(b)])
    finally:
        backend.close()
    assert first[0].ok and again[0].cached and not other[0].cached
    assert len(seen) == 2 and "pixel_values_videos" in seen[0] and tuple(seen[0]["video_grid_thw"].shape) == (1, 3)
    assert int(seen[0]["video_grid_thw"][0, 0]) == 2  # 4 frames at 2 fps, 2 frames per temporal patch
    if kind == "qwen2_5_vl":
        assert float(seen[0]["second_per_grid_ts"][0]) == pytest.approx(1.0)  # 2 frames per grid at 2 fps


@pytest.mark.vllm
@pytest.mark.slow
def test_the_openai_backend_sends_video_as_vllm_takes_it(vllm_vlm, tmp_path):
    """A video part goes to a real vLLM server as a ``video_url`` data URL, and vLLM (its own video
    loader, its own frame sampling) answers it."""
    from vlrl.core.backends import ChatRequest, SamplingParams, load_backend

    path = make_video(tmp_path / "a.mp4", seconds=2.0)
    backend = load_backend(f"openai:{vllm_vlm.base_url}@{vllm_vlm.model}?timeout=300&max_retries=0")
    try:
        (res,) = backend.chat([ChatRequest([{"role": "user", "content": [
            {"type": "video", "video": str(path)}, {"type": "text", "text": "Describe the video."}]}],
            SamplingParams(max_tokens=4), id="a.mp4")])
    finally:
        backend.close()
    assert res.ok, res.error
    assert res.prompt_tokens > 40  # the video's tokens reached the model, not only the text
