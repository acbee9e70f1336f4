"""Long commands on a slow model: bars that move per caption and per ask while a batch is with the
model, a caption length flag on every command that captions, and warnings that print once."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from tests.support.photos import photos
from vlrl.cli import app
from vlrl.core import progress
from vlrl.core.backends import ChatRequest, SamplingParams, load_backend

M = "py:tests.support.photo_models"
CAPTIONING = [["caption"], ["data", "teacher-captions"], ["data", "rubrics"], ["eval", "arena"],
              ["eval", "caption-qa"], ["eval", "prism"], ["reward", "smoke"]]


@pytest.mark.parametrize("command", CAPTIONING, ids=" ".join)
def test_every_command_that_captions_takes_caption_max_tokens(command):
    res = CliRunner().invoke(app, [*command, "--help"], env={"COLUMNS": "200", "NO_COLOR": "1"})
    assert res.exit_code == 0 and "--caption-max-tokens" in res.output


def test_caption_qa_and_arena_captions_stop_at_the_flag(tmp_path, caplog):
    imgs = photos(tmp_path / "photos", ("astronaut.png", "rocket.jpg"))
    qa = tmp_path / "qa.jsonl"
    q = {"question": "What is the shape of the photo's frame?", "options": ["wide", "tall", "square", "round"], "answer": "C"}
    qa.write_text("".join(json.dumps({"id": p.name, "image": str(p), "questions": [q]}) + "\n" for p in sorted(imgs.iterdir())))
    with caplog.at_level("WARNING"):
        res = CliRunner().invoke(app, ["eval", "caption-qa", "--qa", str(qa), "--answerer", f"{M}:reader", "--captioner",
                                       f"rnd={M}:random_vlm?newlines=0", "--caption-max-tokens", "7", "--out",
                                       str(tmp_path / "cqa"), "--budgets", "5"])
    assert res.exit_code == 0, res.output
    caps = [json.loads(x) for x in (tmp_path / "cqa" / "captions.jsonl").read_text().splitlines()]
    assert len(caps) == 2 and all(len(c["caption"].split()) == 7 and c["truncated"] for c in caps)
    counts = json.loads((tmp_path / "cqa" / "results.json").read_text())["caption_counts"]
    assert counts == {"rnd": {"captions": 2, "empty": 0, "truncated": 2}}  # in the summary, beside the scores
    warned = [r for r in caplog.records if "captions of rnd stopped at the length limit" in r.getMessage()]
    assert len(warned) == 1 and "raise --caption-max-tokens" in warned[0].getMessage()

    res = CliRunner().invoke(app, ["eval", "arena", "--candidate", f"a={M}:random_vlm?newlines=0", "--baseline",
                                   f"b={M}:captioner", "--judge", f"{M}:vlm", "--images", str(imgs), "--out",
                                   str(tmp_path / "arena"), "--caption-max-tokens", "5", "--max-retries", "0"])
    caps = [json.loads(x) for x in (tmp_path / "arena" / "captions.jsonl").read_text().splitlines()]
    assert {len(c["caption"].split()) for c in caps if c["model"] == "a"} == {5}, res.output
    counts = json.loads((tmp_path / "arena" / "results.json").read_text())["caption_counts"]
    assert counts == {"a": {"captions": 2, "empty": 0, "truncated": 2}, "b": {"captions": 2, "empty": 0, "truncated": 0}}


def test_caption_qa_counts_a_captioner_of_only_newlines(tmp_path):
    """A tiny random VLM's newline captions (#32 point 2) hold no word: in caption-qa each is a
    missing caption with its reason (never scored as a caption), the run exits 3, and the
    summary counts them beside the truncated ones."""
    src = photos(tmp_path / "src", ("astronaut.png", "rocket.jpg", "coffee.png"))
    imgs = tmp_path / "photos"
    imgs.mkdir()
    for i, p in enumerate(sorted(src.iterdir())):  # img0 and img3-style ids: the random VLM blanks every third
        p.rename(imgs / f"img{i}{p.suffix}")
    qa = tmp_path / "qa.jsonl"
    q = {"question": "What is the shape of the photo's frame?", "options": ["wide", "tall", "square", "round"], "answer": "C"}
    qa.write_text("".join(json.dumps({"id": p.stem, "image": str(p), "questions": [q]}) + "\n"
                          for p in sorted(imgs.iterdir())))
    res = CliRunner().invoke(app, ["eval", "caption-qa", "--qa", str(qa), "--answerer", f"{M}:reader", "--captioner",
                                   f"rnd={M}:random_vlm?newlines=1", "--caption-max-tokens", "4", "--out", str(tmp_path / "cqa"),
                                   "--budgets", "5"])
    assert res.exit_code == 3, res.output
    results = json.loads((tmp_path / "cqa" / "results.json").read_text())
    failures = [json.loads(x) for x in (tmp_path / "cqa" / "caption_failures.jsonl").read_text().splitlines()]
    assert len(failures) == results["captioners"]["rnd"]["missing_captions"] == 1
    assert failures[0]["reason"] == "empty answer"
    assert results["caption_counts"]["rnd"] == {"captions": 2, "empty": 0, "truncated": 2}


def test_backends_report_each_request_as_it_completes(tmp_path):
    """A py: backend per request, the cache at once for its hits (and never twice for the same one)."""
    seen = []
    b = load_backend(f"{M}:captioner", cache=tmp_path / "cache")
    reqs = [ChatRequest([{"role": "user", "content": [{"type": "image", "image": im}, {"type": "text", "text": "hi"}]}],
                        SamplingParams(max_tokens=8), id=str(i)) for i, im in enumerate(_pictures(3))]
    with progress.on_requests(seen.append):
        b.chat(reqs)
        assert seen == [1, 1, 1]  # one report per request as it completes (no cache hit)
        seen.clear()
        b.chat(reqs)  # all three from the cache
    assert seen == [3]  # all three at once, before any model call
    b.close()


def _pictures(n):
    from PIL import Image

    return [Image.new("RGB", (40 + 10 * i, 30), (200, 20 * i, 20)) for i in range(n)]


class _Recorder:
    """A stand-in tqdm that keeps every value its counter took."""

    made: list = []

    def __init__(self, *a, total=None, initial=0, disable=False, **kw):
        self.n, self.total, self.disable, self.values = initial, total, False, []
        _Recorder.made.append(self)

    def update(self, n=1):
        self.n += n
        self.values.append(self.n)

    def set_postfix(self, *a, **kw):
        pass

    def close(self):
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def test_vlrl_caption_bar_moves_per_caption_within_one_batch(tmp_path, monkeypatch):
    import tqdm.auto

    from vlrl.captioning import CaptionJob, run_caption

    _Recorder.made = []
    monkeypatch.setattr(tqdm.auto, "tqdm", _Recorder)
    imgs = photos(tmp_path / "photos", ("astronaut.png", "chelsea.png", "coffee.png", "rocket.jpg"))
    run_caption(CaptionJob(images=str(imgs), models=[f"{M}:captioner"], out=tmp_path / "caps", batch_size=16,
                           cache=False))
    (bar,) = _Recorder.made
    assert bar.values == [1, 2, 3, 4]  # one batch of four, and the bar took every step


def test_stage_bars_move_per_caption_and_count_asks(monkeypatch):
    from vlrl.core import stage
    from vlrl.core.pipeline import JsonlStore

    _Recorder.made = []
    monkeypatch.setattr(stage, "tqdm", _Recorder)

    def process(batch):
        for _ in batch:
            progress.requests_done(1)
            progress.requests_done(1)  # a second request for the same item never moves the bar past the batch
        return [stage.Outcome.ok(k, {"key": k}) for k in batch]

    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as d:
        store = JsonlStore(Path(d) / "s.jsonl", key_field="key")
        stage.run_stage([f"k{i}" for i in range(6)], key=str, process=process, store=store, batch_size=4, progress_by="item")
        store.close()
    (bar,) = _Recorder.made
    assert bar.values == [1, 2, 3, 4, 5, 6]

    # another unit: the item bar moves per batch, a second bar counts every request as it completes
    import tqdm.auto

    _Recorder.made = []
    monkeypatch.setattr(tqdm.auto, "tqdm", _Recorder)
    with tempfile.TemporaryDirectory() as d:
        store = JsonlStore(Path(d) / "s.jsonl", key_field="key")
        stage.run_stage([f"k{i}" for i in range(6)], key=str, process=process, store=store, batch_size=4, progress_by="ask")
        store.close()
    items, asks = _Recorder.made
    assert items.values == [4, 6] and asks.values == list(range(1, 13))


def test_caption_qa_warns_once_about_sampled_estimates_and_counts_asks(tmp_path, caplog):
    imgs = photos(tmp_path / "photos", ("astronaut.png", "rocket.jpg", "cell.png"))
    qa = tmp_path / "qa.jsonl"
    q = {"question": "What is the shape of the photo's frame?", "options": ["wide", "tall", "square", "round"], "answer": "C"}
    qa.write_text("".join(json.dumps({"id": p.name, "image": str(p), "questions": [q]}) + "\n" for p in sorted(imgs.iterdir())))
    caps = tmp_path / "caps.jsonl"
    caps.write_text("".join(json.dumps({"image_id": p.name, "caption": "A square photo."}) + "\n" for p in sorted(imgs.iterdir())))
    with caplog.at_level("WARNING"):
        res = CliRunner().invoke(app, ["eval", "caption-qa", "--qa", str(qa), "--answerer", f"{M}:reader", "--captions",
                                       str(caps), "--out", str(tmp_path / "cqa"), "--budgets", "1,2,3", "--batch-size", "2"])
    assert res.exit_code == 0, res.output
    sampled = [r for r in caplog.records if "sampled estimates" in r.getMessage()]
    assert len(sampled) == 1  # 12 units in 6 reward calls, one warning
