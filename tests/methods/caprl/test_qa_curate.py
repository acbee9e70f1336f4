"""QA curation: scripted VLM/answerer at the backend seam, then the real CLI with tiny models + kill -9."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from PIL import Image

from tests.support.curate import (
    ScriptedTextAnswerer,
    ScriptedVLM,
    colour_of,
    letter_of,
    make_images,
    prompt_image,
    prompt_text,
)
from tests.support.scripted import Scripted
from vlrl.core.backends import Backend, ChatResult, ChoiceResult
from vlrl.methods.caprl.curate import CurateConfig, curate
from vlrl.methods.caprl.filtering import text_only_filter


def scripted_captioner() -> Scripted:
    return Scripted("captioner", lambda r: ChatResult(texts=[f"A {colour_of(prompt_image(r.messages))} square on a plain background."]))


def failing_text_answerer() -> Scripted:
    """An answerer endpoint that is down: every request fails with a reason."""
    return Scripted("text", lambda r: ChatResult(error="connection refused"))


def junk_vlm() -> Scripted:
    """A model that ignores the format entirely (random weights, wrong prompt)."""
    return Scripted("junk", lambda r: ChatResult(texts=["thinkthinkthink \" \" qu qu"]))


def always_a() -> Scripted:
    return Scripted("always-a", lambda r: ChatResult(texts=[" A"]))

def run(tmp_path, out="out", **kw):
    images = make_images(tmp_path / "imgs")
    return curate(images, kw.pop("vlm", ScriptedVLM()), ScriptedTextAnswerer(), tmp_path / out,
                  CurateConfig(per_image=5, rounds=4, batch_size=2), progress=False, **kw)


def test_end_to_end_with_scripted_models(tmp_path):
    import datasets

    stats = run(tmp_path)
    assert stats["images"] == 4 and stats["images_done"] == 3 and stats["images_quarantined"] == 1
    assert stats["generated"] == 9 and stats["parsed"] == 6 and stats["kept"] == 3
    assert stats["drop_reasons"] == {"answer_not_in_options": 3, "text_acc_too_high": 3}
    assert list(stats["quarantine_reasons"].values()) == [1]
    assert json.loads((tmp_path / "out" / "stats.json").read_text())["kept"] == 3
    ds = datasets.load_from_disk(str(tmp_path / "out" / "dataset"))
    assert sorted(ds["id"]) == ["blue.png", "green.png", "red.png"]
    for row in ds:
        (q,) = row["questions"]
        assert q["question"] == "What colour is the square?" and q["visual_acc"] == 1.0 and q["text_acc"] == 0.0
        assert q["options"]["ABCD".index(q["answer"])] == colour_of(row["image"])


def test_rerun_replays_cache_and_shards_merge(tmp_path):
    import datasets

    run(tmp_path, out="whole")
    again = ScriptedVLM()
    run(tmp_path, out="whole", vlm=again)
    assert again.calls == 0  # everything was done: nothing asked again
    s0 = run(tmp_path, out="sharded", shard=(0, 2))
    assert s0["images_pending"] > 0 and not (tmp_path / "sharded" / "dataset").exists()
    run(tmp_path, out="sharded", shard=(1, 2))
    a = datasets.load_from_disk(str(tmp_path / "whole" / "dataset")).to_list()
    b = datasets.load_from_disk(str(tmp_path / "sharded" / "dataset")).to_list()
    assert a == b and len(a) == 3


def test_failed_generation_is_retried_not_lost(tmp_path):
    stats = run(tmp_path, vlm=ScriptedVLM(fail_on="green"))
    assert stats["images_pending"] == 1 and not (tmp_path / "out" / "dataset").exists()
    stats = run(tmp_path)
    assert stats["images_pending"] == 0 and stats["kept"] == 3


def test_text_only_filter_on_its_own():
    qs = [
        {"question": "What colour is the sky?", "options": ["blue", "red", "green"], "answer": "A"},
        {"question": "What colour is the cube?", "options": ["red", "blue", "yellow"], "answer": "A"},
        {"question": "broken", "options": ["x"], "answer": "A"},
    ]
    v = text_only_filter(qs, ScriptedTextAnswerer(), rounds=4, text_max=0.25)
    assert [x.keep for x in v] == [False, True, False]
    assert v[0].accuracy == 1.0 and v[1].accuracy == 0.0 and "bad question" in v[2].error


def _cli(images, out, vlm, lm):
    return [str(Path(sys.executable).parent / "vlrl"), "data", "qa-curate", "--images", str(images), "--vlm", f"hf:{vlm}?device=cpu",
            "--answerer", f"hf:{lm}?device=cpu", "--out", str(out), "--per-image", "2", "--rounds", "2",
            "--batch-size", "2", "--max-tokens", "48", "--max-attempts", "1", "--quiet"]


def _finish(cmd, env):
    res = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    # random tiny models may keep no question: such a run exits 1 ("the dataset ... is empty"), by design
    assert res.returncode == 0 or (res.returncode == 1 and "is empty" in res.stderr), res.stderr[-2000:]


@pytest.mark.slow
def test_kill9_resume_equals_uninterrupted(tmp_path, tiny_vlm, tiny_lm):
    images = tmp_path / "imgs"
    images.mkdir()
    for i in range(16):
        Image.new("RGB", (56, 56), ((i * 40) % 256, (i * 90) % 256, (i * 150) % 256)).save(images / f"im{i:02d}.png")
    (images / "bad.jpg").write_bytes(b"\xff\xd8 truncated")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    whole = tmp_path / "whole"
    _finish(_cli(images, whole, tiny_vlm, tiny_lm), env)

    killed = tmp_path / "killed"
    proc = subprocess.Popen(_cli(images, killed, tiny_vlm, tiny_lm), env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    records = killed / "records" / "shard-0-of-1.jsonl"
    deadline = time.time() + 300
    while time.time() < deadline and proc.poll() is None:
        if records.exists() and records.read_text().count("\n") >= 3:
            break
        time.sleep(0.05)
    assert proc.poll() is None, "the job finished before it could be killed; make it longer"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    partial = records.read_text().count("\n")
    assert partial < 16
    _finish(_cli(images, killed, tiny_vlm, tiny_lm), env)

    def recs(d):
        return sorted((json.loads(x) for x in (d / "records" / "shard-0-of-1.jsonl").read_text().splitlines()), key=lambda r: r["id"])

    a, b = recs(whole), recs(killed)
    assert [r["id"] for r in b] == [f"im{i:02d}.png" for i in range(16)]  # each exactly once
    assert a == b
    sa, sb = (json.loads((d / "stats.json").read_text()) for d in (whole, killed))
    assert sa == sb and sa["images_quarantined"] == 1 and sa["images_pending"] == 0
    import datasets

    assert datasets.load_from_disk(str(whole / "dataset")).to_list() == datasets.load_from_disk(str(killed / "dataset")).to_list()


class CaptionReader(Backend):
    """Text answerer that picks the option the caption states, else 'Cannot answer'."""

    kind = "scripted-reader"

    def __init__(self):
        super().__init__("reader")

    def _score_choices(self, requests):
        out = []
        for r in requests:
            text = prompt_text(r.messages)
            caption = text.split("<description>")[1].split("</description>")[0].lower()
            opts = re.findall(r"^([A-Z])\. (.*)$", text, re.M)
            pick = next((L for L, o in opts if re.search(rf"\b{o.lower()}\b", caption)), opts[-1][0])
            out.append(ChoiceResult(probs={f" {L}": float(pick == L) for L, _ in opts}, method="logits", mass=1.0))
        return out

    def _chat(self, requests):
        raise NotImplementedError


def test_smoke_check_passes_on_good_data_and_fails_on_leaky_data(tmp_path):
    import datasets

    from vlrl.methods.caprl.smoke import smoke_check

    run(tmp_path)
    summary = smoke_check(str(tmp_path / "out" / "dataset"), scripted_captioner(), CaptionReader(), mode="exact")
    v = summary["variants"]
    assert summary["passed"] and summary["images"] == 3
    assert v["real"]["mean"] == 1.0 and v["generic"]["mean"] == v["empty"]["mean"] == v["shuffled"]["mean"] == 0.0
    # leaky QA: the answer is written in the question, so every caption "works"
    leaky = datasets.load_from_disk(str(tmp_path / "out" / "dataset")).to_list()
    for row in leaky:
        q = row["questions"][0]
        q["options"] = ["square", "circle", "star", "moon"]
        q["answer"] = "A"
    datasets.Dataset.from_list(leaky).cast_column("image", datasets.Image()).save_to_disk(str(tmp_path / "leaky"))
    bad = smoke_check(str(tmp_path / "leaky"), scripted_captioner(), CaptionReader(), mode="exact")
    assert not bad["passed"] and any("shuffled" in f for f in bad["failures"])


@pytest.mark.slow
def test_smoke_cli_with_tiny_models(tmp_path, tiny_vlm, tiny_lm):
    run(tmp_path)  # a real QA dataset (scripted curation)
    vlrl = str(Path(sys.executable).parent / "vlrl")
    base = [vlrl, "reward", "smoke", "--qa", str(tmp_path / "out" / "dataset"), "--captioner", f"hf:{tiny_vlm}?device=cpu",
            "--answerer", f"hf:{tiny_lm}?device=cpu", "--questions-per-caption", "2", "--rounds", "2",
            "--out", str(tmp_path / "smoke.json")]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    r = subprocess.run(base, capture_output=True, text=True, timeout=600, env=env)
    assert r.returncode == 0, r.stderr
    summary = json.loads((tmp_path / "smoke.json").read_text())
    assert set(summary["variants"]) == {"real", "generic", "empty", "shuffled"} and summary["images"] == 3
    strict = subprocess.run(base + ["--strict"], capture_output=True, text=True, timeout=600, env=env)
    assert strict.returncode == (0 if summary["passed"] else 1)
    if not summary["passed"]:
        assert "FAILED" in r.stdout


def test_answerer_failure_is_one_line_per_image_with_its_reason(tmp_path, caplog):
    images = make_images(tmp_path / "imgs")
    with caplog.at_level("WARNING", logger="vlrl.methods.caprl.curate"):
        stats = curate(images, ScriptedVLM(), failing_text_answerer(), tmp_path / "out",
                       CurateConfig(per_image=5, rounds=2, batch_size=2), progress=False)
    assert stats["images_pending"] == 3 and stats["images_done"] == 0
    lines = [r.getMessage() for r in caplog.records if "answering failed" in r.getMessage()]
    assert len(lines) == 3
    assert all("connection refused" in m and m.split(":")[0] in {"red.png", "green.png", "blue.png"} for m in lines)


def test_smoke_check_names_the_reason_when_nothing_can_be_scored(tmp_path):
    from vlrl.methods.caprl.smoke import smoke_check

    run(tmp_path)
    summary = smoke_check(str(tmp_path / "out" / "dataset"), scripted_captioner(), failing_text_answerer(), mode="sample")
    assert not summary["passed"]
    assert any("could not be scored" in f and "connection refused" in f for f in summary["failures"])
    assert sum(summary["unscored_reasons"].values()) == 12


def test_images_whose_answer_holds_no_question_are_counted_and_logged(tmp_path, caplog):
    """Such an image is retried by the next run (with a new generation seed), and written as
    'no question found' once it has had max_attempts tries."""
    images = make_images(tmp_path / "imgs")
    cfg = CurateConfig(per_image=5, rounds=2, batch_size=2, max_attempts=2)
    junk = junk_vlm()
    with caplog.at_level("WARNING", logger="vlrl.methods.caprl.curate"):
        first = curate(images, junk, ScriptedTextAnswerer(), tmp_path / "out", cfg, progress=False)
    assert first["images_pending"] == 3 and first["images_done"] == 0
    lines = [r.getMessage() for r in caplog.records if "holds no multiple-choice question" in r.getMessage()]
    assert sorted(m.split(":")[0] for m in lines) == ["blue.png", "green.png", "red.png"]
    assert all("will retry on the next run" in m for m in lines)
    stats = curate(images, junk, ScriptedTextAnswerer(), tmp_path / "out", cfg, progress=False)
    assert stats["generated"] == 0 and stats["images_done"] == 3 and stats["images_no_question_found"] == 3
    seeds = [r.sampling.seed for r in junk.requests]
    assert len(set(seeds)) == 6  # the retry asked for a new draw, not the cached reply


class OnceJunkVLM(ScriptedVLM):
    """The same model (same identity) whose first question-writing replies hold no question."""

    junk = True

    def _chat(self, requests):
        if self.junk and any("Write" in prompt_text(r.messages) for r in requests):
            return [ChatResult(texts=["thinkthinkthink"]) for _ in requests]
        return super()._chat(requests)


def test_no_question_image_recovers_on_rerun(tmp_path):
    images = make_images(tmp_path / "imgs")
    cfg = CurateConfig(per_image=5, rounds=4, batch_size=2)
    vlm = OnceJunkVLM()
    assert curate(images, vlm, ScriptedTextAnswerer(), tmp_path / "out", cfg, progress=False)["images_pending"] == 3
    vlm.junk = False  # a new draw (the retry's new seed) now holds questions
    stats = curate(images, vlm, ScriptedTextAnswerer(), tmp_path / "out", cfg, progress=False)
    assert stats["images_pending"] == 0 and stats["kept"] == 3 and stats["images_no_question_found"] == 0


class FlakyTextAnswerer(ScriptedTextAnswerer):
    """Fails every ask about the sky question; answers the rest like the scripted answerer."""

    def _chat(self, requests):
        good = super()._chat(requests)
        return [ChatResult(error="HTTP 500: boom") if "sky" in prompt_text(r.messages) else g for r, g in zip(requests, good, strict=True)]


def test_a_question_failing_k_times_is_dropped_with_its_reason(tmp_path):
    images = make_images(tmp_path / "imgs")
    cfg = CurateConfig(per_image=5, rounds=4, batch_size=2, max_attempts=2)
    first = curate(images, ScriptedVLM(), FlakyTextAnswerer(), tmp_path / "out", cfg, progress=False)
    assert first["images_pending"] == 3 and not (tmp_path / "out" / "dataset").exists()
    stats = curate(images, ScriptedVLM(), FlakyTextAnswerer(), tmp_path / "out", cfg, progress=False)
    assert stats["images_pending"] == 0 and stats["kept"] == 3 and stats["drop_reasons"]["answer_failed"] == 3
    rec = json.loads((tmp_path / "out" / "records" / "shard-0-of-1.jsonl").read_text().splitlines()[0])
    sky = next(q for q in rec["questions"] if "sky" in q["question"])
    assert sky["reason"].startswith("answer_failed: ") and "boom" in sky["reason"] and not sky["kept"]
    assert (tmp_path / "out" / "dataset").exists()


class SmallVLM(ScriptedVLM):
    """Only answers (never writes questions): the filter VLM."""

    def _chat(self, requests):
        assert all("Write" not in prompt_text(r.messages) for r in requests)
        self.calls += 1
        return super()._chat(requests)


def test_filter_vlm_answers_with_the_image_and_settings_are_recorded(tmp_path):
    images = make_images(tmp_path / "imgs")
    big, small = ScriptedVLM(), SmallVLM()
    stats = curate(images, big, ScriptedTextAnswerer(), tmp_path / "out", CurateConfig(per_image=5, rounds=4, batch_size=2),
                   progress=False, filter_vlm=small)
    assert stats["kept"] == 3 and small.calls > 0
    s = stats["settings"]
    assert s["vlm"] == "scripted-vlm:vlm" and s["filter_vlm"] == "scripted-vlm:vlm" and s["answerer"] == "scripted-text:text"
    assert {"rounds", "visual_min", "text_max", "max_attempts", "per_image", "temperature", "seed"} <= set(s)


def test_balanced_rotations_give_an_always_a_answerer_chance_and_chance_passes():
    """Each option visits each position across the rounds, so answering "A" every time scores
    exactly 1/k (k | R): chance. It keeps every question under the chance floor, and none under the
    paper's strict rule (where it passed ~32% by luck with independent shuffles)."""
    qs = [{"question": f"Question {i}?", "options": ["w", "x", "y", "z"], "answer": "ABCD"[i % 4]} for i in range(40)]
    v = text_only_filter(qs, always_a(), rounds=4, text_max=0.25)
    assert all(x.accuracy == 0.25 for x in v) and all(x.keep for x in v)
    strict = text_only_filter(qs, always_a(), rounds=4, text_max=0.25, chance_floor=False)
    assert not any(x.keep for x in strict)
    assert sum(x.keep for x in text_only_filter(qs, always_a(), rounds=8, text_max=0.25, chance_floor=False)) == 0


def knows(right_rounds: int) -> Scripted:
    """A text answerer right on the first ``right_rounds`` rounds of each question and wrong after:
    every question's right option is the text ``"right"``."""
    def answer(r):
        text = prompt_text(r.messages)
        rnd = int(r.id.rsplit("/round", 1)[1])
        wanted = "right" if rnd < right_rounds else next(o for _, o in re.findall(r"^([A-Z])\. (.*)$", text, re.M) if o != "right")
        return f" {letter_of(text, wanted)}"

    return Scripted("knows", answer=answer)


@pytest.mark.parametrize("k", [2, 3, 4, 5, 6])
def test_a_constant_answerer_passes_whenever_rounds_cover_the_options(k):
    """The boundary is tight: with R >= k the most a constant answerer scores is exactly the
    ceiling, and the ceiling passes; with R < k there is no floor (the strict rule alone)."""
    from vlrl.methods.caprl.filtering import chance_ceiling

    qs = [{"question": f"Q{i}?", "options": [f"o{j}" for j in range(k)], "answer": "ABCDEF"[i % k]} for i in range(3 * k)]
    for rounds in range(1, 9):
        v = text_only_filter(qs, always_a(), rounds=rounds, text_max=0.25)
        if rounds >= k:
            assert max(x.accuracy for x in v) == pytest.approx(chance_ceiling(k, rounds)), (k, rounds)
            assert all(x.keep for x in v), (k, rounds)
        else:
            assert [x.keep for x in v] == [x.accuracy < 0.25 for x in v], (k, rounds)


@pytest.mark.parametrize("k,rounds", [(4, 4), (3, 4), (5, 5), (3, 3)])
def test_one_right_round_above_chance_is_dropped(k, rounds):
    """(Rounds whose option order repeats an earlier round's are asked once, so a greedy answerer
    cannot answer them apart: the cases here have the first ``at + 1`` rounds in distinct orders.)"""
    from vlrl.methods.caprl.filtering import chance_ceiling

    qs = [{"question": f"Q{i}?", "options": ["right"] + [f"o{j}" for j in range(k - 1)], "answer": "A"} for i in range(2 * k)]
    at = round(chance_ceiling(k, rounds) * rounds)
    v_at = text_only_filter(qs, knows(at), rounds=rounds, text_max=0.25)
    assert all(x.accuracy == pytest.approx(at / rounds) and x.keep for x in v_at)
    v_above = text_only_filter(qs, knows(at + 1), rounds=rounds, text_max=0.25)
    assert all(x.accuracy == pytest.approx((at + 1) / rounds) and not x.keep for x in v_above)


def test_a_single_round_is_no_free_pass(caplog):
    """At one round a floor of 1/R would keep every question, even one the answerer always gets
    right without the image: with R < k there is no floor, and a warning says why."""
    qs = [{"question": "Q0?", "options": ["w", "right", "y", "z"], "answer": "B"}]
    with caplog.at_level("WARNING"):
        (v,) = text_only_filter(qs, knows(1), rounds=1, text_max=0.25)
    assert v.accuracy == 1.0 and not v.keep
    assert "more options than the 1 rounds" in caplog.text


def test_qa_curate_keeps_questions_for_a_blind_text_answerer(tmp_path):
    images = make_images(tmp_path / "imgs")
    blind = curate(images, ScriptedVLM(), always_a(), tmp_path / "floor", CurateConfig(per_image=5, rounds=4, batch_size=2),
                   progress=False)
    assert blind["kept"] > 0 and "text_acc_too_high" not in blind["drop_reasons"]
    strict = curate(images, ScriptedVLM(), always_a(), tmp_path / "strict",
                    CurateConfig(per_image=5, rounds=4, batch_size=2, chance_floor=False), progress=False)
    assert strict["kept"] == 0 and strict["drop_reasons"]["text_acc_too_high"] == blind["kept"]


def test_smoke_cli_samples_the_qa_set_by_default(monkeypatch, tmp_path):
    from typer.testing import CliRunner

    import vlrl.methods.caprl.smoke as smoke
    from vlrl.cli import app

    seen = {}

    def fake_check(qa, captioner, answerer, **kw):
        seen.update(kw)
        v = {"mean": 1.0, "none": 0, "cannot_answer_rate": 0.0}
        return {"images": 2, "variants": dict.fromkeys(("real", "generic", "empty", "shuffled"), v), "passed": True, "failures": [],
                "scored": 8, "backend_failed": 0}

    monkeypatch.setattr(smoke, "smoke_check", fake_check)
    base = ["reward", "smoke", "--qa", "x", "--captioner", "hf:x", "--answerer", "hf:y", "--out", str(tmp_path / "s.json")]
    assert CliRunner().invoke(app, base).exit_code == 0
    assert seen["limit"] == 256  # a smoke check on a 75k-image corpus would hold every image in memory
    assert CliRunner().invoke(app, [*base, "--limit", "0"]).exit_code == 0
    assert seen["limit"] is None


def test_streamed_dataset_write_is_a_loadable_save_to_disk_folder(tmp_path):
    """Several shards (rolled by size) and the empty case both load with load_from_disk, in order."""
    import datasets

    from vlrl.methods.caprl import curate as curate_mod

    features = datasets.Features({"id": datasets.Value("string"), "image": datasets.Image()})
    imgs = make_images(tmp_path / "imgs")
    rows = [{"id": n, "image": {"bytes": (imgs / f"{n}.png").read_bytes(), "path": f"{n}.png"}} for n in ("red", "green", "blue")]
    (tmp_path / "multi").mkdir()
    assert curate_mod._write_arrow_shards(tmp_path / "multi", iter(rows), features, shard_bytes=1) == 3
    assert len(list((tmp_path / "multi").glob("data-*-of-00003.arrow"))) == 3
    ds = datasets.load_from_disk(str(tmp_path / "multi"))
    assert ds["id"] == ["red", "green", "blue"] and colour_of(ds[2]["image"]) == "blue"
    (tmp_path / "empty").mkdir()
    assert curate_mod._write_arrow_shards(tmp_path / "empty", iter([]), features) == 0
    empty = datasets.load_from_disk(str(tmp_path / "empty"))
    assert len(empty) == 0 and set(empty.features) == {"id", "image"}
