"""Batch captioning (`vlrl caption`): sources, exactly-once output, quarantine, shards, kill -9, Ray."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from tests.support.captioning import ScriptedBackend
from tests.support.servers import FaultProxy
from vlrl.captioning import CaptionJob, CaptionStore, open_source, run_caption
from vlrl.core.prompts import render
from vlrl.core.sources import read_locator


def _png(rng, size=(40, 30)) -> bytes:
    import io

    buf = io.BytesIO()
    Image.fromarray(rng.integers(0, 255, (size[1], size[0], 3), dtype=np.uint8)).save(buf, format="PNG")
    return buf.getvalue()


@pytest.fixture
def folder(tmp_path):
    rng = np.random.default_rng(0)
    root = tmp_path / "imgs"
    (root / "a" / "b").mkdir(parents=True)
    (root / ".hidden").mkdir()
    for i in range(12):
        sub = ["", "a/", "a/b/"][i % 3]
        (root / f"{sub}img{i:02d}.png").write_bytes(_png(rng))
    (root / ".hidden" / "skip.png").write_bytes(_png(rng))
    (root / "notes.txt").write_text("not an image file")
    (root / "a" / "broken.jpg").write_bytes(b"<html>404</html>")
    (root / "a" / "truncated.png").write_bytes(_png(rng)[:60])
    return root


def _job(src, out, **kw) -> CaptionJob:
    kw.setdefault("progress", False)
    kw.setdefault("cache", False)
    return CaptionJob(images=str(src), models=["hf:unused"], out=out, **kw)


def _health(rows: list[dict]) -> dict[str, int]:
    """The manifest's empty/truncated counts, recounted from the records themselves."""
    return {"empty": sum(not r["caption"].strip() for r in rows),
            "truncated": sum(r["finish_reason"] == "length" for r in rows)}


def _captions(out: Path) -> list[dict]:
    rows = []
    for p in sorted((out / "captions").glob("*.jsonl")):
        rows += [json.loads(line) for line in p.read_text().splitlines()]
    for p in sorted((out / "captions").glob("*.parquet")):
        import pyarrow.parquet as pq

        rows += pq.read_table(p).to_pylist()
    return rows


def test_folder_job_output_quarantine_and_manifest(folder, tmp_path):
    out = tmp_path / "out"
    m = run_caption(_job(folder, out, batch_size=5), backend=ScriptedBackend())
    rows = _captions(out)
    ids = sorted(r["image_id"] for r in rows)
    assert len(ids) == 12 and len(set(ids)) == 12
    assert "a/b/img02.png" in ids and not any("hidden" in i for i in ids)
    q = {json.loads(line)["image_id"]: json.loads(line)["reason"] for line in (out / "quarantine.jsonl").read_text().splitlines()}
    assert set(q) == {"a/broken.jpg", "a/truncated.png"}
    assert "not an image" in q["a/broken.jpg"] and q["a/truncated.png"]
    r = rows[0]
    assert r["model"] == "scripted-captioner" and r["prompt"] == render("caption_default")
    assert r["sampling"]["max_tokens"] == 256 and r["seconds"] >= 0 and r["width"] == 40
    assert m["status"] == "complete" and m["counts"] == {"captioned": 12, "quarantined": 2, "empty": 0, "truncated": 0}
    assert json.loads((out / "manifest.json").read_text())["output"]["parts"] == ["part-00000.jsonl"]

    # loadable with datasets
    from datasets import load_dataset

    ds = load_dataset("json", data_files=str(out / "captions" / "*.jsonl"), split="train")
    assert len(ds) == 12 and set(ds["image_id"]) == set(ids)

    # rerun: nothing new is captioned, nothing is re-sent to the backend
    b = ScriptedBackend()
    m2 = run_caption(_job(folder, out, batch_size=5), backend=b)
    assert b.seen == [] and m2["this_run"]["captioned"] == 0 and len(_captions(out)) == 12


def test_resume_after_limit_and_rotation_is_exactly_once(folder, tmp_path):
    out = tmp_path / "out"
    b1 = ScriptedBackend()
    run_caption(_job(folder, out, batch_size=2, part_size=3, limit=5), backend=b1)
    first = {r["image_id"] for r in _captions(out)}
    assert len(first) in (5, 6)  # the limit is checked per batch
    # a torn last line from a killed writer is dropped and redone
    last = sorted((out / "captions").glob("*.jsonl"))[-1]
    with open(last, "a") as fh:
        fh.write('{"image_id": "a/img01.png", "capt')
    b2 = ScriptedBackend()
    run_caption(_job(folder, out, batch_size=2, part_size=3), backend=b2)
    ids = [r["image_id"] for r in _captions(out)]
    assert len(ids) == 12 and len(set(ids)) == 12
    assert not first & set(b2.seen)  # committed captions are never sent again
    assert len(list((out / "captions").glob("part-*.jsonl"))) == 4  # 12 captions, 3 per part


def test_backend_failures_are_retried_by_the_next_run(folder, tmp_path):
    out = tmp_path / "out"
    m = run_caption(_job(folder, out), backend=ScriptedBackend(fail={"img00.png", "a/img01.png"}))
    assert m["status"] == "incomplete" and m["this_run"]["failed"] == 2 and m["counts"]["captioned"] == 10
    b = ScriptedBackend()
    m = run_caption(_job(folder, out), backend=b)
    assert sorted(b.seen) == ["a/img01.png", "img00.png"] and m["counts"]["captioned"] == 12


def test_changed_settings_are_refused(folder, tmp_path):
    out = tmp_path / "out"
    run_caption(_job(folder, out, limit=2), backend=ScriptedBackend())
    with pytest.raises(ValueError, match="different job.*prompt"):
        run_caption(_job(folder, out, prompt="Say hi."), backend=ScriptedBackend())


def test_spec_options_are_part_of_the_identity(folder, tmp_path):
    """A rerun with ``?terse=0`` into a folder captioned with ``?terse=1`` is another job, refused
    before anything is written; the finished job is not reported as 'nothing left to caption'."""
    out = tmp_path / "out"
    spec = "py:tests.support.photo_models:captioner"
    m = run_caption(CaptionJob(images=str(folder), models=[f"{spec}?terse=1"], out=out, progress=False, cache=False))
    assert m["status"] == "complete" and m["job"]["model"] == ["tests.support.photo_models:captioner?terse=1"]
    assert {r["caption"] for r in _captions(out)} <= {"A square photo.", "A wide photo.", "A tall photo."}
    with pytest.raises(ValueError, match=re.escape('model: ["tests.support.photo_models:captioner?terse=1"] → ["tests.support.photo_models:captioner?terse=0"]')):
        run_caption(CaptionJob(images=str(folder), models=[f"{spec}?terse=0"], out=out, progress=False, cache=False))
    with pytest.raises(ValueError, match="model: "):
        run_caption(CaptionJob(images=str(folder), models=[spec], out=out, progress=False, cache=False))
    # the same options in another order are the same job (finished: nothing to do)
    m = run_caption(CaptionJob(images=str(folder), models=[f"{spec}?terse=1"], out=out, progress=False, cache=False))
    assert m["this_run"]["captioned"] == 0 and m["counts"]["captioned"] == 12


def test_empty_and_truncated_captions_are_counted_and_warned_once(folder, tmp_path, caplog):
    """A random VLM runs every caption into the length limit, some as newlines only: the job says
    'complete' (nothing failed), but the manifest counts them and one warning says so."""
    out = tmp_path / "out"
    job = CaptionJob(images=str(folder), models=["py:tests.support.photo_models:random_vlm"], out=out,
                     progress=False, cache=False, max_tokens=8, batch_size=5)
    blank = [i for i in range(12) if i % 3 == 0]
    with caplog.at_level("WARNING"):
        m = run_caption(job)
    run = m["this_run"]
    # whitespace is a (bad) answer kept as the caption, or a failure of its request where the
    # backend layer refuses whitespace: either way it is never a silent, healthy caption
    assert run["empty"] + run["failed"] == len(blank) and run["empty"] in (0, len(blank))
    assert run["truncated"] == run["captioned"] == 12 - run["failed"]
    assert m["counts"]["empty"] == run["empty"] and m["counts"]["truncated"] == run["truncated"]
    on_disk = json.loads((out / "manifest.json").read_text())
    assert on_disk["counts"]["truncated"] == run["truncated"] and on_disk["this_run"]["empty"] == run["empty"]
    warnings = [r.getMessage() for r in caplog.records if "stopped at the length limit" in r.getMessage()]
    assert len(warnings) == 1 and "--max-tokens (now 8)" in warnings[0]
    # a rerun keeps the folder's totals and counts only what it adds
    caplog.clear()
    m2 = run_caption(job)
    assert m2["counts"]["truncated"] == 12 and m2["this_run"]["truncated"] == run["failed"]
    ok = run_caption(_job(folder, tmp_path / "ok"), backend=ScriptedBackend())
    assert ok["counts"]["empty"] == ok["counts"]["truncated"] == 0


def test_the_empty_warning_comes_once_during_a_long_run(caplog):
    from vlrl.core.outputs import OutputCounts

    counts = OutputCounts("captions", after=20)
    with caplog.at_level("WARNING"):
        for i in range(100):
            counts.add("a fine caption" if i % 3 else "  \n", "stop" if i % 2 else "length")
    assert counts.as_dict() == {"empty": 34, "truncated": 50}
    assert len(caplog.records) == 1 and "7 of 20 captions are empty" in caplog.records[0].getMessage()
    assert counts.check() is None  # once
    quiet = OutputCounts("captions", after=5)
    for _ in range(50):
        quiet.add("fine", "stop")
    quiet.add("", "length")
    assert quiet.check() is None and quiet.as_dict() == {"empty": 1, "truncated": 1}  # 2% is under the share


def test_shards_partition_the_corpus(folder, tmp_path):
    out = tmp_path / "out"
    for i in range(3):
        run_caption(_job(folder, out, shard=f"{i}/3"), backend=ScriptedBackend())
    ids = [r["image_id"] for r in _captions(out)]
    assert len(ids) == 12 and len(set(ids)) == 12
    assert len(list(out.glob("manifest-shard*.json"))) == 3
    assert not (out / "manifest.json").exists()


def test_prompt_template_and_parquet_output(tmp_path):
    rng = np.random.default_rng(1)
    (tmp_path / "pics").mkdir()
    rows = []
    for i in range(5):
        (tmp_path / "pics" / f"p{i}.png").write_bytes(_png(rng))
        rows.append({"image": f"pics/p{i}.png", "id": f"rec-{i}", "title": f"title {i}"})
    rows.append({"image": "pics/missing.png", "id": "rec-missing", "title": "x"})
    rows.append({"image": "../../etc/passwd", "id": "rec-escape", "title": "x"})
    manifest = tmp_path / "m.jsonl"
    manifest.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    out = tmp_path / "out"
    run_caption(
        _job(manifest, out, prompt="Describe {{ image_id }} titled '{{ meta.title }}'.", output_format="parquet", part_size=2),
        backend=ScriptedBackend(),
    )
    got = {r["image_id"]: r for r in _captions(out)}
    assert set(got) == {f"rec-{i}" for i in range(5)}
    assert got["rec-3"]["prompt"] == "Describe rec-3 titled 'title 3'."
    assert not list((out / "captions").glob("*.jsonl"))  # every part converted at the end
    q = {json.loads(line)["image_id"]: json.loads(line)["reason"] for line in (out / "quarantine.jsonl").read_text().splitlines()}
    assert "not found" in q["rec-missing"] and "escapes" in q["rec-escape"]
    from datasets import load_dataset

    assert len(load_dataset("parquet", data_files=str(out / "captions" / "*.parquet"), split="train")) == 5


def _tar(path: Path, samples: dict[str, bytes]) -> None:
    import io

    with tarfile.open(path, "w") as tf:
        for key, data in samples.items():
            for name, blob in ((f"{key}.png", data), (f"{key}.json", json.dumps({"k": key}).encode())):
                ti = tarfile.TarInfo(name)
                ti.size = len(blob)
                tf.addfile(ti, io.BytesIO(blob))


def test_all_source_kinds_stream_and_locators_reread(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq
    from datasets import Dataset, Features, Value
    from datasets import Image as HFImage

    rng = np.random.default_rng(2)
    blobs = {f"s{i:03d}": _png(rng) for i in range(6)}
    (tmp_path / "shards").mkdir()
    _tar(tmp_path / "shards" / "shard-000.tar", dict(list(blobs.items())[:3]))
    _tar(tmp_path / "shards" / "shard-001.tar", dict(list(blobs.items())[3:]))
    pq.write_table(
        pa.Table.from_pylist([{"key": k, "image": {"bytes": v, "path": None}} for k, v in blobs.items()]),
        tmp_path / "m.parquet",
        row_group_size=4,
    )
    Dataset.from_dict(
        {"id": list(blobs), "image": [{"bytes": v, "path": None} for v in blobs.values()]},
        features=Features({"id": Value("string"), "image": HFImage()}),
    ).save_to_disk(str(tmp_path / "hfds"))

    for src, kind in (
        (tmp_path / "shards", "wds"),
        (str(tmp_path / "shards" / "shard-{000..001}.tar"), "wds"),
        (tmp_path / "m.parquet", "manifest"),
        (tmp_path / "hfds", "hf"),
    ):
        source = open_source(src)
        assert source.kind == kind
        items = list(source)
        # tar ids are <shard>/<key>; other sources use the dataset's id
        key = (lambda i: i.split("/", 1)[1]) if kind == "wds" else (lambda i: i)
        if kind == "wds":
            assert [it.image_id.split("/")[0] for it in items] == ["shard-000"] * 3 + ["shard-001"] * 3
        assert [key(it.image_id) for it in items] == list(blobs), src
        for it in items:
            assert it.data == blobs[key(it.image_id)]
        listed = list(source.iter_items(with_data=False))  # what the Ray driver ships: no bytes
        assert [key(it.image_id) for it in listed] == list(blobs) and all(it.data is None for it in listed)
        assert source.count() in (len(blobs), None)
        for it in listed:
            reread = read_locator(json.loads(json.dumps(it.locator)))  # what a Ray worker does
            reread = reread["bytes"] if isinstance(reread, dict) else reread
            assert reread == blobs[key(it.image_id)], (src, it.locator)

    # no id column: the row index is the id, listed without touching the image column
    Dataset.from_dict({"image": [{"bytes": v, "path": None} for v in blobs.values()]}, features=Features({"image": HFImage()})).save_to_disk(
        str(tmp_path / "hf_noid")
    )
    source = open_source(tmp_path / "hf_noid")
    assert [it.image_id for it in source.iter_items(with_data=False)] == [str(i) for i in range(6)]
    assert read_locator(next(source.iter_items(with_data=False)).locator)["bytes"] == blobs["s000"]

    out = tmp_path / "out"
    run_caption(_job(tmp_path / "shards", out, batch_size=4), backend=ScriptedBackend())
    assert sorted(r["image_id"].split("/", 1)[1] for r in _captions(out)) == sorted(blobs)


def test_store_recovers_parquet_conversion_interrupted(tmp_path):
    folder = tmp_path / "c"
    with CaptionStore(folder, fmt="parquet", max_records=2) as st:
        for i in range(3):
            st.append({"image_id": f"x{i}", "caption": "c"})
    # simulate a crash after the parquet rename but before the journal was deleted
    (folder / "part-00000.jsonl").write_text('{"image_id": "x0", "caption": "c"}\n')
    (folder / ".part-00001.parquet.tmp").write_bytes(b"half a parquet file")
    st = CaptionStore(folder, fmt="parquet", max_records=2)
    assert len(st) == 3 and not (folder / "part-00000.jsonl").exists()
    assert not (folder / ".part-00001.parquet.tmp").exists()
    assert not st.append({"image_id": "x1", "caption": "again"})
    st.close()


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_store_counts_the_empty_and_truncated_records_it_finds(tmp_path, fmt):
    """The folder's empty/truncated counts come from the records on disk, not from a manifest a
    ``kill -9`` may have left behind: a store left open (killed) and reopened counts them all."""
    folder = tmp_path / "c"
    captions = [("a red square.", "stop"), ("\n\n", "length"), ("", "stop"), ("a blue", "length"), (" ", "length")]
    st = CaptionStore(folder, fmt=fmt, max_records=2)
    for i, (text, finish) in enumerate(captions):
        st.append({"image_id": f"x{i}", "caption": text, "finish_reason": finish})
    st.sync()  # never closed: the last part stays a JSONL journal, as after a kill
    again = CaptionStore(folder, fmt=fmt, max_records=2)
    assert len(again) == 5 and again.existing == {"empty": 3, "truncated": 3}
    again.close()


# -- real processes ----------------------------------------------------------------------------------


def _make_corpus(root: Path, n: int) -> None:
    rng = np.random.default_rng(3)
    root.mkdir(parents=True)
    for i in range(n):
        (root / f"{i:04d}.png").write_bytes(_png(rng, (28, 28)))
    (root / "zz-corrupt.png").write_bytes(b"\x89PNG\r\n\x1a\nbroken")


@pytest.mark.slow
def test_kill_dash_nine_then_rerun_gives_exactly_once(tiny_vlm, tmp_path):
    corpus, out = tmp_path / "corpus", tmp_path / "out"
    _make_corpus(corpus, 300)
    cmd = [
        str(Path(sys.executable).parent / "vlrl"), "caption", "--images", str(corpus), "--model", f"hf:{tiny_vlm}",
        "--out", str(out), "--batch-size", "4", "--max-tokens", "8", "--part-size", "25", "--no-progress",
    ]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    kills = 0
    for threshold in (30, 90):  # kill twice, at different points of the run
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.time() + 300
        while time.time() < deadline and proc.poll() is None:
            n = sum(p.read_bytes().count(b"\n") for p in (out / "captions").glob("*.jsonl")) if (out / "captions").exists() else 0
            if n >= threshold:
                os.kill(proc.pid, signal.SIGKILL)
                kills += 1
                break
            time.sleep(0.02)
        proc.wait()
    assert kills == 2, "the job finished before it could be killed; make the corpus larger"
    assert json.loads((out / "manifest.json").read_text())["status"] == "running"  # killed, never closed
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    ids = [r["image_id"] for r in _captions(out)]
    assert len(ids) == 300 and len(set(ids)) == 300
    q = [json.loads(line)["image_id"] for line in (out / "quarantine.jsonl").read_text().splitlines()]
    assert q == ["zz-corrupt.png"]
    m = json.loads((out / "manifest.json").read_text())
    # a random tiny VLM often writes only skipped special tokens: the folder's counts must match its records
    assert m["status"] == "complete" and m["counts"] == {"captioned": 300, "quarantined": 1, **_health(_captions(out))}


@pytest.mark.slow
def test_ray_engine_on_a_local_cluster_matches_the_output_format(tiny_vlm, tmp_path):
    # tar shards: the driver ships only (shard, offset, size) locators; workers read the bytes
    rng = np.random.default_rng(4)
    blobs = {f"{i:04d}": _png(rng, (28, 28)) for i in range(12)}
    blobs["zz-corrupt"] = b"\x89PNG\r\n\x1a\nbroken"
    corpus, out = tmp_path / "shards", tmp_path / "out"
    corpus.mkdir()
    items = list(blobs.items())
    _tar(corpus / "shard-000.tar", dict(items[:7]))
    _tar(corpus / "shard-001.tar", dict(items[7:]))
    job = CaptionJob(
        images=str(corpus), models=[f"hf:{tiny_vlm}", f"hf:{tiny_vlm}?batch_size=3"], out=out, engine="ray",
        batch_size=4, max_tokens=8, progress=False, cpus_per_worker=0.5,
    )
    m = run_caption(job)
    assert m["status"] == "complete" and m["engine"] == "ray"
    rows = _captions(out)
    assert sorted(r["image_id"] for r in rows) == [f"shard-00{i // 7}/{i:04d}" for i in range(12)]
    assert {"caption", "model", "prompt", "sampling", "seconds", "finish_reason"} <= set(rows[0])
    assert [json.loads(line)["image_id"] for line in (out / "quarantine.jsonl").read_text().splitlines()] == ["shard-001/zz-corrupt"]
    assert not (out / ".ray").exists()
    # rerun on Ray: nothing pending, nothing duplicated
    m = run_caption(job)
    assert m["this_run"]["captioned"] == 0 and len(_captions(out)) == 12


@pytest.mark.slow
def test_openai_backend_requests_in_flight_and_failed_request_retried_on_rerun(transformers_server, tmp_path):
    corpus, out = tmp_path / "corpus", tmp_path / "out"
    _make_corpus(corpus, 6)
    with FaultProxy(transformers_server.root, blank="a blank tiny-model caption") as proxy:
        spec = f"openai:{proxy.root}/v1@{transformers_server.model}?concurrency=4"
        job = CaptionJob(images=str(corpus), models=[spec], out=out, batch_size=6, max_tokens=8, progress=False)
        proxy.script("400")  # the first request to arrive is refused (not retryable)
        m = run_caption(job)
        assert m["this_run"]["failed"] == 1 and m["counts"] == {"captioned": 5, "quarantined": 1, **_health(_captions(out))}
        assert len(proxy.posts()) == 6  # one batch: six requests, corrupt image never sent
        m = run_caption(job)
    assert m["status"] == "complete" and m["this_run"]["captioned"] == 1
    rows = _captions(out)
    assert sorted(r["image_id"] for r in rows) == [f"{i:04d}.png" for i in range(6)]
    assert rows[0]["model"] == transformers_server.model


@pytest.mark.slow
def test_bench_caption_reports_the_five_numbers(tiny_vlm, tmp_path):
    from vlrl.bench.caption import bench_caption

    res = bench_caption(model=tiny_vlm, n_images=4, batch_size=4, max_tokens=4, large_factor=2, workdir=tmp_path)
    assert set(res) == {"batched_images_per_s", "single_images_per_s", "speedup", "peak_rss_mb_small", "peak_rss_mb_large"}
    assert all(v > 0 for v in res.values())
    assert res["speedup"] == pytest.approx(res["batched_images_per_s"] / res["single_images_per_s"], rel=0.01, abs=0.005)  # the report rounds to 2 decimals


def test_cli_bad_input_is_one_clear_line(folder, tmp_path):
    from typer.testing import CliRunner

    from vlrl.cli import app

    runner = CliRunner()
    res = runner.invoke(app, ["caption", "--images", str(tmp_path / "nope"), "--model", "hf:x", "--out", str(tmp_path / "o")])
    assert res.exit_code == 2 and "no such file or directory" in res.output
    res = runner.invoke(app, ["caption", "--images", str(folder), "--model", "hf:a", "--model", "hf:b", "--out", str(tmp_path / "o")])
    assert res.exit_code == 2 and "--engine ray" in res.output
    res = runner.invoke(app, ["caption", "--images", str(folder), "--model", "hf:a", "--out", str(tmp_path / "o"), "--shard", "3/2"])
    assert res.exit_code == 2 and "0 <= i < n" in res.output


def test_parquet_output_resumes_exactly_once(folder, tmp_path):
    out = tmp_path / "out"
    first = run_caption(_job(folder, out, batch_size=2, part_size=4, limit=5, output_format="parquet"), backend=ScriptedBackend())
    assert first["status"] == "incomplete" and not list((out / "captions").glob("*.jsonl"))
    b = ScriptedBackend()
    m = run_caption(_job(folder, out, batch_size=2, part_size=4, output_format="parquet"), backend=b)
    ids = [r["image_id"] for r in _captions(out)]
    assert len(ids) == 12 and len(set(ids)) == 12 and len(b.seen) == 12 - first["counts"]["captioned"]
    assert m["status"] == "complete" and all(p.endswith(".parquet") for p in m["output"]["parts"])


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_output_folder_loads_with_plain_load_dataset(folder, tmp_path, fmt):
    # Regression: load_dataset(OUT) used to read manifest.json and quarantine.jsonl as data too and
    # fail on their schemas; the README.md dataset card points it at the caption parts only.
    from datasets import load_dataset

    out = tmp_path / "out"
    for i in range(2):  # shards share one folder and one card
        run_caption(_job(folder, out, shard=f"{i}/2", output_format=fmt), backend=ScriptedBackend())
    ds = load_dataset(str(out), split="train")
    assert len(ds) == 12 and len(set(ds["image_id"])) == 12
    assert {"image_id", "caption", "model", "prompt", "sampling"} <= set(ds.column_names)


def test_prompt_with_an_unknown_variable_fails_before_writing(folder, tmp_path):
    # Regression: '{{ nope }}' used to quarantine every image of the corpus (and the changed-job
    # check then refused the corrected prompt in the same --out).
    out = tmp_path / "out"
    with pytest.raises(ValueError, match=r"undefined variable\(s\) \['nope'\]"):
        run_caption(_job(folder, out, prompt="Describe {{ nope }}."), backend=ScriptedBackend())
    with pytest.raises(ValueError, match="prompt template"):
        run_caption(_job(folder, out, prompt="Describe {{ image_id"), backend=ScriptedBackend())
    assert not out.exists()
    m = run_caption(_job(folder, out, prompt="{{ image_id }} {{ meta.get('x', '') }}"), backend=ScriptedBackend())
    assert m["counts"]["captioned"] == 12


def test_cli_missing_model_folder_is_one_line_not_a_traceback(folder, tmp_path):
    import subprocess
    import sys

    vlrl = str(Path(sys.executable).parent / "vlrl")
    res = subprocess.run([vlrl, "caption", "--images", str(folder), "--model", f"hf:{tmp_path}/no-model",
                          "--out", str(tmp_path / "o"), "--no-progress"], capture_output=True, text=True)
    assert res.returncode == 2 and "Traceback" not in res.stderr
    assert "no-model' does not exist" in res.stderr.strip().splitlines()[-1]


def test_ray_worker_that_cannot_build_its_backend_is_one_line():
    # Regression: `--engine ray` with a missing model folder printed ~300 lines of Ray tracebacks;
    # Ray keeps only the worker's traceback text, from which the reason is read.
    from vlrl.captioning.ray_engine import worker_start_error
    from vlrl.core.backends.base import BackendError

    text = ("The actor died because of an error raised in its creation task, ray::MapWorker(...).__init__()\n"
            "  File \"vlrl/core/backends/hf.py\", line 80, in __init__\n"
            "vlrl.core.backends.base.BackendError: hf backend: model folder '/m' does not exist (the hub is not used)\n")
    err = worker_start_error(RuntimeError(text))
    assert isinstance(err, BackendError) and "\n" not in str(err)
    assert str(err).endswith("model folder '/m' does not exist (the hub is not used)")
    assert "died" in str(worker_start_error(RuntimeError("The actor died.\nmore")))


def test_bench_caption_bad_flags_are_one_line(tmp_path):
    # Regression: `vlrl bench caption --images 0` died with ZeroDivisionError, and a missing --model
    # only failed inside the child `vlrl caption`, as a RuntimeError traceback.
    from typer.testing import CliRunner

    from vlrl.cli import app

    runner = CliRunner()
    res = runner.invoke(app, ["bench", "caption", "--json", str(tmp_path / "b.json"), "--images", "0"])
    assert res.exit_code == 2 and "n_images must be a positive integer" in res.output
    res = runner.invoke(app, ["bench", "caption", "--json", str(tmp_path / "b.json"), "--model", str(tmp_path / "nope")])
    assert res.exit_code == 2 and "no such model folder" in res.output
    assert not (tmp_path / "b.json").exists()


def test_dataset_card_never_replaces_a_users_readme(folder, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "README.md").write_text("# my notes\n")
    run_caption(_job(folder, out), backend=ScriptedBackend())
    assert (out / "README.md").read_text() == "# my notes\n"


def test_tar_shards_reusing_a_key_lose_no_image(tmp_path):
    """Two shards that both hold 0000.png: both images are listed, under distinct ids."""
    rng = np.random.default_rng(9)
    (tmp_path / "s").mkdir()
    _tar(tmp_path / "s" / "a.tar", {"0000": _png(rng), "0001": _png(rng)})
    _tar(tmp_path / "s" / "b.tar", {"0000": _png(rng)})
    ids = [it.image_id for it in open_source(tmp_path / "s")]
    assert ids == ["a/0000", "a/0001", "b/0000"]


def test_model_loading_is_reported_apart_from_throughput(folder, tmp_path, monkeypatch):
    """The model is opened lazily, inside the loop; its seconds must not count as captioning time (#33)."""
    import time

    import vlrl.captioning.job as job_mod

    def slow_open(job, spec, cache_name="responses.sqlite"):
        time.sleep(0.6)
        return ScriptedBackend()

    monkeypatch.setattr(job_mod, "open_backend", slow_open)
    monkeypatch.setattr(job_mod, "preflight", lambda spec: None)
    m = run_caption(_job(folder, tmp_path / "out", batch_size=5))["this_run"]
    assert m["captioned"] == 12 and m["model_load_seconds"] >= 0.6
    assert m["images_per_s"] == pytest.approx(12 / (m["seconds"] - m["model_load_seconds"]), rel=0.1)
    assert m["images_per_s"] > 12 / m["seconds"]
