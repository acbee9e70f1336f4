"""Ask a batch of multiple-choice questions through any backend, each distinct request once.

The reward, the curation filter and Prism-style evaluation all pose MCQs the same way, in one of
two modes:

* ``sample`` — the answerer *writes* its answer after a pre-filled ``"The answer is"`` (sent as a
  partial assistant turn that every backend continues, never closes); the first option letter it
  names is compared with the gold letter (1 or 0). This is what the public CapRL code does; at
  temperature > 0 it is a one-sample Monte-Carlo estimate.
* ``exact`` — one forward pass reads the answerer's next-token distribution right after the same
  pre-fill at the *same temperature* (``Backend.score_choices`` with ``temperature``), summing
  every token that reads as a letter. The letters' total is the ask's ``letter_mass``; the score
  is the gold letter's share of it, the expected sample-mode score at that temperature, without
  sampling noise. An ask whose letter mass is below ``min_letter_mass`` is a parse failure (score
  0), as an off-format sampled answer would be: renormalising 1% of the mass over the letters
  would otherwise award chance-level credit to a caption that derailed the answerer.

Identical requests (same messages, same sampling seed) are sent once and their result shared; in
GRPO a group often contains duplicate captions, and a question drawn twice with the same option
order costs nothing extra.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from typing import Any, Literal

from vlrl.core.backends import Backend, ChatRequest, ChoiceRequest, SamplingParams
from vlrl.methods.caprl.mcq import Presentation, parse_letter

logger = logging.getLogger(__name__)

Mode = Literal["sample", "exact"]
PREFILL = "The answer is"


@dataclass
class Ask:
    """One request: a conversation (the question already rendered into it) and how it was shown."""

    messages: list[dict[str, Any]]
    presentation: Presentation
    seed: int | None = None
    id: str | None = None
    prompt: str | None = None
    """A whole raw prompt, pre-fill included, sent with no chat template (sample mode only; see
    :attr:`vlrl.core.backends.ChatRequest.prompt`): the public CapRL prompt, for parity."""


@dataclass
class Answer:
    correct: float | None = None
    """1/0 (sample) or the probability of the gold letter (exact); ``None`` if the request failed."""
    abstain: float = 0.0
    """Same, for the abstain option (0 when there is none)."""
    letter: str | None = None
    """Parsed letter (sample) or most probable letter (exact)."""
    parse_failure: bool = False
    text: str = ""
    error: str | None = None
    first: bool = False
    """Whether this ask was the one actually sent (the others were duplicates of it)."""
    exact: bool = True
    probs: dict[str, float] = field(default_factory=dict)
    letter_mass: float | None = None
    """Exact mode: the probability the answerer put on any option letter (None in sample mode)."""
    resampled: bool = False
    """Exact mode with ``low_mass: sample``: the letter mass was too low, and this answer was sampled."""


def _image_safe(obj: Any) -> Any:
    # Images inside one batch are the same object when they are the same image: key them cheaply.
    return f"<obj {id(obj)}>"


def ask(
    backend: Backend,
    asks: list[Ask],
    *,
    mode: Mode = "sample",
    temperature: float | None = None,
    max_tokens: int = 10,
    prefill: str | None = PREFILL,
    min_letter_mass: float = 0.0,
    parse_rule: str = "vlrl",
) -> list[Answer]:
    """Pose every ask in one backend call (duplicates collapsed). Never raises.

    ``temperature`` is the sampling temperature in sample mode (default 0: greedy) and the
    temperature whose expectation exact mode computes (default 1: the model's own distribution);
    ``min_letter_mass`` is the exact-mode floor (see module doc).
    """
    if temperature is None:
        temperature = 0.0 if mode == "sample" else 1.0
    if mode not in ("sample", "exact"):
        raise ValueError(f"mode must be 'sample' or 'exact', not {mode!r}")
    keys, unique = [], {}
    for a in asks:
        req: Any
        if a.prompt is not None:
            if mode != "sample":
                raise ValueError("a raw-prompt ask (the caprl_public layout) is asked in sample mode only")
            sampling = SamplingParams(max_tokens=max_tokens, temperature=temperature,
                                      seed=a.seed if temperature > 0 else None)
            req = ChatRequest([{"role": "user", "content": a.prompt}], sampling, id=a.id, prompt=a.prompt)
            payload = ["raw", a.prompt, sampling.to_dict()]
        elif mode == "sample":
            sampling = SamplingParams(max_tokens=max_tokens, temperature=temperature,
                                      seed=a.seed if temperature > 0 else None)
            msgs = a.messages + ([{"role": "assistant", "content": prefill}] if prefill else [])
            req = ChatRequest(msgs, sampling, id=a.id)
            payload = [msgs, sampling.to_dict()]
        else:
            letters = a.presentation.letters
            choices = [f" {L}" for L in letters] if prefill else list(letters)
            # Exact scoring is deterministic: the seed (only used by backends that must estimate by
            # sampling) is fixed so the same question in the same order is computed once.
            req = ChoiceRequest(a.messages, choices, prefix=prefill or "", id=a.id, seed=0, temperature=temperature)
            payload = [a.messages, choices, prefill, temperature]
        key = json.dumps(payload, sort_keys=True, default=_image_safe, ensure_ascii=False)
        keys.append(key)
        unique.setdefault(key, req)
    try:
        raw = backend.chat(list(unique.values())) if mode == "sample" else backend.score_choices(list(unique.values()))
        if len(raw) != len(unique):
            raise RuntimeError(f"backend returned {len(raw)} results for {len(unique)} requests")
    except Exception as e:  # noqa: BLE001 - a failing answerer must not crash a training step
        logger.error("answerer call failed for %d requests: %s", len(unique), e)
        return [Answer(error=f"answerer failed: {e}") for _ in asks]
    by_key = dict(zip(unique, raw, strict=False))
    seen: set[str] = set()
    out = []
    for a, key in zip(asks, keys, strict=False):
        res = by_key[key]
        ans = (_sample_answer(res, a.presentation, parse_rule) if mode == "sample"
               else _exact_answer(res, a.presentation, min_letter_mass))
        ans.first = key not in seen
        seen.add(key)
        out.append(ans)
    return out


def _sample_answer(res: Any, pres: Presentation, parse_rule: str = "vlrl") -> Answer:
    if not res.ok:
        return Answer(error=res.error)
    letter = parse_letter(res.text, pres.letters, abstain=pres.abstain, rule=parse_rule)
    return Answer(
        correct=float(letter == pres.gold),
        abstain=float(letter is not None and letter == pres.abstain),
        letter=letter,
        parse_failure=letter is None,
        text=res.text,
    )


def _exact_answer(res: Any, pres: Presentation, min_letter_mass: float = 0.0) -> Answer:
    if not res.ok:
        return Answer(error=res.error)
    sampled = getattr(res, "method", None) == "sampled"
    reported = getattr(res, "mass", None)
    mass = None if reported is None else float(reported)
    probs = {k.strip(): float(v) for k, v in res.probs.items()}
    total = sum(probs.get(L, 0.0) for L in pres.letters)
    if (mass is not None and (mass <= 0 or mass < min_letter_mass)) or total <= 0:
        # Off-format: the answerer named no option (a sampling fallback where no sample named one,
        # a server whose listed logprobs hold no letter, or too little probability on the letters).
        # Scored like an unparsable sampled answer, never as the uniform "chance" a
        # renormalisation would invent: with no letter information there is nothing to score, even
        # at min_letter_mass 0.
        return Answer(correct=0.0, letter=None, parse_failure=True, exact=not sampled, letter_mass=mass)
    probs = {L: probs.get(L, 0.0) / total for L in pres.letters}
    letter = max(probs, key=probs.__getitem__)
    return Answer(
        correct=probs[pres.gold],
        abstain=probs[pres.abstain] if pres.abstain else 0.0,
        letter=letter,
        exact=bool(getattr(res, "exact", True)),
        probs=probs,
        letter_mass=mass,
    )
