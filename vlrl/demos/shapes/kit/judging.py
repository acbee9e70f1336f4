"""How the shapes demos judge captions: a rule-based reader that learned nothing, and intervals.

**The reader** (:func:`reader_eval`) is the demos' headline judge. It reads a caption with the
world's grammar (:func:`vlrl.demos.shapes.kit.world.parse_caption`) and answers each held-out
question from what the caption states (:func:`vlrl.demos.shapes.kit.world.answer_from_caption`),
then compares that with the scene's truth. It has no weights and no training data, so nothing a
reward model learned can leak into it; :func:`check_reader` checks it against the scenes themselves
(every question right from the scene's full caption, every question "cannot answer" from an empty
one). What it does not do: read a caption outside the grammar. Such a caption answers nothing (as
for the reward answerer, which was taught the same reading), and ``parse_rate`` says how many
captions that was. It is not independent of the *world*: it and the reward answerer's labels
share the grammar and the parser; what it shares with no reward is anything learned.

Verdicts, per question: *right* (the caption settles it and is true), *wrong* (the caption
settles it on the other option: it stated something false or invented), *cannot answer* (the
caption leaves it open, or states a value that is neither option).

**Intervals**: questions about one image are not independent draws, so every rate carries a 95%
percentile bootstrap interval over scenes (:func:`vlrl.core.stats.bootstrap_ratio`, resampling an
image with all its questions), and a before/after gain the paired interval over the same scenes.
"""

from __future__ import annotations

from typing import Any

from vlrl.core.stats import bootstrap_ratio
from vlrl.demos.shapes.kit import world as W

RATES = (("acc", 0), ("hallucination_rate", 1), ("cannot_answer_rate", 2))
"""Each rate's name and its column in a ``per_caption_counts`` row ``[right, wrong, cannot, asked]``."""


def _question(q: dict[str, Any]) -> W.Question:
    return W.Question(**{k: q[k] for k in ("id", "kind", "question", "options", "answer", "key")})


def read_answer(stated: list[W.Item] | None, q: W.Question) -> str:
    """``right``, ``wrong`` or ``cannot`` for ``q`` given what a caption states."""
    value = W.answer_from_caption(stated, q)
    if value == q.answer:
        return "right"
    return "wrong" if value in q.options else "cannot"


def reader_eval(captions: list[str], rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Every question of each row answered from its caption by the rule-based reader.

    Same keys as the learned judges' evaluation (``acc``, ``hallucination_rate``,
    ``cannot_answer_rate``, ``asks``, ``per_scene``, ``per_caption_counts``) plus ``by_kind``
    (``{question kind: [right, asked]}``). One verdict per question: the reader does not depend on
    option order, so asking both orders would only count each verdict twice."""
    counts, by_kind = [], {}
    for cap, r in zip(captions, rows, strict=True):
        stated = W.parse_caption(cap or "")
        c = [0, 0, 0, 0]
        for qd in r["questions"]:
            v = read_answer(stated, _question(qd))
            c[{"right": 0, "wrong": 1, "cannot": 2}[v]] += 1
            c[3] += 1
            k = by_kind.setdefault(qd["kind"], [0, 0])
            k[0] += v == "right"
            k[1] += 1
        counts.append(c)
    total = max(1, sum(c[3] for c in counts))
    out = {name: sum(c[col] for c in counts) / total for name, col in RATES}
    out.update(asks=sum(c[3] for c in counts), errors=0, per_scene=[c[0] / c[3] if c[3] else None for c in counts],
               per_caption_counts=counts, by_kind=by_kind)
    return out


def check_reader(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The reader against the scenes: accuracy from each scene's full caption (must be 1.0) and the
    share of "cannot answer" from an empty caption (must be 1.0). A reader failing this would
    misjudge every run, so the demo stores the check beside its numbers."""
    full = reader_eval([r["caption_full"] for r in rows], rows)
    empty = reader_eval(["" for _ in rows], rows)
    return {"full_caption_acc": full["acc"], "empty_caption_cannot": empty["cannot_answer_rate"], "asks": full["asks"]}


def interval(num: list[float], den: list[float], seed: int = 0) -> list[float] | None:
    """95% bootstrap interval over scenes of ``sum(num) / sum(den)``, rounded; None without data."""
    ci = bootstrap_ratio(num, den, seed=seed)
    return None if ci is None else [round(ci[0], 4), round(ci[1], 4)]


def rate_intervals(res: dict[str, Any], seed: int = 0) -> dict[str, list[float] | None]:
    """``{rate}_ci`` for each rate of a judge result that has ``per_caption_counts``."""
    counts = res.get("per_caption_counts") or []
    den = [c[3] for c in counts]
    return {f"{name}_ci": interval([c[col] for c in counts], den, seed) for name, col in RATES}


def gain_interval(before: dict[str, Any], after: dict[str, Any], seed: int = 0) -> list[float] | None:
    """Paired interval of ``after.acc - before.acc`` over the same scenes and questions."""
    b, a = before.get("per_caption_counts") or [], after.get("per_caption_counts") or []
    if len(a) != len(b) or not a or any(x[3] != y[3] for x, y in zip(a, b, strict=True)):
        return None
    return interval([x[0] - y[0] for x, y in zip(a, b, strict=True)], [x[3] for x in a], seed)


def kind_accuracy(res: dict[str, Any]) -> dict[str, float]:
    """Accuracy per question kind from a reader result's ``by_kind``."""
    return {k: round(r / n, 4) for k, (r, n) in sorted((res.get("by_kind") or {}).items()) if n}


def fact_marks(caption: str, scene: W.Scene) -> list[tuple[str, bool]] | None:
    """The caption as (text, is_wrong) pieces, each stated value checked against the scene's item in
    that slot (an item in a slot the scene does not have is wrong as a whole); None outside the grammar."""
    items = W.parse_caption(caption or "")
    if items is None:
        return None
    truth = {it.position: it for it in scene.items}
    pieces: list[tuple[str, bool]] = []
    for n, it in enumerate(items):
        if n:
            pieces.append((" and " if n == len(items) - 1 else ", ", False))
        t = truth.get(it.position)
        if t is None or t.is_word != it.is_word:
            pieces.append((f"{W.item_phrase(it)} {W.WHERE[it.position]}", True))
            continue
        if it.is_word:
            pieces += [("the word ", False), (it.word, it.word != t.word)] if it.word else [("a word", False)]
        else:
            pieces.append(("a", False))
            for attr in ("size", "colour"):
                v = getattr(it, attr)
                if v:
                    pieces += [(" ", False), (v, v != getattr(t, attr))]
            pieces += [(" ", False), (it.shape, it.shape != t.shape) if it.shape else ("shape", False)]
        pieces.append((f" {W.WHERE[it.position]}", False))
    pieces.append((".", False))
    return pieces
