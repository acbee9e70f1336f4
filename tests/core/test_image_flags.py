"""The image-size flags on every command that opens images (issue 14, "Images").

``--max-image-pixels`` (decompression-bomb limit) and ``--resize-max-pixels`` (Qwen resize budget)
mean the same on every command. A legitimate 12000×12000 scan is refused by default with one line
naming the flag, and captioned once the limit is raised explicitly: checked through the real CLI
on ``vlrl caption``, RubiCap's ``data teacher-captions`` and CapRL's ``eval prism``, against a real
OpenAI-compatible HTTP server on 127.0.0.1 (tests/support/fake_openai.py), so the image really is decoded,
resized and sent.
"""

from __future__ import annotations

import json
import re

import pytest
from PIL import Image
from typer.testing import CliRunner

from tests.support.fake_openai import FakeOpenAI
from vlrl.cli import app
from vlrl.core.images import DEFAULT_MAX_PIXELS_LIMIT, ImageLoadError, image_limits, load_image

SIDE = 12_000  # 144 M pixels: above PIL's default limit (89 M), below its hard ceiling (179 M)
RAISED = "200000000"
BUDGET = "50176"  # 224×224: the scan is shrunk before it is sent


@pytest.fixture(scope="module")
def scan_folder(tmp_path_factory):
    """A folder holding a small photo and a 12000×12000 solid grey scan (a ~140 KB PNG; 144 MB when decoded)."""
    root = tmp_path_factory.mktemp("scans")
    Image.new("L", (SIDE, SIDE), 128).save(root / "scan.png", compress_level=1)
    Image.new("RGB", (64, 48), (200, 30, 30)).save(root / "small.png")
    return root


@pytest.fixture
def server():
    with FakeOpenAI() as s:
        yield s


def _one_line_naming_the_flag(reason: str) -> None:
    assert "\n" not in reason and "--max-image-pixels" in reason and f"{SIDE}x{SIDE}" in reason, reason


def test_a_huge_scan_is_refused_by_default_with_one_line_naming_the_flag(scan_folder):
    with pytest.raises(ImageLoadError) as e:  # refused from the header: nothing is decoded
        load_image(scan_folder / "scan.png")
    _one_line_naming_the_flag(e.value.reason)


@pytest.mark.slow  # decodes 144 M pixels
def test_image_limits_reach_load_image_and_are_restored(scan_folder):
    with image_limits(int(RAISED), resize_max_pixels=int(BUDGET)):
        img = load_image(scan_folder / "scan.png")
        assert img.width * img.height <= int(BUDGET) and img.width == img.height
    with pytest.raises(ImageLoadError):  # restored after the block
        load_image(scan_folder / "scan.png")
    with image_limits(0):  # 0: no limit
        assert load_image(scan_folder / "small.png").size == (64, 48)
    assert Image.MAX_IMAGE_PIXELS == DEFAULT_MAX_PIXELS_LIMIT


def _caption_rows(out):
    return [json.loads(x) for p in sorted((out / "captions").glob("*.jsonl")) for x in p.read_text().splitlines()]


@pytest.mark.slow  # decodes 144 M pixels
def test_caption_refuses_a_huge_scan_by_default_and_captions_it_when_the_limit_is_raised(scan_folder, server, tmp_path):
    base = ["caption", "--images", str(scan_folder), "--model", server.spec(), "--no-progress", "--resize-max-pixels", BUDGET]
    res = CliRunner().invoke(app, [*base, "--out", str(tmp_path / "a")])
    assert res.exit_code == 0, res.output
    q = [json.loads(x) for x in (tmp_path / "a" / "quarantine.jsonl").read_text().splitlines()]
    assert [r["image_id"] for r in q] == ["scan.png"]
    _one_line_naming_the_flag(q[0]["reason"])
    assert [r["image_id"] for r in _caption_rows(tmp_path / "a")] == ["small.png"]

    # the same folder, limit raised: the quarantined scan is retried and captioned
    res = CliRunner().invoke(app, [*base, "--out", str(tmp_path / "a"), "--max-image-pixels", RAISED,
                                   "--retry-quarantined"])
    assert res.exit_code == 0, res.output
    rows = {r["image_id"]: r for r in _caption_rows(tmp_path / "a")}
    assert set(rows) == {"small.png", "scan.png"} and rows["scan.png"]["caption"].startswith("a caption")


@pytest.mark.slow  # decodes 144 M pixels
def test_teacher_captions_refuses_then_accepts_with_the_flag(scan_folder, server, tmp_path):
    base = ["data", "teacher-captions", "--images", str(scan_folder), "--teacher", f"t={server.spec()}", "--min-words", "1"]
    res = CliRunner().invoke(app, [*base, "--out", str(tmp_path / "a")])
    failures = [json.loads(x) for x in (tmp_path / "a" / "failures.jsonl").read_text().splitlines()]
    scan_failures = [f for f in failures if "scan.png" in json.dumps(f)]
    assert len(scan_failures) == 1, (res.output, failures)
    _one_line_naming_the_flag(re.sub(r"\s+", " ", json.dumps(scan_failures[0])))

    res = CliRunner().invoke(app, [*base, "--out", str(tmp_path / "b"), "--max-image-pixels", RAISED, "--resize-max-pixels", BUDGET])
    assert res.exit_code == 0, res.output
    assert not (tmp_path / "b" / "failures.jsonl").exists() or not (tmp_path / "b" / "failures.jsonl").read_text().strip()
    rows = [json.loads(x) for x in (tmp_path / "b" / "teacher_captions.jsonl").read_text().splitlines()]
    assert len(rows) == 2 and all(r["teacher_captions"] for r in rows)


@pytest.mark.slow  # decodes 144 M pixels
def test_prism_refuses_then_accepts_with_the_flag(scan_folder, server, tmp_path):
    bench = scan_folder / "bench.jsonl"
    bench.write_text(json.dumps({"id": "q1", "image": "scan.png", "question": "What colour is it?", "answer": "grey"}) + "\n")
    base = ["eval", "prism", "--captioner", server.spec(), "--answerer", server.spec(), "--bench", str(bench), "--quiet"]
    CliRunner().invoke(app, [*base, "--out", str(tmp_path / "a")])
    caps = [json.loads(x) for x in (tmp_path / "a" / "captions.jsonl").read_text().splitlines()]
    assert len(caps) == 1 and caps[0]["caption"] is None
    _one_line_naming_the_flag(caps[0]["error"])

    CliRunner().invoke(app, [*base, "--out", str(tmp_path / "b"), "--max-image-pixels", RAISED, "--resize-max-pixels", BUDGET])
    caps = [json.loads(x) for x in (tmp_path / "b" / "captions.jsonl").read_text().splitlines()]
    assert len(caps) == 1 and caps[0]["caption"] and caps[0]["error"] is None


@pytest.mark.parametrize("command", [
    ["caption"], ["data", "qa-curate"], ["data", "teacher-captions"], ["data", "rubrics"], ["data", "cold-start"],
    ["eval", "arena"], ["eval", "caption-qa"], ["eval", "prism"], ["eval", "reasoning"], ["reward", "smoke"],
])
def test_every_image_command_has_both_flags_with_one_meaning(command):
    res = CliRunner().invoke(app, [*command, "--help"], terminal_width=400, env={"COLUMNS": "400"})
    assert res.exit_code == 0
    text = " ".join(res.output.split())
    assert "--max-image-pixels" in text and "Decompression-bomb limit: refuse images declaring more pixels" in text
    assert "--resize-max-pixels" in text and "Qwen resize budget: images are resized to at most this many pixels" in text
