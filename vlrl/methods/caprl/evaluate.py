"""Caption-QA evaluation: how much a text-only judge learns about an image from its caption.

The ``caprl_qa`` reward is a *training signal*: it draws a few questions per caption and scores the
expected correctness. Evaluating a captioner asks for something stricter and easier to read:

* **every** question of each caption is asked, once in each *rotation* of its options (every
  option in every position once, so a judge's position bias cancels; both orders for two options);
* the judge's verdict is its **most probable letter** (``ask`` in exact mode: one forward pass,
  no sampling noise), with "Cannot answer based on the caption" offered last as in the reward;
* each verdict is one of three outcomes: right; a **wrong concrete option** (the caption stated
  or invented something false: the hallucination rate); or **cannot answer** (the caption left
  the fact out: an omission, not a lie).

The judge must never be the model that produced a training reward: an answerer used as reward is
exactly what a policy learns to please. Give an independently trained one (the shapes demo trains
its judge with another seed) and, if wanted, report the reward answerer beside it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from vlrl.core.backends import Backend, load_backend
from vlrl.core.prompts import render
from vlrl.core.records import MCQ
from vlrl.methods.caprl.ask import Ask, ask
from vlrl.methods.caprl.mcq import CANNOT_ANSWER, MCQError, coerce_questions, make_mcq, normalize_mcq, present


@dataclass
class CaptionQAResult:
    acc: float
    """Share of verdicts that pick the gold option."""
    hallucination_rate: float
    """Share that pick a wrong concrete option."""
    cannot_answer_rate: float
    """Share that pick "cannot answer"."""
    asks: int
    """Verdicts counted (questions × rotations); failed requests count as not right."""
    errors: int = 0
    per_caption: list[float | None] = field(default_factory=list)
    """Accuracy of each caption (``None`` for a caption without a usable question)."""
    per_caption_counts: list[list[int]] = field(default_factory=list)
    """``[right, wrong, cannot answer, verdicts]`` of each caption: what an interval over captions
    (a cluster bootstrap, :func:`vlrl.core.stats.bootstrap_ratio`) needs."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def rotations(mcq: MCQ) -> list[MCQ]:
    """The question with its options rotated so that each option sits in each position once."""
    n, opts = len(mcq.options), list(mcq.options)
    return [make_mcq(mcq.question, opts[k:] + opts[:k], (mcq.answer_index - k) % n) for k in range(n)]


def caption_qa_eval(
    judge: Backend | str,
    captions: Sequence[str],
    questions: Sequence[Any],
    *,
    prompt: str = "caprl_answer",
    cannot_answer: str = CANNOT_ANSWER,
) -> CaptionQAResult:
    """Ask ``judge`` every question of ``questions[i]`` about ``captions[i]`` (see the module docstring).

    ``questions[i]`` is a list of MCQs in any shape :func:`~vlrl.methods.caprl.mcq.normalize_mcq`
    accepts (or a JSON string of one); malformed questions are skipped. ``prompt`` names the
    answer template (variables ``caption``, ``question``, ``options``), as in the reward.
    """
    if len(captions) != len(questions):
        raise ValueError(f"caption_qa_eval: {len(captions)} captions but {len(questions)} question lists")
    backend = load_backend(judge) if isinstance(judge, str) else judge
    asks, owner = [], []
    for i, (cap, qs) in enumerate(zip(captions, questions, strict=True)):
        try:
            items = coerce_questions(qs)
        except MCQError:
            items = []
        for j, item in enumerate(items):
            try:
                mcq = normalize_mcq(item)
            except MCQError:
                continue
            for k, rotated in enumerate(rotations(mcq)):
                pres = present(rotated, None, cannot_answer)
                text = render(prompt, caption=cap or "", question=rotated.question, options=pres.lines())
                asks.append(Ask([{"role": "user", "content": text}], pres, id=f"caption{i}/q{j}/rot{k}"))
                owner.append(i)
    answers = ask(backend, asks, mode="exact") if asks else []
    n = len(captions)
    right, wrong, abstain, count = [0] * n, [0] * n, [0] * n, [0] * n
    errors = 0
    for a, ak, i in zip(answers, asks, owner, strict=True):
        count[i] += 1
        if a.error:
            errors += 1
            continue
        right[i] += a.letter == ak.presentation.gold
        abstain[i] += a.letter == ak.presentation.abstain
        wrong[i] += a.letter not in (ak.presentation.gold, ak.presentation.abstain)
    total = max(1, sum(count))
    return CaptionQAResult(
        acc=sum(right) / total,
        hallucination_rate=sum(wrong) / total,
        cannot_answer_rate=sum(abstain) / total,
        asks=sum(count),
        errors=errors,
        per_caption=[right[i] / count[i] if count[i] else None for i in range(n)],
        per_caption_counts=[[right[i], wrong[i], abstain[i], count[i]] for i in range(n)],
    )
