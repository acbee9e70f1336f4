"""The multiple-choice question as every CapRL stage sees it.

QA curation writes MCQs, the ``caprl_qa`` reward asks them, Prism-style evaluation and the smoke
check reuse them. They all need the same three operations, kept here so they cannot drift apart:

* :func:`normalize_mcq` — accept the shapes MCQs arrive in (dicts from JSONL or an HF dataset,
  ``vlrl.core.records`` objects, options as bare texts or as ``"A. text"`` strings, the answer as a
  letter, an index or the option text) and return one validated :class:`MCQ`, or raise
  :class:`MCQError` naming the reason.
* :func:`present` — one *presentation* of a question: options shuffled by a seeded RNG and an
  abstain option ("Cannot answer based on the caption" / "None of the above") appended **last**.
  Keeping the abstain option last (as the public CapRL code does) means its letter always reads
  as "the extra one", and shuffling it among the real options would only add position noise to
  the one option whose meaning does not depend on the image.
* :func:`parse_letter` — the answer letter a model named.
"""

from __future__ import annotations

import hashlib
import json
import random
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from vlrl.core.records import MCQ, RecordError

LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
CANNOT_ANSWER = "Cannot answer based on the caption"
NONE_OF_THE_ABOVE = "None of the above"

_LABEL = re.compile(r"^\s*[\(\[]?([A-Za-z])\s*[\)\]\.:：、]\s*(.*)$", re.S)
_LETTER_TOKEN = re.compile(r"(?<![A-Za-z])([A-Z])(?![A-Za-z])")
_ABSTAIN = re.compile(
    r"^\W*(?:(?:it\s+)?(?:cannot|can\s*not|can't|could\s+not|unable\s+to)\s+(?:be\s+)?"
    r"(?:answer|answered|determine|determined|tell|know|say)"
    r"|none\s+of\s+(?:the\s+)?(?:above|options|choices|these)"
    r"|not\s+(?:enough\s+information|mentioned|stated|specified|given|provided|shown|visible)"
    r"|(?:there\s+is\s+)?(?:no|insufficient)\s+(?:information|answer)"
    r"|unknown\b|i\s+(?:do\s+not|don't)\s+know)",
    re.I,
)
_PREAMBLE = re.compile(r"^\s*(the\s+)?(correct\s+)?(answer|option|choice)\s*(is|:)?\s*", re.I)


class MCQError(ValueError):
    """A question that cannot be asked (missing text, bad options, answer not among them)."""


def make_mcq(question: str, options: Sequence[str], answer_index: int) -> MCQ:
    """The one :class:`~vlrl.core.records.MCQ` type, with its validation failures as :class:`MCQError`."""
    try:
        return MCQ(question, list(options), LETTERS[answer_index])
    except RecordError as e:
        raise MCQError(e.reason) from None


@dataclass(frozen=True)
class Presentation:
    """One way of showing a question: option order plus an optional abstain option."""

    options: tuple[str, ...]
    gold: str
    """Letter of the correct option in this presentation."""
    abstain: str | None
    """Letter of the appended abstain option, if any."""
    labels: tuple[str, ...] | None = None
    """The option letters when they are not A, B, C, ... in order (the public layout's abstain is
    always F, after 3 or 4 real options)."""

    @property
    def letters(self) -> tuple[str, ...]:
        return self.labels if self.labels is not None else tuple(LETTERS[: len(self.options)])

    def lines(self) -> list[str]:
        return [f"{letter}. {text}" for letter, text in zip(self.letters, self.options, strict=False)]


def is_abstain(text: str) -> bool:
    """Whether an option or answer text says "cannot answer" / "none of the above" in any wording.

    Such an option is the abstain option whatever its exact words: a question that already has one
    gets no second one, and a question whose gold answer is one is rejected (it would reward a
    caption for saying nothing).
    """
    return bool(_ABSTAIN.match(text or ""))


def _field(item: Any, name: str) -> Any:
    if isinstance(item, dict):
        return item.get(name)
    return getattr(item, name, None)


def _strip_labels(options: list[str]) -> list[str]:
    """Remove ``"A. "`` style labels when every option carries the expected letter in order."""
    matches = [_LABEL.match(o) for o in options]
    if all(m and m.group(1).upper() == LETTERS[i] for i, m in enumerate(matches)):
        return [m.group(2).strip() for m in matches]  # type: ignore[union-attr]
    return options


def normalize_mcq(item: Any, abstain_answer_ok: bool = False) -> MCQ:
    """Validate one MCQ given in any supported shape. Raises :class:`MCQError` with the reason.

    ``abstain_answer_ok``: keep a question whose gold option reads like abstaining ("Not visible",
    "Unknown brand"); vlrl's own layout refuses it (it would reward a caption for saying nothing),
    the public layout asks it, as the public code asks every question whose answer is an option."""
    if isinstance(item, str):
        try:
            item = json.loads(item)
        except json.JSONDecodeError:
            raise MCQError("question is a string, not an MCQ record") from None
    if item is None:
        raise MCQError("empty question record")
    if not isinstance(item, dict) and hasattr(item, "to_dict") and _field(item, "question") is None:
        item = item.to_dict()
    question = _field(item, "question")
    if not isinstance(question, str) or not question.strip():
        raise MCQError("missing question text")
    raw = _field(item, "options")
    if raw is None:
        raw = _field(item, "choices")
    if isinstance(raw, dict):  # {"A": "red", "B": "blue"}
        raw = [raw[k] for k in sorted(raw)]
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except json.JSONDecodeError:
            raise MCQError("options are a string, not a list") from None
    if not isinstance(raw, (list, tuple)) or not raw:
        raise MCQError("no options")
    if any(not isinstance(o, str) or not o.strip() for o in raw):
        raise MCQError("an option is empty or not text")
    options = _strip_labels([o.strip() for o in raw])
    if len(options) < 2:
        raise MCQError(f"only {len(options)} option(s)")
    if len({o.casefold() for o in options}) != len(options):
        raise MCQError("duplicate options")
    if len(options) > len(LETTERS) - 1:
        raise MCQError(f"too many options ({len(options)})")
    answer = _answer_index(_field(item, "answer"), options)
    if not abstain_answer_ok and is_abstain(options[answer]):
        raise MCQError(f"the answer is the abstain option {options[answer][:40]!r}")
    return make_mcq(question.strip(), options, answer)


def _answer_index(answer: Any, options: Sequence[str]) -> int:
    if isinstance(answer, bool) or answer is None:
        raise MCQError("missing answer")
    if isinstance(answer, int):
        if 0 <= answer < len(options):
            return answer
        raise MCQError(f"answer index {answer} is not among {len(options)} options")
    if not isinstance(answer, str) or not answer.strip():
        raise MCQError("missing answer")
    text = answer.strip()
    for i, o in enumerate(options):  # the option text itself
        if text.casefold() == o.casefold():
            return i
    m = _LABEL.match(text)
    letter = m.group(1) if m else (text if len(text) == 1 else None)
    if letter is None or not letter.isalpha():
        raise MCQError(f"answer {text[:40]!r} is neither an option letter nor an option")
    idx = LETTERS.find(letter.upper())
    if not 0 <= idx < len(options):
        raise MCQError(f"answer letter {letter.upper()} is not among the options A-{LETTERS[len(options) - 1]}")
    return idx


def coerce_questions(value: Any) -> list[Any]:
    """The per-row questions column as a list (accepts a JSON string or a single record)."""
    if value is None:
        return []
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            raise MCQError("questions column is a string that is not JSON") from None
    if isinstance(value, dict) or not isinstance(value, (list, tuple)):
        return [value]
    return list(value)


def seeded_rng(*parts: Any) -> random.Random:
    """A ``random.Random`` seeded by a stable hash of ``parts`` (not Python's salted ``hash``)."""
    blob = json.dumps(parts, sort_keys=True, default=str, ensure_ascii=False)
    return random.Random(int(hashlib.sha256(blob.encode()).hexdigest()[:16], 16))


def present(mcq: MCQ, rng: random.Random | None, abstain: str | None = CANNOT_ANSWER, rotate: int = 0) -> Presentation:
    """Shuffle the options with ``rng`` (``None``: keep order), rotate them left by ``rotate``
    positions, and append ``abstain`` last."""
    order = list(range(len(mcq.options)))
    if rng is not None:
        rng.shuffle(order)
    if rotate:
        k = rotate % len(order)
        order = order[k:] + order[:k]
    options = [mcq.options[i] for i in order]
    gold = LETTERS[order.index(mcq.answer_index)]
    abstain_letter = None
    if abstain:
        existing = [i for i, o in enumerate(options) if o.casefold() == abstain.casefold() or is_abstain(o)]
        if existing:  # the question already offers it; do not ask twice
            abstain_letter = LETTERS[existing[0]]
        else:
            options.append(abstain)
            abstain_letter = LETTERS[len(options) - 1]
    return Presentation(tuple(options), gold, abstain_letter)


PUBLIC_ABSTAIN = "Can not answer based on the caption"
"""The public CapRL code's abstain option, always lettered F."""


def _public_real_options(mcq: MCQ) -> list[tuple[int, str]]:
    """The options the public layout shows (a stored E/F "Can not answer based on the caption"
    dropped), by original index; :class:`MCQError` when the gold answer is the dropped one."""
    real = [(i, o) for i, o in enumerate(mcq.options) if not (i in (4, 5) and o.strip() == PUBLIC_ABSTAIN)]
    if not any(i == mcq.answer_index for i, _ in real):
        raise MCQError("the gold answer is the public abstain option")
    return real


def check_public(mcq: MCQ) -> MCQ:
    """``mcq`` if the public layout can ask it, else :class:`MCQError` with the reason."""
    _public_real_options(mcq)
    return mcq


def present_public(mcq: MCQ, rng: random.Random | None) -> tuple[str, Presentation]:
    """One presentation in the public CapRL reward's layout: the question block it asks and how
    it was shown.

    As the public code does on every draw: the question's first line, then its options shuffled
    by ``rng`` (one ``shuffle`` call over the real options; a stored "Can not answer based on the
    caption" option lettered E or F is dropped first, as the public code strips exactly those
    lines) as ``   - A) text`` lines, then ``   - F) Can not answer based on the caption`` as F
    whatever the option count. (With 6 real options the public code
    would letter two options F; here the abstain option then takes the next letter.)
    """
    items = _public_real_options(mcq)
    if rng is not None:
        rng.shuffle(items)
    labels = list(LETTERS[: len(items)])
    gold = labels[[i for i, _ in items].index(mcq.answer_index)]
    abstain = "F" if len(items) < 6 else LETTERS[len(items)]
    lines = [mcq.question.strip().split("\n")[0]]
    lines += [f"   - {L}) {o.strip()}" for L, (_, o) in zip(labels, items, strict=True)]
    lines.append(f"   - {abstain}) {PUBLIC_ABSTAIN}")
    pres = Presentation((*[o for _, o in items], PUBLIC_ABSTAIN), gold, abstain, labels=(*labels, abstain))
    return "\n".join(lines), pres


def parse_letter(text: str, letters: Sequence[str], abstain: str | None = None, rule: str = "vlrl") -> str | None:
    """The option letter an answer names, or ``None``.

    ``rule="vlrl"`` (default): a letter standing alone (``B``, ``(B)``, ``B.``, ``The answer is B``)
    wins; otherwise the first valid capital letter anywhere. An answer that *says* it cannot answer
    ("Cannot answer based on the caption") is never read as a letter from its words (the C of
    "Cannot"): it is the ``abstain`` letter when the question showed one, else ``None``.

    ``rule="first_capital"``: the public CapRL code's rule, the first capital A-I anywhere in the
    reply, whether or not the question showed it (so "Answer: C" reads as A, "I think C" as I and
    a reply of G as G: all wrong); for reproducing its numbers.
    """
    if not text:
        return None
    valid = set(letters)
    if rule == "first_capital":
        return next((ch for ch in text if ch in "ABCDEFGHI"), None)
    s = _PREAMBLE.sub("", text.strip(), count=1)
    if is_abstain(s):
        return abstain if abstain in valid else None
    for m in _LETTER_TOKEN.finditer(s):
        if m.group(1) in valid:
            return m.group(1)
    for ch in s:
        if ch in valid:
            return ch
    return None
