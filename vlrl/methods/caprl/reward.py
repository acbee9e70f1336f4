"""``caprl_qa``: a caption is worth what a text-only answerer can learn from it (CapRL).

For each caption the reward draws ``questions_per_caption`` (Q) questions *with replacement* from
the image's curated MCQs (the ``questions`` dataset column) and poses each one ``rounds`` (N) times
to a text-only answerer that sees the caption and never the image. Every round shows the options
in a fresh seeded order with "Cannot answer based on the caption" appended **last** (kept last, as
in the public code, so only the real options move; picks of it are reported as
``cannot_answer_rate``). The reward is the mean correctness over the Q×N asks.

Modes (see :mod:`vlrl.methods.caprl.ask`):

* ``sample`` (default) follows the public CapRL code: pre-fill "The answer is", sample at
  ``temperature`` 0.6 with at most ``max_tokens`` 10 new tokens, take the first option letter.
* ``exact`` reads the answerer's option-letter probabilities over the *same* Q×N presentations,
  at the configured ``temperature``, and averages the probability of the gold letter: the expected
  sample-mode score given the draws. No sampling noise and no generation loop. An ask whose letter
  mass (the probability on any option letter) is below ``min_letter_mass`` counts as a parse
  failure, not as chance credit; the mean letter mass is reported as ``letter_mass``. The option
  order of round r of a question is the same whichever draw picked it, so a question drawn twice
  costs one forward pass per round: at most ``min(Q, #questions) × N`` passes per caption.

Draws: ``questions: sample`` (default) draws Q questions with replacement, as the public code does;
``questions: all`` asks every curated question once per round instead (Q is then ignored).

Seeding: the draws and option orders are a pure function of (``seed``, training step, image): the
step comes from TRL's ``trainer_state.global_step`` (or a call counter outside a trainer) and the
image from its ``image_id``/``id`` column when there is one, else its question list. Every caption
of one GRPO group is therefore asked the *same* questions in the same orders (common random
numbers: the group advantage reflects the captions, not the luck of the draw), every step sees
fresh draws so every curated question gets asked over a run, and reruns reproduce. ``draws: fixed``
(or the older ``redraw: false``) freezes the draws across steps.

Presets: ``preset: caprl_public`` is the public CapRL reward, for reproducing the paper's numbers
(``layout: public``): its raw prompt byte for byte with no chat template (so no system turn), the
question block reshuffled on every draw with "F) Can not answer based on the caption" as F
(:func:`~vlrl.methods.caprl.mcq.present_public`), sampling at 0.6 with 10 new tokens, 8 draws with
replacement asked once each, and its parse rule (the first capital A-I anywhere in the reply). A
setting given explicitly wins over the preset. vlrl's defaults differ on purpose; docs/caprl.md
tables each difference.

All asks of a batch go to the answerer in one call and identical ones are sent once. A caption
with no usable question, or whose asks all failed, scores ``None`` (not applicable) and the reason
is in its details: the reward never raises inside a training step. A caption with *some* failed
asks scores ``None`` too (``on_ask_failure: none``, the default): its accuracy over the asks that
survived is over another question set than its group's, so it would move the advantage on luck.
``on_ask_failure: subset`` keeps the old rule (the mean over the surviving asks). Either way
``ask_failure_rate`` is in the details, logged per step as a sub-score.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from vlrl.core.backends import Backend, load_backend, parse_spec
from vlrl.core.prompts import render
from vlrl.methods.caprl.ask import Ask, ask
from vlrl.methods.caprl.mcq import (
    CANNOT_ANSWER,
    MCQError,
    check_public,
    coerce_questions,
    normalize_mcq,
    present,
    present_public,
    seeded_rng,
)
from vlrl.rewards import register_reward
from vlrl.rewards.base import BACKEND_FAILED, Reward, Score

logger = logging.getLogger(__name__)


DEFAULTS: dict[str, Any] = {
    "mode": "sample", "questions_per_caption": 8, "rounds": 4, "temperature": 0.6, "max_tokens": 10,
    "prompt": "caprl_answer", "parse": "vlrl", "layout": "vlrl",
}
PRESETS: dict[str, dict[str, Any]] = {
    "caprl_public": {
        "layout": "public",
        "prompt": "caprl_public_prompt",
        "mode": "sample",
        "questions_per_caption": 8,
        "rounds": 1,
        "temperature": 0.6,
        "max_tokens": 10,
        "parse": "first_capital",
    },
}


@register_reward("caprl_qa")
class CapRLQAReward(Reward):
    """QA-utility caption reward. Settings are keyword arguments (a recipe's reward block)."""

    name = "caprl_qa"
    required_columns = ("questions",)

    def __init__(
        self,
        answerer: str | Backend,
        mode: str | None = None,
        questions_per_caption: int | None = None,
        rounds: int | None = None,
        temperature: float | None = None,
        max_tokens: int | None = None,
        seed: int = 0,
        cache: str | None = None,
        prompt: str | None = None,
        shuffle: bool = True,
        redraw: bool | None = None,
        cannot_answer: str = CANNOT_ANSWER,
        every_question: bool = False,
        min_letter_mass: float = 0.1,
        draws: str | None = None,
        questions: str = "sample",
        parse: str | None = None,
        preset: str | None = None,
        on_ask_failure: str = "none",
        layout: str | None = None,
        low_mass: str = "zero",
    ) -> None:
        # Settings left unset (None) come from the preset, else from DEFAULTS; explicit ones win.
        if preset is not None and preset not in PRESETS:
            raise ValueError(f"caprl_qa: unknown preset {preset!r}; known: {', '.join(PRESETS)}")
        given = {"mode": mode, "questions_per_caption": questions_per_caption, "rounds": rounds,
                 "temperature": temperature, "max_tokens": max_tokens, "prompt": prompt, "parse": parse,
                 "layout": layout}
        base = {**DEFAULTS, **(PRESETS[preset] if preset else {})}
        merged = {k: (v if v is not None else base[k]) for k, v in given.items()}
        mode, questions_per_caption, rounds = merged["mode"], merged["questions_per_caption"], merged["rounds"]
        temperature, max_tokens, prompt, parse = merged["temperature"], merged["max_tokens"], merged["prompt"], merged["parse"]
        layout = merged["layout"]
        if layout not in ("vlrl", "public"):
            raise ValueError(f"caprl_qa: layout must be 'vlrl' or 'public', not {layout!r}")
        if layout == "public" and mode != "sample":
            raise ValueError("caprl_qa: layout 'public' (preset caprl_public) sends the public raw prompt and is "
                             "sample mode only; drop mode: exact or use the vlrl layout")
        if parse not in ("vlrl", "first_capital"):
            raise ValueError(f"caprl_qa: parse must be 'vlrl' or 'first_capital', not {parse!r}")
        if low_mass not in ("zero", "sample"):
            raise ValueError(f"caprl_qa: low_mass must be 'zero' or 'sample', not {low_mass!r}")
        if on_ask_failure not in ("none", "subset"):
            raise ValueError(f"caprl_qa: on_ask_failure must be 'none' or 'subset', not {on_ask_failure!r}")
        if mode not in ("sample", "exact"):
            raise ValueError(f"caprl_qa: mode must be 'sample' or 'exact', not {mode!r}")
        if draws is None:
            draws = "fixed" if redraw is False else "per_step"
        if draws not in ("per_step", "fixed"):
            raise ValueError(f"caprl_qa: draws must be 'per_step' or 'fixed', not {draws!r}")
        if questions not in ("sample", "all"):
            raise ValueError(f"caprl_qa: questions must be 'sample' or 'all', not {questions!r}")
        if not 0.0 <= float(min_letter_mass) <= 1.0:
            raise ValueError(f"caprl_qa: min_letter_mass must be within [0, 1], not {min_letter_mass!r}")
        if questions_per_caption < 1 or rounds < 1:
            raise ValueError("caprl_qa: questions_per_caption and rounds must be >= 1")
        if isinstance(answerer, str):
            parse_spec(answerer)  # a malformed spec fails when the reward is built, not per row
        self.answerer = answerer
        self.mode = mode
        self.questions_per_caption = int(questions_per_caption)
        self.rounds = int(rounds)
        self.temperature = float(temperature)
        self.max_tokens = int(max_tokens)
        self.seed = int(seed)
        self.cache = cache
        self.prompt = prompt
        self.shuffle = shuffle
        self.redraw = draws == "per_step"
        self.draws = draws
        self.questions = questions
        self.min_letter_mass = float(min_letter_mass)
        self.cannot_answer = cannot_answer
        self.every_question = bool(every_question) or questions == "all"
        """Ask each valid question exactly once, in order, instead of drawing ``questions_per_caption``
        with replacement (evaluation: every question counts once, none twice, none skipped); the
        older spelling of ``questions: all``."""
        if self.every_question:
            self.questions = "all"
        self.parse = parse
        self.preset = preset
        self.on_ask_failure = on_ask_failure
        self.layout = layout
        self.low_mass = low_mass
        """Exact mode, an ask whose letter mass is below ``min_letter_mass``: ``zero`` scores it 0 (a
        parse failure); ``sample`` asks it again in sample mode, which finds a letter the answerer
        writes after other tokens, so the reward agrees with the sampled one where exact cannot."""
        self._warned_mass = False
        self._backend: Backend | None = None
        self._calls = 0
        self._local = threading.local()
        self._warned_inexact = False
        render(prompt, caption="", question="", options=[], choices=[])  # fail fast on a bad template name

    @property
    def _step(self) -> int | None:
        """The trainer step of the call running on this thread: one shared reward serves verl's worker
        threads concurrently, and each call must draw from its own step, not another thread's."""
        return getattr(self._local, "step", None)

    @_step.setter
    def _step(self, value: int | None) -> None:
        self._local.step = value

    def __getstate__(self) -> dict[str, Any]:  # picklable (a thread-local is not)
        state = dict(self.__dict__)
        state.pop("_local", None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._local = threading.local()

    @property
    def backend(self) -> Backend:
        """The answerer, built on first use (so building a trainer loads no model twice)."""
        if self._backend is None:
            self._backend = load_backend(self.answerer, cache=self.cache)
        return self._backend

    def __call__(self, prompts=None, completions=None, completion_ids=None, **kwargs: Any) -> list[float | None]:
        # The training step seeds the draws (see module doc); TRL passes it in trainer_state.
        state = kwargs.get("trainer_state")
        step = getattr(state, "global_step", None)
        self._step = int(step) if isinstance(step, int) else None
        try:
            return super().__call__(prompts, completions, completion_ids, **kwargs)
        finally:
            self._step = None

    def _plan(self, caption: str, questions: Any, call: int, image: Any = None, media: str = "image") -> tuple[list[Ask], dict[str, Any]]:
        """The Q×N asks of one caption, or none with the reason in the details."""
        try:
            items = coerce_questions(questions)
        except MCQError as e:
            return [], {"reason": str(e), "n_questions": 0, "invalid_questions": 1}
        valid, invalid, reasons = [], 0, []
        public = self.layout == "public"
        for item in items:
            try:
                mcq = normalize_mcq(item, abstain_answer_ok=public)
                valid.append(check_public(mcq) if public else mcq)
            except MCQError as e:
                invalid += 1
                reasons.append(str(e))
        details: dict[str, Any] = {"n_questions": len(valid), "invalid_questions": invalid}
        if not valid:
            details["reason"] = "no usable question" + (f" ({reasons[0]})" if reasons else "")
            return [], details
        epoch = call if self.redraw else 0
        who = str(image) if image is not None else None
        rng = seeded_rng("caprl_qa", self.seed, epoch, [m.key for m in valid], *([who] if who else []))
        if self.layout == "public":
            return self._plan_public(caption, valid, rng, epoch, who), details
        if self.questions == "all":
            draws = list(range(len(valid)))
        else:
            draws = [rng.randrange(len(valid)) for _ in range(self.questions_per_caption)]
        asks = []
        # (presentation, prompt text) per (question, round): round r of a question always shows the
        # same order, so a question drawn again reuses its rendered prompt
        orders: dict[tuple[int, int], Any] = {}
        for j, qi in enumerate(draws):
            mcq = valid[qi]
            for r in range(self.rounds):
                if (qi, r) not in orders:
                    order_rng = (seeded_rng("caprl_qa/order", self.seed, epoch, mcq.key, r, *([who] if who else []))
                                 if self.shuffle else None)
                    pres = present(mcq, order_rng, self.cannot_answer)
                    orders[qi, r] = pres, render(self.prompt, caption=caption, question=mcq.question, options=pres.lines(),
                                                 choices=list(zip(pres.letters, pres.options, strict=True)), media=media)
                pres, text = orders[qi, r]
                sample_seed = rng.getrandbits(31)  # each sample-mode ask is an independent draw
                asks.append(Ask([{"role": "user", "content": text}], pres, seed=sample_seed, id=f"q{qi}/draw{j}/round{r}"))
        return asks, details

    def _plan_public(self, caption: str, valid: list[Any], rng: Any, epoch: int, who: str | None) -> list[Ask]:
        """The public reward's asks: per draw, one question drawn with replacement and its options
        reshuffled (one ``choice`` then one ``shuffle`` from the caption's stream, in that order, as
        the public code calls ``random``), rendered into the public raw prompt. Sampling seeds come
        from a stream of their own, so the draws are exactly a ``random.Random``'s."""
        seeds = seeded_rng("caprl_qa/sample", self.seed, epoch, [m.key for m in valid], *([who] if who else []))
        order = list(range(len(valid))) if self.questions == "all" else None
        asks = []
        for j in range(len(valid) if order is not None else self.questions_per_caption):
            qi = order[j] if order is not None else rng.randrange(len(valid))
            for r in range(self.rounds):
                block, pres = present_public(valid[qi], rng if self.shuffle else None)
                text = render(self.prompt, caption=caption, question=block)
                asks.append(Ask([{"role": "user", "content": text}], pres, seed=seeds.getrandbits(31),
                                id=f"q{qi}/draw{j}/round{r}", prompt=text))
        return asks

    def score(self, completions: list[str], questions: Any = None, **columns: Any) -> list[Score]:
        n = len(completions)
        ids = columns.get("image_id") or columns.get("id")
        if not isinstance(ids, (list, tuple)) or len(ids) != n:
            ids = [None] * n
        if questions is None:
            questions = [None] * n
        if len(questions) != n:
            logger.error("caprl_qa: %d completions but %d question lists", n, len(questions))
            return [Score(None, {"reason": "questions column length mismatch"}) for _ in completions]
        call = self._step if self._step is not None else self._calls
        self._calls += 1
        media = _media(columns, n)  # a video row's caption is a video's description; nothing else changes
        plans = [self._plan(c or "", q, call, i, m) for c, q, i, m in zip(completions, questions, ids, media, strict=False)]
        flat = [a for asks, _ in plans for a in asks]
        if flat:
            try:
                answers = ask(self.backend, flat, mode=self.mode, temperature=self.temperature, max_tokens=self.max_tokens,
                              min_letter_mass=self.min_letter_mass, parse_rule=self.parse)
            except Exception as e:  # noqa: BLE001 - e.g. the answerer cannot even be built
                logger.error("caprl_qa: answerer unavailable: %s", e)
                answers = [None] * len(flat)
            if self.mode == "exact":
                answers = self._low_mass(flat, answers)
        else:
            answers = []
        scores, pos, inexact = [], 0, 0
        for asks, details in plans:
            mine = answers[pos : pos + len(asks)]
            pos += len(asks)
            scores.append(self._aggregate(mine, details))
            inexact += sum(1 for a in mine if a is not None and a.error is None and not a.exact)
        if inexact and self.mode == "exact" and not self._warned_inexact:  # once per reward, not per batch
            self._warned_inexact = True
            logger.warning("caprl_qa: %d answers were sampled estimates, not exact probabilities (backend lacks "
                           "logprobs); later batches of this run will be too, without another warning", inexact)
        n_none = sum(s.value is None for s in scores)
        if n_none:
            logger.warning("caprl_qa: %d of %d captions could not be scored (reward None)", n_none, n)
        return scores

    def _low_mass(self, asks: list[Ask], answers: list[Any]) -> list[Any]:
        """Warn once when the answerer puts little first-token mass on the letters (exact mode then
        measures something else than the sampled reward; docs/caprl.md), and with ``low_mass:
        sample`` re-ask those asks in sample mode."""
        masses = [a.letter_mass for a in answers if a is not None and a.letter_mass is not None]
        if masses and sum(masses) / len(masses) < 0.5 and not self._warned_mass:
            self._warned_mass = True
            logger.warning("caprl_qa: the answerer's mean first-token letter mass is %.2f: exact mode scores only the "
                           "letter it names first, and may differ from the sampled reward (low_mass: sample re-asks "
                           "low-mass asks by sampling; see letter_mass in the logs)", sum(masses) / len(masses))
        if self.low_mass != "sample":
            return answers
        low = [i for i, a in enumerate(answers)
               if a is not None and a.error is None and a.letter_mass is not None and a.letter_mass < self.min_letter_mass]
        if not low:
            return answers
        try:
            again = ask(self.backend, [asks[i] for i in low], mode="sample", temperature=self.temperature,
                        max_tokens=self.max_tokens, parse_rule=self.parse)
        except Exception as e:  # noqa: BLE001 - keep the exact answers
            logger.error("caprl_qa: low-mass re-ask failed: %s", e)
            return answers
        out = list(answers)
        for i, a in zip(low, again, strict=True):
            a.exact, a.letter_mass, a.resampled = False, answers[i].letter_mass, True
            out[i] = a
        return out

    def _aggregate(self, answers: list[Any], details: dict[str, Any]) -> Score:
        if not answers:
            return Score(None, {**details, "answerer_calls": 0})
        ok = [a for a in answers if a is not None and a.error is None]
        errors = len(answers) - len(ok)
        details = {
            **details,
            "answerer_calls": sum(1 for a in answers if a is not None and a.first),
            "errors": errors,
            "parse_failures": sum(a.parse_failure for a in ok),
            "asks": len(answers),
        }
        details["ask_failure_rate"] = errors / len(answers)
        if errors:
            first_error = next((a.error for a in answers if a is not None and a.error), "answerer unavailable")
            if not ok:
                return Score(None, {**details, BACKEND_FAILED: 1, "reason": f"no question could be scored: {first_error}"})
            if self.on_ask_failure == "none":
                # Over the asks that survived, the reward is over another question set than the rest
                # of its GRPO group's: no reward, with the reason, rather than a different number.
                return Score(None, {**details, BACKEND_FAILED: 1,
                                    "reason": f"{errors} of {len(answers)} asks failed: {first_error}"})
        acc = sum(a.correct for a in ok) / len(ok)
        details["qa_acc"] = acc
        details["parse_failure_rate"] = details["parse_failures"] / len(ok)
        masses = [a.letter_mass for a in ok if a.letter_mass is not None]
        if masses:
            details["letter_mass"] = sum(masses) / len(masses)
        if self.mode == "exact":
            details["low_mass_resampled"] = sum(bool(getattr(a, "resampled", False)) for a in ok)
        details["cannot_answer_rate"] = sum(a.abstain for a in ok) / len(ok)
        return Score(acc, details)


def _media(columns: dict[str, Any], n: int) -> list[str]:
    """``"video"`` for each row that carries a video (CapRL++'s rows: ``videos``; vlrl's: ``video``
    or ``video_path``), else ``"image"``: the answerer is told what the caption describes."""
    from vlrl.core.sources.columns import VIDEO_COLUMNS

    out = ["image"] * n
    for c in VIDEO_COLUMNS:
        col = columns.get(c)
        if isinstance(col, (list, tuple)) and len(col) == n:
            out = ["video" if v is not None or m == "video" else m for v, m in zip(col, out, strict=True)]
    return out
