"""`vlrl data check`: the real console script over a folder and datasets full of hostile files."""

from __future__ import annotations

import io
import json
import os
import struct
import subprocess
import sys
import zlib
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

VLRL = Path(sys.executable).parent / "vlrl"


def _png_chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)


def _bomb_png(width: int, height: int) -> bytes:
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    idat = zlib.compress(b"\x00" * 4096, 9)
    return b"\x89PNG\r\n\x1a\n" + _png_chunk(b"IHDR", ihdr) + _png_chunk(b"IDAT", idat) + _png_chunk(b"IEND", b"")


def _noise(w: int, h: int, seed: int = 0) -> Image.Image:
    rng = np.random.default_rng(seed)
    return Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8))


def _encoded(img: Image.Image, fmt: str, **kw: object) -> bytes:
    buf = io.BytesIO()
    img.save(buf, fmt, **kw)
    return buf.getvalue()


def run_check(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    return subprocess.run([str(VLRL), "data", "check", *args], capture_output=True, text=True, env=env, timeout=300)


def _read_report(path: Path) -> dict:
    report = json.loads(path.read_text())
    assert set(report) == {"files", "ok", "errors"}
    for f in report["files"]:
        assert set(f) == {"path", "status", "reason"}
        assert f["status"] in ("ok", "error")
        assert (f["reason"] is None) == (f["status"] == "ok")
    assert report["ok"] == sum(f["status"] == "ok" for f in report["files"])
    assert report["errors"] == len(report["files"]) - report["ok"]
    return report


@pytest.fixture
def hostile_folder(tmp_path: Path) -> Path:
    root = tmp_path / "corpus"
    (root / "sub").mkdir(parents=True)
    outside = tmp_path / "outside.png"
    _noise(8, 8).save(outside)

    _noise(32, 24).save(root / "good.png")
    (root / "good.jpg").write_bytes(_encoded(_noise(32, 24, 1), "JPEG", quality=90))
    Image.new("CMYK", (16, 16), (0, 255, 255, 0)).save(root / "sub" / "cmyk.jpg")
    pal = Image.new("P", (4, 4))
    pal.putpalette([0, 0, 0, 255, 0, 0] + [0] * 762)
    pal.save(root / "sub" / "palette.png", transparency=0)
    Image.fromarray(np.full((6, 6), 40000, dtype=np.uint16)).save(root / "sub" / "deep16.png")
    Image.new("LA", (5, 5), (10, 100)).save(root / "sub" / "gray_alpha.png")
    exif = Image.Exif()
    exif[0x0112] = 8
    Image.new("RGB", (30, 10)).save(root / "sub" / "rotated.jpg", exif=exif.tobytes())

    png = _encoded(_noise(96, 96, 2), "PNG")
    jpg = _encoded(_noise(96, 96, 3), "JPEG", quality=95)
    (root / "truncated.png").write_bytes(png[: len(png) // 2])
    (root / "truncated.jpg").write_bytes(jpg[: len(jpg) // 2])
    (root / "random.jpg").write_bytes(np.random.default_rng(4).bytes(3000))
    (root / "bomb.png").write_bytes(_bomb_png(10_000, 10_000))
    os.symlink(outside, root / "escape.png")
    (root / "notes.txt").write_text("not listed: wrong extension")
    return root


EXPECTED_ERRORS = {
    "truncated.png": "truncated",
    "truncated.jpg": "truncated",
    "random.jpg": "not an image",
    "bomb.png": "decompression bomb",
    "escape.png": "escapes the dataset root",
}


def test_check_folder_reports_every_bad_file(hostile_folder: Path, tmp_path: Path) -> None:
    out = tmp_path / "report.json"
    proc = run_check(str(hostile_folder), "--json", str(out))
    assert proc.returncode == 0, proc.stderr
    assert "7 ok, 5 errors" in proc.stdout
    report = _read_report(out)
    by_path = {f["path"]: f for f in report["files"]}
    assert sorted(by_path) == sorted(
        [
            "good.png",
            "good.jpg",
            "sub/cmyk.jpg",
            "sub/palette.png",
            "sub/deep16.png",
            "sub/gray_alpha.png",
            "sub/rotated.jpg",
            *EXPECTED_ERRORS,
        ]
    )
    assert [f["path"] for f in report["files"]] == sorted(by_path)  # stable order
    for name, words in EXPECTED_ERRORS.items():
        assert by_path[name]["status"] == "error"
        assert words in by_path[name]["reason"], by_path[name]
    assert report["ok"] == 7 and report["errors"] == 5


def test_max_pixels_and_root_options(hostile_folder: Path, tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    proc = run_check(str(hostile_folder), "--json", str(out), "--max-pixels", "300", "--quiet")
    assert proc.returncode == 0, proc.stderr
    report = _read_report(out)
    by_path = {f["path"]: f for f in report["files"]}
    assert "exceeds the limit of 300" in by_path["good.png"]["reason"]  # 32x24 = 768 pixels
    assert by_path["sub/palette.png"]["status"] == "ok"  # 16 pixels

    # With the parent as root, the symlink's target is inside it and passes.
    proc = run_check(str(hostile_folder), "--json", str(out), "--root", str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    assert {f["path"]: f["status"] for f in _read_report(out)["files"]}["escape.png"] == "ok"

    # A narrower root: the folder's own files are still named relative to it, but only sub/ may be read.
    proc = run_check(str(hostile_folder), "--json", str(out), "--root", str(hostile_folder / "sub"))
    assert proc.returncode == 0, proc.stderr
    statuses = {f["path"]: (f["status"], f["reason"]) for f in _read_report(out)["files"]}
    assert statuses["sub/cmyk.jpg"] == ("ok", None)
    assert statuses["good.png"][0] == "error" and "escapes the dataset root" in statuses["good.png"][1]


def test_check_jsonl_and_parquet_datasets(hostile_folder: Path, tmp_path: Path) -> None:
    rows = [
        {"id": "a", "image": "good.png"},
        {"id": "b", "image": "../outside.png"},
        {"id": "c", "image": "missing.png"},
        {"id": "d", "image": None},
        {"id": "e", "image": "truncated.jpg"},
    ]
    meta = hostile_folder / "meta.jsonl"
    meta.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "j.json"
    proc = run_check(str(meta), "--json", str(out))
    assert proc.returncode == 0, proc.stderr
    files = _read_report(out)["files"]
    assert [f["path"] for f in files] == ["good.png", "../outside.png", "missing.png", "d", "truncated.jpg"]
    assert [f["status"] for f in files] == ["ok", "error", "error", "error", "error"]
    assert "escapes the dataset root" in files[1]["reason"]
    assert "not found" in files[2]["reason"]
    assert "no image" in files[3]["reason"]

    import datasets

    feats = datasets.Features({"id": datasets.Value("string"), "image": datasets.Image()})
    datasets.Dataset.from_list(
        [
            {"id": "ok-1", "image": {"bytes": _encoded(_noise(9, 9), "PNG"), "path": None}},
            {"id": "bomb-1", "image": {"bytes": _bomb_png(10_000, 10_000), "path": None}},
            {"id": "junk-1", "image": {"bytes": b"GIF89a nonsense", "path": None}},
        ],
        features=feats,
    ).to_parquet(str(tmp_path / "bytes.parquet"))
    proc = run_check(str(tmp_path / "bytes.parquet"), "--json", str(out))
    assert proc.returncode == 0, proc.stderr
    report = _read_report(out)
    assert [(f["path"], f["status"]) for f in report["files"]] == [
        ("ok-1", "ok"),
        ("bomb-1", "error"),
        ("junk-1", "error"),
    ]
    assert "decompression bomb" in report["files"][1]["reason"]


def test_unreadable_source_is_a_clear_failure(tmp_path: Path) -> None:
    proc = run_check(str(tmp_path / "nope"), "--json", str(tmp_path / "x.json"))
    assert proc.returncode == 2
    assert "no such file or folder" in proc.stderr
    assert not (tmp_path / "x.json").exists()


def test_special_files_and_undecodable_names_never_crash_the_check(tmp_path: Path) -> None:
    """A FIFO (opening it would block forever), a zero-byte file, a folder named like an image, a
    dangling link, a newline and a non-UTF-8 byte in file names, a file chmod 000: every one is
    reported on its own line and the report is still written (a non-UTF-8 name used to abort it)."""
    root = tmp_path / "odd"
    root.mkdir()
    _noise(8, 8).save(root / "good.png")
    os.mkfifo(root / "fifo.jpg")
    (root / "zero.jpg").write_bytes(b"")
    (root / "folder.jpg").mkdir()
    os.symlink(root / "gone.png", root / "dangling.png")
    _noise(8, 8).save(root / "new\nline.png")
    bad_name = os.path.join(os.fsencode(root), b"bad\xffname.png")
    with open(bad_name, "wb") as fh:
        fh.write(_encoded(_noise(8, 8), "PNG"))
    _noise(8, 8).save(root / "locked.png")
    os.chmod(root / "locked.png", 0)
    out = tmp_path / "r.json"
    proc = run_check(str(root), "--json", str(out), "-q")
    assert proc.returncode == 0, proc.stderr
    by_path = {f["path"]: f for f in _read_report(out)["files"]}
    assert by_path["good.png"]["status"] == "ok" and by_path["new\nline.png"]["status"] == "ok"
    assert "not a regular file" in by_path["fifo.jpg"]["reason"]
    assert "empty file" in by_path["zero.jpg"]["reason"]
    assert "not found" in by_path["dangling.png"]["reason"]
    assert "not valid UTF-8" in by_path["bad\\xffname.png"]["reason"]
    assert "folder.jpg" not in by_path  # a directory is not a file of the folder
    # root reads anything; any other user gets a clear "cannot read file"
    assert by_path["locked.png"]["status"] == "ok" or "cannot read file" in by_path["locked.png"]["reason"]


def test_manifest_with_mixed_value_types_reports_the_bad_rows(hostile_folder: Path, tmp_path: Path) -> None:
    """`"image": 5` among path strings made Arrow refuse the whole JSONL (a traceback); now only
    those rows fail, each with its reason."""
    manifest = hostile_folder / "m.jsonl"
    rows = [{"id": "a", "image": "good.png"}, {"id": "b", "image": 5}, {"id": 7, "image": ["x.png"]}]
    manifest.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "r.json"
    proc = run_check(str(manifest), "--json", str(out), "-q")
    assert proc.returncode == 0, proc.stderr
    files = _read_report(out)["files"]
    assert [(f["path"], f["status"]) for f in files] == [("good.png", "ok"), ("b", "error"), ("7", "error")]
    assert "unsupported image source type int" in files[1]["reason"]


def test_report_path_that_is_a_folder_fails_before_the_check(hostile_folder: Path, tmp_path: Path) -> None:
    proc = run_check(str(hostile_folder), "--json", str(tmp_path), "-q")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "is a folder" in proc.stderr and not list(tmp_path.glob(".*"))
    proc = run_check(str(hostile_folder), "--json", str(tmp_path / "r.json"), "--max-pixels", "-1")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr  # 0 is "no limit"; below it is refused


def test_manifest_with_bom_and_crlf_is_read(hostile_folder: Path, tmp_path: Path) -> None:
    """A JSONL saved by a Windows editor (UTF-8 BOM, CRLF) was refused as 'not valid JSON' on line 1."""
    manifest = hostile_folder / "win.jsonl"
    manifest.write_bytes(b'\xef\xbb\xbf{"id": "a", "image": "good.png"}\r\n{"id": "b", "image": "random.jpg"}\r\n')
    out = tmp_path / "r.json"
    proc = run_check(str(manifest), "--json", str(out), "-q")
    assert proc.returncode == 0, proc.stderr
    assert [(f["path"], f["status"]) for f in _read_report(out)["files"]] == [("good.png", "ok"), ("random.jpg", "error")]


def test_a_folder_is_checked_without_datasets_or_pandas(tmp_path: Path) -> None:
    """Listing files needs no dataframe library: under load those imports cost seconds."""
    folder = tmp_path / "imgs"
    folder.mkdir()
    for i in range(3):
        _noise(20, 10, i).save(folder / f"{i}.png")
    code = ("import sys; from typer.testing import CliRunner; from vlrl.cli import app; "
            f"r = CliRunner().invoke(app, ['data', 'check', {str(folder)!r}, '--json', {str(tmp_path / 'r.json')!r}, '-q']); "
            "print(r.exit_code, sorted(m for m in ('datasets', 'pandas', 'pyarrow') if m in sys.modules))")
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert done.stdout.split(None, 1) == ["0", "[]\n"], done.stdout + done.stderr[-2000:]
    assert _read_report(tmp_path / "r.json")["ok"] == 3


def test_max_pixels_zero_means_no_limit_as_everywhere(tmp_path: Path) -> None:
    folder = tmp_path / "imgs"
    folder.mkdir()
    _noise(40, 30).save(folder / "a.png")
    res = run_check(str(folder), "--json", str(tmp_path / "r.json"), "--max-pixels", "100", "-q")
    assert _read_report(tmp_path / "r.json")["errors"] == 1, res.stderr
    res = run_check(str(folder), "--json", str(tmp_path / "r.json"), "--max-pixels", "0", "-q")
    assert res.returncode == 0, res.stderr
    assert _read_report(tmp_path / "r.json")["ok"] == 1
