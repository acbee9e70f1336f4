"""The one image loader against real hostile and awkward files written by the tests themselves."""

from __future__ import annotations

import io
import os
import struct
import zlib
from pathlib import Path

import numpy as np
import pytest
from PIL import Image, ImageFile

from vlrl.core.images import (
    DEFAULT_MAX_PIXELS_LIMIT,
    ImageLoadError,
    check_images,
    iter_image_files,
    load_image,
    qwen_smart_resize,
    resolve_under_root,
)

# ---------------------------------------------------------------- file factories


def _noise(w: int, h: int, seed: int = 0) -> Image.Image:
    rng = np.random.default_rng(seed)
    return Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8))


def _png_chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)


def bomb_png(width: int, height: int) -> bytes:
    """A valid PNG header declaring ``width × height`` 8-bit gray pixels, with a few hundred bytes of data."""
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    idat = zlib.compress(b"\x00" * 4096, 9)
    return b"\x89PNG\r\n\x1a\n" + _png_chunk(b"IHDR", ihdr) + _png_chunk(b"IDAT", idat) + _png_chunk(b"IEND", b"")


def truncated(path: Path, fraction: float = 0.6) -> Path:
    data = path.read_bytes()
    out = path.with_name("truncated_" + path.name)
    out.write_bytes(data[: int(len(data) * fraction)])
    return out


def _assert_refused(exc: pytest.ExceptionInfo[ImageLoadError], record: str, *words: str) -> None:
    err = exc.value
    assert isinstance(err, ValueError)
    assert err.record == record
    assert str(err).startswith(f"{record}: ")
    assert "\n" not in str(err)
    for w in words:
        assert w in err.reason.lower(), err.reason


# ---------------------------------------------------------------- refusals


@pytest.mark.parametrize("fmt", ["PNG", "JPEG"])
def test_truncated_file_is_refused(tmp_path: Path, fmt: str) -> None:
    assert not ImageFile.LOAD_TRUNCATED_IMAGES
    good = tmp_path / f"noise.{fmt.lower()}"
    _noise(96, 96).save(good, fmt)
    assert load_image(good).size == (96, 96)  # the intact file loads
    bad = truncated(good)
    # Opening only reads the header, so without a forced decode this would "succeed".
    assert Image.open(bad).size == (96, 96)
    with pytest.raises(ImageLoadError) as exc:
        load_image(bad)
    _assert_refused(exc, str(bad), "truncated")


def test_random_bytes_with_jpg_extension(tmp_path: Path) -> None:
    p = tmp_path / "photo.jpg"
    p.write_bytes(np.random.default_rng(1).bytes(5000))
    with pytest.raises(ImageLoadError) as exc:
        load_image(p, record="photo-1")
    _assert_refused(exc, "photo-1", "not an image")


def test_empty_and_html_files(tmp_path: Path) -> None:
    (tmp_path / "empty.png").write_bytes(b"")
    (tmp_path / "page.jpg").write_text("<html><body>403 Forbidden</body></html>")
    with pytest.raises(ImageLoadError, match=r"empty file \(0 bytes\)"):
        load_image(tmp_path / "empty.png")
    with pytest.raises(ImageLoadError, match="not an image"):
        load_image(tmp_path / "page.jpg")


def test_missing_file_and_directory(tmp_path: Path) -> None:
    with pytest.raises(ImageLoadError) as exc:
        load_image("nope.png", root=tmp_path)
    _assert_refused(exc, "nope.png", "not found")
    (tmp_path / "dir.png").mkdir()
    with pytest.raises(ImageLoadError, match="not a regular file"):
        load_image("dir.png", root=tmp_path)


def test_decompression_bomb_refused_before_decoding(tmp_path: Path) -> None:
    # 10000 x 10000 = 1e8 pixels: above our default limit but below PIL's own hard ceiling, so only
    # our check (on the declared size, before decoding) can refuse it. Decoding the few hundred
    # bytes of IDAT would fail as "truncated" instead, so the reason proves the order.
    p = tmp_path / "bomb.png"
    p.write_bytes(bomb_png(10_000, 10_000))
    assert p.stat().st_size < 1000
    assert DEFAULT_MAX_PIXELS_LIMIT < 10_000 * 10_000
    with pytest.raises(ImageLoadError) as exc:
        load_image(p)
    _assert_refused(exc, str(p), "decompression bomb", "10000x10000")
    # Beyond PIL's hard ceiling PIL refuses at open(); still our error type and wording.
    huge = tmp_path / "huge.png"
    huge.write_bytes(bomb_png(100_000, 100_000))
    with pytest.raises(ImageLoadError, match="decompression bomb"):
        load_image(huge)
    assert Image.MAX_IMAGE_PIXELS == DEFAULT_MAX_PIXELS_LIMIT  # the global was never touched


def test_pixel_limit_is_configurable(tmp_path: Path) -> None:
    p = tmp_path / "a.png"
    _noise(120, 100).save(p)
    with pytest.raises(ImageLoadError, match="12000 pixels exceeds the limit of 11999"):
        load_image(p, max_pixels_limit=11_999)
    assert load_image(p, max_pixels_limit=12_000).size == (120, 100)
    with pytest.raises(ImageLoadError, match="decompression bomb"):
        load_image(p.read_bytes(), max_pixels_limit=100)  # bytes are checked the same way
    # Without our limit the moderate bomb reaches the decoder, which finds its data missing.
    bomb = tmp_path / "bomb.png"
    bomb.write_bytes(bomb_png(10_000, 10_000))
    with pytest.raises(ImageLoadError, match="truncated|corrupt"):
        load_image(bomb, max_pixels_limit=None)


def test_symlink_escaping_the_root(tmp_path: Path) -> None:
    root, outside = tmp_path / "root", tmp_path / "outside"
    root.mkdir()
    outside.mkdir()
    _noise(8, 8).save(outside / "secret.png")
    _noise(8, 8).save(root / "inside.png")
    os.symlink(outside / "secret.png", root / "link.png")
    os.symlink(root / "inside.png", root / "alias.png")
    with pytest.raises(ImageLoadError) as exc:
        load_image("link.png", root=root)
    _assert_refused(exc, "link.png", "escapes the dataset root")
    with pytest.raises(ImageLoadError, match="escapes"):
        load_image(root / "link.png", root=root)  # absolute path through the link
    assert load_image("alias.png", root=root).size == (8, 8)  # a link that stays inside is fine
    assert load_image(root / "link.png").size == (8, 8)  # no root given: no containment


def test_dotdot_path_escaping_the_root(tmp_path: Path) -> None:
    root = tmp_path / "data"
    (root / "sub").mkdir(parents=True)
    _noise(8, 8).save(tmp_path / "outside.png")
    _noise(8, 8).save(root / "sub" / "ok.png")
    for bad in ("../outside.png", "sub/../../outside.png", str(tmp_path / "outside.png")):
        with pytest.raises(ImageLoadError) as exc:
            load_image(bad, root=root)
        _assert_refused(exc, bad, "escapes the dataset root")
    assert load_image("sub/../sub/ok.png", root=root).size == (8, 8)
    # The root is resolved too, so a root given through a symlink still contains its own files.
    os.symlink(root, tmp_path / "data_link")
    assert resolve_under_root("sub/ok.png", tmp_path / "data_link") == (root / "sub" / "ok.png").resolve()


# ---------------------------------------------------------------- conversions


def test_cmyk_jpeg_becomes_rgb(tmp_path: Path) -> None:
    p = tmp_path / "cmyk.jpg"
    Image.new("CMYK", (16, 16), (0, 255, 255, 0)).save(p, quality=95)  # pure red ink
    assert Image.open(p).mode == "CMYK"
    img = load_image(p)
    assert img.mode == "RGB"
    r, g, b = img.getpixel((8, 8))
    assert r > 230 and g < 30 and b < 30


def test_palette_png_with_transparency_goes_on_white(tmp_path: Path) -> None:
    p = tmp_path / "pal.png"
    img = Image.new("P", (4, 2))
    img.putpalette([0, 0, 0, 0, 0, 255] + [0] * 762)  # index 0 black (transparent), 1 blue
    img.putdata([0, 1] * 4)
    img.save(p, transparency=0)
    assert Image.open(p).mode == "P" and "transparency" in Image.open(p).info
    out = load_image(p)
    assert out.mode == "RGB"
    assert out.getpixel((0, 0)) == (255, 255, 255)  # transparent black → white, not black
    assert out.getpixel((1, 0)) == (0, 0, 255)


def test_rgba_and_la_composited_on_white(tmp_path: Path) -> None:
    rgba = Image.new("RGBA", (3, 1))
    rgba.putdata([(255, 0, 0, 255), (255, 0, 0, 0), (0, 0, 0, 128)])
    rgba.save(tmp_path / "rgba.png")
    out = load_image(tmp_path / "rgba.png")
    assert out.mode == "RGB"
    assert out.getpixel((0, 0)) == (255, 0, 0)
    assert out.getpixel((1, 0)) == (255, 255, 255)
    assert all(abs(c - 127) <= 1 for c in out.getpixel((2, 0)))  # half-transparent black → mid gray
    la = Image.new("LA", (2, 1))
    la.putdata([(0, 0), (0, 255)])
    la.save(tmp_path / "la.png")
    out = load_image(tmp_path / "la.png")
    assert out.getpixel((0, 0)) == (255, 255, 255) and out.getpixel((1, 0)) == (0, 0, 0)


def test_16bit_png_is_scaled_not_clipped(tmp_path: Path) -> None:
    arr = np.full((4, 4), 65535, dtype=np.uint16)
    arr[0, 0] = 0
    arr[1, 1] = 128 * 257
    arr[2, 2] = 1000  # a dark pixel: clipping would make it white (1000 > 255)
    p = tmp_path / "deep.png"
    Image.fromarray(arr).save(p)
    assert Image.open(p).mode.startswith("I")
    out = load_image(p)
    assert out.mode == "RGB"
    assert out.getpixel((0, 0)) == (0, 0, 0)
    assert out.getpixel((1, 1)) == (128, 128, 128)
    assert out.getpixel((2, 2)) == (4, 4, 4)
    assert out.getpixel((3, 3)) == (255, 255, 255)
    # Mode "I" (32-bit int) holding 16-bit values is scaled the same way.
    out = load_image(Image.fromarray(arr.astype(np.int32)))
    assert out.getpixel((1, 1)) == (128, 128, 128)


@pytest.mark.parametrize("mode", ["L", "1"])
def test_grayscale_and_bilevel(tmp_path: Path, mode: str) -> None:
    img = Image.new(mode, (5, 5), 0)
    img.putpixel((2, 2), 255 if mode == "L" else 1)
    p = tmp_path / f"{mode}.png"
    img.save(p)
    out = load_image(p)
    assert out.mode == "RGB"
    assert out.getpixel((0, 0)) == (0, 0, 0)
    assert out.getpixel((2, 2)) == (255, 255, 255)


def test_exif_rotated_jpeg_swaps_size(tmp_path: Path) -> None:
    img = Image.new("RGB", (40, 20), (255, 0, 0))
    img.paste((0, 0, 255), (0, 0, 10, 20))  # blue band on the left
    exif = Image.Exif()
    exif[0x0112] = 6  # stored sideways: display after rotating 90° clockwise
    p = tmp_path / "phone.jpg"
    img.save(p, exif=exif.tobytes(), quality=95)
    assert Image.open(p).size == (40, 20)
    out = load_image(p)
    assert out.size == (20, 40)
    r, g, b = out.getpixel((10, 3))  # the left band is now on top
    assert b > 200 and r < 60
    assert load_image(p.read_bytes()).size == (20, 40)  # same from bytes


# ---------------------------------------------------------------- sources and the pixel budget


def test_sources_bytes_pil_and_hf_feature_dict(tmp_path: Path) -> None:
    buf = io.BytesIO()
    _noise(10, 6).save(buf, "PNG")
    data = buf.getvalue()
    (tmp_path / "a.png").write_bytes(data)
    assert load_image(data).size == (10, 6)
    assert load_image(Image.open(io.BytesIO(data))).mode == "RGB"
    assert load_image({"bytes": data, "path": "ignored.png"}).size == (10, 6)
    assert load_image({"bytes": None, "path": "a.png"}, root=tmp_path).size == (10, 6)
    with pytest.raises(ImageLoadError) as exc:
        load_image({"bytes": None, "path": "../a.png"}, root=tmp_path / "x")
    _assert_refused(exc, "../a.png", "escapes")
    with pytest.raises(ImageLoadError, match="neither bytes nor path"):
        load_image({"bytes": None, "path": None}, record="row 3")
    with pytest.raises(ImageLoadError, match="unsupported image source type"):
        load_image(42, record="row 4")


def test_pixel_budget_uses_qwen_smart_resize(tmp_path: Path) -> None:
    from qwen_vl_utils import smart_resize

    p = tmp_path / "wide.png"
    _noise(1000, 500).save(p)
    budget = 200 * 28 * 28
    out = load_image(p, max_pixels=budget)
    assert (out.height, out.width) == smart_resize(500, 1000, factor=28, max_pixels=budget)
    assert out.width % 28 == 0 and out.height % 28 == 0
    assert out.width * out.height <= budget
    assert out.width > out.height  # aspect ratio kept

    small = load_image(_noise(30, 20), min_pixels=64 * 28 * 28, max_pixels=budget)
    assert small.width * small.height >= 64 * 28 * 28
    assert small.width % 28 == 0 and small.height % 28 == 0
    assert load_image(p).size == (1000, 500)  # no budget, no resize

    with pytest.raises(ImageLoadError, match="aspect ratio"):
        load_image(_noise(1000, 2), max_pixels=budget, record="strip")
    with pytest.raises(ValueError, match="max_pixels"):
        load_image(p, min_pixels=1000, max_pixels=10)


def test_fallback_resize_rules_match_qwen_vl_utils(monkeypatch: pytest.MonkeyPatch) -> None:
    from qwen_vl_utils import smart_resize

    import vlrl.core.images

    cases = [
        (500, 1000, None, 200 * 784),
        (20, 30, 64 * 784, None),
        (1080, 1920, 256 * 784, 1280 * 784),
        (7, 9, None, None),
    ]
    expected = [smart_resize(h, w, factor=28, min_pixels=lo, max_pixels=hi) for h, w, lo, hi in cases]
    monkeypatch.setattr(vlrl.core.images, "_qwen_smart_resize_fn", lambda: None)
    got = [qwen_smart_resize(h, w, factor=28, min_pixels=lo, max_pixels=hi) for h, w, lo, hi in cases]
    assert got == expected


def test_iter_image_files_sorted_recursive_relative(tmp_path: Path) -> None:
    for rel in ("b.png", "a/z.JPG", "a/b/c.webp", "notes.txt", ".hidden.png", ".cache/x.png", "a/._y.jpg"):
        f = tmp_path / rel
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_bytes(b"")
    assert list(iter_image_files(tmp_path)) == ["a/b/c.webp", "a/z.JPG", "b.png"]
    assert list(iter_image_files(tmp_path, extensions=["png"])) == ["b.png"]
    assert ".hidden.png" in list(iter_image_files(tmp_path, include_hidden=True))


def test_check_images_never_raises(tmp_path: Path) -> None:
    _noise(8, 8).save(tmp_path / "good.png")
    (tmp_path / "bad.jpg").write_bytes(b"\xff\xd8\xff garbage")
    items = [("good.png", "good.png"), ("bad.jpg", "bad.jpg"), ("gone.png", "gone.png"), ("weird", object())]
    report = check_images(items, root=tmp_path, progress=False)
    assert report["ok"] == 1 and report["errors"] == 3
    assert [f["status"] for f in report["files"]] == ["ok", "error", "error", "error"]
    assert report["files"][0]["reason"] is None
    assert all(isinstance(f["reason"], str) and f["reason"] for f in report["files"][1:])


@pytest.mark.parametrize("fallback", [False, True])
def test_one_sided_budget_below_or_above_qwen_defaults(monkeypatch: pytest.MonkeyPatch, fallback: bool) -> None:
    """max_pixels alone below qwen-vl-utils' default min (4*28*28) used to trip its assert (a crash,
    not an ImageLoadError); min_pixels alone above its default max likewise. Both are valid budgets."""
    import vlrl.core.images

    if fallback:
        monkeypatch.setattr(vlrl.core.images, "_qwen_smart_resize_fn", lambda: None)
    tiny = load_image(_noise(300, 200), max_pixels=28 * 28)
    assert tiny.size == (28, 28)
    assert qwen_smart_resize(200, 300, max_pixels=2 * 28 * 28) == (28, 28)  # never a 0-pixel side
    assert qwen_smart_resize(2000, 3000, max_pixels=6 * 28 * 28) == (56, 84)
    h, w = qwen_smart_resize(28, 28, min_pixels=20000 * 28 * 28)
    assert h * w >= 20000 * 28 * 28 and h % 28 == 0 and w % 28 == 0


def test_postscript_disguised_as_jpeg_is_refused_before_ghostscript(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """PIL decodes EPS by running Ghostscript on the file; a hostile `.jpg` holding PostScript must
    be refused without ever reaching an interpreter (here: one that would record being called)."""
    from PIL import EpsImagePlugin

    calls = []
    monkeypatch.setattr(EpsImagePlugin, "Ghostscript", lambda *a, **k: calls.append(a) or None)
    p = tmp_path / "photo.jpg"
    p.write_bytes(b"%!PS-Adobe-3.0 EPSF-3.0\n%%BoundingBox: 0 0 10 10\nnewpath 0 0 moveto 10 10 lineto stroke\n%%EOF\n")
    with pytest.raises(ImageLoadError, match="PostScript") as exc:
        load_image(p, record="photo.jpg")
    _assert_refused(exc, "photo.jpg", "refused")
    assert calls == []


def test_an_extreme_aspect_ratio_is_the_images_problem_not_the_backends(tmp_path):
    """A 1000×2 image passed the loader and failed inside `hf:` on every request: a backend failure,
    retried on every run, exit 1, and 32 in a row tripped the breaker (finding 10 of #24)."""
    import json
    import subprocess
    import sys

    from tests.support.fake_openai import FakeOpenAI
    from tests.support.jobs import child_env
    from vlrl.core.images import ImageLoadError, load_image

    Image.new("RGB", (1000, 2), "red").save(tmp_path / "thin.png")
    with pytest.raises(ImageLoadError, match="aspect ratio 500:1 is over 200:1"):
        load_image(tmp_path / "thin.png")
    Image.new("RGB", (400, 2), "red").save(tmp_path / "ok.png")  # 200:1 exactly is fine
    assert load_image(tmp_path / "ok.png").size == (400, 2)
    vlrl = str(Path(sys.executable).parent / "vlrl")
    with FakeOpenAI() as srv:
        res = subprocess.run([vlrl, "caption", "--images", str(tmp_path), "--model", srv.spec(), "--out",
                              str(tmp_path / "out"), "--no-progress"], capture_output=True, text=True, env=child_env(),
                             timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]  # quarantined with its reason, not failed
    (q,) = [json.loads(x) for x in (tmp_path / "out" / "quarantine.jsonl").read_text().splitlines()]
    assert q["image_id"] == "thin.png" and "aspect ratio" in q["reason"]
