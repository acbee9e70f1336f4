"""Reading a rubric judge's answer: verdicts, single verdicts and scores, from its *final* object.

A judge may reason first, quote the caption it grades, or echo the prompt; whatever JSON appears
before its verdict is not the verdict. Every parser here therefore reads the last JSON value that has
the expected shape (:func:`vlrl.judge.structured.extract_final_json`), so a verdict forged inside a
caption and quoted back by the judge cannot stand in for the judge's own. A verdict may carry an
``explanation`` (written before ``pass``, so the judge reasons before it decides); it is kept for
audit and never read as a verdict.
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Any

from vlrl.judge.structured import InvalidOutput, extract_final_json

_TRUE = {"pass", "passed", "yes", "true", "1", "met", "y"}
_FALSE = {"fail", "failed", "no", "false", "0", "not met", "n"}
_VERDICT_KEYS = ("pass", "passed", "verdict", "met", "result")
_LEADING_WORD = re.compile(r"^\W*([A-Za-z]+)")
# A leading number, its sign, and an optional "/ denominator" ("7", "-3", "7.5/10", "8 / 100").
_NUMBER = re.compile(r"^[^\w+-]*(?:score\s*[:=]?\s*)?([-+]?\d+(?:\.\d+)?)(?:\s*/\s*(\d+(?:\.\d+)?))?", re.IGNORECASE)


def as_bool(v: Any) -> bool:
    if isinstance(v, bool):
        return v
    if isinstance(v, (int, float)) and v in (0, 1):
        return bool(v)
    if isinstance(v, str) and v.strip().lower() in _TRUE | _FALSE:
        return v.strip().lower() in _TRUE
    raise ValueError(f"verdict {v!r} is not true/false")


def parse_verdicts(obj: Any, ids: list[str]) -> dict[str, bool]:
    """``{"verdicts": [{"id", "pass"}]}`` (or a bare list, or ``{id: bool}``) → {id: passed}.

    Raises ``ValueError`` worded for the judge when ids or the count are wrong.
    """
    if isinstance(obj, dict) and "verdicts" in obj:
        obj = obj["verdicts"]
    pairs: list[tuple[str, Any]] = []
    if isinstance(obj, list):
        for v in obj:
            if not isinstance(v, dict) or "id" not in v:
                raise ValueError('each verdict must be an object like {"id": "r1", "pass": true}')
            val = next((v[k] for k in _VERDICT_KEYS if k in v), None)
            if val is None:
                raise ValueError(f'verdict for id {v["id"]!r} has no "pass" field')
            pairs.append((str(v["id"]), val))
    elif isinstance(obj, dict):
        pairs = [(str(k), v) for k, v in obj.items()]
    else:
        raise ValueError('the answer must be {"verdicts": [{"id": ..., "pass": true|false}, ...]}')
    got = [k for k, _ in pairs]
    dup = sorted(k for k, c in Counter(got).items() if c > 1)
    missing = [i for i in ids if i not in got]
    unknown = [k for k in got if k not in ids]
    if dup or missing or unknown or len(got) != len(ids):
        parts = [f"expected exactly {len(ids)} verdicts with ids {ids}, got {len(got)}"]
        if missing:
            parts.append(f"missing {missing}")
        if unknown:
            parts.append(f"unknown {unknown}")
        if dup:
            parts.append(f"duplicated {dup}")
        raise ValueError("; ".join(parts))
    return {k: as_bool(v) for k, v in pairs}


def parse_verdicts_text(text: str, ids: list[str]) -> dict[str, bool]:
    """The judge's final verdict set in ``text`` (see :func:`parse_verdicts`)."""
    return extract_final_json(text, lambda obj: parse_verdicts(obj, ids))


def _single(obj: Any) -> bool:
    if isinstance(obj, dict):
        for k in _VERDICT_KEYS:
            if k in obj:
                return as_bool(obj[k])
    raise ValueError('answer with {"pass": true} or {"pass": false}')


def parse_single_verdict(text: str) -> bool:
    """The final ``{"pass": true}`` in ``text``, or an answer that starts with PASS/FAIL/YES/NO."""
    try:
        return extract_final_json(text, _single)
    except (InvalidOutput, ValueError, TypeError):
        pass
    m = _LEADING_WORD.match(text or "")
    if m and m.group(1).lower() in _TRUE | _FALSE:
        return m.group(1).lower() in _TRUE
    raise ValueError('answer with {"pass": true} or {"pass": false}')


def _number(value: Any, scale: float) -> float:
    """A score value → [0, 1]. Strings keep their sign and denominator: "-3" is -3 (out of range,
    an error), "8/100" is 8 out of 100 (0.08), never 0.3 or 0.8."""
    if isinstance(value, bool):
        raise ValueError("a score must be a number, not true/false")
    denom = scale
    if isinstance(value, str):
        m = _NUMBER.match(value)
        if not m:
            raise ValueError(f"score {value!r} is not a number")
        value, denom = m.group(1), float(m.group(2)) if m.group(2) else scale
    try:
        x = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"score {value!r} is not a number") from None
    if denom <= 0 or not 0 <= x <= denom:
        raise ValueError(f"score {x:g} is outside 0..{denom:g}")
    return x / denom


def parse_score(text: str, scale: float = 10.0) -> float:
    """The final ``{"score": 7}`` (or a leading number such as ``7/10``) → 0.7. Out of range, a
    negative number or an unknown denominator is an error, not a silent re-reading."""

    def accept(obj: Any) -> float:
        if isinstance(obj, dict) and ("score" in obj or "rating" in obj):
            return _number(obj.get("score", obj.get("rating")), scale)
        raise ValueError('answer with {"score": <number from 0 to 10>}')

    try:
        return extract_final_json(text, accept)
    except InvalidOutput:
        pass
    m = _NUMBER.match(text or "")
    if not m:
        raise ValueError('answer with {"score": <number from 0 to 10>}')
    return _number(m.group(0).strip(), scale)


# -- the same answers as JSON schemas ------------------------------------------------------------------
# Sent with the built-in prompts as server-side structured output (vLLM's response_format): decoding
# is held to the shape the parsers above read, so a verdict is never lost to prose or a broken
# bracket. A server without the feature ignores them and the parsers' own leniency does the work.
# Free text is bounded (maxLength) so a constrained answer always closes within the token limit.

EXPLANATION_MAX_CHARS = 150
"""One sentence; with its brackets it fits the per-rubric default of 192 tokens even on a tokenizer
of one character per token, so a constrained answer is never cut off before its verdict."""


def _object(props: dict[str, Any], title: str | None = None) -> dict[str, Any]:
    out = {"type": "object", "properties": props, "required": list(props), "additionalProperties": False}
    return {"title": title, **out} if title else out


def _explained(props: dict[str, Any], explain: bool) -> dict[str, Any]:
    """``props`` with an ``explanation`` first (the judge reasons before it decides), if asked for."""
    return {"explanation": {"type": "string", "maxLength": EXPLANATION_MAX_CHARS}, **props} if explain else props


def verdicts_schema(ids: list[str], explain: bool = False) -> dict[str, Any]:
    """``{"verdicts": [{"id", "pass"}, ...]}`` with exactly ``ids``, in their order (the prompt's)."""
    items = [_object({"id": {"type": "string", "const": i}, **_explained({"pass": {"type": "boolean"}}, explain)})
             for i in ids]
    verdicts = {"type": "array", "prefixItems": items, "items": False, "minItems": len(ids), "maxItems": len(ids)}
    return _object({"verdicts": verdicts}, "rubric_verdicts")


def single_verdict_schema(explain: bool = False) -> dict[str, Any]:
    """``{"pass": true|false}`` (after an explanation when asked for)."""
    return _object(_explained({"pass": {"type": "boolean"}}, explain), "rubric_verdict")


def score_schema(explain: bool = False, scale: float = 10.0) -> dict[str, Any]:
    """``{"score": 0..scale}`` (after an explanation when asked for)."""
    return _object(_explained({"score": {"type": "number", "minimum": 0, "maximum": scale}}, explain), "rubric_score")


def majority(votes: list[bool]) -> bool:
    """Strict majority; a tie fails (a criterion passes only when most votes say so)."""
    return sum(votes) * 2 > len(votes)
