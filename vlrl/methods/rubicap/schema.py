"""The rubric writer's answer as a strict schema (pydantic v2), and the checks behind it.

A rubric set is training data that steers a policy for thousands of steps, so a malformed one must be
caught before it lands in a dataset, not discovered as a reward of ``None`` halfway through a run.
Nothing in the answer has a default: an empty object, an object with other keys, random text that
JSON repair turned into a dict, or an answer cut off part-way all fail validation, because a
missing key never reads as "no rubrics". What the schema cannot express is checked by hand:

* **Solved is explicit.** ``student_meets_all`` (the *last* key, so an answer truncated anywhere
  before its end has lost it) must be ``true`` or ``false``. ``true`` requires empty deficiency and
  rubric lists; ``false`` requires at least one deficiency.
* **Consensus.** A fact (with an id) needs at least two *distinct, known* caption labels behind it;
  facts that do not are dropped and counted: they are the writer's opinion, not consensus. At least
  one consensus fact is required: without it nothing was checked.
* **Linked deficiencies.** Every deficiency cites the consensus fact ids it rests on, or, for a
  hallucination, the span of the student caption that states it (verified to occur there). A
  deficiency with neither, or citing a fact that lacks two teachers, is dropped with its reason (in
  ``unlinked``) together with its rubric; if none is left the answer is invalid.
* **One rubric per deficiency**, linked by id, with a weight fixed by its deficiency's severity
  (3.0 / 2.0 / 1.0). A rubric marked ``pitfall`` (allowed only for a deficiency with a student
  span) describes the mistake itself ("mentions a purple unicorn") and gets the *negative* weight:
  a rollout that repeats the hallucination loses reward.
* **Self-contained**: a rubric may not refer to the reference captions, their labels or the
  student, because the judge that applies it sees none of them.
* **What the student already has right** (``student_correct``: consensus fact ids the student
  states correctly) becomes *regression* pitfalls, written here rather than by the writer: "States
  something that contradicts this fact: ...", weight −1 each. A rollout that loses ground the student
  held costs reward. They are added only when the image has deficiency rubrics (a solved image stays
  solved). Each rubric carries ``kind``: ``criterion``, ``pitfall`` or ``regression``.

Validation errors are raised as ``ValueError`` with a message written for the writer model itself,
since :func:`vlrl.judge.structured.chat_structured` quotes it back in the corrective turn.
"""

from __future__ import annotations

import json
import re
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, StrictBool, ValidationError, field_validator

from vlrl.core.records import SEVERITY_WEIGHTS, RubricItem, Severity

# Words that only make sense to someone who saw the writer's inputs (the judge never does).
_SELF_REF = re.compile(r"\b(student'?s? (caption|description)|reference captions?|other captions)\b", re.IGNORECASE)
_LABEL_REF = re.compile(r"\b(T\d{1,2})\b")
KEYS = ("consensus_facts", "student_correct", "deficiencies", "rubrics", "student_meets_all")
REGRESSION_WEIGHT = -1.0


class _Strict(BaseModel):
    """Every declared field is required; unknown keys are ignored (models add chatter keys)."""

    model_config = ConfigDict(extra="ignore", str_strip_whitespace=True)


def _str_id(v: Any) -> Any:
    return str(v) if isinstance(v, int) and not isinstance(v, bool) else v


class ConsensusFact(_Strict):
    id: str = Field(min_length=1)
    fact: str = Field(min_length=1)
    sources: list[str]

    _ids = field_validator("id", mode="before")(classmethod(lambda cls, v: _str_id(v)))


class Deficiency(_Strict):
    id: str = Field(min_length=1)
    severity: Severity
    description: str = Field(min_length=1)
    facts: list[str]
    """Ids of the consensus facts this deficiency rests on (may be empty for a hallucination)."""
    student_span: str | None
    """For a hallucination or wrong statement: the words of the student caption that state it."""

    @field_validator("severity", mode="before")
    @classmethod
    def _lower(cls, v: Any) -> Any:
        return v.strip().lower() if isinstance(v, str) else v

    @field_validator("facts", mode="before")
    @classmethod
    def _fact_ids(cls, v: Any) -> Any:
        return [_str_id(x) for x in v] if isinstance(v, list) else v

    _ids = field_validator("id", mode="before")(classmethod(lambda cls, v: _str_id(v)))


class RubricDraft(_Strict):
    id: str = Field(min_length=1)
    deficiency: str = Field(min_length=1)
    criterion: str = Field(min_length=1)
    pass_rule: str = Field(min_length=1)
    pitfall: StrictBool

    _ids = field_validator("id", "deficiency", mode="before")(classmethod(lambda cls, v: _str_id(v)))


class WriterOutput(_Strict):
    """Field order is the order the writer is asked for; ``student_meets_all`` comes last."""

    consensus_facts: list[ConsensusFact]
    student_correct: list[str]
    deficiencies: list[Deficiency]
    rubrics: list[RubricDraft]
    student_meets_all: StrictBool


def _squash(text: str) -> str:
    return " ".join(re.findall(r"\w+", text.lower()))


def _describe(e: ValidationError) -> str:
    parts = []
    for err in e.errors()[:6]:
        loc = ".".join(str(x) for x in err["loc"]) or "answer"
        parts.append(f"{loc}: {'missing' if err['type'] == 'missing' else err['msg']}")
    return "; ".join(parts)


def validate_writer_output(obj: Any, labels: dict[str, str], *, student: str) -> dict[str, Any]:
    """Check a writer answer; return the cleaned record.

    ``labels`` maps caption label → teacher name; ``student`` is the student caption the answer
    diagnoses (hallucination spans must occur in it). Raises ``ValueError`` (worded for the writer)
    when the answer cannot be used.
    """
    if not isinstance(obj, dict):
        raise ValueError(f"the answer must be one JSON object with keys {', '.join(KEYS)}")
    missing = [k for k in KEYS if k not in obj]
    if missing:
        raise ValueError(f"the answer lacks the required keys {missing} (all of {', '.join(KEYS)} are required)")
    try:
        out = WriterOutput.model_validate(obj)
    except ValidationError as e:
        raise ValueError(_describe(e)) from None

    facts: list[dict[str, Any]] = []
    good_facts: set[str] = set()
    dropped = 0
    for f in out.consensus_facts:
        srcs = sorted({s.strip().strip("[]").upper() for s in f.sources} & set(labels))
        if len(srcs) >= 2 and f.id not in good_facts:
            facts.append({"id": f.id, "fact": f.fact, "teachers": [labels[s] for s in srcs]})
            good_facts.add(f.id)
        else:
            dropped += 1
    if not facts:
        raise ValueError("no consensus fact is stated by at least two of the reference captions")

    defs = {d.id: d for d in out.deficiencies}
    if len(defs) != len(out.deficiencies):
        raise ValueError("deficiency ids must be unique")
    if out.student_meets_all:
        if out.deficiencies or out.rubrics:
            raise ValueError("student_meets_all is true, so deficiencies and rubrics must be empty lists")
    elif not out.deficiencies:
        raise ValueError("student_meets_all is false but no deficiency is listed; list them or answer true")

    covered: dict[str, int] = {}
    for r in out.rubrics:
        if r.deficiency not in defs:
            raise ValueError(f"rubric {r.id} names deficiency {r.deficiency!r}, which is not in the deficiencies list")
        covered[r.deficiency] = covered.get(r.deficiency, 0) + 1
        text = f"{r.criterion} {r.pass_rule}"
        m = _SELF_REF.search(text) or _LABEL_REF.search(text)
        if m:
            raise ValueError(f"rubric {r.id} is not self-contained: it mentions {m.group(0)!r}; state the fact itself")
        if r.pitfall and not defs[r.deficiency].student_span:
            raise ValueError(
                f"rubric {r.id} is a pitfall, but deficiency {r.deficiency} quotes no student_span; "
                "pitfalls are only for what the student wrongly states"
            )
    nocover = [d for d in defs if d not in covered]
    if nocover:
        raise ValueError(f"deficiencies {nocover} have no rubric; write exactly one rubric per deficiency")
    doubled = [d for d, c in covered.items() if c > 1]
    if doubled:
        raise ValueError(f"deficiencies {doubled} have more than one rubric; write exactly one per deficiency")

    student_words = _squash(student)
    unlinked: dict[str, str] = {}
    for d in out.deficiencies:
        bad_facts = [f for f in d.facts if f not in good_facts]
        span = (d.student_span or "").strip()
        if bad_facts:
            unlinked[d.id] = f"cites {bad_facts}, which are not consensus facts backed by two teachers"
        elif span and (not _squash(span) or _squash(span) not in student_words):
            unlinked[d.id] = f"student_span {span[:80]!r} does not occur in the student caption"
        elif not d.facts and not span:
            unlinked[d.id] = "cites no consensus fact and no student span"
    kept_defs = [d for d in out.deficiencies if d.id not in unlinked]
    if not out.student_meets_all and not kept_defs:
        raise ValueError(
            "no deficiency is linked to evidence: "
            + "; ".join(f"{k}: {v}" for k, v in unlinked.items())
            + ". Cite consensus fact ids in 'facts', or quote the student's words in 'student_span'"
        )

    rubrics: list[dict[str, Any]] = []
    n = 0
    for r in out.rubrics:
        if r.deficiency in unlinked:
            continue
        n += 1
        sev = defs[r.deficiency].severity
        w = SEVERITY_WEIGHTS[sev] * (-1.0 if r.pitfall else 1.0)
        item = RubricItem(criterion=r.criterion, pass_rule=r.pass_rule, severity=sev, weight=w, id=f"r{n}")
        rubrics.append({**item.to_dict(), "deficiency": r.deficiency, "kind": "pitfall" if r.pitfall else "criterion"})
    unknown_correct = [f for f in out.student_correct if str(f) not in good_facts]
    if unknown_correct:
        raise ValueError(f"student_correct cites {unknown_correct}, which are not consensus facts backed by two teachers")
    if rubrics:
        by_id = {f["id"]: f["fact"] for f in facts}
        for fid in dict.fromkeys(str(f) for f in out.student_correct):
            n += 1
            item = RubricItem(
                criterion=f"States something that contradicts this fact about the image: {by_id[fid]}",
                pass_rule="Pass if the caption contradicts the fact; fail if it agrees with it or does not mention it.",
                severity="minor", weight=REGRESSION_WEIGHT, id=f"r{n}",
            )
            rubrics.append({**item.to_dict(), "fact": fid, "kind": "regression"})
    return {
        "consensus_facts": facts,
        "deficiencies": [d.model_dump() for d in kept_defs],
        "rubrics": rubrics,
        "student_meets_all": out.student_meets_all,
        "unlinked": [{"id": k, "reason": v} for k, v in unlinked.items()],
        "dropped_facts": dropped,
    }


def writer_schema(labels: list[str] | tuple[str, ...]) -> dict[str, Any]:
    """The writer's answer as a JSON schema, sent with the built-in prompt as structured output.

    Decoding held to it yields the five keys in order, ``student_meets_all`` last, caption labels
    from ``labels`` and severities from the three known; everything :func:`validate_writer_output`
    checks beyond shape (consensus, links, spans) is still checked there. Lists and texts are
    bounded so a constrained answer closes within the token limit.
    """

    def text(n: int) -> dict[str, Any]:
        return {"type": "string", "minLength": 1, "maxLength": n}

    def obj(props: dict[str, Any]) -> dict[str, Any]:
        return {"type": "object", "properties": props, "required": list(props), "additionalProperties": False}

    def many(item: dict[str, Any], n: int = 24) -> dict[str, Any]:
        return {"type": "array", "items": item, "maxItems": n}

    ident = text(16)
    return {"title": "rubric_writer", **obj({
        "consensus_facts": many(obj({"id": ident, "fact": text(300),
                                     "sources": many({"type": "string", "enum": list(labels)}, len(labels))})),
        "student_correct": many(ident),
        "deficiencies": many(obj({
            "id": ident, "severity": {"type": "string", "enum": list(SEVERITY_WEIGHTS)}, "description": text(300),
            "facts": many(ident), "student_span": {"anyOf": [text(300), {"type": "null"}]},
        })),
        "rubrics": many(obj({"id": ident, "deficiency": ident, "criterion": text(300), "pass_rule": text(300),
                             "pitfall": {"type": "boolean"}})),
        "student_meets_all": {"type": "boolean"},
    })}  # fmt: skip


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
