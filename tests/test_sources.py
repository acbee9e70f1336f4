"""vlrl.sources: one package for both ways of reading images (random access and streamed)."""

from __future__ import annotations

import subprocess
import sys

from PIL import Image

from vlrl.sources import load_any_dataset, open_source


def test_package_imports_in_either_order():
    for first, second in (("vlrl.sources", "vlrl.records"), ("vlrl.records", "vlrl.sources")):
        code = f"import {first}, {second}; from vlrl.sources import DatasetSource, ImageItem, open_source"
        subprocess.run([sys.executable, "-c", code], check=True)


def test_streamed_and_random_access_readers_agree_on_a_folder(tmp_path):
    for rel in ("b.png", "a/x.png", "a/y.jpg"):
        p = tmp_path / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        Image.new("RGB", (8, 8), "red").save(p)
    (tmp_path / ".hidden.png").write_bytes(b"not read")
    streamed = [it.image_id for it in open_source(tmp_path)]
    random_access = [label for label, _ in load_any_dataset(tmp_path).iter_images()]
    assert sorted(streamed) == sorted(random_access) == ["a/x.png", "a/y.jpg", "b.png"]
