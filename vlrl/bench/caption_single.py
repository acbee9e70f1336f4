"""The baseline of ``vlrl bench caption``: plain transformers, one image per ``generate`` call.

Run as ``python -m vlrl.bench.caption_single MODEL IMAGES_JSON MAX_TOKENS PROMPT RESULT`` in a fresh
process. Deliberately no vlrl code: it is the loop people write first, the side of the ratio that
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


if __name__ == "__main__":
    main(sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5])
