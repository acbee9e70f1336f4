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


def arena(root: Path, spec: str) -> list[str]:
    caps = root / "candidate.jsonl"
    caps.write_text("".join(json.dumps({"image_id": f"img{i}.png", "caption": f"A {c} square."}) + "\n"
                            for i, c in enumerate(COLOURS)))
    return ["eval", "arena", "--candidate", f"cand={caps}", "--baseline", f"base={spec}", "--judge", spec,
            "--images", str(images(root)), "--out", str(root / "out"), *FAIL_FAST]


def cold_start(root: Path, spec: str) -> list[str]:
    imgs = images(root)
    rows = root / "math.jsonl"
    rows.write_text("".join(json.dumps({"id": f"q{i}", "image": str(imgs / f"img{i}.png"), "question": "What is 2+3?",
                                        "answer": "5"}) + "\n" for i in range(4)))
    return ["data", "cold-start", "--input", str(rows), "--vlm", spec, "--reasoner", spec, "--out", str(root / "out"),
            *FAIL_FAST]


def prism(root: Path, spec: str) -> list[str]:
    images(root)
    bench = root / "bench.jsonl"
    bench.write_text("".join(json.dumps({"id": f"q{i}", "benchmark": "colours", "image": f"imgs/img{i}.png",
                                         "question": "What colour is the square?", "options": list(COLOURS),
                                         "answer": "ABCD"[i]}) + "\n" for i in range(4)))
    return ["eval", "prism", "--captioner", spec, "--answerer", spec, "--bench", str(bench), "--out", str(root / "out"),
            *FAIL_FAST]


def reasoning(root: Path, spec: str) -> list[str]:
    imgs = images(root)
    bench = root / "reasoning.jsonl"
    bench.write_text("".join(json.dumps({"id": f"q{i}", "image": str(imgs / f"img{i}.png"), "question": "What is 2+3?",
                                         "answer": "5"}) + "\n" for i in range(4)))
    return ["eval", "reasoning", "--model", spec, "--bench", str(bench), "--out", str(root / "out"), "--max-tokens", "32"]


def reward_guard(root: Path, spec: str) -> list[str]:
    """``reward guard`` with its one backend: the opt-in ``llm_defense`` judge."""
    caps = root / "guard-captions.jsonl"
    caps.write_text("".join(json.dumps({"image_id": f"img{i}", "caption": f"A {c} square."}) + "\n"
                            for i, c in enumerate(COLOURS)))
    settings = {"enabled": ["llm_defense"], "llm_defense": {"judge": spec, "max_retries": 0}}
    (root / "out").mkdir(parents=True, exist_ok=True)
    return ["reward", "guard", "--input", str(caps), "--json", str(root / "out" / "guards.json"),
            "--settings", json.dumps(settings)]


def reward_smoke(root: Path, spec: str) -> list[str]:
    return ["reward", "smoke", "--qa", str(qa_rows(root)), "--captioner", spec, "--answerer", spec, "--mode", "sample",
            "--rounds", "1", "--questions-per-caption", "1", "--out", str(root / "out" / "smoke.json")]


COMMANDS: dict[str, Callable[[Path, str], list[str]]] = {
    "caption": caption,
    "teacher-captions": teacher_captions,
    "rubrics": rubrics,
    "qa-curate": qa_curate,
    "caption-qa": caption_qa,
    "reward-score": reward_score,
    "arena": arena,
    "cold-start": cold_start,
    "prism": prism,
    "reasoning": reasoning,
    "reward-smoke": reward_smoke,
    "reward-guard": reward_guard,
}


def run(argv: list[str], **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([VLRL, *argv], capture_output=True, text=True, env=child_env(**env), timeout=300)


# -- one server that answers every command's prompts -----------------------------------------------

RUBRIC = {
    "consensus_facts": [{"id": "f1", "fact": "a square", "sources": ["T1", "T2"]},
                        {"id": "f2", "fact": "its colour", "sources": ["T1", "T2", "T3"]}],
    "student_correct": [],
    "deficiencies": [{"id": "d1", "severity": "important", "description": "misses the colour", "facts": ["f2"],
                      "student_span": None}],
    "rubrics": [{"id": "x", "deficiency": "d1", "criterion": "States the colour of the square",
                 "pass_rule": "Pass if the colour is named; fail otherwise.", "weight": 5, "pitfall": False}],
    "student_meets_all": False,
}
SHAPES = ("square", "circle", "triangle", "star")


def _parts(body: dict) -> tuple[str, list[str]]:
    """The text of a chat request and the data URLs of its images."""
    text, urls = [], []
    for m in body.get("messages", []):
        c = m.get("content")
        for p in c if isinstance(c, list) else [{"type": "text", "text": c or ""}]:
            if p.get("type") == "text":
                text.append(p.get("text", ""))
            elif p.get("type") == "image_url":
                urls.append(p["image_url"]["url"])
    return "\n".join(text), urls


def colour_of(url: str) -> str:
    import base64
    import io

    im = Image.open(io.BytesIO(base64.b64decode(url.split(",", 1)[1]))).convert("RGB")
    px = im.getpixel((im.width // 2, im.height // 2))
    return min(RGB, key=lambda c: sum(abs(a - b) for a, b in zip(RGB[c], px, strict=True)))


def answer(body: dict) -> str:
    """What a competent model would say to each command's prompt (see the module docstring)."""
    import re

    text, urls = _parts(body)
    if "game the grader" in text:
        return json.dumps({"explanation": "a plain description", "gaming": False})
    if "grading rubrics" in text:
        return json.dumps(RUBRIC)
    if "multiple-choice questions about this image" in text:
        return ("Question 1: What shape is shown in the picture?\nA. square\nB. circle\nC. triangle\nD. star\n"
                "Answer: A\n")
    options = dict(re.findall(r"^\(?([A-D])[.)] (.+?)\s*$", text, re.M))
    if options:
        rest = re.sub(r"^\(?[A-D][.)] .*$", "", text, flags=re.M).lower()
        if urls and "square" in options.values():  # with the image: the right shape
            return next(k for k, v in options.items() if v == "square")
        for k, v in options.items():  # from a caption: the option the caption names
            if v.lower() in rest and v.lower() not in ("square",):
                return k
        return next((k for k, v in options.items() if v == "circle"), "A")  # a blind guess, wrong
    colour = colour_of(urls[0]) if urls else "red"
    return f"A {colour} square on a plain background."


def fails_on(colour: str):
    """A fault that answers 500 to every request about the ``colour`` image: by its pixels, or by
    a caption or teacher caption that names the colour."""

    def fault(body: dict, headers: dict) -> tuple[int, str] | None:
        text, urls = _parts(body)
        if any(colour_of(u) == colour for u in urls) or f"{colour} square" in text.lower():
            return 500, json.dumps({"error": {"message": f"injected failure for the {colour} image"}})
        return None

    return fault


def fails_all(body: dict, headers: dict) -> tuple[int, str]:
    return 500, json.dumps({"error": {"message": "injected failure"}})
