"""Discrimination check after rubric synthesis: do the rubrics separate the student from the teachers?

A rubric is written for a deficiency of the student caption, from facts at least two teachers
state. So, applied by the in-loop judge, it should *fail* the student caption and *pass* the teacher
captions (a pitfall, which describes the student's mistake, the other way round: the student
commits it, the teachers do not). A rubric that does neither is noise in the reward: the writer
mis-diagnosed, the criterion is vague, or the judge cannot apply it. This check runs the real
``rubicap_rubric`` judge on the student and teacher captions of each image and reports:

* per rubric: whether the student caption behaved as expected, the teachers' expected-outcome rate,
  and ``discriminates`` (student as expected and at least half the teachers as expected);
* overall: the *credit* rate of student captions and of teacher captions (a positive rubric met, or a
  pitfall avoided), each with a 95% Wilson interval over (rubric, caption) verdicts, and the raw
  "met" rates;
* ``passed``: the teachers' credit interval lies entirely above the student's. When it does not,
  the judge cannot tell the captions apart with these rubrics, and the command exits non-zero.

Regression pitfalls (``kind: regression``: facts the student already had right) are not meant to
separate student from teachers; they are counted apart and always kept. With ``drop``, the rubrics
that do not discriminate are removed and the rest written to
``rubrics.discriminating.jsonl`` beside the summary (images left with no rubric are left out).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from vlrl.core.backends import Backend
from vlrl.core.pipeline import atomic_write_json, read_jsonl, write_jsonl
from vlrl.core.stats import wilson

logger = logging.getLogger(__name__)


def _load_rows(rubrics: str | Path, limit: int | None) -> list[dict[str, Any]]:
    p = Path(rubrics)
    if p.is_dir():
        p = p / "rubrics.jsonl"
    if not p.is_file():
        raise FileNotFoundError(f"{p}: not found; run `vlrl data rubrics` first")
    rows = [r for r in read_jsonl(p) if r.get("rubrics")]
    if not rows:
        raise ValueError(f"{p}: no image with a non-empty rubric set")
    missing = [r["image_id"] for r in rows if not r.get("student_caption") or not r.get("teacher_captions")]
    if missing:
        raise ValueError(f"{p}: rows {missing[:5]} lack student_caption or teacher_captions (not a `vlrl data rubrics` file?)")
    return rows[:limit] if limit else rows


def rubric_discrimination(
    rubrics: str | Path,
    judge: str | Backend,
    *,
    out: str | Path | None = None,
    limit: int | None = None,
    drop: bool = False,
    settings: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Judge student and teacher captions against each image's rubrics; return (and write) the summary."""
    from vlrl.rewards import build_reward

    rows = _load_rows(rubrics, limit)
    reward = build_reward("rubicap_rubric", judge=judge, **(settings or {}))
    reward.keep_verdicts = True
    captions, sets, images, owners = [], [], [], []
    for k, row in enumerate(rows):
        for who, cap in [("student", row["student_caption"]), *[(f"teacher:{n}", c) for n, c in row["teacher_captions"].items()]]:
            captions.append(cap)
            sets.append(row["rubrics"])
            images.append(row.get("image"))
            owners.append((k, who))
    scores = reward.score(captions, rubrics=sets, image=images)

    verdicts: dict[int, dict[str, dict[str, bool]]] = {}
    judge_failures = 0
    for (k, who), s in zip(owners, scores, strict=True):
        if "verdicts" not in s.details:
            judge_failures += 1
            continue
        verdicts.setdefault(k, {})[who] = s.details["verdicts"]

    per_rubric: list[dict[str, Any]] = []
    stu_met = stu_n = tea_met = tea_n = stu_exp = tea_exp = regressions = 0
    kept_rows = []
    for k, row in enumerate(rows):
        got = verdicts.get(k, {})
        kept = []
        for r in row["rubrics"]:
            if r.get("kind") == "regression":  # guards what the student had right: not meant to separate
                regressions += 1
                kept.append(r)
                continue
            pitfall = float(r.get("weight", 1.0)) < 0
            student = got.get("student", {}).get(r["id"])
            teachers = [v[r["id"]] for who, v in got.items() if who != "student" and r["id"] in v]
            entry: dict[str, Any] = {"image_id": row["image_id"], "rubric": r["id"], "criterion": r["criterion"],
                                     "pitfall": pitfall, "student_met": student,
                                     "teacher_met_rate": sum(teachers) / len(teachers) if teachers else None}
            if student is not None:
                stu_n += 1
                stu_met += student
                stu_exp += student == pitfall  # positive: the student fails it; pitfall: commits it
            expected_t = [t != pitfall for t in teachers]
            tea_n += len(teachers)
            tea_met += sum(teachers)
            tea_exp += sum(expected_t)
            entry["teacher_expected_rate"] = sum(expected_t) / len(expected_t) if expected_t else None
            entry["teacher_expected_ci95"] = wilson(sum(expected_t), len(expected_t))
            entry["discriminates"] = bool(
                student is not None and student == pitfall and expected_t and sum(expected_t) * 2 >= len(expected_t)
            )
            per_rubric.append(entry)
            if entry["discriminates"] or not drop:
                kept.append(r)
        if kept:
            kept_rows.append({**row, "rubrics": kept})

    # credit: a positive rubric met or a pitfall avoided; the student should earn little, teachers much
    stu_credit, tea_credit = stu_n - stu_exp, tea_exp
    student_ci, teacher_ci = wilson(stu_credit, stu_n), wilson(tea_credit, tea_n)
    n_disc = sum(e["discriminates"] for e in per_rubric)
    failures = []
    if not stu_n or not tea_n:
        failures.append("the judge returned no usable verdict")
    elif student_ci is None or teacher_ci is None or teacher_ci[0] <= student_ci[1]:
        failures.append(
            f"the judge cannot tell student from teacher captions: credit rate {stu_credit / stu_n:.2f} "
            f"(95% CI {student_ci[0]:.2f}-{student_ci[1]:.2f}) for the student vs {tea_credit / tea_n:.2f} "
            f"({teacher_ci[0]:.2f}-{teacher_ci[1]:.2f}) for the teachers"
        )
    summary: dict[str, Any] = {
        "images": len(rows),
        "rubrics": len(per_rubric),
        "discriminating": n_disc,
        "non_discriminating": len(per_rubric) - n_disc,
        "regression_rubrics": regressions,
        "student_credit_rate": stu_credit / stu_n if stu_n else None,
        "student_credit_ci95": student_ci,
        "teacher_credit_rate": tea_credit / tea_n if tea_n else None,
        "teacher_credit_ci95": teacher_ci,
        "student_met_rate": stu_met / stu_n if stu_n else None,
        "teacher_met_rate": tea_met / tea_n if tea_n else None,
        "student_expected_rate": stu_exp / stu_n if stu_n else None,
        "student_expected_ci95": wilson(stu_exp, stu_n),
        "teacher_expected_rate": tea_exp / tea_n if tea_n else None,
        "teacher_expected_ci95": wilson(tea_exp, tea_n),
        "judge_failures": judge_failures,
        "passed": not failures,
        "failures": failures,
        "per_rubric": per_rubric,
    }
    if out is not None:
        out = Path(out)
        atomic_write_json(out, summary)
        if drop:
            kept_path = out.with_name("rubrics.discriminating.jsonl")
            write_jsonl(kept_path, kept_rows)
            summary["kept_file"] = str(kept_path)
            summary["kept_images"] = len(kept_rows)
            atomic_write_json(out, summary)
    for e in per_rubric:
        if not e["discriminates"]:
            logger.info("%s/%s does not discriminate: %s", e["image_id"], e["rubric"], e["criterion"][:80])
    return summary


__all__ = ["rubric_discrimination"]
