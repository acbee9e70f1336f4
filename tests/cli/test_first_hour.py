"""The first hour on your own photos: caption → qa-curate → reward score --qa → eval caption-qa →
eval prism, on real photographs with scripted ``py:`` models, and no glue between the commands.

The models (tests/support/photo_models.py) read the image the way a model would: a captioner that
describes a photo's frame, brightness and colour (``?terse=1``: the frame only), a VLM that writes
three questions about those and answers them with the image, and a reader that answers from a
caption, or blindly "A" with nothing to read (a chance-level text answerer, which qa-curate keeps).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.support.photos import PHOTOS, photos
from vlrl.cli import app

M = "py:tests.support.photo_models"


def vlrl(*args: str) -> str:
    res = CliRunner().invoke(app, [str(a) for a in args])
    assert res.exit_code == 0, f"vlrl {' '.join(map(str, args[:2]))} exited {res.exit_code}: {res.output[-3000:]}"
    return res.output


def _jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@pytest.fixture(scope="module")
def chain(tmp_path_factory):
    root = tmp_path_factory.mktemp("hour")
    imgs = photos(root / "photos")
    for name, spec in (("full", f"{M}:captioner"), ("terse", f"{M}:captioner?terse=1")):
        vlrl("caption", "--images", imgs, "--model", spec, "--out", root / f"caps-{name}", "--no-progress")
    vlrl("data", "qa-curate", "--images", imgs, "--vlm", f"{M}:vlm", "--answerer", f"{M}:reader", "--out", root / "qa",
         "--quiet")
    return root


def test_qa_curate_keeps_the_questions_a_blind_answerer_cannot_beat_chance_on(chain):
    stats = json.loads((chain / "qa" / "stats.json").read_text())
    assert stats["images_with_questions"] == len(PHOTOS) and stats["kept"] == 3 * len(PHOTOS)


def test_reward_score_attaches_the_curated_questions_by_id(chain, tmp_path):
    scores = {}
    for name in ("full", "terse"):
        (part,) = (chain / f"caps-{name}" / "captions").glob("*.jsonl")
        for qa in (chain / "qa", chain / "qa" / "dataset"):  # the qa-curate folder, or its dataset/
            out = tmp_path / f"{name}-{qa.name}.jsonl"
            vlrl("reward", "score", "--reward", "caprl_qa", "--input", part, "--qa", qa, "--answerer", f"{M}:reader",
                 "-s", "questions=all", "--out", out)
            rows = _jsonl(out)
            assert sorted(r["image_id"] for r in rows) == sorted(PHOTOS)
            assert all(r["details"]["n_questions"] == 3 for r in rows)
            scores[name, qa.name] = {r["image_id"]: r["reward"] for r in rows}
    assert scores["full", "qa"] == scores["full", "dataset"]
    # the curated questions are about frame, brightness and colour: the full captions answer them
    # all, the terse ones (frame only) one in three, and 'cannot answer' the rest
    assert all(v == 1.0 for v in scores["full", "qa"].values())
    assert all(v == pytest.approx(1 / 3) for v in scores["terse", "qa"].values())


def test_reward_score_names_a_caption_whose_image_has_no_curated_question(chain, tmp_path):
    rows = tmp_path / "rows.jsonl"
    rows.write_text(json.dumps({"image_id": "astronaut.png", "caption": "A square, bright photo."}) + "\n"
                    + json.dumps({"image_id": "not-curated.png", "caption": "A photo."}) + "\n")
    res = CliRunner().invoke(app, ["reward", "score", "--reward", "caprl_qa", "--input", str(rows), "--qa",
                                   str(chain / "qa"), "--answerer", f"{M}:reader", "--out", str(tmp_path / "s.jsonl")])
    assert res.exit_code == 0, res.output
    got = {r["image_id"]: r for r in _jsonl(tmp_path / "s.jsonl")}
    assert got["astronaut.png"]["reward"] is not None
    assert got["not-curated.png"]["reward"] is None and "not in --qa" in got["not-curated.png"]["details"]["error"]
    res = CliRunner().invoke(app, ["reward", "score", "--reward", "caprl_qa", "--input", str(rows), "--qa",
                                   str(tmp_path), "--answerer", f"{M}:reader", "--out", str(tmp_path / "s2.jsonl")])
    assert res.exit_code == 2 and "not a qa-curate dataset" in res.output


def test_caption_qa_and_prism_read_the_curated_dataset(chain, tmp_path):
    (part,) = (chain / "caps-full" / "captions").glob("*.jsonl")
    vlrl("eval", "caption-qa", "--qa", chain / "qa" / "dataset", "--answerer", f"{M}:reader", "--captions", part,
         "--out", tmp_path / "cqa", "--budgets", "5,50")
    cqa = json.loads((tmp_path / "cqa" / "results.json").read_text())
    (name,) = cqa["captioners"]
    assert cqa["captioners"][name]["missing_captions"] == 0 and cqa["captioners"][name]["50"]["scored"] == len(PHOTOS)
    assert cqa["captioners"][name]["50"]["accuracy"] == 1.0 > cqa["captioners"][name]["5"]["accuracy"]

    for name, spec in (("full", f"{M}:captioner"), ("terse", f"{M}:captioner?terse=1")):
        vlrl("eval", "prism", "--captioner", spec, "--answerer", f"{M}:reader", "--bench", chain / "qa",
             "--out", tmp_path / f"prism-{name}", "--quiet")
    full = json.loads((tmp_path / "prism-full" / "results.json").read_text())
    terse = json.loads((tmp_path / "prism-terse" / "results.json").read_text())
    assert full["n"] == terse["n"] == 3 * len(PHOTOS) and full["images"] == len(PHOTOS)
    assert full["benchmarks"]["qa-curate"]["by_type"] == {"mc": 1.0}
    # Prism has no 'cannot answer' option: from a terse caption the frame questions are right and
    # the others are the reader's guess ('A'), right only where 'A' happens to be
    assert full["overall"] == 1.0 > terse["overall"]
    preds = _jsonl(tmp_path / "prism-terse" / "predictions.jsonl")
    assert {p["id"].split("#")[0] for p in preds} == set(PHOTOS)
    assert all(p["score"] == 1.0 for p in preds if p["id"].endswith("#0"))  # question 0: the frame
    assert {p["prediction"] for p in preds if not p["id"].endswith("#0")} == {"A"}
