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


def test_one_bad_manifest_line_is_that_records_problem_not_the_jobs(tmp_path):
    """`qa-curate`, `teacher-captions` and `data check` aborted (exit 2) on one bad manifest line,
    and an invalid-UTF-8 line named no file or line (finding 12 of #24). Each bad line is now an
    unloadable record named FILE:LINE; the job quarantines it and goes on."""
    import json

    from PIL import Image

    from tests.support.fake_openai import FakeOpenAI
    from tests.support.long_commands import FAIL_FAST, answer, run

    for i in range(3):
        Image.new("RGB", (16, 16), (200, 20 * i, 20)).save(tmp_path / f"{i}.png")
    manifest = tmp_path / "manifest.jsonl"
    manifest.write_bytes(json.dumps({"image_id": "a", "image": "0.png"}).encode() + b"\n"
                         + b'{"image_id": "b", "image": "1.png"\n'
                         + b'{"image_id": "c\xff", "image": "2.png"}\n'
                         + json.dumps({"image_id": "d", "image": "2.png"}).encode() + b"\n")
    res = run(["data", "check", str(manifest), "--json", str(tmp_path / "check.json"), "-q"])
    assert res.returncode == 0, res.stderr[-2000:]
    report = json.loads((tmp_path / "check.json").read_text())
    reasons = {f["path"]: f.get("reason") for f in report["files"]}
    assert "not valid UTF-8" in reasons[f"{manifest}:3"] and "not valid JSON" in reasons[f"{manifest}:2"]
    with FakeOpenAI(reply=answer) as srv:
        res = run(["data", "teacher-captions", "--images", str(manifest), "--teacher", f"t={srv.spec()}",
                   "--out", str(tmp_path / "t"), "--min-words", "1", *FAIL_FAST])
        # the bad lines are input errors, not backend failures: the run is done (0), reasons kept
        assert res.returncode == 0 and f"{manifest}:3" in res.stderr, res.stderr[-2000:]
        rows = {json.loads(x)["image_id"]: json.loads(x) for x in (tmp_path / "t" / "teacher_captions.jsonl").read_text().splitlines()}
        assert rows["a"]["teacher_captions"] and rows["d"]["teacher_captions"]
        assert "not valid UTF-8" in rows[f"{manifest}:3"]["missing"]["t"]
        res = run(["data", "qa-curate", "--images", str(manifest), "--vlm", srv.spec(), "--answerer", srv.spec(),
                   "--out", str(tmp_path / "qa"), "--per-image", "1", "--rounds", "1", "--quiet", *FAIL_FAST])
        assert res.returncode == 0, res.stderr[-2000:]
    quarantined = (tmp_path / "qa" / "records" / "quarantine-shard-0-of-1.jsonl").read_text()
    assert f"{manifest}:2" in quarantined and f"{manifest}:3" in quarantined


def test_caption_refuses_an_absolute_manifest_path_out_of_the_folder_like_every_command(tmp_path):
    """`caption` opened absolute manifest paths outside the manifest's folder where the other
    commands refused them (finding 6 of #24): one root policy now."""
    import json

    from PIL import Image

    from tests.support.fake_openai import FakeOpenAI
    from tests.support.long_commands import run

    (tmp_path / "data").mkdir()
    Image.new("RGB", (8, 8), "red").save(tmp_path / "data" / "in.png")
    Image.new("RGB", (8, 8), "blue").save(tmp_path / "outside.png")
    manifest = tmp_path / "data" / "m.jsonl"
    manifest.write_text(json.dumps({"image_id": "in", "image": str(tmp_path / "data" / "in.png")}) + "\n"
                        + json.dumps({"image_id": "out", "image": str(tmp_path / "outside.png")}) + "\n")
    with FakeOpenAI() as srv:
        res = run(["caption", "--images", str(manifest), "--model", srv.spec(), "--out", str(tmp_path / "caps"),
                   "--no-progress"])
        assert res.returncode == 0 and srv.chats == 1, res.stderr[-2000:]  # only the inside image was sent
    (q,) = [json.loads(x) for x in (tmp_path / "caps" / "quarantine.jsonl").read_text().splitlines()]
    assert q["image_id"] == "out" and "escapes the dataset root" in q["reason"]
