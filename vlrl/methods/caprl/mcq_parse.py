"""Turn a VLM's free-text multiple-choice questions into validated :class:`~vlrl.core.records.MCQ`.

Real models break the requested layout in a handful of recurring ways, and each one must cost a
question, never the image: chatter before or after the questions, Markdown bold, numbered
questions instead of "Question 1:", options on one line, an explanation after the answer, a
missing "Answer:" line, an answer letter with no such option, duplicate options, fewer than three
options, or JSON instead of text. The parser reads what it can and reports every dropped question
with a short reason code, which the curation stats count.

The public CapRL generation layout is read as written: numbered questions, options as indented
bullets (``   - A) text``; ``*`` and ``•`` bullets too), options on the question line itself (for
every question of a reply, and with the answer on the same line), and a bold answer line
(``**Answer:** D) text``). Chinese layouts too, since the public QA data is partly Chinese:
full-width letters and punctuation (``Ａ．``, ``（A）``, ``A：``), the ideographic comma
(``A、``), ``问题1：`` / ``题目`` / ``第1题`` question labels and ``答案：`` / ``正确答案：`` /
``参考答案：`` / ``答：`` answer lines.

Reason codes: ``no_question``, ``too_few_options``, ``duplicate_options``,
``duplicate_option_letters``, ``missing_answer``, ``answer_not_in_options``, ``too_many_options``,
``answer_is_abstain`` (the gold answer is a "cannot answer"/"none of the above" option).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

from vlrl.core.records import MCQ
from vlrl.methods.caprl.mcq import LETTERS, MCQError, is_abstain, make_mcq, normalize_mcq

MIN_OPTIONS = 3

_Q_START = re.compile(r"^\s*(?:question\b\s*\d*\s*[:.)\-]?|q\s*\d+\s*[:.)\-]?|\d+\s*[.)、]"
                      r"|(?:问题|题目)\s*\d*\s*[:.、]?|第\s*\d+\s*题\s*[:.、]?)\s*(?P<rest>.*)$", re.I)
_BULLET = r"(?:[-–•·]\s*)?"
_SEP = r"[\)\]\.:、]"
_OPTION = re.compile(r"^\s*" + _BULLET + r"[\(\[]?([A-Ha-h])\s*" + _SEP + r"\s*(.+?)\s*$")
# inline options need a space after the label, or a non-ASCII text right after it ("A.红色"); before
# it, a space or non-ASCII text (Chinese puts none: "颜色？A．红 B．蓝", "（A）红（B）蓝")
_INLINE_OPTION = re.compile(r"(?:^|\s|(?<=[^\x00-\x7f]))" + _BULLET + r"[\(\[]?([A-H])" + _SEP + r"(?:\s+|(?=[^\x00-\x7f]))")
_ANSWER_WORD = r"(?:(?:the\s+)?(?:correct\s+)?(?:answer|ans|solution)\s*(?:is)?|(?:正确答案|参考答案|答案)\s*[是为]?|答(?=\s*:))"
_ANSWER = re.compile(r"^\s*" + _ANSWER_WORD + r"\s*:?\s*(.*)$", re.I)
_ANSWER_TAIL = re.compile(r"\s(" + _ANSWER_WORD + r"\s*:\s*\S.*)$", re.I)
_MARKDOWN = re.compile(r"[*_`#>]+")
_FULL_WIDTH = {ord(c): ord(c) - 0xFEE0 for c in "ＡＢＣＤＥＦＧＨａｂｃｄｅｆｇｈ０１２３４５６７８９．：（）［］"} | {0x3000: 0x20}
"""Full-width option letters, digits and label punctuation (``Ａ．``, ``（A）``, ``答案：``) to
ASCII, so one set of label patterns reads both; other text (``？``, ``，``) is kept as written."""


@dataclass
class ParseResult:
    questions: list[MCQ] = field(default_factory=list)
    dropped: list[dict[str, str]] = field(default_factory=list)
    """``{"reason": code, "detail": message, "text": the block}`` per dropped question."""

    @property
    def found(self) -> int:
        return len(self.questions) + len(self.dropped)


def parse_mcqs(text: str) -> ParseResult:
    """Parse every MCQ in ``text``; never raises."""
    text = text or ""
    as_json = _try_json(text)
    if as_json is not None:
        return as_json
    result = ParseResult()
    for block in _blocks(text):
        try:
            result.questions.append(_parse_block(block))
        except _Drop as d:
            result.dropped.append({"reason": d.code, "detail": d.detail, "text": "\n".join(block)[:500]})
    return result


class _Drop(Exception):
    def __init__(self, code: str, detail: str = "") -> None:
        super().__init__(code)
        self.code, self.detail = code, detail or code.replace("_", " ")


def _clean(line: str) -> str:
    return _MARKDOWN.sub("", line.translate(_FULL_WIDTH)).strip()


def _lines(text: str) -> list[str]:
    """Clean non-empty lines, with an answer that follows inline options on the same line
    (``... C) green Answer: A``) split onto a line of its own."""
    out = []
    for line in (x for x in map(_clean, text.splitlines()) if x):
        tail = _ANSWER_TAIL.search(line)
        if tail and len(_INLINE_OPTION.findall(line[: tail.start()])) >= 2:
            out += [line[: tail.start()].strip(), tail.group(1)]
        else:
            out.append(line)
    return out


def _blocks(text: str) -> list[list[str]]:
    """Lines grouped per question.

    A block opens at a labelled question line ("Question 2:", "2.") or at any plain line that
    follows an answer; blocks with neither a label nor options (chatter, explanations) vanish.
    """
    blocks: list[tuple[bool, list[str]]] = []
    current: list[str] | None = None
    current_labelled = False
    state = None  # None -> "question" -> "options" -> "answered"
    for line in _lines(text):
        is_opt = bool(_OPTION.match(line))
        is_ans = bool(_ANSWER.match(line))
        labelled = bool(_Q_START.match(line)) and not is_opt and not is_ans
        plain = not is_opt and not is_ans
        # a question line that carries its own options ("What colour? A) red B) blue C) green")
        inline = plain and bool(_split_question_line(line)[1])
        # a labelled line continues a labelled block only while that block is a bare label
        # ("Question 1:" then its text); after question text it is the next question, and the one
        # before it (no options) is dropped and counted instead of absorbing it
        opens = labelled and (state != "question" or not current_labelled or _has_text(current))
        if current is None or opens or (plain and state == "answered") or (inline and state == "options"):
            current, current_labelled = [line], labelled
            blocks.append((labelled, current))
            state = "options" if is_opt or inline else "question"
            continue
        current.append(line)
        if is_ans and state == "options":
            state = "answered"
        elif is_opt and state == "question":
            state = "options"
    return [b for labelled, b in blocks
            if labelled or any(_OPTION.match(x) or _split_question_line(x)[1] for x in b)]


def _has_text(block: list[str] | None) -> bool:
    """Whether a block already holds question text beyond a bare label line."""
    if not block:
        return False
    head = _Q_START.match(block[0])
    return len(block) > 1 or not head or bool(head.group("rest").strip())


def _split_inline(line: str) -> list[str]:
    """``"A. red B. blue C. green"`` → three option lines (only when letters run A, B, C...)."""
    hits = list(_INLINE_OPTION.finditer(line))
    if len(hits) >= 2 and [h.group(1) for h in hits] == list(LETTERS[: len(hits)]) and hits[0].start() == 0:
        ends = [h.start() for h in hits[1:]] + [len(line)]
        return [line[h.start() : e].strip() for h, e in zip(hits, ends, strict=False)]
    return [line]


def _split_question_line(line: str) -> tuple[str, list[str]]:
    """``"What colour? A) red B) blue C) green"`` → the question and its option lines."""
    hits = [h for h in _INLINE_OPTION.finditer(line) if h.start() > 0]
    for k, h in enumerate(hits):
        run = [x.group(1) for x in hits[k:]]
        if h.group(1) == "A" and len(run) >= 2 and run == list(LETTERS[: len(run)]):
            return line[: h.start()].strip(), _split_inline(line[h.start() :].strip())
    return line, []


def _parse_block(block: list[str]) -> MCQ:
    head = _Q_START.match(block[0])
    if _OPTION.match(block[0]):
        question_parts, body = [], block
    elif head and not _ANSWER.match(block[0]):
        question, inline = _split_question_line(head.group("rest"))
        question_parts, body = [question], inline + block[1:]
    else:
        question, inline = _split_question_line(block[0])
        question_parts, body = [question], inline + block[1:]
    options: list[tuple[str, str]] = []
    answer: str | None = None
    for raw in body:
        m_ans = _ANSWER.match(raw)
        if m_ans:
            answer = answer or m_ans.group(1).strip() or None
            continue
        if answer is not None:
            continue  # explanation after the answer line
        pieces = _split_inline(raw)
        matched = [_OPTION.match(p) for p in pieces]
        if all(matched):
            options.extend((m.group(1).upper(), m.group(2).strip()) for m in matched)  # type: ignore[union-attr]
        elif not options:
            question_parts.append(raw)
    question = " ".join(p for p in question_parts if p).strip()
    if not question:
        raise _Drop("no_question")
    if len(options) < MIN_OPTIONS:
        raise _Drop("too_few_options", f"{len(options)} option(s), need {MIN_OPTIONS}")
    letters = [L for L, _ in options]
    if len(set(letters)) != len(letters):
        raise _Drop("duplicate_option_letters")
    texts = [t for _, t in options]
    if len({t.casefold() for t in texts}) != len(texts):
        raise _Drop("duplicate_options")
    if len(texts) > len(LETTERS) - 1:
        raise _Drop("too_many_options")
    if not answer:
        raise _Drop("missing_answer")
    index = _answer_index(answer, letters, texts)
    if is_abstain(texts[index]):
        raise _Drop("answer_is_abstain", f"the answer is the abstain option {texts[index][:40]!r}")
    try:
        return make_mcq(question, texts, index)
    except MCQError as e:
        raise _Drop(_code(str(e)), str(e)) from None


def _answer_index(answer: str, letters: list[str], texts: list[str]) -> int:
    # a closing full stop or semicolon, ASCII or Chinese ("答案：B。"), is not part of the answer
    a = answer.strip().rstrip(".;。；").strip()
    for i, t in enumerate(texts):
        if a.casefold() == t.casefold():
            return i
    # the letter, then a label separator (ASCII or Chinese: "B、蓝色", "B，蓝色", "B项"), a space or the end
    m = re.match(r"^[\(\[]?([A-Za-z])(?:[\)\]\.:,;、，；。项]|\s|$)", a)
    if m:
        letter = m.group(1).upper()
        if letter in letters:
            return letters.index(letter)
        raise _Drop("answer_not_in_options", f"answer {letter} is not among options {''.join(letters)}")
    raise _Drop("answer_not_in_options", f"answer {a[:40]!r} names no option")


def _try_json(text: str) -> ParseResult | None:
    """JSON output (a list of MCQ objects, or ``{"questions": [...]}``), repaired if needed."""
    s = text.strip()
    if s.startswith("```"):
        s = re.sub(r"^```[a-zA-Z]*\s*|\s*```$", "", s)
    if not s or s[0] not in "[{" or '"question"' not in s:
        return None
    from vlrl.judge.structured import InvalidOutput, extract_json  # strict JSON, else json_repair

    try:
        data, _ = extract_json(s)
    except InvalidOutput:
        return None
    if isinstance(data, dict):
        data = data.get("questions", [data])
    if not isinstance(data, list):
        return None
    result = ParseResult()
    for item in data:
        try:
            mcq = normalize_mcq(item)
            if len(mcq.options) < MIN_OPTIONS:
                raise _Drop("too_few_options", f"{len(mcq.options)} option(s), need {MIN_OPTIONS}")
            result.questions.append(mcq)
        except _Drop as d:
            result.dropped.append({"reason": d.code, "detail": d.detail, "text": json.dumps(item)[:500]})
        except MCQError as e:
            result.dropped.append({"reason": _code(str(e)), "detail": str(e), "text": json.dumps(item, default=str)[:500]})
    return result


def _code(message: str) -> str:
    m = message.lower()
    for needle, code in (("duplicate", "duplicate_options"), ("abstain", "answer_is_abstain"),
                         ("answer", "answer_not_in_options"),
                         ("option", "too_few_options"), ("question", "no_question")):
        if needle in m:
            return "missing_answer" if m.startswith("missing answer") else code
    return "malformed"
