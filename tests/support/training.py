"""Data sources the training tests share."""

from __future__ import annotations

import json


def two_image_source(tmp_path):
    from PIL import Image

    rows = []
    for i in range(4):
        Image.new("RGB", (32, 32), (40 * i + 20, 0, 0)).save(tmp_path / f"a{i}.png")
        Image.new("RGB", (32, 32), (0, 40 * i + 20, 0)).save(tmp_path / f"b{i}.png")
        rows.append({"id": f"r{i}", "images": [f"a{i}.png", f"b{i}.png"], "question": "Which is redder?", "answer": "A"})
    src = tmp_path / "two.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return src
