"""One bad manifest row is one quarantined record with its reason; the job goes on (`vlrl caption`)."""

from __future__ import annotations

import json

from PIL import Image

from tests.support.captioning import ScriptedBackend
from vlrl.captioning import CaptionJob, run_caption


def test_bad_manifest_rows_are_quarantined_with_reasons(tmp_path):
    root = tmp_path / "data"
    root.mkdir()
    Image.new("RGB", (8, 8), "red").save(root / "a.png")
    Image.new("RGB", (8, 8), "blue").save(root / "b.png")
    Image.new("RGB", (8, 8), "green").save(tmp_path / "outside.png")
    rows = [
        {"id": "1", "image": "a.png"},
        {"id": "2", "image": 42},                                 # not a path
        {"id": "3"},                                              # no image column at all
        {"id": "1", "image": "b.png"},                            # same id, another image
        {"id": "1", "image": "a.png"},                            # an exact repeat: the same image
        {"id": "4", "image": {"bytes": "../outside.png"}},        # bytes that are a path: same root policy
        {"id": "5", "image": {"bytes": "b.png"}},
    ]
    manifest = root / "m.jsonl"
    with open(manifest, "wb") as fh:
        fh.write(b"".join(json.dumps(r).encode() + b"\n" for r in rows))
        fh.write(b'{"id": "6", "image": "caf\xe9.png"}\n')              # invalid UTF-8
        fh.write(b"[" * 100_000 + b"]" * 100_000 + b"\n")            # 100k-deep JSON
        fh.write(b'{"id": "\\ud800", "image": "a.png"}\n')            # a lone surrogate
    out = tmp_path / "out"
    m = run_caption(CaptionJob(images=str(manifest), models=["hf:unused"], out=out, progress=False, cache=False),
                    backend=ScriptedBackend())
    caps = [json.loads(line)["image_id"] for p in (out / "captions").glob("*.jsonl") for line in p.read_text().splitlines()]
    q = {json.loads(line)["image_id"]: json.loads(line)["reason"] for line in (out / "quarantine.jsonl").read_text().splitlines()}
    assert sorted(caps) == ["1", "5"]
    assert "int" in q["2"] and "no image column" in q["3"] and "escapes the dataset root" in q["4"]
    (dup,) = [k for k in q if k.startswith("1#dup-")]
    assert "duplicate image_id '1'" in q[dup] and "b.png" in q[dup]
    assert "UTF-8" in q["m.jsonl:line8"] and "nested too deeply" in q["m.jsonl:line9"]
    assert "surrogate" in q["m.jsonl:line10"]
    assert m["counts"] == {"captioned": 2, "quarantined": 7, "empty": 0, "truncated": 0}
    # a rerun neither re-sends nor re-lists anything
    b = ScriptedBackend()
    m2 = run_caption(CaptionJob(images=str(manifest), models=["hf:unused"], out=out, progress=False, cache=False), backend=b)
    assert b.seen == [] and m2["counts"] == {"captioned": 2, "quarantined": 7, "empty": 0, "truncated": 0}


def test_qa_curate_quarantines_an_id_reused_for_another_image(tmp_path):
    from tests.support.curate import ScriptedTextAnswerer, ScriptedVLM, make_images
    from vlrl.methods.caprl.curate import CurateConfig, curate
    imgs = make_images(tmp_path / "imgs")
    names = sorted(p.name for p in imgs.iterdir() if p.suffix == ".png" and p.name != "broken.png")
    manifest = imgs / "m.jsonl"
    rows = [{"id": n, "image": n} for n in names] + [{"id": names[0], "image": names[1]}, {"id": names[0], "image": names[0]}]
    manifest.write_text("".join(json.dumps(r) + "\n" for r in rows))
    stats = curate(str(manifest), ScriptedVLM(), ScriptedTextAnswerer(), tmp_path / "out", CurateConfig(batch_size=2), progress=False)
    assert stats["images"] == len(names) + 1 and stats["images_quarantined"] == 1 and stats["images_pending"] == 0
    assert list(stats["quarantine_reasons"]) == [f"duplicate id {names[0]!r} names a different image ({names[1]}); give it a unique id"]
