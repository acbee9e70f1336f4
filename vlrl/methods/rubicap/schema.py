"""The rubric writer's answer as a validated schema (pydantic v2), and the checks behind it.

A rubric set is training data that steers a policy for thousands of steps, so a malformed one must be
caught before it lands in a dataset, not discovered as a reward of ``None`` halfway through a run.
The writer's JSON is validated here; what the schema cannot express is checked by hand:

* a consensus fact needs at least two *distinct, known* caption labels behind it (facts that do not
  are dropped and counted: they are the writer's own opinion, not consensus);
* every deficiency gets exactly one rubric, linked by id;
* a rubric's weight is fixed by its deficiency's severity (3.0 / 2.0 / 1.0) — the writer cannot
  invent other weights;
* a rubric must be self-contained: it may not refer to the reference captions, their labels or the
  student, because the judge that applies it sees none of them.

Validation errors are raised as ``ValueError`` with a message written for the writer model itself,
since :func:`vlrl.judge.structured.chat_structured` quotes it back in the corrective turn.
"""

from __future__ import annotations

import json
import re
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from vlrl.core.records import SEVERITY_WEIGHTS, RubricItem, Severity

# Words that only make sense to someone who saw the writer's inputs (the judge never does).
_SELF_REF = re.compile(r"\b(student'?s? (caption|description)|reference captions?|other captions)\b", re.IGNORECASE)
_LABEL_REF = re.compile(r"\b(T\d{1,2})\b")


class _Lenient(BaseModel):
    model_config = ConfigDict(extra="ignore", str_strip_whitespace=True)


class ConsensusFact(_Lenient):
    fact: str = Field(min_length=1)
    sources: list[str] = Field(default_factory=list)

    @field_validator("sources", mode="before")
    @classmethod
    def _listify(cls, v: Any) -> Any:
        return [v] if isinstance(v, str) else v


class Deficiency(_Lenient):
    id: str = Field(min_length=1)
    severity: Severity
    description: str = Field(min_length=1)

    @field_validator("severity", mode="before")
    @classmethod
    def _lower(cls, v: Any) -> Any:
        return v.strip().lower() if isinstance(v, str) else v

    @field_validator("id", mode="before")
    @classmethod
    def _str_id(cls, v: Any) -> Any:
        return str(v) if isinstance(v, int) else v


class RubricDraft(_Lenient):
    id: str | None = None
    deficiency: str = Field(min_length=1)
    criterion: str = Field(min_length=1)
    pass_rule: str = Field(min_length=1)

    @field_validator("id", "deficiency", mode="before")
    @classmethod
    def _str_id(cls, v: Any) -> Any:
        return str(v) if isinstance(v, int) else v


class WriterOutput(_Lenient):
    consensus_facts: list[ConsensusFact] = Field(default_factory=list)
    deficiencies: list[Deficiency] = Field(default_factory=list)
    rubrics: list[RubricDraft] = Field(default_factory=list)


def validate_writer_output(obj: Any, labels: dict[str, str]) -> dict[str, Any]:
    """Check a writer answer; return the cleaned record. ``labels`` maps caption label → teacher name.

    Raises ``ValueError`` (worded for the writer) when the answer cannot be used.
    """
    if not isinstance(obj, dict):
        raise ValueError("the answer must be a JSON object with keys consensus_facts, deficiencies, rubrics")
    out = WriterOutput.model_validate(obj)

    facts, dropped = [], 0
    for f in out.consensus_facts:
        srcs = sorted({s.strip().strip("[]").upper() for s in f.sources} & set(labels))
        if len(srcs) >= 2:
            facts.append({"fact": f.fact, "teachers": [labels[s] for s in srcs]})
        else:
            dropped += 1

    defs = {d.id: d for d in out.deficiencies}
    if len(defs) != len(out.deficiencies):
        raise ValueError("deficiency ids must be unique")
    covered: dict[str, int] = {}
    rubrics: list[dict[str, Any]] = []
    for n, r in enumerate(out.rubrics, 1):
        if r.deficiency not in defs:
            raise ValueError(
                f"rubric {r.id or n} names deficiency {r.deficiency!r}, which is not in the deficiencies list"
            )
        covered[r.deficiency] = covered.get(r.deficiency, 0) + 1
        text = f"{r.criterion} {r.pass_rule}"
        m = _SELF_REF.search(text) or _LABEL_REF.search(text)
        if m:
            raise ValueError(
                f"rubric {r.id or n} is not self-contained: it mentions {m.group(0)!r}; state the fact itself"
            )
        sev = defs[r.deficiency].severity
        item = RubricItem(
            criterion=r.criterion, pass_rule=r.pass_rule, severity=sev, weight=SEVERITY_WEIGHTS[sev], id=f"r{n}"
        )
        rubrics.append({**item.to_dict(), "deficiency": r.deficiency})
    missing = [d for d in defs if d not in covered]
    if missing:
        raise ValueError(f"deficiencies {missing} have no rubric; write exactly one rubric per deficiency")
    doubled = [d for d, c in covered.items() if c > 1]
    if doubled:
        raise ValueError(f"deficiencies {doubled} have more than one rubric; write exactly one per deficiency")
    return {
        "consensus_facts": facts,
        "deficiencies": [d.model_dump() for d in out.deficiencies],
        "rubrics": rubrics,
        "dropped_facts": dropped,
    }


def parse_rubric_set(value: Any) -> list[RubricItem]:
    """A dataset's ``rubrics`` cell (list of dicts or records, or its JSON string) → rubric items.

    Missing ids become ``r1, r2, ...`` (duplicates are renumbered); a missing weight comes from the
    severity. Raises ``ValueError`` naming the problem for a malformed set.
    """
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as e:
            raise ValueError(f"rubrics column is not valid JSON ({e.msg})") from None
    if value is None:
        return []
    if isinstance(value, dict):
        value = value.get("rubrics", [])
    if not isinstance(value, (list, tuple)):
        raise ValueError(f"rubrics must be a list, got {type(value).__name__}")
    out: list[RubricItem] = []
    seen: set[str] = set()
    for n, item in enumerate(value, 1):
        if isinstance(item, RubricItem):
            item = item.to_dict()
        if not isinstance(item, dict):
            raise ValueError(f"rubric {n} is a {type(item).__name__}, not an object")
        item = {k: v for k, v in item.items() if v is not None}
        rid = str(item.get("id") or f"r{n}")
        if rid in seen:
            rid = f"r{n}"
        seen.add(rid)
        item["id"] = rid
        item.setdefault("pass_rule", "Pass if the caption satisfies the criterion; fail otherwise.")
        try:
            out.append(RubricItem.from_dict(item))
        except (TypeError, ValueError) as e:
            raise ValueError(f"rubric {n} is malformed: {e}") from None
    return out
