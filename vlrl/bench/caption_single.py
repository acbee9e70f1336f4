"""The baseline of ``vlrl bench caption``: plain transformers, one image (or video) per ``generate`` call.

Run as ``python -m vlrl.bench.caption_single MODEL IMAGES_JSON MAX_TOKENS PROMPT RESULT [video]`` in a
fresh process. A video is decoded with PyAV, every frame, and its frames are chosen and sized with
qwen-vl-utils' own functions (``smart_nframes``, ``smart_resize`` and its video pixel budget), which is
what its ``fetch_video`` does when one of its readers works (its torchvision reader does not, with
the torchvision this project installs). Deliberately no vlrl code: it is the loop people write first, the side of the ratio that
vlrl's own changes must not be able to move. The result goes to a file, not stdout, so that library
warnings cannot corrupt it.
"""

import json
import sys
import time

import torch
from PIL import Image
from transformers import AutoModelForImageTextToText, AutoProcessor


def main(model_dir: str, images: list[str], max_tokens: int, prompt: str, result: str) -> None:
    model = AutoModelForImageTextToText.from_pretrained(model_dir, dtype=torch.float32).eval()
    proc = AutoProcessor.from_pretrained(model_dir)
    t0 = time.perf_counter()
    for path in images:
        img = Image.open(path).convert("RGB")
        msgs = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": prompt}]}]
        text = proc.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
        enc = proc(text=[text], images=[img], return_tensors="pt")
        with torch.inference_mode():
            out = model.generate(**enc, max_new_tokens=max_tokens, do_sample=False)
        proc.decode(out[0, enc["input_ids"].shape[1]:], skip_special_tokens=True)
    dt = time.perf_counter() - t0
    with open(result, "w") as fh:
        json.dump({"images": len(images), "seconds": dt}, fh)


def qwen_frames(path: str) -> tuple[list, dict]:
    """Every frame decoded with PyAV, then the ones qwen-vl-utils keeps (2 fps), sized by its budget."""
    import av
    from qwen_vl_utils import vision_process as v

    with av.open(path) as container:
        stream = container.streams.video[0]
        fps = float(stream.average_rate)
        frames = [f.to_image().convert("RGB") for f in container.decode(stream)]
    n = v.smart_nframes({"fps": 2.0}, total_frames=len(frames), video_fps=fps)
    idx = sorted({round(i * (len(frames) - 1) / max(n - 1, 1)) for i in range(n)})
    factor = 14 * v.SPATIAL_MERGE_SIZE
    min_px = v.VIDEO_MIN_TOKEN_NUM * factor * factor
    max_px = max(min(v.VIDEO_MAX_TOKEN_NUM * factor * factor, v.MODEL_SEQ_LEN * factor * factor * 0.9 / n * v.FRAME_FACTOR),
                 int(min_px * 1.05))
    w, h = frames[0].size
    rh, rw = v.smart_resize(h, w, factor=factor, min_pixels=min_px, max_pixels=max_px)
    kept = [frames[i].resize((rw, rh), Image.Resampling.BICUBIC) for i in idx]
    return kept, {"fps": fps, "frames_indices": idx, "total_num_frames": len(frames)}


def main_video(model_dir: str, videos: list[str], max_tokens: int, prompt: str, result: str) -> None:
    model = AutoModelForImageTextToText.from_pretrained(model_dir, dtype=torch.float32).eval()
    proc = AutoProcessor.from_pretrained(model_dir)
    t0 = time.perf_counter()
    tokens = 0
    for path in videos:
        frames, meta = qwen_frames(path)
        msgs = [{"role": "user", "content": [{"type": "video"}, {"type": "text", "text": prompt}]}]
        text = proc.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
        enc = proc(text=[text], videos=[frames], video_metadata=[meta], do_sample_frames=False, return_tensors="pt")
        tokens += enc["input_ids"].shape[1]
        with torch.inference_mode():
            out = model.generate(**enc, max_new_tokens=max_tokens, do_sample=False)
        proc.decode(out[0, enc["input_ids"].shape[1]:], skip_special_tokens=True)
    dt = time.perf_counter() - t0
    with open(result, "w") as fh:
        json.dump({"images": len(videos), "seconds": dt, "prompt_tokens": tokens / max(len(videos), 1)}, fh)


if __name__ == "__main__":
    run = main_video if len(sys.argv) > 6 and sys.argv[6] == "video" else main
    run(sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5])
