"""Rubric synthesis: schema validation, repair, corrective retries, rejection with reasons.

The student and the rubric writer are scripted :class:`Backend` subclasses; the slow test runs the
real CLI with tiny ``hf:`` models, whose junk answers must end up as rejections with reasons.
"""

from __future__ import annotations

import json
from collections import Counter

import pytest
from PIL import Image

from tests.support.scripted import Scripted
from vlrl.core.backends import ChatResult
from vlrl.core.pipeline import read_jsonl
from vlrl.methods.rubicap.schema import validate_writer_output
from vlrl.methods.rubicap.synthesis import build_rubrics

LABELS = {"T1": "gemini", "T2": "gpt", "T3": "qwen"}
STUDENT = "A red truck."

GOOD = {
    "consensus_facts": [
        {"id": "f1", "fact": "a red bus", "sources": ["T1", "T2"]},
        {"id": "f2", "fact": "a sign reading STOP", "sources": ["T1", "T2", "T3"]},
        {"id": "f3", "fact": "only one says it rains", "sources": ["T3"]},
        {"id": "f4", "fact": "unknown labels", "sources": ["T1", "T9"]},
    ],
    "student_correct": [],
    "deficiencies": [
        {"id": "d1", "severity": "Critical", "description": "calls the bus a truck", "facts": ["f1"],
         "student_span": "truck"},
        {"id": "d2", "severity": "minor", "description": "no STOP sign", "facts": ["f2"], "student_span": None},
    ],
    "rubrics": [
        {
            "id": "x",
            "deficiency": "d1",
            "criterion": "Identifies the vehicle as a bus",
            "pass_rule": "Pass if bus; fail if truck.",
            "weight": 9,
            "pitfall": False,
        },
        {
            "id": "y",
            "deficiency": "d2",
            "criterion": "Mentions the STOP sign",
            "pass_rule": "Pass if the STOP sign is stated; fail otherwise.",
            "pitfall": False,
        },
    ],
    "student_meets_all": False,
}
SOLVED = {"consensus_facts": GOOD["consensus_facts"][:2], "student_correct": ["f1", "f2"], "deficiencies": [],
          "rubrics": [], "student_meets_all": True}


def validate(obj, student=STUDENT):
    return validate_writer_output(obj, LABELS, student=student)


def test_schema_accepts_and_normalises():
    v = validate(GOOD)
    assert [f["fact"] for f in v["consensus_facts"]] == ["a red bus", "a sign reading STOP"]
    assert v["consensus_facts"][1]["teachers"] == ["gemini", "gpt", "qwen"]
    assert v["dropped_facts"] == 2
    assert [(r["id"], r["severity"], r["weight"]) for r in v["rubrics"]] == [
        ("r1", "critical", 3.0),
        ("r2", "minor", 1.0),
    ]
    solved = validate(SOLVED)
    assert solved["rubrics"] == [] and solved["student_meets_all"] is True


def _with_def(i, **patch):
    defs = [dict(d) for d in GOOD["deficiencies"]]
    defs[i].update(patch)
    return {**GOOD, "deficiencies": defs}


def test_unlinked_deficiencies_are_dropped_with_their_reason_and_rubric():
    # d2 cites a fact with one source (f3): dropped; d1 is still linked
    v = validate(_with_def(1, facts=["f3"]))
    assert [r["deficiency"] for r in v["rubrics"]] == ["d1"]
    assert v["unlinked"][0]["id"] == "d2" and "not consensus facts" in v["unlinked"][0]["reason"]
    # a "purple unicorn" hallucination span that the student never wrote
    v = validate(_with_def(1, facts=[], student_span="a purple unicorn"))
    assert v["unlinked"][0]["id"] == "d2" and "does not occur" in v["unlinked"][0]["reason"]
    # a deficiency with no evidence at all
    v = validate(_with_def(1, facts=[], student_span=None))
    assert "no consensus fact and no student span" in v["unlinked"][0]["reason"]
    # when nothing is left linked, the answer is invalid (goes back to the writer)
    bad = _with_def(0, facts=["f9"], student_span=None)
    bad["deficiencies"][1].update(facts=["f3"])
    with pytest.raises(ValueError, match="no deficiency is linked"):
        validate(bad)


def test_what_the_student_had_right_becomes_regression_pitfalls():
    v = validate({**GOOD, "student_correct": ["f2", "f2"]})
    reg = [r for r in v["rubrics"] if r["kind"] == "regression"]
    assert len(reg) == 1 and reg[0]["weight"] == -1.0 and "a sign reading STOP" in reg[0]["criterion"]
    assert [r["kind"] for r in v["rubrics"]] == ["criterion", "criterion", "regression"]
    assert validate({**SOLVED})["rubrics"] == []  # a solved image stays solved
    with pytest.raises(ValueError, match="student_correct"):
        validate({**GOOD, "student_correct": ["f3"]})  # one teacher only: not a consensus fact


def test_pitfall_rubrics_get_negative_weight_and_need_a_student_span():
    ans = {
        **GOOD,
        "deficiencies": [*GOOD["deficiencies"],
                         {"id": "d3", "severity": "important", "description": "invents a dog", "facts": [],
                          "student_span": "dog"}],
        "rubrics": [*GOOD["rubrics"],
                    {"id": "z", "deficiency": "d3", "criterion": "Mentions a dog", "pass_rule": "Pass if a dog is "
                     "mentioned; fail otherwise.", "pitfall": True}],
    }
    v = validate(ans, student="A red truck and a dog.")
    assert [r["weight"] for r in v["rubrics"]] == [3.0, 1.0, -2.0]
    with pytest.raises(ValueError, match="pitfall"):
        validate({**GOOD, "rubrics": [{**GOOD["rubrics"][0]}, {**GOOD["rubrics"][1], "pitfall": True}]})


@pytest.mark.parametrize(
    "patch,message",
    [
        ({"rubrics": GOOD["rubrics"][:1]}, "have no rubric"),
        ({"rubrics": GOOD["rubrics"] + [{**GOOD["rubrics"][1], "id": "y"}]}, "more than one rubric"),
        ({"rubrics": [{**GOOD["rubrics"][0], "deficiency": "d7"}, GOOD["rubrics"][1]]}, "not in the deficiencies"),
        (
            {"deficiencies": [{**GOOD["deficiencies"][0], "severity": "catastrophic"}, GOOD["deficiencies"][1]]},
            "severity",
        ),
        (
            {
                "rubrics": [
                    {**GOOD["rubrics"][0], "criterion": "Fixes what the student caption got wrong"},
                    GOOD["rubrics"][1],
                ]
            },
            "self-contained",
        ),
        (
            {"rubrics": [{**GOOD["rubrics"][0], "criterion": "Agrees with T2 about the vehicle"}, GOOD["rubrics"][1]]},
            "'T2'",
        ),
        ({"rubrics": [{**GOOD["rubrics"][0], "pass_rule": ""}, GOOD["rubrics"][1]]}, "pass_rule"),
        ({"student_meets_all": True}, "must be empty"),
        ({"student_meets_all": "yes"}, "student_meets_all"),
        ({"deficiencies": [], "rubrics": []}, "no deficiency is listed"),
        ({"consensus_facts": GOOD["consensus_facts"][2:]}, "no consensus fact"),
        ({"rubrics": [{k: v for k, v in GOOD["rubrics"][0].items() if k != "pitfall"}, GOOD["rubrics"][1]]},
         "pitfall"),
    ],
)
def test_schema_rejects(patch, message):
    with pytest.raises(ValueError, match=message):
        validate({**GOOD, **patch})


@pytest.mark.parametrize("obj", [{}, {"answer": "a red ball"}, [], "", {"rubrics": []},
                                 {"consensus_facts": [], "deficiencies": [], "rubrics": []},
                                 {k: v for k, v in GOOD.items() if k != "student_correct"}])
def test_garbage_objects_are_rejected(obj):
    with pytest.raises(ValueError):
        validate(obj)


def test_random_text_and_truncated_answers_never_become_an_accepted_rubric_set():
    """Through the real extract → repair → validate path: random text and every cut of a valid
    answer (the length limit struck anywhere) must be rejected, never accepted as a rubric set."""
    import random

    from vlrl.judge.structured import InvalidOutput, extract_json

    rng = random.Random(7)
    full = json.dumps(GOOD)
    texts = [full[:k] for k in range(1, len(full) - 1)]
    alphabet = "abc {}[]\":,tru efals0123\n"
    texts += ["".join(rng.choice(alphabet) for _ in range(rng.randint(1, 200))) for _ in range(300)]
    accepted = 0
    for t in texts:
        try:
            obj, _ = extract_json(t)
            validate(obj)
            accepted += 1
        except (InvalidOutput, ValueError):
            pass
    assert accepted == 0
    assert validate(extract_json(full)[0])["rubrics"]  # the whole answer still passes


def test_teacher_labels_are_shuffled_per_image_and_reproducible():
    from vlrl.methods.rubicap.synthesis import teacher_labels

    caps = {n: "x" for n in ("a", "b", "c", "d", "e")}
    orders = {tuple(teacher_labels(caps, f"img{k}").values()) for k in range(40)}
    assert len(orders) > 10  # not one fixed order
    assert teacher_labels(caps, "img3") == teacher_labels(caps, "img3")
    firsts = Counter(teacher_labels(caps, f"img{k}")["T1"] for k in range(400))
    assert set(firsts) == set(caps) and max(firsts.values()) < 400 * 0.35


def _text(req) -> str:
    c = req.messages[0]["content"]
    return c if isinstance(c, str) else "".join(p.get("text", "") for p in c if p.get("type") == "text")


def writer_answer(req):
    """Per image (req.id): valid / repairable / invalid-then-fixed / garbage / timeout."""
    turns = len(req.messages)
    if req.id == "good":
        return "Here you go:\n```json\n" + json.dumps(GOOD) + "\n```"
    if req.id == "repairable":
        return json.dumps(GOOD)[:-1] + ",}"  # trailing comma: repaired
    if req.id == "cutoff":  # the length limit struck: complete-looking after repair, but rejected
        return ChatResult(texts=[json.dumps(GOOD)[:-40]], finish_reasons=["length"])
    if req.id == "solved":
        return json.dumps(SOLVED)
    if req.id == "retry":
        if turns == 1:
            return json.dumps({**GOOD, "rubrics": GOOD["rubrics"][:1]})
        assert "have no rubric" in req.messages[-1]["content"]  # the correction quotes the error
        return json.dumps(GOOD)
    if req.id == "garbage":
        return "The student did fine, I think."
    return ChatResult(error="timed out")


def _teacher_dir(tmp_path, ids, n_teachers=3):
    d = tmp_path / "teachers"
    d.mkdir()
    with open(d / "teacher_captions.jsonl", "w") as fh:
        for k, iid in enumerate(ids):
            img = tmp_path / f"{iid}.png"
            Image.new("RGB", (16, 16), (255, 10 * k, 0)).save(img)  # distinct pixels: no shared cache entries
            caps = {
                n: f"a red bus by a STOP sign ({iid}, view {j})"
                for j, n in enumerate(["gemini", "gpt", "qwen"][: n_teachers if iid != "lonely" else 1])
            }
            fh.write(json.dumps({"image_id": iid, "image": str(img), "teacher_captions": caps, "missing": {}}) + "\n")
    return d


def test_pipeline_repair_retry_reject_and_resume(tmp_path):
    ids = ["good", "repairable", "retry", "garbage", "timeout", "lonely", "nostudent", "cutoff", "solved"]
    tdir = _teacher_dir(tmp_path, ids)
    student = Scripted("student", lambda r: "" if r.id == "nostudent" else "A red truck.")
    writer = Scripted("writer", writer_answer)
    stats = build_rubrics(tdir, student, writer, tmp_path / "out", batch_size=4, max_retries=2)
    rows = {r["image_id"]: r for r in read_jsonl(tmp_path / "out" / "rubrics.jsonl")}
    assert set(rows) == {"good", "repairable", "retry"}
    row = rows["good"]
    assert row["image"].endswith("good.png") and row["student_caption"] == "A red truck."
    assert set(row["teacher_captions"]) == {"gemini", "gpt", "qwen"}
    assert row["rubrics"][0]["criterion"] == "Identifies the vehicle as a bus"
    assert [r["weight"] for r in row["rubrics"]] == [3.0, 1.0]
    tl = row["teacher_labels"]
    assert row["consensus_facts"][0] == {"id": "f1", "fact": "a red bus", "teachers": [tl["T1"], tl["T2"]]}
    assert rows["repairable"]["writer"]["repaired"] is True
    assert rows["retry"]["writer"]["attempts"] == 2
    # the writer never sees teacher names, only neutral labels
    assert all("gemini" not in _text(r) and "[T1]" in _text(r) for r in writer.requests)
    rej = {r["image_id"]: r for r in read_jsonl(tmp_path / "out" / "rejected.jsonl")}
    assert set(rej) == {"garbage", "timeout", "lonely", "nostudent", "cutoff"}
    assert "cut off at the length limit" in rej["cutoff"]["reason"] and len(rej["cutoff"]["raw"]) == 1
    solved = list(read_jsonl(tmp_path / "out" / "solved.jsonl"))
    assert [r["image_id"] for r in solved] == ["solved"] and solved[0]["student_meets_all"] is True
    assert stats["solved"] == 1 and stats["empty_rubric_sets"] == 1 and stats["training_images"] == 3
    assert "no JSON object" in rej["garbage"]["reason"] and len(rej["garbage"]["raw"]) == 3
    # token accounting survives answers that never parsed: all three attempts are counted
    assert rej["garbage"]["completion_tokens"] == sum(len(t.split()) for t in rej["garbage"]["raw"]) > 0
    assert rows["retry"]["writer"]["completion_tokens"] > rows["good"]["writer"]["completion_tokens"] > 0
    assert stats["writer_tokens"]["completion_tokens"] == (
        sum(r["writer"]["completion_tokens"] for r in [*rows.values(), *solved])
        + sum(r.get("completion_tokens", 0) for r in rej.values())
    )
    assert "timed out" in rej["timeout"]["reason"]
    assert "only 1 teacher caption" in rej["lonely"]["reason"]
    # an empty reply is a failure of the student's request (vlrl.core.backends.base.answer_problem)
    assert rej["nostudent"]["reason"].startswith("student caption missing: backend error: nostudent: the reply is empty")
    assert stats["rejected_by_reason"]["rubric writer: invalid output"] == 2
    assert (
        stats["accepted"] == 3
        and stats["rejected"] == 5
        and stats["rubrics_by_severity"] == {"critical": 3, "minor": 3}
    )
    assert not any(r.id == "lonely" for r in writer.requests)

    # resume: accepted images are not redone; rejected ones are retried (deterministic answers replay
    # from the response cache, failed calls are asked again) without duplicating lines
    writer2 = Scripted("writer", lambda r: json.dumps(GOOD) if r.id == "timeout" else writer_answer(r))
    student2 = Scripted("student", lambda r: "A red truck.")
    stats2 = build_rubrics(tdir, student2, writer2, tmp_path / "out", batch_size=4, max_retries=0)
    # the empty student caption was a failure, so it was never cached: the student is asked again
    # (and now answers), and that image reaches the writer; stored student captions are reused
    assert [r.id for r in student2.requests] == ["nostudent"]
    assert sorted(r.id for r in writer2.requests) == ["nostudent", "timeout"]
    assert len(list(read_jsonl(tmp_path / "out" / "rubrics.jsonl"))) == 4 and stats2["accepted"] == 4
    assert len(list(read_jsonl(tmp_path / "out" / "rejected.jsonl"))) == 5
    assert stats2["rejected"] == 4


def test_with_image_attaches_the_image(tmp_path):
    tdir = _teacher_dir(tmp_path, ["good"])
    writer = Scripted("writer", writer_answer)
    build_rubrics(tdir, Scripted("s", lambda r: "A red truck."), writer, tmp_path / "out", with_image=True)
    content = writer.requests[0].messages[0]["content"]
    assert content[0]["type"] == "image" and content[0]["image"].size == (16, 16)
    assert "attached" in content[1]["text"]


def _code(stats):
    """The README's exit code for a rubrics run: 1 when every image was rejected, 3 when some were
    for a backend error, else 0 (random tiny models mostly write junk)."""
    if not stats["accepted"] + stats["solved"]:
        return 1
    return 3 if any("backend error" in k for k in stats["rejected_by_reason"]) else 0


@pytest.mark.slow
def test_cli_with_tiny_hf_models(tmp_path, tiny_vlm, tiny_lm):
    from typer.testing import CliRunner

    from vlrl.cli import app

    tdir = _teacher_dir(tmp_path, ["a", "b"])
    # 1) a tiny VLM student: its (empty) captions are rejections with reasons
    out = tmp_path / "out"
    args = [
        "data",
        "rubrics",
        "--teachers",
        str(tdir),
        "--student",
        f"hf:{tiny_vlm}",
        "--writer",
        f"hf:{tiny_lm}",
        "--out",
        str(out),
        "--max-retries",
        "1",
        "--student-max-tokens",
        "8",
        "--writer-max-tokens",
        "48",
    ]
    res = CliRunner().invoke(app, args)
    stats = json.loads((out / "stats.json").read_text())
    assert res.exit_code == _code(stats), res.output
    assert stats["images"] == 2 and stats["accepted"] + stats["rejected"] == 2
    # 2) student captions from a file: the tiny writer's junk is repaired, retried, then rejected
    caps = tmp_path / "student.jsonl"
    caps.write_text("".join(json.dumps({"image_id": i, "caption": "A red truck."}) + "\n" for i in ("a", "b")))
    out2 = tmp_path / "out2"
    res = CliRunner().invoke(app, [*args[:5], str(caps), *args[6:9], str(out2), *args[10:]])
    stats2 = json.loads((out2 / "stats.json").read_text())
    assert res.exit_code == _code(stats2), res.output
    assert stats2["accepted"] + stats2["rejected"] == 2
    for rec in read_jsonl(out2 / "rejected.jsonl"):  # never a crash: a reason and the raw answers
        assert rec["reason"].startswith("rubric writer:") and len(rec["raw"]) >= 1


_CHILD = """
import json, sys, time
from vlrl.core.backends import Backend, ChatResult
from vlrl.methods.rubicap.synthesis import build_rubrics

GOOD = json.loads(sys.argv[3])

class Slow(Backend):
    kind = "scripted"
    def _chat(self, requests):
        time.sleep(0.3)
        text = json.dumps(GOOD) if self.model == "writer" else "A red truck."
        return [ChatResult(texts=[text]) for r in requests]
    def _score_choices(self, requests):
        raise NotImplementedError

build_rubrics(sys.argv[1], Slow("student"), Slow("writer"), sys.argv[2], batch_size=1)
"""


def test_kill9_then_rerun_is_exactly_once(tmp_path):
    import os
    import signal
    import subprocess
    import sys
    import time

    ids = [f"i{k}" for k in range(6)]
    tdir = _teacher_dir(tmp_path, ids)
    out = tmp_path / "out"
    script = tmp_path / "child.py"
    script.write_text(_CHILD)
    cmd = [sys.executable, str(script), str(tdir), str(out), json.dumps(GOOD)]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen(cmd, env=env)
    rubrics = out / "rubrics.jsonl"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        if rubrics.exists() and len(rubrics.read_text().splitlines()) >= 2:
            break
        time.sleep(0.05)
    assert proc.poll() is None, "the job finished before it could be killed"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    subprocess.run(cmd, env=env, check=True)
    got = [r["image_id"] for r in read_jsonl(rubrics)]
    assert sorted(got) == ids
    assert sorted(r["image_id"] for r in read_jsonl(out / "student.jsonl")) == ids
    assert json.loads((out / "stats.json").read_text())["accepted"] == 6


def test_each_rejected_image_is_one_log_line_with_its_reason(tmp_path, caplog):
    tdir = _teacher_dir(tmp_path, ["good", "garbage", "timeout", "lonely"])
    with caplog.at_level("WARNING", logger="vlrl.methods.rubicap.synthesis"):
        build_rubrics(tdir, Scripted("s", lambda r: "A red truck."), Scripted("writer", writer_answer),
                      tmp_path / "out", max_retries=0)
    lines = [r.getMessage() for r in caplog.records if ": rejected: " in r.getMessage()]
    assert sorted(m.split(":")[0] for m in lines) == ["garbage", "lonely", "timeout"]
    assert any(m.startswith("timeout: rejected: rubric writer:") and "timed out" in m for m in lines)


def test_writer_sees_the_image_when_its_backend_is_a_vlm(tmp_path):
    tdir = _teacher_dir(tmp_path, ["good"])
    vlm = Scripted("writer", writer_answer)
    vlm.is_vlm = True
    build_rubrics(tdir, Scripted("s", lambda r: "A red truck."), vlm, tmp_path / "out")
    assert vlm.requests[0].messages[0]["content"][0]["type"] == "image"
    text_only = Scripted("writer", writer_answer)
    text_only.is_vlm = False
    build_rubrics(tdir, Scripted("s", lambda r: "A red truck."), text_only, tmp_path / "out2")
    assert "do not see the image" in _text(text_only.requests[0])


def test_training_data_leaves_out_empty_rubric_sets(tmp_path, caplog):
    from vlrl.training.data import to_trl_dataset
    from vlrl.training.recipe import DataSpec

    img = tmp_path / "a.png"
    Image.new("RGB", (8, 8), "red").save(img)
    rubric = {"id": "r1", "criterion": "mentions the bus", "pass_rule": "Pass if a bus is named.", "severity": "minor"}
    rows = [{"image_id": "x", "image": str(img), "rubrics": [rubric]},
            {"image_id": "y", "image": str(img), "rubrics": []},
            {"image_id": "z", "image": str(img), "rubrics": "[]"}]
    src = tmp_path / "rubrics.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with caplog.at_level("WARNING", logger="vlrl.training.data"):
        ds = to_trl_dataset(DataSpec(source=str(src)), cache_dir=tmp_path / "cache")
    assert len(ds) == 1 and ds[0]["rubrics"][0]["id"] == "r1"
    assert any("2 records with an empty rubric set left out" in r.getMessage() for r in caplog.records)
