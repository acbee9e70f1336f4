"""Vision-R1's hard formatting result reward (HFRRF) and the answer checking it shares with eval.

Vision-R1 rewards a reasoning rollout with 1 only when *both* hold: the completion is exactly
``<think>…</think>`` followed by ``<answer>…</answer>`` (whitespace around is fine, nothing else,
one of each tag), and the answer inside is correct. Everything else scores 0. The all-or-nothing
rule is the point: a format reward that pays separately is gamed first (the policy learns tags, not
maths), and a truncated rollout — one that ran out of tokens before ``</answer>`` — must never be
paid, or PTST's short stages would reward cut-off reasoning.

Correctness is decided by :func:`check_answer`, after :func:`plain_latex` has removed the LaTeX
that carries no meaning from both sides (``\\text{B}``, ``\\boxed{\\text{B}}``, ``\\(B\\)`` → ``B``;
``\\$12`` → ``$12``; ``√2`` → ``\\sqrt{2}``), in this order:

1. **Multiple choice** when ``choices`` are given or the gold answer is one letter A-Z: the
   prediction may be ``B``, ``(B)``, ``B. text``, ``B) text``, ``Option B`` or the option's text.
2. **Numbers** with a relative tolerance (1e-6 by default): ``1,000`` = ``1000``, ``50%`` = ``0.5``,
   ``$12`` = ``12``, ``5 cm`` = ``5`` (a unit on one side only), ``500 cm`` = ``5 m``, ``5 cm`` ≠ ``5 m``.
3. **Mathematics** through ``math_verify`` (``\\frac12`` = ``0.5``, ``2\\sqrt2`` = ``\\sqrt8``,
   ``x=3`` = ``3``) when either side looks mathematical, with the timeout-safe check Prism uses too
   (:func:`vlrl.rewards.answer_check.math_equal`).
4. Otherwise normalised text equality (case, surrounding punctuation, ``\\text{}``).

The reasoning evaluation (``vlrl eval reasoning``) imports :func:`extract_answer` and
:func:`check_answer` so that training reward and evaluation agree on what "correct" means.

**Soft variant** (``soft=True``), for runs where the hard reward is too sparse to start from:
correct format and correct answer 1.0; correct format, wrong answer ``format_credit`` (0.2);
both blocks present in order but with extra text, repeated tags or a missing ``<think>``
``partial_format_credit`` (0.1); truncated or no blocks 0.0. The paper used the hard reward.

Details per completion: ``format_ok``, ``answer_ok`` (correctness of the extracted answer, taken
from the ``<answer>`` block, or leniently from ``\\boxed{}`` / "the answer is" when the format is
broken — a diagnostic; the reward still needs both), ``truncated`` (the completion reached the
token cap without ending in EOS; a missing ``</answer>`` alone is a format failure, not
truncation), ``think_too_short`` and ``pred``.

Numbers carry units (``5 m`` ≠ ``5 cm``, ``500 cm`` = ``5 m``; see ``units.py``), and an equation is
graded as a whole: ``x = 3`` answers 3, ``41 = 42`` answers nothing.
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Sequence
from typing import Any

from vlrl.rewards import register_reward
from vlrl.rewards.answer_check import last_boxed, math_equal
from vlrl.rewards.base import Reward, Score, last_scores

logger = logging.getLogger(__name__)

_STRICT = re.compile(r"\A\s*<think>(.*?)</think>\s*<answer>(.*?)</answer>\s*\Z", re.DOTALL)
_LOOSE = re.compile(r"<think>.*?</think>.*?<answer>.*?</answer>", re.DOTALL)
_TAGS = ("<think>", "</think>", "<answer>", "</answer>")


def split_think_answer(text: str) -> tuple[str, str] | None:
    """``(thinking, answer)`` when ``text`` is exactly one think block then one answer block.

    >>> split_think_answer("<think>2+2=4</think>\\n<answer>4</answer>")
    ('2+2=4', '4')
    >>> split_think_answer("Sure! <think>x</think><answer>4</answer>") is None
    True
    """
    if any(text.count(tag) != 1 for tag in _TAGS):
        return None
    m = _STRICT.match(text)
    return (m.group(1), m.group(2)) if m else None


def _clean(ans: str) -> str:
    if (boxed := last_boxed(ans)) is not None:
        ans = boxed
    ans = ans.strip().strip("*").strip()
    ans = re.sub(r"^(?:the\s+)?(?:final\s+|correct\s+)?answer\s*(?:is\s*:?|:)\s*", "", ans, flags=re.IGNORECASE)
    ans = re.sub(r"\.$", "", ans).strip()
    if ans.startswith("$") and ans.endswith("$") and len(ans) > 1:
        ans = ans.strip("$").strip()
    return re.sub(r"\.$", "", ans).strip()


def extract_answer(text: str) -> str | None:
    """The final answer of a completion, or ``None`` when there is none.

    Taken from the last ``<answer>…</answer>`` block; failing that (eval of untagged models) from the
    last ``\\boxed{}`` or a final "answer is/Answer:" line. A ``\\boxed{}`` inside the block wins.

    >>> extract_answer("<think>…</think><answer>The answer is \\\\boxed{\\\\frac{1}{2}}.</answer>")
    '\\\\frac{1}{2}'
    >>> extract_answer("so the final answer is B.")
    'B'
    >>> extract_answer("<think>I was cut off") is None
    True
    """
    if not isinstance(text, str):
        return None
    blocks = re.findall(r"<answer>(.*?)</answer>", text, re.DOTALL)
    if blocks:
        return _clean(blocks[-1])
    if (boxed := last_boxed(text)) is not None:
        return _clean(boxed)
    hits = re.findall(r"(?:final answer|answer)\s*(?:is\s*:?|:)\s*([^\n]+)", text, re.IGNORECASE)
    if hits:
        return _clean(hits[-1]) or None
    return None


# ----------------------------------------------------------------------------------------------
# Answer checking

_LETTER_FORMS = re.compile(r"^(?:\(([A-Za-z])\)|\[([A-Za-z])\]|([A-Z])(?:[.):]|$)|([a-z])[.)]?$)")
_LETTER_PREFIX = re.compile(
    r"^(?:the\s+)?(?:correct\s+|final\s+|best\s+)?(?:answer|option|choice)\s*(?:is\s*:?|:)?\s*", re.IGNORECASE
)


def _norm_text(s: str) -> str:
    s = re.sub(r"\\text\{([^{}]*)\}", r"\1", str(s))
    s = s.lower().strip().strip("$*\"'`").strip()
    s = re.sub(r"\s+", " ", s)
    return s.rstrip(".!,;: ")


def _letter(i: int) -> str:
    return chr(ord("A") + i)


def normalize_choices(choices: Any) -> list[str]:
    """Option texts in order; accepts a list (``"A. text"`` prefixes are removed) or a dict."""
    if not choices:
        return []
    if isinstance(choices, dict):
        items = [str(v) for _, v in sorted(choices.items())]
    elif isinstance(choices, (list, tuple)):
        items = [str(c) for c in choices]
    else:
        return []
    out = []
    for i, c in enumerate(items):
        m = re.match(rf"^\s*(?:\({_letter(i)}\)|{_letter(i)}[.):])\s*(.*)$", c, re.DOTALL)
        out.append(m.group(1) if m else c.strip())
    return out


def _as_letter(text: str, options: list[str], strict: bool) -> str | None:
    """The option letter ``text`` names. ``strict``: only a bare letter (gold answers)."""
    t = text.strip().strip("*$").strip()
    if options:
        for i, o in enumerate(options):
            if _norm_text(t) == _norm_text(o):
                return _letter(i)
    if strict:
        m = re.fullmatch(r"\(?([A-Z])\)?\.?", t)
        return m.group(1) if m else None
    t = _LETTER_PREFIX.sub("", t)
    m = _LETTER_FORMS.match(t)
    if not m:
        return None
    letter = next(g for g in m.groups() if g).upper()
    if options and m.group(3) and len(t) > 2:  # "B. text" whose text contradicts option B: trust neither
        rest = _norm_text(t[2:])
        idx = ord(letter) - ord("A")
        if (
            rest
            and idx < len(options)
            and rest != _norm_text(options[idx])
            and any(rest == _norm_text(o) for o in options)
        ):
            return None
    return letter


_NUM = re.compile(
    r"^([-+\u2212]?)\s*(?:[$\u20ac\u00a3\u00a5]\s*)?((?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d*)?|\.\d+)(?:[eE]([-+]?\d+))?"
    r"(?:\s*/\s*(\d+))?\s*(%|\\%|percent)?"
    # a unit: "cm", "m", "kg", "cm^2", "°", "apples" (units.py compares them); not "pi" or a variable
    r"\s*((?:\u00b0[A-Za-z]?|(?!pi\b)[A-Za-z]{2,}\.?|(?:mm|cm|km|m|g|kg|s|h|l)(?:\^?[23]|[\u00b2\u00b3])?)"
    r"(?:\s+[A-Za-z]{2,}\.?)?)?$"
)
_VARIABLE = re.compile(r"^\s*(?:[A-Za-z](?:_\{?\w+\}?)?|\\[A-Za-z]+|\\text\{[^{}]*\})\s*$")


def split_equation(s: str) -> str | None:
    """The right-hand side of ``x = 3`` (a variable named on the left), else None.

    ``41 = 42`` or ``2x = 6`` are graded as a whole, not on their right-hand side.
    """
    if s.count("=") != 1:
        return None
    lhs, rhs = s.split("=")
    return rhs.strip() if _VARIABLE.match(lhs) else None


def to_number(text: Any) -> tuple[float, bool] | None:
    """``(value, is_percent)`` for a plain number (commas, %, currency, trailing unit), else None.

    >>> to_number("1,000"), to_number("50%"), to_number("x = -2.5 cm"), to_number("3/4"), to_number("41 = 42")
    ((1000.0, False), (50.0, True), (-2.5, False), (0.75, False), None)
    """
    parsed = number_with_unit(text)
    return None if parsed is None else parsed[:2]


def number_with_unit(text: Any) -> tuple[float, bool, str | None] | None:
    """``(value, is_percent, unit)``; ``unit`` is the trailing unit word, if any (``"cm"``)."""
    if isinstance(text, bool):
        return None
    if isinstance(text, (int, float)):
        return (float(text), False, None) if math.isfinite(text) else None
    s = str(text).strip().strip("$").strip()
    s = s.replace("{,}", ",").replace("\\!", "").replace("\\,", "")
    if "=" in s:
        rhs = split_equation(s)
        if rhs is None:
            return None
        s = rhs
    m = _NUM.match(s)
    if not m:
        return None
    sign, digits, exp, denom, pct, unit = m.groups()
    # Read as a float from the text, never as 10 ** exp exactly (1e999999999 would take minutes). A value
    # that overflows or underflows a float is not a plain number (inf == inf would pass 1e400 for 1e500);
    # math_equal, which bounds exponents before any arithmetic, grades it instead.
    value = float(digits.replace(",", "") + (f"e{exp}" if exp else ""))
    if not math.isfinite(value) or (value == 0 and any(c in digits for c in "123456789")):
        return None
    if denom:
        d = float(denom)
        if "." in digits or d == 0 or not math.isfinite(d):
            return None
        value /= d
    return (-value if sign in ("-", "\u2212") else value), bool(pct), unit


def _numbers_match(p: tuple, g: tuple, rel_tol: float, abs_tol: float) -> bool:
    from vlrl.methods.vision_r1.units import units_compatible

    (pv, pp, pu), (gv, gp, gu) = (tuple(p) + (None,))[:3], (tuple(g) + (None,))[:3]
    converted = units_compatible(pv, pu, gv, gu)
    if converted is None:  # 5 cm vs 5 m: different units that do not convert
        return False
    pv, gv = converted
    candidates = [(pv, gv)]
    if pp != gp:  # "50%" vs "0.5": either reading may be meant
        candidates.append((pv / 100, gv) if pp else (pv, gv / 100))
    return any(math.isclose(a, b, rel_tol=rel_tol, abs_tol=abs_tol) for a, b in candidates)


_FONT = re.compile(r"\\(?:text|textbf|textit|textrm|textsf|texttt|mathrm|mathbf|mathit|mathsf|mathtt|mbox|operatorname)"
                   r"\s*\{([^{}]*)\}")
_ROOT_SIGN = re.compile(r"([\u221a\u221b\u221c])\s*(\{[^{}]*\}|\([^()]*\)|[\w.]+)")
_ROOT_INDEX = {"\u221a": "", "\u221b": "[3]", "\u221c": "[4]"}  # √ ∛ ∜
_MATH_DELIMITERS = (("\\(", "\\)"), ("\\[", "\\]"), ("$$", "$$"))


def _root(m: re.Match) -> str:
    arg = m.group(2)[1:-1] if m.group(2)[0] in "{(" else m.group(2)
    return "\\sqrt" + _ROOT_INDEX[m.group(1)] + "{" + arg + "}"


def plain_latex(s: str) -> str:
    r"""``s`` with the LaTeX that carries no meaning for grading removed: a whole-answer ``\boxed{}``,
    font wrappers (``\text{B}``, ``\textbf{B}``, ``\mathrm{B}`` → ``B``), whole-answer math delimiters
    (``\(B\)``, ``\[x = 3\]``, ``$$12$$``: models write them as often as ``$...$``), escaped dollars
    (``\$12`` → ``$12``); and the root signs written as LaTeX (``√2`` → ``\sqrt{2}``, ``∛8`` → ``\sqrt[3]{8}``).

    >>> plain_latex("\\boxed{\\text{(B)}}"), plain_latex("\\$1,200"), plain_latex("3√2"), plain_latex("\\(\\text{B}\\)")
    ('(B)', '$1,200', '3\\sqrt{2}', 'B')
    """
    s = s.strip()
    for left, right in _MATH_DELIMITERS:  # a whole answer set as math: \(B\), \[x = 3\], $$12$$
        inner = s[len(left):-len(right)] if len(s) > len(left) + len(right) else ""
        if s.startswith(left) and s.endswith(right) and inner and left not in inner and right not in inner:
            s = inner.strip()
            break
    boxed = last_boxed(s)
    if boxed is not None and s.startswith(("\\boxed", "\\fbox")) and s.endswith("}") and s.count("\\boxed") <= 1:
        s = boxed.strip()
    prev = None
    while prev != s:  # nested wrappers: \textbf{\text{B}}
        prev, s = s, _FONT.sub(r"\1", s)
    s = s.replace("\\$", "$")
    s = _ROOT_SIGN.sub(_root, s)
    return s.strip()


_MATHY = re.compile(r"[\d\\^_=+*/(){}\[\]<>\u221a\u03c0\u221e]")


def check_answer(pred: Any, gold: Any, choices: Any = None, rel_tol: float = 1e-6, abs_tol: float = 1e-9) -> bool:
    """Whether ``pred`` answers ``gold`` (see the module docstring for the rules).

    ``gold`` may be a list of acceptable answers.

    >>> check_answer("(B)", "B"), check_answer("B. Jupiter", "B"), check_answer("Jupiter", "B", ["Mars", "Jupiter"])
    (True, True, True)
    >>> check_answer("1000", "1,000"), check_answer("0.5", "50%"), check_answer("\\\\sqrt{8}", "2\\\\sqrt{2}")
    (True, True, True)
    >>> check_answer("C", "B"), check_answer("1001", "1000"), check_answer(None, "4")
    (False, False, False)
    """
    if isinstance(gold, (list, tuple)):
        return any(check_answer(pred, g, choices, rel_tol, abs_tol) for g in gold)
    if pred is None or gold is None:
        return False
    pred_s, gold_s = plain_latex(str(pred)), plain_latex(str(gold))
    if not pred_s or not gold_s:
        return False
    options = normalize_choices(choices)
    gold_letter = _as_letter(gold_s, options, strict=True)
    if gold_letter is not None:
        return _as_letter(pred_s, options, strict=False) == gold_letter
    if options:  # free-text gold with options: a predicted letter stands for its option's text
        letter = _as_letter(pred_s, options, strict=False)
        if letter is not None and ord(letter) - ord("A") < len(options):
            pred_s = options[ord(letter) - ord("A")]
    g_num = number_with_unit(gold if isinstance(gold, (int, float)) else gold_s)
    if g_num is not None:
        p_num = number_with_unit(pred_s)
        if p_num is not None:
            return _numbers_match(p_num, g_num, rel_tol, abs_tol)
    if _norm_text(pred_s) == _norm_text(gold_s):
        return True
    if "=" in pred_s and "=" not in gold_s:  # an equation is graded as a whole: "x = 3" → 3, "41 = 42" is wrong
        rhs = split_equation(pred_s)
        return rhs is not None and check_answer(rhs, gold, choices, rel_tol, abs_tol)
    if _MATHY.search(gold_s) or _MATHY.search(pred_s):
        return math_equal(pred_s, gold_s)
    return False


# ----------------------------------------------------------------------------------------------
# The reward


def _flag(column: Sequence[Any] | None, i: int) -> bool:
    if column is None or i >= len(column):
        return False
    return bool(column[i])


def _jsonable(v: Any) -> Any:
    return v if isinstance(v, (str, int, float, bool, type(None), list)) else str(v)


def _row(column: Sequence[Any] | None, i: int) -> Any:
    if column is None or i >= len(column):
        return None
    return column[i]


@register_reward("hfrrf")
class HFRRFReward(Reward):
    """Hard formatting result reward (Vision-R1).

    Settings: ``soft`` (partial format credit, see the module docstring), ``format_credit``,
    ``partial_format_credit``, ``rel_tol`` (numeric tolerance), ``max_completion_length`` (a
    completion whose token count reaches it without ending in one of ``eos_token_ids`` is
    truncated; the trainer fills both in), ``think_prefilled`` (the chat template already opened
    ``<think>`` in the prompt), ``answer_column`` (default ``answer``), ``min_think_chars``
    (minimum non-blank characters inside ``<think>``; default 0, the paper's format rule, which
    asks only for the two blocks in order — raise it to refuse an empty ``<think></think>``).

    Optional columns: ``choices``, ``truncated`` / ``is_truncated``, ``completion_lengths``.

    >>> r = HFRRFReward()
    >>> r(completions=["<think>7*6</think><answer>42</answer>", "<think>7*6</think><answer>41</answer>",
    ...                "<think>7*6</think><answer>42", "42"], answer=["42"] * 4)
    [1.0, 0.0, 0.0, 0.0]
    >>> HFRRFReward(soft=True)(completions=["<think>a</think><answer>41</answer>", "Hi <think>a</think><answer>41</answer>"],
    ...                        answer=["42", "42"])
    [0.2, 0.1]
    """

    name = "hfrrf"
    required_columns: tuple[str, ...] = ("answer",)  # the default answer_column

    def __init__(
        self,
        soft: bool = False,
        format_credit: float = 0.2,
        partial_format_credit: float = 0.1,
        rel_tol: float = 1e-6,
        max_completion_length: int | None = None,
        think_prefilled: bool = False,
        answer_column: str = "answer",
        min_think_chars: int = 0,
        eos_token_ids: Sequence[int] | None = None,
    ) -> None:
        self.soft = soft
        self.format_credit = float(format_credit)
        self.partial_format_credit = float(partial_format_credit)
        self.rel_tol = float(rel_tol)
        self.max_completion_length = max_completion_length
        self.think_prefilled = think_prefilled
        self.answer_column = answer_column
        self.required_columns = (answer_column,)
        if not isinstance(min_think_chars, int) or min_think_chars < 0:
            raise ValueError(f"min_think_chars must be a non-negative integer, got {min_think_chars!r}")
        self.min_think_chars = min_think_chars
        self.eos_token_ids = set(eos_token_ids) if eos_token_ids else None

    def __call__(self, prompts=None, completions=None, completion_ids=None, **kwargs: Any) -> list[float | None]:
        if completion_ids is not None and self.max_completion_length:
            kwargs.setdefault("completion_lengths", [len(ids) for ids in completion_ids])
            if self.eos_token_ids:  # a completion of exactly the cap that ended with EOS is complete
                kwargs.setdefault("ended_with_eos", [bool(ids) and ids[-1] in self.eos_token_ids for ids in completion_ids])
        values = super().__call__(prompts, completions, completion_ids, **kwargs)
        log_extra = kwargs.get("log_extra")
        scores = last_scores(self)
        if log_extra is not None and scores is not None and len(scores) == len(values):
            # the completions dump (TRL's table, vlrl's step-*.jsonl) shows what was graded against what
            log_extra("gold", [_jsonable(_row(kwargs.get(self.answer_column), i)) for i in range(len(values))])
            log_extra("prediction", [s.details.get("pred") for s in scores])
        return values

    def score(self, completions: list[str], **columns: Any) -> list[Score]:
        answers = columns.get(self.answer_column)
        choices = columns.get("choices")
        lengths = columns.get("completion_lengths")
        out = []
        for i, text in enumerate(completions):
            gold = _row(answers, i)
            # a missing answer: None, blank, or the NaN a parquet/pandas null becomes (never graded as "nan")
            if gold is None or (isinstance(gold, str) and not gold.strip()) or (isinstance(gold, float) and math.isnan(gold)):
                out.append(Score(None, {"error": f"no gold {self.answer_column!r}"}))
                continue
            try:
                out.append(self._score_one(text, gold, _row(choices, i), i, columns, lengths))
            except Exception as e:  # noqa: BLE001 - one bad sample never crashes a training step
                logger.warning("hfrrf: completion %d could not be scored: %s", i, e)
                out.append(Score(None, {"error": str(e)}))
        return out

    def _score_one(self, text: Any, gold: Any, choices: Any, i: int, columns: dict, lengths: Any) -> Score:
        text = text if isinstance(text, str) else str(text or "")
        if self.think_prefilled and not text.lstrip().startswith("<think>"):
            text = "<think>" + text
        length = _row(lengths, i)
        # Truncated means the generator stopped at the cap, not that </answer> is missing (a missing tag
        # alone is a format failure); a completion of exactly the cap that ended with EOS is complete.
        truncated = (
            _flag(columns.get("truncated"), i)
            or _flag(columns.get("is_truncated"), i)
            or bool(self.max_completion_length and length is not None and length >= self.max_completion_length
                    and not _flag(columns.get("ended_with_eos"), i))
        )
        parts = None if truncated else split_think_answer(text)
        think_short = parts is not None and len(parts[0].strip()) < self.min_think_chars
        if think_short:
            parts = None
        format_ok = parts is not None
        pred = _clean(parts[1]) if parts else (None if truncated else extract_answer(text))
        if think_short:
            pred = extract_answer(text)
        answer_ok = check_answer(pred, gold, choices, rel_tol=self.rel_tol)
        if format_ok and answer_ok:
            value = 1.0
        elif self.soft and format_ok:
            value = self.format_credit
        elif self.soft and not truncated and _LOOSE.search(text):
            value = self.partial_format_credit
        else:
            value = 0.0
        return Score(value, {"format_ok": format_ok, "answer_ok": answer_ok, "truncated": truncated,
                             "think_too_short": think_short, "pred": pred})


__all__ = [
    "HFRRFReward",
    "check_answer",
    "extract_answer",
    "math_equal",
    "normalize_choices",
    "plain_latex",
    "split_think_answer",
    "to_number",
]
