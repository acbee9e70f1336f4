"""vlrl.core.sources: one package for both ways of reading images (random access and streamed)."""

from __future__ import annotations

import subprocess
import sys

import pytest
from PIL import Image

from vlrl.core.sources import load_any_dataset, open_source


def test_package_imports_in_either_order():
    for first, second in (("vlrl.core.sources", "vlrl.core.records"), ("vlrl.core.records", "vlrl.core.sources")):
        code = f"import {first}, {second}; from vlrl.core.sources import DatasetSource, ImageItem, open_source"
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


def test_a_bad_manifest_row_is_quarantined_not_fatal(tmp_path):
    """One row with no image or an escaping path must not abort reading the other rows."""
    import json

    from PIL import Image

    from vlrl.core.images import ImageLoadError
    from vlrl.core.records import UnloadableImageRef
    from vlrl.core.sources import load_any_dataset
    from vlrl.methods.rubicap.sources import load_images

    Image.new("RGB", (8, 8), "red").save(tmp_path / "ok.png")
    rows = [{"id": "good", "image": "ok.png"}, {"id": "noimg", "image": None}, {"id": "escape", "image": "../x.png"}]
    (tmp_path / "m.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    refs = load_any_dataset(tmp_path / "m.jsonl").image_refs()
    assert [r.id for r in refs] == ["good", "noimg", "escape"]
    assert not isinstance(refs[0], UnloadableImageRef)
    for bad in refs[1:]:
        assert isinstance(bad, UnloadableImageRef)
        with pytest.raises(ImageLoadError, match=bad.id):
            bad.load()
    items = load_images(tmp_path / "m.jsonl")
    assert items[0].open().size == (8, 8)
    with pytest.raises(ImageLoadError, match="escape"):
        items[2].open()
