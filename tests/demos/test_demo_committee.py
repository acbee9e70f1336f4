"""Shapes-world stand-ins for RubiCap's teachers and writer, run through the real committee and
synthesis code (``py:`` backends), checked against the scenes' facts."""

from __future__ import annotations

import json
import random

import pytest

from vlrl.core.pipeline import read_jsonl
from vlrl.demos.shapes.kit import world as W
from vlrl.demos.shapes.standins.committee import facts_of, perceive, teacher_items, write_rubrics

M = "py:vlrl.demos.shapes.standins.committee"


@pytest.mark.parametrize("cfg", [W.WorldConfig(), W.WorldConfig(max_shapes=3)])
def test_perception_reads_every_rendered_scene(cfg):
    for sc in W.make_scenes(150, 7, cfg, prefix="p"):
        assert perceive(W.render(sc, cfg)) == sc.items


def _truth(sc):
    return facts_of(sc.items)


def test_teacher_profiles_make_their_own_mistakes_at_their_rate():
    rng = random.Random(0)
    scenes = W.make_scenes(400, 1, W.WorldConfig(), prefix="t")
    omitted = wrong = invented = attrs = 0
    for sc in scenes:
        truth = _truth(sc)
        o = facts_of(teacher_items(sc.items, "omit", 0.4, rng))
        assert all(truth[k] == v for k, v in o.items())  # terse, never wrong
        omitted += sum(k not in o for k in truth if k[1] != "count")
        w = facts_of(teacher_items(sc.items, "wrong", 0.2, rng))
        assert w.keys() == truth.keys()
        wrong += sum(w[k] != truth[k] for k in truth)
        i = facts_of(teacher_items(sc.items, "invent", 0.5, rng))
        invented += i[("scene", "count")] != truth[("scene", "count")]
        assert facts_of(teacher_items(sc.items, "exact", 0.9, rng)) == truth
        attrs += sum(k[1] != "count" for k in truth)
    for got, p, n in ((omitted / attrs, 0.4, attrs), (wrong / attrs, 0.2, attrs), (invented / len(scenes), 0.5, len(scenes))):
        assert abs(got - p) < 4 * (p * (1 - p) / n) ** 0.5, (got, p)


def test_writer_keeps_only_consensus_and_grades_the_student():
    sc = W.Scene("s", [W.Item("left", shape="circle", colour="red", size="large"),
                       W.Item("right", shape="square", colour="blue", size="small")])
    teachers = {"T1": W.caption(sc),
                "T2": "a large red circle on the left and a square on the right.",
                "T3": "a large green circle on the left and a small blue square on the right."}
    out = write_rubrics(teachers, "a circle on the left and a small blue triangle on the right.")
    facts = {f["fact"]: f["sources"] for f in out["consensus_facts"]}
    assert facts["The colour of the shape on the left is red."] == ["T1", "T2"]  # 2 vs 1: consensus
    assert "The colour of the shape on the left is green." not in facts
    sev = {d["description"]: d["severity"] for d in out["deficiencies"]}
    assert sev == {
        "The caption does not give the colour of the shape on the left; it is red.": "important",
        "The caption does not give the size of the shape on the left; it is large.": "minor",
        "The caption states triangle for the shape of the shape on the right; it is square.": "critical",
    }
    assert len(out["rubrics"]) == 3 and {r["deficiency"] for r in out["rubrics"]} == {"d1", "d2", "d3"}
    assert out["student_meets_all"] is False
    assert [d["student_span"] for d in out["deficiencies"]] == [None, None, "triangle"]
    solved = write_rubrics(teachers, W.caption(sc))  # a perfect student needs no rubric
    assert solved["rubrics"] == [] and solved["student_meets_all"] is True
    assert len(solved["student_correct"]) == len(solved["consensus_facts"])


def test_committee_and_writer_through_the_real_rubicap_commands(tmp_path):
    cfg = W.WorldConfig()
    scenes = W.make_scenes(40, 3, cfg, prefix="c")
    (tmp_path / "images").mkdir()
    rng = random.Random(1)
    with open(tmp_path / "student.jsonl", "w") as fh:
        for sc in scenes:
            W.render(sc, cfg).save(tmp_path / "images" / f"{sc.id}.png")
            fh.write(json.dumps({"image_id": f"{sc.id}.png", "caption": W.caption(sc, rng, 0.6)}) + "\n")
    teachers = [f"terse={M}:teacher?profile=omit&rate=0.3", f"careless={M}:teacher?profile=wrong&rate=0.15",
                f"dreamer={M}:teacher?profile=invent&rate=0.3"]
    from typer.testing import CliRunner

    from vlrl.cli import app

    args = ["data", "teacher-captions", "--images", str(tmp_path / "images"), "--out", str(tmp_path / "teachers")]
    for t in teachers:
        args += ["--teacher", t]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    rows = list(read_jsonl(tmp_path / "teachers" / "teacher_captions.jsonl"))
    assert len(rows) == 40 and all(len(r["teacher_captions"]) == 3 for r in rows)

    res = CliRunner().invoke(app, ["data", "rubrics", "--teachers", str(tmp_path / "teachers"), "--student",
                                   str(tmp_path / "student.jsonl"), "--writer", f"{M}:writer", "--out",
                                   str(tmp_path / "rubrics")])
    assert res.exit_code == 0, res.output
    out = {r["image_id"]: r for r in read_jsonl(tmp_path / "rubrics" / "rubrics.jsonl")}
    solved = list(read_jsonl(tmp_path / "rubrics" / "solved.jsonl"))
    assert not list(read_jsonl(tmp_path / "rubrics" / "rejected.jsonl"))
    assert len(out) + len(solved) == 40 and len(out) > 30
    by_id = {f"{sc.id}.png": sc for sc in scenes}
    true_facts = n_facts = n_rubrics = 0
    for iid, r in out.items():
        truth = {W.caption(W.Scene("x", [it]))[:-1] for it in by_id[iid].items}
        n_rubrics += sum(rub["kind"] == "criterion" for rub in r["rubrics"])
        for rub in r["rubrics"]:
            w = {"critical": 3.0, "important": 2.0, "minor": 1.0}[rub["severity"]]
            assert rub["weight"] == (w if rub["kind"] == "criterion" else -1.0), rub
        for f in r["consensus_facts"]:
            n_facts += 1
            assert len(f["teachers"]) >= 2
            true_facts += _fact_true(f["fact"], by_id[iid])
        assert truth  # every scene has items
    assert n_rubrics > 40  # the terse student leaves plenty out
    assert true_facts / n_facts > 0.95  # consensus of independent mistakes is near ground truth


def _fact_true(fact: str, sc: W.Scene) -> bool:
    truth = _truth(sc)
    for (where, attr), v in truth.items():
        place = "" if where == "scene" else W.WHERE[where]
        if attr == "count" and fact == f"The image holds {v} shape{'s' if v != 'one' else ''}.":
            return True
        if attr != "count" and fact == f"The {attr} of the shape {place} is {v}.":
            return True
    return False
