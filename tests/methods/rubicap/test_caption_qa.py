"""Caption-QA budgets: truncation, caprl_qa scoring per budget, table and plot, resume.

The answerer is the scripted backend of tests/support/scripted.py: it picks the option whose
text appears in the description, else "cannot answer", so a caption that puts the fact late loses
it at small budgets.
"""

from __future__ import annotations

import json
import re

import pytest
from PIL import Image

from tests.support.scripted import Scripted
from vlrl.core.backends import ChatResult, ChoiceResult
from vlrl.methods.rubicap.caption_qa import parse_budgets, results_table, run_caption_qa, truncate_words

COLOURS = ["red", "blue", "green"]


def _pick(text):
    """The option whose text the description names, else "cannot answer"."""
    desc = re.search(r"<description>\n(.*?)\n</description>", text, re.S).group(1)
    opts = re.findall(r"^([A-Z])\. (.*)$", text, re.M)
    pick = next((letter for letter, o in opts if o in desc.split()), None)
    return pick or next(letter for letter, o in opts if o.lower().startswith("cannot"))


def _choose(r) -> ChoiceResult:
    pick = _pick(r.messages[0]["content"])
    return ChoiceResult(probs={c: float(c.strip() == pick) for c in r.choices}, method="logprobs", mass=1.0)


def Answerer() -> Scripted:
    """The answerer in both modes: the picked letter as text, or all probability on it."""
    return Scripted("answerer", lambda r: ChatResult(texts=[f" {_pick(r.messages[0]['content'])}."]), choose=_choose)


def _qa_dataset(tmp_path):
    rows = []
    for i, colour in enumerate(COLOURS):
        img = tmp_path / f"{i}.png"
        Image.new("RGB", (8, 8), colour).save(img)
        q = {"question": "What colour is the ball?", "options": ["red", "blue", "green", "yellow"], "answer": "ABC"[i]}
        rows.append({"id": f"img{i}", "image": img.name, "questions": [q]})
    path = tmp_path / "qa.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _captions(tmp_path, name, early: bool):
    filler = " ".join(["filler"] * 60)
    path = tmp_path / f"{name}.jsonl"
    with open(path, "w") as fh:
        for i, colour in enumerate(COLOURS):
            cap = f"A {colour} ball. {filler}" if early else f"{filler} a {colour} ball."
            fh.write(json.dumps({"image_id": f"img{i}", "caption": cap}) + "\n")
    return path


def test_budgets_curve_table_plot_and_resume(tmp_path):
    qa = _qa_dataset(tmp_path)
    early, late = _captions(tmp_path, "early", True), _captions(tmp_path, "late", False)
    answerer = Answerer()
    settings = {"questions_per_caption": 2, "rounds": 2, "mode": "sample", "every_question": False}
    res = run_caption_qa(
        qa, answerer, tmp_path / "out", captions=[early, late], budgets=[50, 100], reward_settings=settings
    )
    c = res["captioners"]
    assert c["early"]["50"]["accuracy"] == 1.0 and c["early"]["100"]["accuracy"] == 1.0
    assert c["late"]["50"]["accuracy"] == 0.0 and c["late"]["100"]["accuracy"] == 1.0
    assert c["late"]["full"]["accuracy"] == 1.0 and c["late"]["50"]["mean_words"] == 50
    assert c["early"]["missing_captions"] == 0 and res["images"] == 3
    png = tmp_path / "out" / "accuracy_vs_budget.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert results_table(res).row_count == 2
    sent = len(answerer.requests)

    # rerun: every (captioner, budget, image) is already scored
    again = run_caption_qa(
        qa, answerer, tmp_path / "out", captions=[early, late], budgets=[50, 100], reward_settings=settings
    )
    assert len(answerer.requests) == sent and again == res
    lines = (tmp_path / "out" / "scores.jsonl").read_text().splitlines()
    assert len(lines) == 2 * 3 * 3


def test_missing_captions_and_bad_inputs(tmp_path):
    qa = _qa_dataset(tmp_path)
    partial = tmp_path / "partial.jsonl"
    partial.write_text(json.dumps({"image_id": "img0", "caption": "A red ball."}) + "\n")
    res = run_caption_qa(qa, Answerer(), tmp_path / "out", captions=[partial], budgets=[50])
    assert res["captioners"]["partial"]["missing_captions"] == 2
    assert res["captioners"]["partial"]["50"]["scored"] == 1
    with pytest.raises(ValueError, match="at least one"):
        run_caption_qa(qa, Answerer(), tmp_path / "o2")
    noq = tmp_path / "noq.jsonl"
    noq.write_text(json.dumps({"id": "x", "image": "0.png"}) + "\n")
    with pytest.raises(ValueError, match="questions"):
        run_caption_qa(noq, Answerer(), tmp_path / "o3", captions=[partial])


def test_helpers():
    assert truncate_words("a  b\nc d", 3) == "a b c"
    assert truncate_words("a b", None) == "a b"
    assert parse_budgets("400,50,100") == [50, 100, 400]
    with pytest.raises(ValueError):
        parse_budgets("0,10")


@pytest.mark.slow
def test_cli_with_tiny_hf_models(tmp_path, tiny_vlm, tiny_lm):
    from typer.testing import CliRunner

    from vlrl.cli import app

    qa = _qa_dataset(tmp_path)
    early = _captions(tmp_path, "early", True)
    out = tmp_path / "out"
    res = CliRunner().invoke(
        app,
        [
            "eval",
            "caption-qa",
            "--qa",
            str(qa),
            "--answerer",
            f"hf:{tiny_lm}",
            "--out",
            str(out),
            "--captions",
            str(early),
            "--captioner",
            f"tiny=hf:{tiny_vlm}",
            "--budgets",
            "5,50",
            "--set",
            "rounds=1",
            "--set",
            "questions_per_caption=1",
        ],
    )
    r = json.loads((out / "results.json").read_text())
    # the random tiny captioner writes junk or nothing: its missing captions make the run partial (3)
    assert res.exit_code == (3 if r["captioners"]["tiny"]["missing_captions"] else 0), res.output
    assert set(r["captioners"]) == {"early", "tiny"} and (out / "accuracy_vs_budget.png").exists()


@pytest.mark.parametrize("bad", ["50,abc", "1.5", "", ","])
def test_bad_budgets_name_the_flag(bad):
    with pytest.raises(ValueError, match="--budgets"):
        parse_budgets(bad)


def DownAnswerer() -> Scripted:
    """The same answerer (same identity) whose chat endpoint is down."""
    return Scripted("answerer", lambda r: ChatResult(error="connection refused"), choose=_choose)


def test_answerer_outage_is_retried_on_rerun_not_stored_as_unscored(tmp_path):
    qa = _qa_dataset(tmp_path)
    early = _captions(tmp_path, "early", True)
    settings = {"questions_per_caption": 1, "rounds": 1, "mode": "sample"}
    down = run_caption_qa(qa, DownAnswerer(), tmp_path / "out", captions=[early], budgets=[50], reward_settings=settings)
    assert down["captioners"]["early"]["50"]["accuracy"] is None
    up = run_caption_qa(qa, Answerer(), tmp_path / "out", captions=[early], budgets=[50], reward_settings=settings)
    assert up["captioners"]["early"]["50"]["accuracy"] == 1.0 and up["captioners"]["early"]["full"]["scored"] == 3


def test_evaluation_asks_every_question_once_exactly_with_intervals(tmp_path):
    """Default settings: exact mode, each question of an image asked once (no draws with
    replacement), accuracy with a bootstrap interval, answerer parse failures reported."""
    rows = []
    for i, colour in enumerate(COLOURS):
        img = tmp_path / f"{i}.png"
        Image.new("RGB", (8, 8), colour).save(img)
        qs = [{"question": f"Q{k}: what colour is the ball?", "options": ["red", "blue", "green", "yellow"],
               "answer": "ABC"[i]} for k in range(5)]
        rows.append({"id": f"img{i}", "image": img.name, "questions": qs})
    qa = tmp_path / "qa5.jsonl"
    qa.write_text("".join(json.dumps(r) + "\n" for r in rows))
    answerer = Answerer()
    res = run_caption_qa(qa, answerer, tmp_path / "out", captions=[_captions(tmp_path, "early", True)], budgets=[50])
    assert res["settings"]["mode"] == "exact" and res["settings"]["every_question"] is True
    asked = [re.search(r"Q(\d):", r.messages[0]["content"]).group(1) for r in answerer.requests]
    assert sorted(asked) == sorted([str(k) for k in range(5)] * 3 * 2)  # 5 questions x 3 images x 2 levels, once each
    cell = res["captioners"]["early"]["50"]
    assert cell["questions_asked"] == 15 and cell["parse_failure_rate"] == 0.0
    lo, hi = cell["accuracy_ci95"]
    assert lo <= cell["accuracy"] <= hi


def _photo_qa(tmp_path, bad: int):
    """A QA file of 3 photos, ``bad`` of them unreadable (bytes that are no image): per-image input
    problems, not the captioner's or the answerer's failures."""
    d = tmp_path / "qa"
    d.mkdir()
    rows = []
    for i, c in enumerate(COLOURS):
        if i < bad:
            (d / f"p{i}.png").write_bytes(b"<html>not an image</html>")
        else:
            Image.new("RGB", (32, 20), {"red": (220, 20, 20), "blue": (20, 20, 220), "green": (20, 200, 20)}[c]).save(
                d / f"p{i}.png")
        q = {"question": "Is the photo wide or tall?", "options": ["wide", "tall", "square", "round"], "answer": "A"}
        rows.append({"image_id": f"p{i}", "image": f"p{i}.png", "questions": [q]})
    (d / "qa.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return d / "qa.jsonl"


@pytest.mark.parametrize("bad, code", [(1, 0), (3, 1)])
def test_an_unreadable_image_is_an_input_error_not_a_backend_failure(tmp_path, bad, code):
    """#24 finding 10 on `eval caption-qa --captioner`: an image that cannot be opened is that record's
    problem, counted apart from backend failures. It must not make every rerun exit 3 with "rerun the
    same command to retry them" (nothing a rerun can fix); with no image readable nothing succeeded (1)."""
    from tests.support.long_commands import run

    qa = _photo_qa(tmp_path, bad)
    argv = ["eval", "caption-qa", "--qa", str(qa), "--captioner", "py:tests.support.photo_models:captioner",
            "--answerer", "py:tests.support.photo_models:reader", "--out", str(tmp_path / "out"), "--budgets", "50",
            "--set", "rounds=1", "--set", "mode=sample"]
    for _ in range(2):  # the rerun retries nothing and ends the same way
        res = run(argv)
        assert res.returncode == code, res.stderr[-2000:]
    (r,) = json.loads((tmp_path / "out" / "results.json").read_text())["captioners"].values()
    assert r["missing_captions"] == bad and r["bad_inputs"] == bad
    assert "retry" not in res.stderr.split("caption-qa:")[-1] or code == 1
