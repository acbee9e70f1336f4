"""Prism's scoring: how a short answer is checked against the benchmark's gold answers.

Split from :mod:`vlrl.methods.caprl.prism` (which re-exports every name) so the evaluation loop reads on
its own; the metric rules are documented there.
"""

from __future__ import annotations

import re
from typing import Any

from vlrl.rewards.answer_check import last_boxed, math_equal, math_number

_NUMBER = re.compile(r"[-+]?\d[\d,]*\.?\d*(?:e[-+]?\d+)?|[-+]?\.\d+", re.I)


# -- metrics ------------------------------------------------------------------------------------


def parse_number(text: Any) -> float | None:
    """First number in ``text`` (``"1,234.5"``, ``"45%"``, ``"$3"``); ``None`` if there is none."""
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        return float(text)
    m = _NUMBER.search(str(text or ""))
    if not m:
        return None
    try:
        return float(m.group(0).replace(",", ""))
    except ValueError:
        return None


def _norm(s: Any) -> str:
    return " ".join(str(s).strip().lower().rstrip(".").split())


def relaxed_accuracy(pred: str, gold: Any, tolerance: float = 0.05, scales: str = "percent") -> float:
    """``scales="percent"``: ×100 and ×0.01 are tried only when either side carries a ``%``;
    ``"public"``: on every number, as the public CapRL evaluation does (so ``0.5`` matches ``50``)."""
    g, p = parse_number(gold), parse_number(pred)
    if g is None or p is None:
        return float(_norm(pred) == _norm(gold))
    candidates = [p]
    if scales == "public" or "%" in str(pred) or "%" in str(gold):  # 45% vs 0.45: one quantity, two ways
        candidates += [p * 100, p / 100]
    for c in candidates:
        if (g == 0 and c == 0) or (g != 0 and abs(c - g) / abs(g) <= tolerance):
            return 1.0
    return 0.0


def exact_match(pred: str, gold: Any) -> float:
    """Case/whitespace-normalised equality; numbers compare by value (``2019`` = ``2019.0``)."""
    g, p = parse_number(gold), parse_number(pred)
    if g is not None and p is not None and _is_number(str(gold)) and _is_number(str(pred)):
        return float(g == p)
    return float(_norm(pred) == _norm(gold))


def _is_number(s: str) -> bool:
    return bool(re.fullmatch(r"\s*[-+]?[\d,]*\.?\d+\s*%?\s*", s))


def _levenshtein(a: str, b: str) -> int:
    prev = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        cur = [i]
        for j, cb in enumerate(b, 1):
            cur.append(min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (ca != cb)))
        prev = cur
    return prev[-1]


def anls(pred: str, golds: list[Any], threshold: float = 0.5) -> float:
    """Average normalised Levenshtein similarity against the closest gold answer."""
    p = _norm(pred)
    best = 0.0
    for g in golds:
        g = _norm(g)
        if not p and not g:
            return 1.0
        nl = _levenshtein(p, g) / max(len(p), len(g), 1)
        best = max(best, 1.0 - nl if nl < threshold else 0.0)
    return best


_ANLS_BENCHMARKS = ("infovqa", "docvqa", "infographic")
_YEAR = re.compile(r"\s*(1[5-9]|20)\d\d\s*")


def question_type(row: dict[str, Any]) -> str:
    """``mc``, ``numeric``, ``exact`` or ``text``: declared, else inferred (see module doc)."""
    declared = row.get("type")
    if declared in QUESTION_TYPES:
        return declared
    if row.get("options"):
        return "mc"
    answer = str(row.get("answer"))
    numeric = parse_number(row.get("answer")) is not None and re.fullmatch(r"[\s\d.,%$+\-e]+", answer)
    if any(b in str(row.get("benchmark") or "").lower() for b in _ANLS_BENCHMARKS):
        return "text"
    if not numeric:
        return "exact"
    return "exact" if _YEAR.fullmatch(answer) else "numeric"


QUESTION_TYPES = ("mc", "numeric", "exact", "text")


def score_short(pred: str, golds: list[Any], qtype: str, scales: str = "percent") -> float:
    """Best score of ``pred`` against any gold answer under the type's metric.

    ``scales="public"`` (``--preset caprl_public``) follows the public evaluation, which scores
    every chart/infographic answer with relaxed accuracy (InfoVQA: the better of it and ANLS): a
    year-like gold (``exact`` here) and an ANLS benchmark's number get relaxed credit too; a text
    answer is still an exact match (relaxed accuracy needs one for text)."""
    if qtype == "numeric":
        return max(relaxed_accuracy(pred, g, scales=scales) for g in golds)
    base = max(exact_match(pred, g) for g in golds) if qtype == "exact" else anls(pred, golds)
    if scales == "public":
        return max(base, *(relaxed_accuracy(pred, g, scales=scales) for g in golds))
    return base


def boxed_answer(text: str) -> str | None:
    """The content of the last ``\\boxed{...}`` in ``text`` (nested braces allowed), or None.

    Read by :func:`vlrl.rewards.answer_check.last_boxed`, the reader Vision-R1's reward uses, so
    ``\\fbox{}`` counts too."""
    boxed = last_boxed(text)
    return None if boxed is None else boxed.strip()


def plain_answer(boxed: str) -> str:
    """A boxed LaTeX answer as plain text for the type's metric: a number's value (``\\frac{25}{2}``
    → ``12.5``, so relaxed accuracy applies), else the text without ``\\text{}`` wrappers."""
    value = math_number(boxed)
    if value is not None:
        return str(value)
    return re.sub(r"\\text\{([^}]*)\}", r"\1", boxed)


def verified(pred: str, golds: list[Any]) -> bool:
    """math-verify equivalence of the boxed answer with any gold answer (numbers, fractions, LaTeX),
    each check bounded in time (:func:`vlrl.rewards.answer_check.math_equal`)."""
    return any(math_equal(pred, str(g)) for g in golds)


def short_answer(text: str) -> str:
    """The answer part of a free-text reply: first line, "The answer is" and trailing dot removed."""
    line = (text or "").strip().splitlines()[0] if (text or "").strip() else ""
    line = re.sub(r"^\s*(the\s+)?(final\s+)?answer\s*(is)?\s*:?\s*", "", line, flags=re.I)
    return line.strip().rstrip(".").strip()
