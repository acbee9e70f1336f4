"""The two halves of CapRL's QA filter, usable apart.

A curated question must need the image: a small VLM *with* the image gets it right every round
(visual accuracy > ``visual_min``), and a text model *without* it almost never does (text-only
accuracy < ``text_max``).

Rounds are *balanced rotations*, not independent shuffles: one seeded shuffle per question, then
round r rotates it by ``floor(r * k / R)`` positions (k options, R rounds), so across R >= k rounds
each option sits in each position equally often. An answerer that always says "A" then scores the
same on every question (exactly 1/k when k divides R), instead of passing or failing by luck as
with independent shuffles.

**A text-only answerer at chance passes** (``chance_floor``, on by default). Chance is what a
constant answerer scores at most under these rotations, :func:`chance_ceiling` = ``ceil(R/k)/R``:
1/4 at R = k = 4. The paper's rule, text-only accuracy ``< text_max`` alone (0 of 4 at 0.25),
drops every question for such an answerer although none of them can be answered without the image;
with the floor a question is kept when text-only accuracy ``< text_max`` *or* ``<= chance_ceiling``.
The floor needs R >= k (see :func:`text_keep`). ``chance_floor=False`` is the paper's rule.

* The visual half adds a "None of the above" option (the paper's design): a VLM that cannot find
  the answer in the image has an honest way out instead of a lucky guess.
* The text-only half adds **no** abstain option: the point is to catch questions whose answer can
  be guessed from the question and options alone, and an abstain option would let a cautious
  answerer hide exactly those.

Both answer greedily after the pre-fill "The answer is" and read the first option letter (see
:mod:`vlrl.methods.caprl.ask`); every ask of a call goes to the backend in one batch.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import Any

from vlrl.core.backends import Backend, load_backend
from vlrl.core.prompts import render
from vlrl.core.records import MCQ
from vlrl.core.video import media_part
from vlrl.methods.caprl.ask import Ask, ask
from vlrl.methods.caprl.mcq import NONE_OF_THE_ABOVE, normalize_mcq, present, seeded_rng

logger = logging.getLogger(__name__)

FILTER_PROMPT = "caprl_filter_answer"


@dataclass
class Verdict:
    accuracy: float | None
    """Mean correctness over the rounds; ``None`` when a request failed (retry later)."""
    keep: bool
    error: str | None = None


def answer_accuracy(
    backend: Backend,
    items: list[tuple[MCQ, Any]],
    *,
    rounds: int,
    keys: list[str] | None = None,
    abstain: str | None = None,
    seed: int = 0,
    salt: str = "",
    prompt: str = FILTER_PROMPT,
    max_tokens: int = 10,
) -> list[tuple[float | None, str | None]]:
    """Accuracy of ``backend`` on each ``(mcq, image_or_None)`` over ``rounds`` shuffled rounds.

    ``keys`` (stable ids, e.g. ``"img.jpg#2"``) seed the option orders; by default the question's
    own hash does. Returns ``(accuracy, error)`` per item.
    """
    keys = keys or [m.key for m, _ in items]
    asks = []
    for (mcq, image), key in zip(items, keys, strict=False):
        k = len(mcq.options)
        for r in range(rounds):
            rng = seeded_rng("caprl_filter", seed, salt, key)  # the same base order every round
            pres = present(mcq, rng, abstain, rotate=(r * k) // rounds)
            part = media_part(image) if image is not None else None
            text = render(prompt, question=mcq.question, options=pres.lines(), with_image=part is not None,
                          media=part["type"] if part else "image")
            content: Any = [part, {"type": "text", "text": text}] if part is not None else text
            asks.append(Ask([{"role": "user", "content": content}], pres, id=f"{key}/round{r}"))
    answers = ask(backend, asks, mode="sample", temperature=0.0, max_tokens=max_tokens)
    out = []
    for i in range(len(items)):
        mine = answers[i * rounds : (i + 1) * rounds]
        err = next((a.error for a in mine if a.error), None)
        out.append((None, err) if err else (sum(a.correct for a in mine) / rounds, None))
    return out


def chance_ceiling(options: int, rounds: int) -> float:
    """The most a constant answerer can score on a ``options``-option question over ``rounds``
    balanced rotations: the rounds that put the right option at one position, ``ceil(R/k)``, over R."""
    return math.ceil(rounds / options) / rounds


def text_keep(accuracy: float, options: int, rounds: int, text_max: float, chance_floor: bool = True) -> bool:
    """The text-only half's rule: below ``text_max``, or at most chance when ``chance_floor`` and
    there are at least as many rounds as options. With fewer rounds the right option never visits
    every position, a constant answerer scores 0 or 1/R by where the answer fell, and a floor of 1/R
    (all of it, at one round) would let through questions the answerer knows: no floor then."""
    if accuracy < text_max:
        return True
    return chance_floor and rounds >= options and accuracy <= chance_ceiling(options, rounds) + 1e-9


def text_only_filter(
    questions: list[Any],
    answerer: Backend | str,
    rounds: int = 4,
    text_max: float = 0.25,
    *,
    keys: list[str] | None = None,
    seed: int = 0,
    cache: str | None = None,
    prompt: str = FILTER_PROMPT,
    chance_floor: bool = True,
) -> list[Verdict]:
    """Keep the questions a text-only ``answerer`` cannot answer without the image (:func:`text_keep`).

    ``prompt`` names the template (stem or ``.jinja`` path; variables ``question``, ``options``,
    ``with_image``), for an answerer trained on a layout of its own such as the demo's.

    ``questions`` are MCQs in any shape :func:`~vlrl.methods.caprl.mcq.normalize_mcq` accepts; one that is
    malformed is not kept (its verdict carries the reason).
    """
    backend = load_backend(answerer, cache=cache) if isinstance(answerer, str) or cache else answerer
    verdicts: list[Verdict | None] = [None] * len(questions)
    items, idx, item_keys = [], [], []
    for i, q in enumerate(questions):
        try:
            mcq = q if isinstance(q, MCQ) else normalize_mcq(q)
        except ValueError as e:
            verdicts[i] = Verdict(None, False, f"bad question: {e}")
            continue
        items.append((mcq, None))
        idx.append(i)
        item_keys.append(keys[i] if keys else mcq.key)
    short = sum(len(m.options) > rounds for m, _ in items)
    if chance_floor and short:
        logger.warning("text-only filter: %d of %d questions have more options than the %d rounds: their "
                       "chance floor is off, and a blind answerer keeps them only by luck (use rounds >= options)",
                       short, len(items), rounds)
    accuracies = answer_accuracy(backend, items, rounds=rounds, keys=item_keys, seed=seed, salt="text", prompt=prompt)
    for i, (mcq, _), (acc, err) in zip(idx, items, accuracies, strict=True):
        keep = acc is not None and text_keep(acc, len(mcq.options), rounds, text_max, chance_floor)
        verdicts[i] = Verdict(acc, keep, err)
    return verdicts  # type: ignore[return-value]


def visual_filter(
    items: list[tuple[MCQ, Any]],
    vlm: Backend,
    rounds: int = 4,
    visual_min: float = 0.75,
    *,
    keys: list[str] | None = None,
    seed: int = 0,
    prompt: str = FILTER_PROMPT,
) -> list[Verdict]:
    """Keep the questions a VLM answers right, with the image, more than ``visual_min`` of the time."""
    res = answer_accuracy(vlm, items, rounds=rounds, keys=keys, abstain=NONE_OF_THE_ABOVE, seed=seed, salt="visual",
                          prompt=prompt)
    return [Verdict(acc, acc is not None and acc > visual_min, err) for acc, err in res]
