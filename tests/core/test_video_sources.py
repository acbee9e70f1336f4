"""Video sources beyond folders: JSONL manifests, parquet rows and save_to_disk datasets with a
``videos`` column holding paths or the encoded files, under the images' root policy.

Both readers are checked: the stream (:func:`vlrl.core.sources.open_source`, what ``vlrl caption``
walks) and the random-access dataset (:func:`vlrl.core.sources.load_any_dataset`, what QA curation,
export and Prism read). Every video is a real file written by FFmpeg.
"""

from __future__ import annotations

import json
import os

import pytest

from tests.support.videos import make_video
from vlrl.core.images import ImageLoadError
from vlrl.core.sources import load_any_dataset, open_source
from vlrl.core.video import Clip


def _corpus(tmp_path):
    """A data folder with two good videos, and one outside it (reached by a symlink and by path)."""
    d = tmp_path / "data"
    (d / "clips").mkdir(parents=True)
    make_video(d / "clips" / "a.mp4", seconds=3.0)
    make_video(d / "clips" / "b.webm", seconds=2.0, codec="libvpx-vp9")
    outside = make_video(tmp_path / "secret.mp4", seconds=2.0)
    os.symlink(outside, d / "clips" / "link.mp4")
    return d, outside


def _opened(source):
    out = {}
    for item in source:
        try:
            out[item.image_id] = item.open()
        except ImageLoadError as e:
            out[item.image_id] = e.reason
    return out


def test_a_jsonl_manifest_names_videos_as_the_public_rows_do(tmp_path):
    d, outside = _corpus(tmp_path)
    rows = [{"id": "a", "videos": ["clips/a.mp4"], "prompt": "<video> Describe."},
            {"id": "b", "video": {"video": "clips/b.webm"}},
            {"id": "link", "videos": ["clips/link.mp4"]},
            {"id": "abs", "videos": [str(outside)]},
            {"id": "up", "video_path": "../secret.mp4"},
            {"id": "none", "image": "x.png"}]
    (d / "m.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    got = _opened(open_source(d / "m.jsonl", media="video"))
    assert isinstance(got["a"], Clip) and len(got["a"].frames) == 6 and got["a"].meta["path"].endswith("a.mp4")
    assert isinstance(got["b"], Clip) and len(got["b"].frames) == 4
    for bad in ("link", "abs", "up"):  # out of the manifest's folder: refused, never opened
        assert "escapes the dataset root" in got[bad], got[bad]
    assert "no video column" in got["none"]
    ds = load_any_dataset(d / "m.jsonl", media="video")
    refs = {r.id: r for r in ds.image_refs()}
    assert len(refs["a"].load(root=ds.root).frames) == 6
    assert "outside the dataset root" in getattr(refs["abs"], "reason", "")
    with pytest.raises(ImageLoadError, match="escapes"):
        refs["link"].load(root=ds.root)


def test_parquet_and_disk_rows_carry_video_bytes_or_paths(tmp_path):
    import datasets
    import pyarrow as pa
    import pyarrow.parquet as pq

    d, _ = _corpus(tmp_path)
    raw = (d / "clips" / "b.webm").read_bytes()
    table = pa.table({"id": ["x", "y", "z"],
                      "videos": [[{"bytes": raw, "path": None}], [{"bytes": None, "path": "clips/a.mp4"}],
                                 [{"bytes": b"\x00" * 64, "path": None}]]})
    pq.write_table(table, d / "rows.parquet")
    got = _opened(open_source(d / "rows.parquet", media="video"))
    assert len(got["x"].frames) == 4 and got["x"].meta["data"] == raw  # decoded from memory
    assert len(got["y"].frames) == 6
    assert "not a readable video" in got["z"]
    ds = load_any_dataset(d / "rows.parquet", media="video")
    assert [len(ds.load_image(i).frames) for i in range(2)] == [4, 6]
    datasets.Dataset(table).save_to_disk(str(d / "disk"))
    got = _opened(open_source(d / "disk", media="video"))
    assert len(got["x"].frames) == 4 and len(got["y"].frames) == 6 and "not a readable video" in got["z"]


def test_a_video_folder_reads_as_a_dataset(tmp_path):
    d, _ = _corpus(tmp_path)
    ds = load_any_dataset(d / "clips", media="video")
    refs = {r.id: r for r in ds.image_refs()}
    assert set(refs) == {"a.mp4", "b.webm", "link.mp4"}
    assert len(refs["a.mp4"].load(root=ds.root).frames) == 6
    with pytest.raises(ImageLoadError, match="escapes"):
        refs["link.mp4"].load(root=ds.root)


def test_a_video_held_as_bytes_goes_to_an_openai_server_as_a_data_url(tmp_path):
    """A clip decoded from a row's bytes has no file: the openai: wire sends the bytes themselves."""
    import base64

    from vlrl.core.backends.openai_wire import to_openai_messages
    from vlrl.core.video import load_video, media_part

    raw = make_video(tmp_path / "a.webm", codec="libvpx-vp9").read_bytes()
    clip = load_video(raw, record="row-1")
    (msg,) = to_openai_messages([{"role": "user", "content": [media_part(clip), {"type": "text", "text": "Describe."}]}])
    url = msg["content"][0]["video_url"]["url"]
    assert url.startswith("data:video/webm;base64,") and base64.b64decode(url.split(",", 1)[1]) == raw
    on_disk = load_video(tmp_path / "a.webm")
    (msg,) = to_openai_messages([{"role": "user", "content": [media_part(on_disk)]}])
    assert base64.b64decode(msg["content"][0]["video_url"]["url"].split(",", 1)[1]) == raw


def test_a_row_reread_by_its_locator_keeps_the_root_policy(tmp_path):
    """The Ray driver lists rows without their media (``with_data=False``) and a worker re-reads each
    by its locator: a path in the row still resolves inside the manifest's folder."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    d, outside = _corpus(tmp_path)
    raw = (d / "clips" / "a.mp4").read_bytes()
    pq.write_table(pa.table({"id": ["in", "bytes", "out"],
                             "videos": [[{"bytes": None, "path": "clips/b.webm"}], [{"bytes": raw, "path": None}],
                                        [{"bytes": None, "path": str(outside)}]]}), d / "rows.parquet")
    listed = list(open_source(d / "rows.parquet", media="video").iter_items(with_data=False))
    assert all(it.data is None and it.locator["kind"] == "parquet" for it in listed)
    got = _opened(listed)
    assert len(got["in"].frames) == 4 and len(got["bytes"].frames) == 6
    assert "escapes the dataset root" in got["out"]
