"""Prism-style evaluation: metrics, a scripted captioner/answerer end to end, and the CLI on tiny models."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from PIL import Image

from tests.support.scripted import Scripted
from vlrl.core.backends import Backend, ChatResult
from vlrl.methods.caprl.prism import anls, evaluate_prism, parse_number, question_type, relaxed_accuracy, short_answer

COLOURS = {"red": (220, 20, 20), "blue": (20, 20, 220)}


def test_metrics():
    assert relaxed_accuracy("The value is 104", "100") == 1.0
    assert relaxed_accuracy("106", "100") == 0.0
    assert relaxed_accuracy("1,050.0", 1000) == 1.0
    assert relaxed_accuracy("0", "0") == 1.0 and relaxed_accuracy("0.01", "0") == 0.0
    assert relaxed_accuracy("Yes", "yes") == 1.0
    assert parse_number("45%") == 45.0 and parse_number("none") is None
    assert anls("Stop sign", ["stop sign"]) == 1.0
    assert anls("stop sigm", ["stop sign"]) == pytest.approx(1 - 1 / 9)
    assert anls("banana", ["stop sign"]) == 0.0
    assert anls("cat", ["dog", "cat"]) == 1.0
    assert short_answer("The answer is: 42.\nBecause...") == "42"
    assert question_type({"options": ["a", "b"]}) == "mc"
    assert question_type({"answer": "12.5"}) == "numeric" and question_type({"answer": "red car"}) == "exact"
    assert question_type({"answer": "red car", "benchmark": "DocVQA"}) == "text"
    assert question_type({"answer": "12", "type": "text"}) == "text"


def _text(messages):
    c = messages[0]["content"]
    return c if isinstance(c, str) else "".join(p.get("text", "") for p in c)


class Captioner(Backend):
    kind = "scripted-captioner"

    def __init__(self):
        super().__init__("cap")

    def _chat(self, requests):
        out = []
        for r in requests:
            img = next(p["image"] for p in r.messages[0]["content"] if p.get("type") == "image")
            px = img.getpixel((3, 3))
            colour = "red" if px[0] > px[2] else "blue"
            out.append(ChatResult(texts=[f"A {colour} square. The sign reads OPEN. There are 12 dots."]))
        return out

    def _score_choices(self, requests):
        raise NotImplementedError


class Reader(Backend):
    kind = "scripted-reader"

    def __init__(self):
        super().__init__("reader")

    def _chat(self, requests):
        out = []
        for r in requests:
            text = _text(r.messages)
            caption = text.split("<description>")[1].split("</description>")[0]
            opts = re.findall(r"^([A-Z])\. (.*)$", text, re.M)
            if opts:
                out.append(ChatResult(texts=[" " + next((L for L, o in opts if o in caption), "A")]))
            elif "Question: How many" in text:
                out.append(ChatResult(texts=["12."]))
            else:
                out.append(ChatResult(texts=["The answer is OPEN"]))
        return out

    def _score_choices(self, requests):
        raise NotImplementedError


def make_bench(tmp_path: Path) -> Path:
    (tmp_path / "img").mkdir()
    for name, rgb in COLOURS.items():
        Image.new("RGB", (32, 32), rgb).save(tmp_path / "img" / f"{name}.png")
    (tmp_path / "img" / "bad.png").write_bytes(b"nope")
    rows = [
        {"id": "q1", "benchmark": "colors", "image": "img/red.png", "question": "Colour?", "options": ["blue", "red"], "answer": "B"},
        {"id": "q2", "benchmark": "colors", "image": "img/blue.png", "question": "Colour?", "options": ["blue", "red"], "answer": "A"},
        {"id": "q3", "benchmark": "colors", "image": "img/blue.png", "question": "Colour?", "options": ["red", "green"], "answer": "green"},
        {"id": "q4", "benchmark": "charts", "image": "img/red.png", "question": "How many dots?", "answer": 12.4},
        {"id": "q5", "benchmark": "charts", "image": "img/red.png", "question": "How many dots?", "answer": "20"},
        {"id": "q6", "benchmark": "docs", "image": "img/blue.png", "question": "What does the sign say?", "answers": ["open", "opened"], "answer": "open"},
        {"id": "q7", "benchmark": "docs", "image": "img/bad.png", "question": "What does the sign say?", "answer": "open"},
    ]
    bench = tmp_path / "bench.jsonl"
    bench.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return bench


def test_end_to_end_scripted(tmp_path):
    bench = make_bench(tmp_path)
    res = evaluate_prism(Captioner(), Reader(), bench, tmp_path / "out", progress=False)
    b = res["benchmarks"]
    assert b["colors"]["accuracy"] == pytest.approx(2 / 3)  # q3: the caption has no "green"
    assert b["charts"]["accuracy"] == 0.5 and b["charts"]["by_type"] == {"numeric": 0.5}
    assert b["docs"]["accuracy"] == 0.5 and b["docs"]["errors"] == 1
    assert res["n"] == 7 and res["images"] == 3 and res["overall"] == pytest.approx(4 / 7)
    assert json.loads((tmp_path / "out" / "results.json").read_text())["overall"] == res["overall"]
    preds = [json.loads(x) for x in (tmp_path / "out" / "predictions.jsonl").read_text().splitlines()]
    assert [p["prediction"] for p in preds[:4]] == ["B", "A", "A", "12"]
    assert "image" in preds[6]["error"]
    caps = (tmp_path / "out" / "captions.jsonl").read_text().splitlines()
    assert len(caps) == 3  # one caption per distinct image


def test_bad_bench_is_a_clear_error(tmp_path):
    bad = tmp_path / "b.jsonl"
    bad.write_text(json.dumps({"image": "x.png", "question": "q"}) + "\n")
    with pytest.raises(ValueError, match="record 1 needs"):
        evaluate_prism(Captioner(), Reader(), bad, tmp_path / "out", progress=False)


@pytest.mark.slow
def test_cli_with_tiny_models(tmp_path, tiny_vlm, tiny_lm):
    bench = make_bench(tmp_path)
    vlrl = str(Path(sys.executable).parent / "vlrl")
    r = subprocess.run([vlrl, "eval", "prism", "--captioner", f"hf:{tiny_vlm}?device=cpu", "--answerer", f"hf:{tiny_lm}?device=cpu",
                        "--bench", str(bench), "--out", str(tmp_path / "out"), "--caption-max-tokens", "16", "--quiet"],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    res = json.loads((tmp_path / "out" / "results.json").read_text())
    assert set(res["benchmarks"]) == {"colors", "charts", "docs"} and res["n"] == 7
    assert 0.0 <= res["overall"] <= 1.0 and res["errors"] >= 1
    assert "overall" in r.stdout


def down_reader() -> Scripted:
    """An answerer endpoint that is down: every request fails with a reason."""
    return Scripted("down", lambda r: ChatResult(error="connection refused"))


def test_every_failed_record_is_one_log_line_naming_it(tmp_path, caplog):
    bench = make_bench(tmp_path)
    with caplog.at_level("WARNING", logger="vlrl.methods.caprl.prism"):
        res = evaluate_prism(Captioner(), down_reader(), bench, tmp_path / "out", progress=False)
    assert res["errors"] == 7 and res["overall"] == 0.0
    msgs = [r.getMessage() for r in caplog.records]
    assert sum(m.startswith("img/bad.png: image:") for m in msgs) == 1
    for qid in ("q1", "q2", "q3", "q4", "q5", "q6"):
        assert sum(m.startswith(f"question {qid}: answerer failed") and "connection refused" in m for m in msgs) == 1


# -- the scoring rules the benchmarks use; N captions; reasoning answers ---------------------------


def test_percent_scaling_exact_years_and_anls_benchmarks():
    from vlrl.methods.caprl.prism import exact_match, score_short

    assert relaxed_accuracy("0.45", "45%") == 1.0 and relaxed_accuracy("45%", "0.45") == 1.0
    assert relaxed_accuracy("0.45", "45") == 0.0  # no % anywhere: no rescaling
    assert question_type({"answer": "2019"}) == "exact" and question_type({"answer": "2019", "type": "numeric"}) == "numeric"
    assert score_short("2020", ["2019"], "exact") == 0.0 and relaxed_accuracy("2020", "2019") == 1.0  # why years are exact
    assert exact_match("2019.0", "2019") == 1.0
    assert question_type({"answer": "12", "benchmark": "InfoVQA"}) == "text"  # InfoVQA scores numbers with ANLS
    assert question_type({"answer": "12", "benchmark": "chartqa"}) == "numeric"
    # ChartQA's relaxed accuracy (and the public evaluation): a text answer needs an exact match
    chart_text = question_type({"answer": "Democrat", "benchmark": "ChartQA"})
    assert chart_text == "exact" and score_short("Democrats", ["Democrat"], chart_text) == 0.0
    assert score_short("democrat", ["Democrat"], chart_text) == 1.0
    assert score_short("Democrats", ["Democrat"], question_type({"answer": "Democrat", "benchmark": "InfoVQA"})) > 0.8


def test_public_numeric_scaling_tries_hundredths_and_hundreds_on_every_number():
    from vlrl.methods.caprl.prism import score_short

    assert relaxed_accuracy("0.45", "45", scales="public") == 1.0 and relaxed_accuracy("4500", "45", scales="public") == 1.0
    assert relaxed_accuracy("0.45", "45") == 0.0  # vlrl's default: only a written % rescales
    assert score_short("0.5", ["50"], "numeric", "public") == 1.0 and score_short("0.5", ["50"], "numeric") == 0.0


def test_the_prism_preset_fills_only_the_settings_left_at_their_defaults():
    from vlrl.methods.caprl.commands import _PRISM_DEFAULTS, _prism_preset

    got = _prism_preset("caprl_public", dict(_PRISM_DEFAULTS))
    assert got == {"captions_per_image": 4, "caption_temperature": 1.0, "answer_mode": "reason",
                   "answer_temperature": 1.0, "reason_max_tokens": 2048, "numeric_scales": "public"}
    assert _prism_preset("caprl_public", {**_PRISM_DEFAULTS, "captions_per_image": 2})["captions_per_image"] == 2


def test_boxed_answers_are_checked_with_math_verify():
    from vlrl.methods.caprl.prism import boxed_answer, verified

    assert boxed_answer(r"first \boxed{1} then \boxed{\frac{3}{4}}") == r"\frac{3}{4}"
    assert boxed_answer("no box") is None
    assert verified(r"\frac{3}{4}", ["0.75"]) and not verified("0.7", ["0.75"])


def sampled_caption(r) -> ChatResult:
    """n captions per image: the first names the colour, the others do not; all stop at the limit."""
    img = next(p["image"] for p in r.messages[0]["content"] if p.get("type") == "image")
    colour = "red" if img.getpixel((3, 3))[0] > img.getpixel((3, 3))[2] else "blue"
    texts = [f"A {colour} square with a sign." if k == 0 else "A square with a sign." for k in range(r.sampling.n)]
    return ChatResult(texts=texts, finish_reasons=["length"] * r.sampling.n)


class Reasoner(Backend):
    kind = "scripted-reasoner"

    def __init__(self):
        super().__init__("reasoner")
        self.max_tokens = []

    def _chat(self, requests):
        out = []
        for r in requests:
            self.max_tokens.append(r.sampling.max_tokens)
            text = _text(r.messages)
            caption = text.split("<description>")[1].split("</description>")[0]
            opts = re.findall(r"^([A-Z])\. (.*)$", text, re.M)
            if opts:
                pick = next((L for L, o in opts if o in caption), "A")
                out.append(ChatResult(texts=[f"The caption mentions it. So \\boxed{{{pick}}}"]))
            else:
                out.append(ChatResult(texts=["Twelve dots, so about \\boxed{\\frac{25}{2}}."]))
        return out

    def _score_choices(self, requests):
        raise NotImplementedError


def test_several_captions_per_image_mean_and_best_of_n_with_truncation(tmp_path):
    bench = make_bench(tmp_path)
    res = evaluate_prism(Scripted("sampler", sampled_caption), Reader(), bench, tmp_path / "out", progress=False, captions_per_image=3)
    assert res["captions_per_image"] == 3
    colors = res["benchmarks"]["colors"]
    # q1: only the first of 3 captions names the colour; q2's gold is the reader's fallback "A" (right
    # with every caption); q3 is never answerable
    assert colors["accuracy"] == pytest.approx((1 / 3 + 1 + 0) / 3) and colors["best_of_n"] == pytest.approx(2 / 3)
    caps = [json.loads(x) for x in (tmp_path / "out" / "captions.jsonl").read_text().splitlines()]
    ok = [c for c in caps if c["error"] is None]
    assert all(len(c["captions"]) == 3 and c["truncations"] == [True] * 3 and c["truncated"] for c in ok)
    assert res["truncated_rate"] == 1.0


def test_reasoning_answerer_boxes_its_answer(tmp_path):
    bench = make_bench(tmp_path)
    reasoner = Reasoner()
    res = evaluate_prism(Captioner(), reasoner, bench, tmp_path / "out", progress=False, answer_mode="reason")
    preds = {p["id"]: p for p in map(json.loads, (tmp_path / "out" / "predictions.jsonl").read_text().splitlines())}
    assert preds["q1"]["prediction"] == "B" and preds["q1"]["score"] == 1.0
    assert preds["q4"]["prediction"] == r"\frac{25}{2}" and preds["q4"]["score"] == 1.0  # 12.5 vs 12.4: within 5%
    assert preds["q5"]["score"] == 0.0
    assert res["answer_mode"] == "reason" and min(reasoner.max_tokens) == 1024


class FlakyCaptioner(Captioner):
    """Fails on the blue image once, then answers; counts the images it was asked to caption."""

    def __init__(self):
        super().__init__()
        self.asked: list[str] = []
        self.failed_once = False

    def _chat(self, requests):
        out = []
        for ok in super()._chat(requests):
            colour = "red" if "red" in ok.texts[0] else "blue"
            self.asked.append(colour)
            if colour == "blue" and not self.failed_once:
                self.failed_once = True
                out.append(ChatResult(error="HTTP 503: overloaded"))
            else:
                out.append(ok)
        return out


def test_captions_are_committed_once_and_failures_are_asked_again(tmp_path):
    """The caption step runs on the keyed stage loop: a rerun (a resumed job) captions nothing that is
    stored, asks again what the captioner failed on (a failure is never kept), and leaves an
    unreadable image quarantined with its reason; ``captions.jsonl`` still has one line per image."""
    bench = make_bench(tmp_path)
    cap = FlakyCaptioner()
    first = evaluate_prism(cap, Reader(), bench, tmp_path / "out", progress=False, cache=False)
    assert sorted(cap.asked) == ["blue", "red"]
    assert first["errors"] == 4  # q2, q3, q6 (blue: captioner down this run) and q7 (bad image)
    lines = {c["image"]: c for c in map(json.loads, (tmp_path / "out" / "captions.jsonl").read_text().splitlines())}
    assert lines["img/blue.png"]["error"].startswith("captioner: backend error: HTTP 503") and lines["img/blue.png"]["caption"] is None
    assert lines["img/bad.png"]["error"].startswith("image:")

    cap.asked.clear()
    again = evaluate_prism(cap, Reader(), bench, tmp_path / "out", progress=False, cache=False)
    assert cap.asked == ["blue"]  # red was committed; the bad image stays quarantined
    assert again["errors"] == 1 and again["overall"] == pytest.approx(4 / 7)
    state = [json.loads(x) for x in (tmp_path / "out" / "state" / "captions.jsonl").read_text().splitlines()]
    assert sorted(r["image"] for r in state) == ["img/blue.png", "img/red.png"]
    assert len((tmp_path / "out" / "captions.jsonl").read_text().splitlines()) == 3


def test_stored_captions_are_not_reused_by_another_captioner(tmp_path):
    """A library call on a folder holding another captioner's (or other caption settings') captions
    is refused, instead of scoring the old captions under the new name."""
    from vlrl.core.jobs import JobMismatch

    bench = make_bench(tmp_path)
    evaluate_prism(Captioner(), Reader(), bench, tmp_path / "out", progress=False, cache=False)
    other = Captioner()
    other.model = "another-captioner"
    with pytest.raises(JobMismatch, match="captioner"):
        evaluate_prism(other, Reader(), bench, tmp_path / "out", progress=False, cache=False)
    with pytest.raises(JobMismatch, match="max_tokens"):
        evaluate_prism(Captioner(), Reader(), bench, tmp_path / "out", progress=False, cache=False, caption_max_tokens=64)
    again = evaluate_prism(Captioner(), Reader(), bench, tmp_path / "out", progress=False, cache=False)
    assert again["overall"] == pytest.approx(4 / 7)


def test_prism_cli_preset_caprl_public_samples_four_captions_and_a_reasoning_answer(tmp_path):
    from tests.support.fake_openai import FakeOpenAI
    from tests.support.long_commands import answer, prism, run

    with FakeOpenAI(reply=answer) as srv:
        res = run([*prism(tmp_path, srv.spec()), "--preset", "caprl_public"])
        bodies = list(srv.bodies)
    assert res.returncode == 0, res.stderr[-2000:]
    captioning = [b for b in bodies if any(isinstance(m.get("content"), list) for m in b.get("messages", []))]
    answering = [b for b in bodies if b not in captioning]
    assert all(b.get("temperature") == 1.0 for b in captioning)
    import json

    caps = [json.loads(line) for line in (tmp_path / "out" / "captions.jsonl").read_text().splitlines()]
    assert len(caps) == 4 and all(len(c["captions"]) == 4 for c in caps)  # 4 images, 4 sampled captions each
    assert answering and all(b.get("temperature") == 1.0 and b.get("max_tokens") == 2048 for b in answering)


def test_public_scales_score_year_golds_and_anls_numbers_as_the_public_evaluation_does():
    """The public evaluation scores every ChartQA/CharXiv/InfoVQA answer with relaxed accuracy
    (InfoVQA: the better of it and ANLS): "2020" for a gold 2019 is within 5% there, and "46" for
    45 too. ``--preset caprl_public`` reproduces that; vlrl's default keeps years exact."""
    from vlrl.methods.caprl.prism import score_short

    year = question_type({"answer": "2019", "benchmark": "ChartQA"})
    assert score_short("2020", ["2019"], year, "public") == 1.0 and score_short("2020", ["2019"], year) == 0.0
    info = question_type({"answer": "45", "benchmark": "InfoVQA"})
    assert score_short("46", ["45"], info, "public") == 1.0 and score_short("46", ["45"], info) == 0.0
    # text answers stay exact (ChartQA) or ANLS (InfoVQA) under the public rule
    chart_text = question_type({"answer": "Democrat", "benchmark": "ChartQA"})
    assert score_short("Democrats", ["Democrat"], chart_text, "public") == 0.0
    assert score_short("DEMOCRAT", ["Democrat"], chart_text, "public") == 1.0
    assert 0.8 < score_short("Democrats", ["Democrat"], info, "public") < 1.0
