"""Asking a model for structured output, and surviving when it does not comply.

Rubric writers, rubric judges and arena judges all answer in JSON, and all of them sometimes answer
with prose, a truncated object, the wrong ids, or nothing at all. The recipe here is the same for
every caller:

1. **Extract.** Take the JSON object out of the text (code fences, leading chatter).
2. **Repair.** If strict parsing fails, ``json_repair`` fixes trailing commas, single quotes and
   truncated brackets. A repaired answer is marked so callers can count them.
3. **Validate.** The caller's ``parse`` function turns the object into a typed value or raises
   ``ValueError`` naming what is wrong (missing id, wrong count, bad severity).
4. **Retry with a correction.** The failed answer goes back into the conversation, followed by a user
   turn that quotes the validation error and asks for the corrected JSON only. A backend error
   (timeout, HTTP 500) is retried as is.

All pending requests of a round go to the backend in *one* ``chat()`` call, so a batch of 64
captions costs ``1 + retries`` backend calls, not 64. Nothing here raises on a bad answer: after the
last round each item carries either a value or the reason it was rejected.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from vlrl.core.backends import Backend, ChatRequest, ChatResult

logger = logging.getLogger(__name__)

T = TypeVar("T")

_FENCE = re.compile(r"```(?:json|JSON)?\s*(.*?)```", re.DOTALL)

_DECODER = json.JSONDecoder(strict=False)
"""Raw control characters inside strings are accepted: grammar-constrained decoding (xgrammar on vLLM)
lets a model write them, and a tab inside a judge's ``reason`` is no reason to repair its verdict."""

CORRECTION = (
    "Your previous answer could not be used: {error}. Reply again with only the corrected JSON object, no other text."
)


class InvalidOutput(ValueError):
    """The model's answer cannot be turned into the expected value (the message says why)."""


def extract_json(text: str) -> tuple[Any, bool]:
    """The first JSON object/array in ``text`` → (value, repaired). Raises :class:`InvalidOutput`."""
    if not text or not text.strip():
        raise InvalidOutput("empty answer")
    candidates = [m.group(1) for m in _FENCE.finditer(text)] + [text]
    for cand in candidates:
        start = _first_bracket(cand)
        if start < 0:
            continue
        try:
            value, _ = _DECODER.raw_decode(cand[start:])
            return value, False
        except json.JSONDecodeError:
            pass
    for cand in candidates:
        start = _first_bracket(cand)
        if start < 0:
            continue
        try:
            import json_repair

            value = json_repair.loads(cand[start:])
        except Exception:  # json_repair is best effort; any failure means "not JSON"
            continue
        if isinstance(value, (dict, list)) and value:
            return value, True
    raise InvalidOutput("no JSON object found in the answer")


def extract_final_json(text: str, accept: Callable[[Any], T]) -> T:
    """The *last* JSON value in ``text`` that ``accept`` takes (it returns a value or raises).

    A judge may think aloud, quote the caption it grades (and whatever JSON the caption carries),
    then give its verdict: the verdict is the final object, so candidates are tried from the end of
    the answer backwards. Every bracket position starts a candidate, so a verdict nested in a longer
    answer is found too; when no strict candidate is accepted, the last candidates are tried again
    through ``json_repair`` (a verdict cut short by the token limit). Raises :class:`InvalidOutput`
    (or the last error of ``accept``) when nothing fits.
    """
    if not text or not text.strip():
        raise InvalidOutput("empty answer")
    starts = [i for i, ch in enumerate(text) if ch in "{["]
    if not starts:
        raise InvalidOutput("no JSON object found in the answer")
    decoder = _DECODER
    last_error: Exception | None = None
    for i in reversed(starts):
        try:
            value, _ = decoder.raw_decode(text[i:])
        except json.JSONDecodeError:
            continue
        try:
            return accept(value)
        except (ValueError, TypeError, KeyError) as e:
            last_error = last_error or e
    import json_repair

    for i in reversed(starts[-8:]):
        try:
            value = json_repair.loads(text[i:])
        except Exception:  # json_repair is best effort; any failure means "not JSON"
            continue
        if not isinstance(value, (dict, list)) or not value:
            continue
        try:
            return accept(value)
        except (ValueError, TypeError, KeyError) as e:
            last_error = last_error or e
    if last_error is not None:
        raise last_error
    raise InvalidOutput("no JSON object found in the answer")


def json_field(text: str, *keys: str) -> Any:
    """The first of ``keys`` in the *last* JSON object of an answer that holds one of them; ``None``
    when there is none. For judges told to answer ``{"score": 7}`` that sometimes answer ``7/10``:
    the caller falls back to reading the text itself. The last object counts, not the first, so a
    verdict the judge quotes from the text it grades cannot stand in for its own."""

    def accept(obj: Any) -> Any:
        if isinstance(obj, dict):
            for k in keys:
                if k in obj:
                    return obj[k]
        raise ValueError("no such key")

    try:
        return extract_final_json(text, accept)
    except (InvalidOutput, ValueError, TypeError, KeyError):
        return None


def _first_bracket(s: str) -> int:
    idx = [i for i in (s.find("{"), s.find("[")) if i >= 0]
    return min(idx) if idx else -1


@dataclass
class Structured(Generic[T]):
    """Outcome of one structured request after all retry rounds."""

    value: T | None = None
    error: str | None = None
    attempts: int = 0
    repaired: bool = False
    raw: list[str] = field(default_factory=list)
    """Every raw answer, in order (kept for audit of rejected records)."""
    prompt_tokens: int = 0
    completion_tokens: int = 0
    truncated: bool = False
    """The last answer stopped at the length limit (only set with ``reject_truncated``)."""

    @property
    def ok(self) -> bool:
        return self.error is None and self.value is not None


def chat_structured(
    backend: Backend,
    requests: Sequence[ChatRequest],
    parse: Callable[[Any, int], T],
    *,
    max_retries: int = 2,
    correction: str = CORRECTION,
    raw_text: bool = False,
    reject_truncated: bool = False,
    json_schema: dict[str, Any] | None = None,
) -> list[Structured[T]]:
    """Run ``requests`` until each parses, retrying failures up to ``max_retries`` times.

    ``parse(obj, i)`` receives the extracted JSON (or the raw text when ``raw_text``) of request
    ``i`` and returns the typed value or raises ``ValueError``. Never raises itself.

    ``reject_truncated``: an answer the backend stopped at its length limit (``finish_reason ==
    "length"``) is rejected without parsing and without a retry (the same limit would cut the
    same answer again): JSON repair would otherwise close its brackets and pass off a fragment as
    a complete answer.

    ``json_schema``: the schema of the expected JSON, for requests that carry none of their own
    (a request's own schema, e.g. one naming its rubric ids, wins). A backend with structured output
    constrains decoding to it, so the answer parses without repair; any other backend ignores it and
    the extract/repair/validate/retry path above does the work, as it does for answers that pass the
    schema but not ``parse``. Correction retries carry the schema too.
    """
    out: list[Structured[T]] = [Structured() for _ in requests]
    if json_schema is not None:
        requests = [r if r.json_schema is not None else dataclasses.replace(r, json_schema=json_schema) for r in requests]
    pending: dict[int, ChatRequest] = dict(enumerate(requests))
    for _round in range(max_retries + 1):
        if not pending:
            break
        idx = list(pending)
        try:
            results = backend.chat([pending[i] for i in idx])
            if len(results) != len(idx):
                raise RuntimeError(f"backend returned {len(results)} results for {len(idx)} requests")
        except Exception as e:  # a backend that raises must not sink the batch
            logger.warning("backend %s raised on a batch of %d: %s", getattr(backend, "model", "?"), len(idx), e)
            results = [ChatResult(error=f"backend raised: {type(e).__name__}: {e}") for _ in idx]
        next_pending: dict[int, ChatRequest] = {}
        for i, res in zip(idx, results, strict=True):
            item = out[i]
            item.attempts += 1
            item.prompt_tokens += res.prompt_tokens
            item.completion_tokens += res.completion_tokens
            if not res.ok:
                item.error = f"backend error: {res.error}"
                next_pending[i] = pending[i]
                continue
            text = res.text
            item.raw.append(text)
            if reject_truncated and "length" in res.finish_reasons:
                item.error = "invalid output: answer cut off at the length limit (finish_reason=length)"
                item.truncated = True
                continue
            try:
                if raw_text:
                    obj, repaired = text, False
                else:
                    obj, repaired = extract_json(text)
                item.value = parse(obj, i)
                item.repaired = repaired
                item.error = None
            except (ValueError, TypeError, KeyError) as e:
                item.error = f"invalid output: {_short(e)}"
                req = pending[i]
                next_pending[i] = ChatRequest(
                    messages=[
                        *req.messages,
                        {"role": "assistant", "content": text},
                        {"role": "user", "content": correction.format(error=_short(e))},
                    ],
                    sampling=req.sampling,
                    id=req.id,
                    json_schema=req.json_schema,
                )
        pending = next_pending
    for i in pending:
        out[i].value = None
        logger.debug("request %s rejected after %d attempts: %s", requests[i].id, out[i].attempts, out[i].error)
    return out


def _short(e: BaseException, limit: int = 300) -> str:
    msg = str(e).replace("\n", " ")
    return msg if len(msg) <= limit else msg[:limit] + "…"
