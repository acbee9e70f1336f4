"""The payloads of the two reward services vlrl's anchors train through, mapped onto ``/v1/score`` rows.

**OpenRLHF** (``--remote_rm_url URL``): the trainer POSTs ``{"query": [str], "prompts": [str],
"labels": [any]}`` (older releases send only ``query``), where each query is the prompt's and the
response's token ids decoded with their special tokens, and reads ``rewards`` (one float per query)
from the answer; newer releases also read ``scores`` and ``extra_logs`` (a mapping of logged
values). A query's completion is the query with its prompt cut off. For a vision-language policy
the query does not start with the prompt text: the processor expanded each image placeholder
(``<|image_pad|>``) into one token per patch, so a placeholder of the prompt matches any run of
itself in the query. A query that does not hold its prompt even so is that row's error (never the
whole query scored as the caption), and the special tokens that end a response (``<|im_end|>``,
``</s>``...) are cut off it. Its label becomes the reward's label column (``ServeSettings.label_column``: by default the reward's first required
column, e.g. caprl_qa's ``questions``, else ``answer``).

**CapRL++** (``/get_reward``, called by its verl ``reward_fn``): ``{"prompts": [[caption, [[question,
answer_letter], ...]], ...], "query": [], "labels": []}``, where a question is its text followed by
one line per option, ``   - A) option``, the abstain option ("Can not answer based on the
caption") included. The answer holds ``rewards`` and ``qa_rewards`` (one float per caption). Each
question becomes a caprl_qa MCQ record (its own abstain line dropped: caprl_qa appends its own).

Neither client can carry "this row could not be scored": both read floats only. vlrl never writes
a number it did not measure, so such a row's reward is ``null`` and its reason is in ``errors``
(``[{"index", "error"}]``): OpenRLHF then fails loudly on the ``null`` rather than training on a
made-up 0.0. A request may add ``"step": int`` to either payload (default 0) to seed the draws.
"""

from __future__ import annotations

import re
from typing import Any

from vlrl.serve.service import ROW_ERROR

_OPTION = re.compile(r"^\s*-?\s*([A-Ia-i])\)\s*(.+?)\s*$")
_ABSTAIN = re.compile(r"^\s*can\s*not\s+answer\b|^\s*cannot\s+answer\b", re.IGNORECASE)


# a chat-template or image placeholder token: <|image_pad|>, <|im_end|>, <image>, <IMG_CONTEXT>
_PLACEHOLDER = re.compile(r"<\|?[A-Za-z_][A-Za-z0-9_]*\|?>")
# what ends a response decoded with its special tokens: end-of-turn, end-of-text, padding
_END_TOKENS = re.compile(r"(?:<\|[A-Za-z_]+\|>|</s>|<eos>|<end_of_turn>|<pad>)+\s*$")


class PayloadError(ValueError):
    """The body does not have the documented shape: HTTP 400 with this line."""


def _list(body: dict, key: str, required: bool = True) -> list:
    value = body.get(key)
    if value is None and not required:
        return []
    if not isinstance(value, list):
        raise PayloadError(f"{key!r} must be a list")
    return value


def _step(body: dict) -> int:
    step = body.get("step", 0)
    if not isinstance(step, int) or isinstance(step, bool) or step < 0:
        raise PayloadError("'step' must be a non-negative integer")
    return step


def openrlhf_rows(body: Any, label_column: str) -> tuple[list[dict], int]:
    """``/v1/score`` rows and step from an OpenRLHF ``--remote_rm_url`` body."""
    if not isinstance(body, dict):
        raise PayloadError("expected a JSON object with 'query'")
    queries = _list(body, "query")
    prompts = _list(body, "prompts", required=False)
    labels = _list(body, "labels", required=False)
    for name, other in (("prompts", prompts), ("labels", labels)):
        if other and len(other) != len(queries):
            raise PayloadError(f"{len(queries)} queries but {len(other)} {name}")
    rows = []
    for i, q in enumerate(queries):
        row: dict[str, Any] = {"id": i, "completion": q}
        if prompts and isinstance(q, str) and isinstance(prompts[i], str):
            response = _response(q, prompts[i])
            if response is None:
                row[ROW_ERROR] = "the query does not start with its prompt (even with image tokens expanded)"
            else:
                row["completion"] = _END_TOKENS.sub("", response)
        elif isinstance(q, str):
            row["completion"] = _END_TOKENS.sub("", q)
        if prompts:
            row["prompt"] = prompts[i]
        if labels:
            row[label_column] = labels[i]
        rows.append(row)
    return rows, _step(body)


def _response(query: str, prompt: str) -> str | None:
    """What follows ``prompt`` in ``query``, where each placeholder token of the prompt may stand for
    a run of itself (a processor's expanded image tokens); None when the query does not hold it."""
    if query.startswith(prompt):
        return query[len(prompt):]
    parts, pos = [], 0
    for m in _PLACEHOLDER.finditer(prompt):
        parts += [re.escape(prompt[pos : m.start()]), f"(?:{re.escape(m.group())})+"]
        pos = m.end()
    found = re.match("".join([*parts, re.escape(prompt[pos:])]), query, re.DOTALL)
    return query[found.end():] if found else None


def openrlhf_answer(results: list[dict]) -> dict[str, Any]:
    """``{"rewards", "scores", "extra_logs", "errors"}`` from ``/v1/score`` results."""
    rewards = [r["reward"] for r in results]
    logs: dict[str, list] = {}
    for r in results:
        for k, v in (r.get("details") or {}).items():
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                logs.setdefault(k, [None] * len(results))
    for i, r in enumerate(results):
        for k in logs:
            v = (r.get("details") or {}).get(k)
            logs[k][i] = v if isinstance(v, (int, float)) and not isinstance(v, bool) else None
    return {"rewards": rewards, "scores": rewards, "extra_logs": logs, "errors": _errors(results)}


def caprl_question(text: Any, answer: Any) -> dict[str, Any]:
    """``"Q\\n   - A) x\\n   - B) y"`` and ``"B"`` → ``{"question", "options", "answer"}`` (abstain dropped)."""
    if not isinstance(text, str):
        raise PayloadError("a question must be text")
    lines = [ln for ln in text.split("\n") if ln.strip()]
    question, options, letters = [], [], []
    for ln in lines:
        m = _OPTION.match(ln)
        if m and (options or question):
            if not _ABSTAIN.match(m.group(2)):
                options.append(m.group(2))
                letters.append(m.group(1).upper())
        elif not options:
            question.append(ln.strip())
    ans = str(answer or "").strip().upper()
    record: dict[str, Any] = {"question": " ".join(question), "options": options}
    # the answer as the option's text: letters are renumbered once the abstain line is gone
    record["answer"] = options[letters.index(ans)] if ans in letters else ans
    return record


def caprl_rows(body: Any) -> tuple[list[dict], int]:
    """``/v1/score`` rows (``completion``, ``questions``) and step from a CapRL++ ``/get_reward`` body."""
    if not isinstance(body, dict):
        raise PayloadError("expected a JSON object with 'prompts'")
    rows = []
    for i, item in enumerate(_list(body, "prompts")):
        if not isinstance(item, list) or len(item) != 2 or not isinstance(item[1], list):
            raise PayloadError(f"prompts[{i}] must be [caption, [[question, answer], ...]]")
        caption, qa = item
        questions = []
        for pair in qa:
            if not isinstance(pair, list) or len(pair) < 2:
                raise PayloadError(f"prompts[{i}]: each question must be [question, answer]")
            questions.append(caprl_question(pair[0], pair[1]))
        rows.append({"id": i, "completion": caption, "questions": questions})
    return rows, _step(body)


def caprl_answer(results: list[dict]) -> dict[str, Any]:
    """``{"rewards", "qa_rewards", "errors"}``: the reward and its QA accuracy per caption."""
    rewards = [r["reward"] for r in results]
    qa = [(r.get("details") or {}).get("qa_acc", r["reward"]) if r["reward"] is not None else None for r in results]
    return {"rewards": rewards, "qa_rewards": qa, "errors": _errors(results)}


def _errors(results: list[dict]) -> list[dict[str, Any]]:
    out = []
    for i, r in enumerate(results):
        if r["reward"] is None:
            d = r.get("details") or {}
            out.append({"index": i, "error": r.get("error") or d.get("reason") or d.get("error") or "not applicable"})
    return out
