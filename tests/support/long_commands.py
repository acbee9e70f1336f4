"""Every long command, ready to run against one OpenAI-compatible server: inputs on disk and argv.

The redaction canary and the exit-code table tests drive the same commands the same way, so a
command added here is checked by both. Each builder writes what the command reads under ``root``
and returns the argv after ``vlrl`` (the model specs all point at ``spec``); the command's
outputs go to ``root / "out"``.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from PIL import Image

from tests.support.jobs import child_env

VLRL = str(Path(sys.executable).parent / "vlrl")
COLOURS = ("red", "green", "blue", "yellow")
RGB = {"red": (220, 20, 20), "green": (20, 200, 20), "blue": (20, 20, 220), "yellow": (230, 230, 20)}
FAIL_FAST = ["--max-consecutive-failures", "0"]  # every record pays its failure: the counts are exact


def images(root: Path, n: int = 4) -> Path:
    d = root / "imgs"
    d.mkdir(parents=True, exist_ok=True)
    for i in range(n):
        c = COLOURS[i % len(COLOURS)]
        im = Image.new("RGB", (16, 16), RGB[c])
        im.putpixel((0, 0), (i, i, i))  # distinct pixels: no two images share a cache entry
        im.save(d / f"img{i}.png")
    return d


def caption(root: Path, spec: str) -> list[str]:
    return ["caption", "--images", str(images(root)), "--model", spec, "--out", str(root / "out"), "--no-progress",
            *FAIL_FAST]


def teacher_captions(root: Path, spec: str) -> list[str]:
    return ["data", "teacher-captions", "--images", str(images(root)), "--teacher", f"t={spec}",
            "--out", str(root / "out"), "--min-words", "1", *FAIL_FAST]


def rubrics(root: Path, spec: str) -> list[str]:
    d = root / "teachers"
    d.mkdir(parents=True, exist_ok=True)
    imgs = images(root)
    with open(d / "teacher_captions.jsonl", "w") as fh:
        for i, c in enumerate(COLOURS):
            caps = {n: f"a {c} square ({n} view {i})" for n in ("a", "b", "c")}
            fh.write(json.dumps({"image_id": f"img{i}", "image": str(imgs / f"img{i}.png"), "teacher_captions": caps,
                                 "missing": {}}) + "\n")
    return ["data", "rubrics", "--teachers", str(d), "--student", spec, "--writer", spec, "--out", str(root / "out"),
            "--max-retries", "0", *FAIL_FAST]


def qa_curate(root: Path, spec: str) -> list[str]:
    return ["data", "qa-curate", "--images", str(images(root)), "--vlm", spec, "--answerer", spec,
            "--out", str(root / "out"), "--per-image", "1", "--rounds", "1", "--max-attempts", "1", "--quiet", *FAIL_FAST]


def qa_rows(root: Path) -> Path:
    imgs = images(root)
    path = root / "qa.jsonl"
    with open(path, "w") as fh:
        for i, c in enumerate(COLOURS):
            q = {"question": "What colour is the square?", "options": list(COLOURS), "answer": "ABCD"[i]}
            fh.write(json.dumps({"id": f"img{i}", "image_id": f"img{i}", "image": str(imgs / f"img{i}.png"),
                                 "questions": [q], "completion": f"A {c} square."}) + "\n")
    return path


def caption_qa(root: Path, spec: str) -> list[str]:
    qa = qa_rows(root)
    caps = root / "caps.jsonl"
    caps.write_text("".join(json.dumps({"image_id": f"img{i}", "caption": f"A {c} square."}) + "\n"
                            for i, c in enumerate(COLOURS)))
    return ["eval", "caption-qa", "--qa", str(qa), "--answerer", spec, "--captions", str(caps), "--out",
            str(root / "out"), "--budgets", "50", "--set", "rounds=1", "--set", "mode=sample", *FAIL_FAST]


def reward_score(root: Path, spec: str) -> list[str]:
    out = root / "out"
    out.mkdir(parents=True, exist_ok=True)
    return ["reward", "score", "--reward", "caprl_qa", "--input", str(qa_rows(root)), "--answerer", spec,
            "-s", "rounds=1", "-s", "mode=sample", "--out", str(out / "scored.jsonl")]


COMMANDS: dict[str, Callable[[Path, str], list[str]]] = {
    "caption": caption,
    "teacher-captions": teacher_captions,
    "rubrics": rubrics,
    "qa-curate": qa_curate,
    "caption-qa": caption_qa,
    "reward-score": reward_score,
}


def run(argv: list[str], **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([VLRL, *argv], capture_output=True, text=True, env=child_env(**env), timeout=300)
