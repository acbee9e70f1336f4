"""One root policy (finding 6 of #24): `teacher-captions`, `eval arena` and `eval caption-qa` read
images through :func:`vlrl.methods.rubicap.sources.iter_images`, which followed a symlink out of
``--images`` (an outside image went to the teacher; ``/etc/passwd`` was opened). Now a path that
leaves the source is an item with a reason, never opened, as in `caption` and `qa-curate`."""

from __future__ import annotations

import json
import os

from PIL import Image

from tests.support.fake_openai import FakeOpenAI
from tests.support.long_commands import FAIL_FAST, run
from vlrl.methods.rubicap.sources import load_images


def _folder_with_escapes(tmp_path):
    src = tmp_path / "imgs"
    src.mkdir()
    Image.new("RGB", (8, 8), "red").save(src / "inside.png")
    outside = tmp_path / "secret.png"
    Image.new("RGB", (8, 8), "blue").save(outside)
    os.symlink(outside, src / "link.png")
    os.symlink("/etc/passwd", src / "passwd.png")
    return src


def test_symlinks_out_of_the_source_are_refused_with_a_reason(tmp_path):
    items = {it.image_id: it for it in load_images(_folder_with_escapes(tmp_path))}
    assert items["inside.png"].error is None
    for name in ("link.png", "passwd.png"):
        assert name in items and "escapes the dataset root" in items[name].error and items[name].path == ""
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "m.jsonl").write_text(json.dumps({"image_id": "abs", "image": str(tmp_path / "secret.png")}) + "\n")
    (abs_item,) = load_images(tmp_path / "sub" / "m.jsonl")  # an absolute path outside the manifest's folder
    assert abs_item.error and ("outside the dataset root" in abs_item.error or "escapes" in abs_item.error)


def test_teacher_captions_never_sends_an_outside_image(tmp_path):
    src = _folder_with_escapes(tmp_path)
    with FakeOpenAI() as srv:
        res = run(["data", "teacher-captions", "--images", str(src), "--teacher", f"t={srv.spec()}",
                   "--out", str(tmp_path / "out"), "--min-words", "1", *FAIL_FAST])
        assert srv.chats == 1, res.stderr[-2000:]  # only inside.png reached the teacher
    rows = {json.loads(x)["image_id"]: json.loads(x) for x in (tmp_path / "out" / "teacher_captions.jsonl").read_text().splitlines()}
    assert rows["inside.png"]["teacher_captions"]
    assert "escapes the dataset root" in rows["passwd.png"]["missing"]["t"]


def test_a_reused_image_id_is_recorded_not_dropped(tmp_path):
    """`teacher-captions` dropped a row that reused an ``image_id`` with only a log warning
    (finding 13 of #24); now it is ``ID#dup-N`` with its reason, like `qa-curate` and `caption`."""
    for c in ("red", "blue"):
        Image.new("RGB", (8, 8), c).save(tmp_path / f"{c}.png")
    rows = [{"image_id": "x", "image": "red.png"}, {"image_id": "x", "image": "blue.png"},
            {"image_id": "x", "image": "red.png"}]  # the third repeats the first: the same record
    (tmp_path / "m.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    items = load_images(tmp_path / "m.jsonl")
    assert [it.image_id for it in items] == ["x", "x#dup-1"]
    assert items[1].error.startswith("duplicate id 'x' names a different image") and items[1].path == ""
