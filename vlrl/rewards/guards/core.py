"""Reward-hacking guards: cheap text checks that veto or penalise a caption before it is rewarded.

Every learned caption reward can be gamed. The papers behind vlrl saw it happen: a policy trained
against a holistic judge learned to append "This description is absolutely correct and complete";
CapRL-3B learned meta-commentary claiming its caption is complete; judge rewards pushed policies to
near-empty or endlessly verbose output. A text-only answerer or an LLM judge reads the whole caption,
so anything written *to* it ("the answer is B", "ignore previous instructions", "dear evaluator")
is an attack on the reward, not a description of the image.

Five guards (``llm_defense`` opt-in), each a set of families over normalised text rather than one
fixed phrase, so that paraphrases are caught too:

* ``self_praise`` — claims about the caption itself (subject {this/my/the above caption,
  description, summary, response, ...} x praise {complete, accurate, comprehensive, captures every
  detail, ...}), coverage claims ("nothing has been left out"), and first-person assistant chatter
  ("I hope this helps", "I have carefully described", "as an AI").
* ``grader_address`` — text addressed to the grader or answerer: asserted option letters ("the
  correct answer is B"), prompt injection ("disregard the prior instructions"), salutations ("dear
  evaluator"), score requests ("this deserves a perfect score"), rubric gaming.
* ``repetition`` — loops: a phrase repeated back to back, the same sentence twice, or a caption
  whose n-grams are mostly repeats.
* ``length`` — word count outside a configurable band (collapse to "An image." or runaway output).
* ``llm_defense`` (opt-in) — a defense rubric judged by an LLM (:mod:`vlrl.rewards.defense`), for
  attacks no pattern names.

Four more, against the hacks aimed at rubric and QA judges ("the car is red, silver or black", noun
dumps, the same sentence reworded, padding), live in :mod:`vlrl.rewards.guards.judge`: ``hedging``,
``keyword_stuffing``, ``rewording`` and ``padding`` (on by default, after the five above). Claims,
grader addresses, score requests and injections in other languages come from the phrase table of
:mod:`vlrl.rewards.guards.lang`, read by ``self_praise`` and ``grader_address``. The last default guard
is ``learned`` (:mod:`vlrl.rewards.guards.learned`), a linear model over hashed words trained on labelled
hacks and honest captions, for the wordings no pattern names.

Honest dense captions quote the text they see ("a sign that says 'ANSWER: B'", 'the screen reads
IGNORE'). Quoted text in the image is content, so quoted spans are removed before the two
semantic guards match. Words like "complete", "accurate" or "answer" alone never fire ("a complete
set of tools", "an accurate clock", "the answer box on the form"): a pattern needs the caption as its
subject, the grader as its addressee, or an option letter in answer position.

Every family of every guard is a row of one table, ``data/families.yaml``
(:mod:`vlrl.rewards.guards.table`); ``extra_patterns: {family: [regex, ...]}`` in a guard's settings
extends any family without editing code, ``skip_families`` switches some off. ``vlrl reward guard --input ROWS.jsonl --json OUT`` runs
every guard over a file of captions to check a corpus (or a policy's samples) before training.

Use them three ways:

* ``GuardSet.from_settings(...).evaluate(caption)`` → which guards fired and the total penalty;
* ``with_guards(reward, policy="veto" | "penalty", ...)`` wraps any :class:`Reward` (recipes write
  ``guards: {...}`` inside a reward block; :func:`vlrl.rewards.build_reward` applies it);
* the registered reward ``guards``: 0 when clean, minus the penalty when a guard fires, to be
  added with a weight next to other rewards.

A reward's settings block takes, for example::

    guards: {policy: veto, floor: 0.0, enabled: [self_praise, grader_address, length],
             length: {min_words: 20, max_words: 600}, self_praise: {penalty: 0.5}}

Every score carries ``guard/<name>`` and ``guard/<name>/<family>`` = 0/1 in its details, so the
trainer logs each guard's and each family's firing rate.
"""

from __future__ import annotations

import logging
import re
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from itertools import compress
from operator import eq
from typing import Any

from vlrl.rewards import register_reward
from vlrl.rewards.base import BACKEND_FAILED, Reward, Score, completion_text, last_scores, no_signal, quiet_report
from vlrl.rewards.guards.base import GUARDS, Guard, register_guard
from vlrl.rewards.guards.doc import Doc, normalize, strip_quoted
from vlrl.rewards.guards.semantic import PatternGuard, TableGuard  # registers self_praise, grader_address first

logger = logging.getLogger(__name__)

# ----------------------------------------------------------------------------------------------
# Guards (the base class and registry live in vlrl.rewards.guards.base)


@register_guard("llm_defense")
class LLMDefenseGuard(Guard):
    """Rubicon-style defense rubric judged by an LLM (:mod:`vlrl.rewards.defense`). Opt-in only."""

    default = False

    def __init__(self, judge: str | Any = None, penalty: float = 1.0, prompt: str | None = None,
                 max_retries: int = 2, max_tokens: int = 256, cache: str | None = None) -> None:
        super().__init__(penalty)
        if judge is None:
            raise ValueError("llm_defense needs a judge backend spec (llm_defense: {judge: SPEC})")
        from vlrl.rewards.defense import DEFENSE_PROMPT, DefenseJudge

        self.judge = DefenseJudge(judge, prompt or DEFENSE_PROMPT, max_retries, max_tokens, cache)

    def prefetch(self, docs: list[Doc]) -> None:
        self.judge.prefetch([d.raw for d in docs])

    def match(self, doc: Doc) -> str | None:
        return "judged as gaming the grader" if self.judge.gaming(doc.raw) else None

    def unjudged(self, doc: Doc) -> str | None:
        return self.judge.error(doc.raw)


@register_guard("repetition")
class RepetitionGuard(Guard):
    """Repetition loops.

    Fires when a unit of 2..``max_unit`` words repeats back to back ``max_consecutive`` times (a
    single word ``max_consecutive + 1`` times), when a sentence of at least ``sentence_min_words``
    words occurs more than ``max_sentence_repeats`` times, or when more than ``max_dup_ngram_frac``
    of a caption's ``ngram``-grams repeat an earlier one (only for captions of ``min_words`` words
    or more).
    """

    def __init__(
        self,
        penalty: float = 1.0,
        max_consecutive: int = 3,
        max_unit: int = 12,
        sentence_min_words: int = 5,
        max_sentence_repeats: int = 1,
        ngram: int = 4,
        max_dup_ngram_frac: float = 0.3,
        min_words: int = 24,
    ) -> None:
        super().__init__(penalty)
        self.max_consecutive = max_consecutive
        self.max_unit = max_unit
        self.sentence_min_words = sentence_min_words
        self.max_sentence_repeats = max_sentence_repeats
        self.ngram = ngram
        self.max_dup_ngram_frac = max_dup_ngram_frac
        self.min_words = min_words

    def _tandem(self, w: list[str]) -> str | None:
        n = len(w)
        for k in range(1, self.max_unit + 1):
            need = self.max_consecutive + (1 if k == 1 else 0)
            last = n - need * k + 1
            # a unit repeated back to back starts with the same word twice, k apart: only those positions
            for i in compress(range(max(last, 0)), map(eq, w, w[k:last + k])):
                unit = w[i : i + k]
                if w[i + k : i + 2 * k] != unit:
                    continue  # not repeated even once
                if all(t.isdigit() for t in unit):
                    continue  # tables of digits ("1 1 0 1") are content; number loops hit the n-gram check
                r = 1
                while w[i + r * k : i + (r + 1) * k] == unit:
                    r += 1
                    if r >= need:
                        return f"{' '.join(unit)!r} x{r}"
        return None

    def hits(self, doc: Doc) -> Iterator[tuple[str, str]]:
        w = doc.words
        if hit := self._tandem(w):
            yield "loop", hit
        # a sentence said twice repeats its first words: without a repeated run of that many words
        # (the caption's words are its sentences' words in order), no sentence can repeat
        k = max(1, self.sentence_min_words)
        runs = list(zip(*(w[i:] for i in range(k)), strict=False))
        counts: Counter[tuple[str, ...]] = Counter()
        if len(set(runs)) < len(runs):
            sentences = [tuple(re.findall(r"[\w']+", s.lower())) for s in doc.units(doc.norm, "sentence")]
            counts = Counter(s for s in sentences if len(s) >= self.sentence_min_words)
        for sent, c in counts.items():
            if c > self.max_sentence_repeats:
                yield "same_sentence", f"sentence {' '.join(sent)!r} x{c}"
        if len(w) >= max(self.min_words, self.ngram + 1):
            grams = list(zip(*(w[i:] for i in range(self.ngram)), strict=False))  # stops at the last whole n-gram
            dup = len(grams) - len(set(grams))
            if dup / len(grams) > self.max_dup_ngram_frac:
                yield "repeated_ngrams", f"{dup}/{len(grams)} repeated {self.ngram}-grams"
        return


_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")
# Scripts that part no words with spaces either (Thai and Lao space phrases), with about how many of their
# characters, vowel signs, tone marks and syllable marks included, make a word in plain captions (digits
# left out: a number is one word)
_UNSPACED = (
    (re.compile(r"[\u0e00-\u0e4f\u0e5a-\u0ecf\u0eda-\u0eff]"), 3.0),  # Thai, Lao
    (re.compile(r"[\u1780-\u17df\u17ea-\u17ff]"), 4.5),  # Khmer
    (re.compile(r"[\u0f00-\u0f1f\u0f34-\u0fff]"), 4.0),  # Tibetan
    (re.compile(r"[\u1000-\u103f\u104a-\u108f\u109a-\u109f]"), 4.5),  # Burmese
)
_ANY_UNSPACED = re.compile("|".join(script.pattern for script, _ in _UNSPACED))  # one look for the usual: none


@register_guard("length")
class LengthGuard(Guard):
    """Word count outside [``min_words``, ``max_words``] (``None`` disables a side).

    Chinese and Japanese put no spaces between words, so a whole sentence would count as one word;
    their characters count ``1 / cjk_chars_per_word`` of a word each (about 1.5 characters a word). Thai,
    Lao, Khmer, Tibetan and Burmese do not part words either: a word is about three of their characters
    in Thai and Lao, four in Tibetan and four and a half in Khmer and Burmese (:data:`_UNSPACED`), so an
    honest Thai sentence of twenty words is not two "words" under ``min_words``."""

    def __init__(self, penalty: float = 1.0, min_words: int | None = 5, max_words: int | None = 1000,
                 cjk_chars_per_word: float = 1.5) -> None:
        super().__init__(penalty)
        self.min_words = min_words
        self.max_words = max_words
        self.cjk_chars_per_word = float(cjk_chars_per_word)

    def words(self, text: str) -> int:
        if text.isascii():
            return len(text.split())
        n = 0.0
        if cjk := len(_CJK.findall(text)):
            n += cjk / self.cjk_chars_per_word
            text = _CJK.sub(" ", text)
        if _ANY_UNSPACED.search(text):
            for script, chars_per_word in _UNSPACED:
                if found := len(script.findall(text)):
                    n += found / chars_per_word
                    text = script.sub(" ", text)
        return len(text.split()) + round(n)

    def hits(self, doc: Doc) -> Iterator[tuple[str, str]]:
        n = self.words(doc.raw)
        if self.min_words is not None and n < self.min_words:
            yield "too_short", f"{n} words < {self.min_words}"
        if self.max_words is not None and n > self.max_words:
            yield "too_long", f"{n} words > {self.max_words}"
        return


# The guards against rubric/QA-judge hacks register after the five above (in this order, they run after them).
from vlrl.rewards.guards import judge as _judge_guards  # noqa: E402,F401,I001  (hedging, keyword_stuffing, rewording, padding)
from vlrl.rewards.guards import learned as _learned_guard  # noqa: E402,F401,I001  (learned, last)

# ----------------------------------------------------------------------------------------------
# GuardSet


@dataclass
class GuardReport:
    fired: list[str]
    penalty: float
    evidence: dict[str, str] = field(default_factory=dict)
    unjudged: dict[str, str] = field(default_factory=dict)
    """Guards that could not decide (name → reason): the caption is not known to be clean."""
    families: dict[str, str] = field(default_factory=dict)
    """The family each fired guard named (guard → family)."""
    doubted: dict[str, str] = field(default_factory=dict)
    """Hits the ``learned`` guard did not confirm (guard → family, probability and evidence): a family
    with a ``confirm`` probability in the table, set aside. The guard fired only if another family did."""

    @property
    def unjudged_reason(self) -> str:
        """One line: each guard that could not judge, and why."""
        return "; ".join(f"{k} could not judge: {v}" for k, v in self.unjudged.items())


SUMMARY_KEYS = ("guard/any", "guard/penalty", "guard/doubted")
"""The details of :meth:`GuardSet.details` that are no guard: the union of the guards that fired, the
penalty, and whether a hit was set aside (``doubted``)."""


class GuardSet:
    """Evaluates a set of guards on captions. ``penalty`` of a caption = sum over fired guards; a
    fallback guard's (``learned``) counts only when no other guard fired.

    ``counts`` keeps running totals (``evaluated`` and one entry per guard) and :meth:`rates` the
    firing rate of each guard since the set was built, for end-of-run reports.
    """

    def __init__(self, guards: Iterable[Guard]) -> None:
        self.guards = list(guards)
        self.counts: Counter[str] = Counter()
        # the guard whose probability confirms uncertain families (``confirm`` in the table): the learned one
        self.opinion = next((g.probability for g in self.guards if g.confirms), None)

    def rates(self) -> dict[str, float]:
        n = self.counts["evaluated"]
        return {name: (self.counts[name] / n if n else 0.0) for name in self.names}

    @property
    def names(self) -> list[str]:
        return [g.name for g in self.guards]

    @classmethod
    def from_settings(
        cls,
        enabled: Iterable[str] | None = None,
        penalty: float | None = None,
        min_words: int | None = None,
        max_words: int | None = None,
        **per_guard: dict[str, Any] | bool | None,
    ) -> GuardSet:
        """Build from a settings block::

            {enabled: [self_praise, length], penalty: 0.5,
             length: {min_words: 20, max_words: 600}, repetition: {ngram: 5}}

        ``enabled`` defaults to every registered guard; ``<name>: false`` turns one off;
        ``penalty`` is the default penalty of every guard (per-guard ``penalty`` wins);
        ``min_words`` / ``max_words`` are shortcuts for the length band (to switch one side of the
        band off, write ``length: {max_words: null}``).
        """
        if enabled is None:  # every default guard, plus an opt-in one that has its own settings block
            names = sorted((n for n, g in GUARDS.items() if g.default or isinstance(per_guard.get(n), dict)),
                           key=lambda n: GUARDS[n].rank)
        else:
            names = list(enabled)
        for key in list(per_guard) + names:
            if key not in GUARDS:
                raise ValueError(f"unknown guard {key!r}; known guards: {', '.join(GUARDS)}")
        guards = []
        for name in names:
            conf = per_guard.get(name, {})
            if conf is False:
                continue
            conf = dict(conf) if isinstance(conf, dict) else {}
            user = {k: conf.pop(k) for k in ("extra_patterns", "skip_families") if k in conf
                    and not issubclass(GUARDS[name], TableGuard)}
            if penalty is not None:
                conf.setdefault("penalty", penalty)
            if name == "length":
                if min_words is not None:
                    conf.setdefault("min_words", min_words)
                if max_words is not None:
                    conf.setdefault("max_words", max_words)
            try:
                guard = GUARDS[name](**conf)
            except TypeError as e:
                raise ValueError(f"guard {name!r}: bad settings {conf} ({e})") from None
            if user:
                guard.extend(user.get("extra_patterns"), user.get("skip_families", ()))
            guards.append(guard)
        return cls(guards)

    def evaluate_many(self, captions: list[str] | list[Doc]) -> list[GuardReport]:
        """:meth:`evaluate` for a batch; guards that call a model judge the batch in one round."""
        docs = [c if isinstance(c, Doc) else Doc.of(c if isinstance(c, str) else str(c or "")) for c in captions]
        for g in self.guards:
            if hasattr(g, "prefetch"):
                g.prefetch(docs)
        return [self.evaluate(d) for d in docs]

    def evaluate(self, caption: str | Doc) -> GuardReport:
        doc = caption if isinstance(caption, Doc) else Doc.of(caption if isinstance(caption, str) else str(caption or ""))
        fired: list[str] = []
        evidence: dict[str, str] = {}
        unjudged: dict[str, str] = {}
        families: dict[str, str] = {}
        doubted: dict[str, str] = {}
        costs: list[float] = []
        second: list[float] = []  # the penalties of fired fallback guards
        for g in self.guards:
            hit = g.check(doc, self.opinion, doubted)
            if hit is not None:
                fired.append(g.name)
                families[g.name], evidence[g.name] = hit
                (second if g.fallback else costs).append(g.penalty)
            elif (why := g.unjudged(doc)) is not None:
                unjudged[g.name] = why
        penalty = sum(costs) if costs else sum(second)
        self.counts["evaluated"] += 1
        self.counts.update(fired)
        if fired:
            logger.debug("guards fired %s: %s", fired, evidence)
        return GuardReport(fired, penalty, evidence, unjudged, families, doubted)

    def details(self, report: GuardReport) -> dict[str, float]:
        """``guard/<guard>`` and ``guard/<guard>/<family>`` (0 or 1 for every family of every guard in
        the set, so a batch's mean is each family's firing rate), ``guard/any``, ``guard/doubted`` (a hit
        the learned guard did not confirm) and ``guard/penalty``."""
        out = {}
        for g in self.guards:
            out[f"guard/{g.name}"] = float(g.name in report.fired)
            for family in g.family_names:
                out[f"guard/{g.name}/{family}"] = float(report.families.get(g.name) == family)
        out["guard/any"] = float(bool(report.fired))
        out["guard/doubted"] = float(bool(report.doubted))
        out["guard/penalty"] = report.penalty
        return out


# ----------------------------------------------------------------------------------------------
# Rewards


class GuardedReward(Reward):
    """Any reward with guards in front: ``veto`` sets the reward of a flagged caption to ``floor``;
    ``penalty`` subtracts the fired guards' penalties.

    The wrapper is transparent: a call goes through the inner reward's own ``__call__`` with every
    keyword TRL passed (``trainer_state``, so caprl_qa seeds its draws from the trainer step and a
    resumed run stays exact; ``completion_ids``, so hfrrf counts tokens against its length cap);
    setting a trainer setting on the wrapper (``max_completion_length``, ``eos_token_ids``) sets it on
    the inner reward; and reading one reads the inner reward's.

    A flagged caption is punished even when the inner reward is ``None`` while other captions of the
    call got a score: a caption that breaks the judge (or the answerer) must not escape the veto that
    way. It then scores ``floor`` (veto) or ``floor - penalty`` (penalty). An unflagged ``None`` stays
    ``None``, and so does every ``None`` of a call where the inner reward gave no signal at all, or of
    a backend failure: a dead answerer is not a reason to train on guard penalties alone. An unflagged
    caption that a model-judged guard could not judge is ``None`` too (with the judge's reason)."""

    _OWN = frozenset({"inner", "guards", "policy", "floor", "name", "required_columns", "health"})

    def __init__(self, inner: Reward, guards: GuardSet, policy: str = "penalty", floor: float = 0.0) -> None:
        if policy not in ("veto", "penalty"):
            raise ValueError(f"guards: policy must be 'veto' or 'penalty', got {policy!r}")
        object.__setattr__(self, "inner", inner)
        self.guards = guards
        self.policy = policy
        self.floor = float(floor)
        self.name = inner.name
        self.required_columns = tuple(getattr(inner, "required_columns", ()))

    def __getattr__(self, name: str) -> Any:  # the inner reward's counters, backend, settings
        if name == "inner":
            raise AttributeError(name)
        return getattr(self.inner, name)

    def __setattr__(self, name: str, value: Any) -> None:
        # the trainer fills in settings (length cap, EOS ids) on what it was given: they belong to the inner reward
        # (its settings, instance attributes; never its methods, which a caller may wrap on the wrapper)
        if name not in self._OWN and not name.startswith("_") and name in vars(self.inner):
            setattr(self.inner, name, value)
        else:
            object.__setattr__(self, name, value)

    def __call__(self, prompts=None, completions=None, completion_ids=None, **kwargs: Any) -> list[float | None]:
        log_metric = kwargs.get("log_metric")
        with quiet_report():  # the inner reward's sub-scores are logged once, below, with the guards'
            values = self.inner(prompts, completions, completion_ids, **kwargs)
        inner_scores = last_scores(self.inner) or [Score(v) for v in values]
        return self.report(self._guarded([completion_text(c) for c in completions or []], inner_scores), log_metric)

    def score(self, completions: list[str], **columns: Any) -> list[Score]:
        return self._guarded(completions, self.inner.score(completions, **columns))

    def _guarded(self, completions: list[str], scores: list[Score]) -> list[Score]:
        dead = all(no_signal(s) for s in scores)  # the inner reward said nothing about any caption
        out = []
        for report, s in zip(self.guards.evaluate_many(completions), scores, strict=True):
            value = s.value
            details = {**s.details, **self.guards.details(report)}
            if report.fired and not (value is None and (dead or s.details.get(BACKEND_FAILED))):
                if value is None:
                    details["guarded_none"] = 1.0  # the inner reward gave None; the guard still decided
                    value = self.floor if self.policy == "veto" else self.floor - report.penalty
                else:
                    value = self.floor if self.policy == "veto" else value - report.penalty
                if self.policy == "veto":
                    details["guard_floor"] = 1.0  # the floor, not the inner reward, decided (no_signal)
            elif report.unjudged:
                # A guard's judge failed: the caption is not known to be clean, so it gets no reward
                # (``None``, a backend failure the reward-health rule counts) rather than a pass.
                value = None
                details[BACKEND_FAILED] = 1.0
                details["reason"] = report.unjudged_reason
            out.append(Score(value, details))
        return out


def with_guards(reward: Reward, policy: str = "penalty", floor: float = 0.0, **settings: Any) -> GuardedReward:
    """Wrap ``reward`` with guards built by :meth:`GuardSet.from_settings` from ``settings``.

    >>> from vlrl.rewards.base import FunctionReward
    >>> r = with_guards(FunctionReward(lambda completions, **kw: [1.0] * len(completions)), policy="veto")
    >>> r(completions=["A red bus parked beside a brick station.", "This caption is complete and accurate."])
    [1.0, 0.0]
    """
    return GuardedReward(reward, GuardSet.from_settings(**settings), policy=policy, floor=floor)


@register_reward("guards")
class GuardReward(Reward):
    """Standalone guard reward: 0.0 for a clean caption, minus the fired penalties otherwise.

    >>> GuardReward()(completions=["A dog sleeps on a red rug by the fire.", "A dog on a rug. I hope this helps!"])
    [0.0, -1.0]
    """

    name = "guards"

    def __init__(self, **settings: Any) -> None:
        self.guards = GuardSet.from_settings(**settings)

    def score(self, completions: list[str], **columns: Any) -> list[Score]:
        out = []
        for report in self.guards.evaluate_many(completions):
            out.append(Score(-report.penalty if report.fired else 0.0, self.guards.details(report)))
        return out


__all__ = [
    "GUARDS",
    "Doc",
    "Guard",
    "GuardReport",
    "GuardReward",
    "GuardSet",
    "GuardedReward",
    "LLMDefenseGuard",
    "LengthGuard",
    "PatternGuard",
    "RepetitionGuard",
    "normalize",
    "register_guard",
    "strip_quoted",
    "with_guards",
]
