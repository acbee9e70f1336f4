"""The notebooks' inputs, produced by the real commands once per test session.

``notebook_results`` runs ``vlrl eval prism`` (two captioners), ``vlrl eval arena`` and
``vlrl eval caption-qa`` against one OpenAI-compatible server on 127.0.0.1 whose answers follow
the request the way a model's would: a captioner names the colour of the shape it is shown (the
``caprl`` one does, the ``base`` one does not), a text-only reader picks the option its description
supports, a judge prefers the caption that names the colour. ``notebook_run`` is a tiny
``vlrl train grpo`` run from ``train/recipes/tiny/``. Each writes into a session folder the notebooks
read through their ``VLRL_NB_*`` variables, so the notebooks are tested on what the commands
really write, never on hand-written files.

Import the fixtures into a test module with ``from tests.support.notebook_runs import notebook_results``.
"""

from __future__ import annotations

import base64
import io
import json
import re
import shutil
from pathlib import Path

import pytest
from PIL import Image

from tests.support.fake_openai import FakeOpenAI
from tests.support.paths import FIXTURES, ROOT

IMAGES = FIXTURES / "notebooks" / "images"
COLOURS = {"red": (220, 40, 40), "green": (40, 180, 60), "blue": (40, 60, 220), "yellow": (230, 210, 40)}


def _texts_and_image(body: dict) -> tuple[str, str | None]:
    """The request's text, and the colour name of the shape in its image (None: text only)."""
    texts, colour = [], None
    for m in body.get("messages", []):
        content = m.get("content")
        for part in content if isinstance(content, list) else [{"type": "text", "text": content or ""}]:
            if part.get("type") == "text":
                texts.append(part.get("text", ""))
            elif part.get("type") == "image_url":
                raw = base64.b64decode(part["image_url"]["url"].split(",", 1)[1])
                with Image.open(io.BytesIO(raw)) as im:
                    px = im.convert("RGB").getpixel((im.width // 2, im.height // 2))
                colour = min(COLOURS, key=lambda c: sum((a - b) ** 2 for a, b in zip(COLOURS[c], px, strict=True)))
    return "\n".join(texts), colour


def reply(body: dict) -> str:
    text, colour = _texts_and_image(body)
    if colour is not None and '"winner"' in text:  # the arena judge: the caption naming the colour wins
        a, b = (json.loads(x) for x in re.findall(r'^(".*")$', text, re.M)[-2:])
        a_ok, b_ok = colour in a.lower(), colour in b.lower()
        winner = "A" if a_ok and not b_ok else "B" if b_ok and not a_ok else "tie"
        return json.dumps({"reason": "names the colour" if winner != "tie" else "equally good", "winner": winner})
    if colour is not None:  # a captioner
        if body.get("model") == "caprl":
            return f"A flat {colour} square centred on a plain white background, with no text or other objects."
        return "A simple shape on a plain background."
    desc = text.split("<description>")[-1].split("</description>")[0].lower() if "<description>" in text else ""
    options = re.findall(r"^([A-Z])\. (.*)$", text, re.M)
    if options:  # a text-only reader: the option the description supports, else "cannot answer"
        pick = next((letter for letter, o in options if o.lower() in desc.split()), None)
        pick = pick or next((letter for letter, o in options if o.lower().startswith("cannot")), options[0][0])
        return f" {pick}."
    return next((c for c in COLOURS if c in desc), "unknown")


def _spec(server: FakeOpenAI, model: str) -> str:
    return f"openai:{server.base_url}@{model}?max_retries=0&timeout=30"


def _run(args: list[str]) -> None:
    from typer.testing import CliRunner

    from vlrl.cli import app

    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, f"vlrl {' '.join(args[:2])}: {res.output}"


@pytest.fixture(scope="session")
def notebook_results(tmp_path_factory) -> Path:
    """A folder with the real ``--out`` folders of two Prism runs, an arena and a caption-QA run."""
    work = tmp_path_factory.mktemp("nb_inputs")
    images = sorted(IMAGES.glob("*.png"))
    bench, qa = [], []
    for p in images:
        options = [c for c in COLOURS if c != p.stem][:2] + [p.stem]
        bench.append({"id": f"{p.stem}-mc", "benchmark": "colours", "image": p.name, "question": "What colour is the shape?",
                      "options": options, "answer": "C"})
        bench.append({"id": f"{p.stem}-name", "benchmark": "names", "image": p.name, "question": "Name the colour of the shape.",
                      "answer": p.stem})
        shutil.copy(p, work / p.name)  # a QA dataset names its images relative to itself
        qa.append({"id": p.stem, "image": p.name, "questions": [{"question": "What colour is the shape?", "options": options, "answer": "C"}]})
    (work / "bench.jsonl").write_text("".join(json.dumps(r) + "\n" for r in bench))
    (work / "qa.jsonl").write_text("".join(json.dumps(r) + "\n" for r in qa))
    assert images, IMAGES

    results = tmp_path_factory.mktemp("nb_results")
    with FakeOpenAI(model="reader", reply=reply, also=("base", "caprl", "judge")) as server:
        for label in ("base", "caprl"):
            _run(["eval", "prism", "--captioner", _spec(server, label), "--answerer", _spec(server, "reader"),
                  "--bench", str(work / "bench.jsonl"), "--out", str(results / f"prism_{label}"), "--quiet"])
        _run(["eval", "arena", "--candidate", f"caprl={_spec(server, 'caprl')}", "--baseline", f"base={_spec(server, 'base')}",
              "--judge", _spec(server, "judge"), "--images", str(IMAGES), "--out", str(results / "arena")])
        _run(["eval", "caption-qa", "--qa", str(work / "qa.jsonl"), "--answerer", _spec(server, "reader"),
              "--captioner", f"base={_spec(server, 'base')}", "--captioner", f"caprl={_spec(server, 'caprl')}",
              "--budgets", "3,50", "--out", str(results / "caption_qa"),
              "--set", "mode=sample", "--set", "rounds=1", "--set", "questions_per_caption=1"])
    return results


@pytest.fixture(scope="session")
def notebook_run(tmp_path_factory) -> Path:
    """The output folder of a three-step ``vlrl train grpo`` on the tiny CapRL recipe (checkpoints at 2 and 3)."""
    out = tmp_path_factory.mktemp("nb_run") / "run"
    _run(["train", "grpo", "--recipe", str(ROOT / "train" / "recipes" / "tiny" / "caprl_tiny.yaml"), f"output_dir={out}"])
    return out
