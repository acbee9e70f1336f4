"""A chat request's JSON schema as server-side structured output, with a fallback to the repair path.

Judges answer in JSON. A random or small model asked for JSON in prose often writes something
else, and :func:`vlrl.judge.structured.chat_structured` then repairs, revalidates and retries. A
server with structured output (vLLM with its xgrammar/guidance backends, SGLang, OpenAI) can instead
constrain decoding to the schema, so the answer parses the first time. The request carries it as

``response_format: {"type": "json_schema", "json_schema": {"name", "schema", "strict": true}}``

A server without the feature answers 400/422 naming the field (or structured output): that is
remembered per backend, logged once, and every request is sent again without it, and the answers
then go through the repair path as before. The route in use is logged once per backend (and again
if it changes), and each request answered under a schema is counted in ``stats.structured``.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Awaitable, Callable
from typing import Any

from vlrl.core.backends.base import Backend

logger = logging.getLogger(__name__)

_REFUSAL_WORDS = ("response_format", "json_schema", "structured output", "structured_output", "guided", "grammar")
"""Words of a 400/422 that refuses the field itself, not the request (vLLM, SGLang, OpenAI, proxies)."""


def response_format(schema: dict[str, Any]) -> dict[str, Any]:
    """The ``response_format`` body of ``schema`` (its ``title``, made a legal name, names it)."""
    name = re.sub(r"[^A-Za-z0-9_-]", "_", str(schema.get("title") or "answer"))[:64]
    return {"type": "json_schema", "json_schema": {"name": name, "schema": schema, "strict": True}}


def is_refusal(e: BaseException) -> bool:
    """Whether a failed request was refused for its ``response_format`` (and may succeed without it)."""
    status = getattr(e, "status", None) or getattr(e, "status_code", None)
    return status in (400, 422) and any(w in str(e).lower() for w in _REFUSAL_WORDS)


class StructuredRoute:
    """Per backend: whether its server takes ``response_format`` (None: not known yet).

    Holds no reference to the backend (it pickles with it, for Ray and multiprocessing)."""

    def __init__(self, where: str) -> None:
        self.where = where
        self.supported: bool | None = None

    async def send(
        self, owner: Backend, schema: dict[str, Any] | None, call: Callable[[dict[str, Any]], Awaitable[Any]]
    ) -> Any:
        """``call(extra_kwargs)`` with the schema as ``response_format`` while the server takes it;
        refused, it is sent again without it (and never again with it). ``owner`` counts and logs."""
        if schema is None:
            return await call({})
        if self.supported is not False:
            try:
                out = await call({"response_format": response_format(schema)})
            except Exception as e:
                if not is_refusal(e):
                    raise
                if self.supported is not False:
                    logger.warning("server %s refuses response_format (%s); JSON answers take the repair path",
                                   self.where, e)
                self.supported = False
            else:
                self.supported = True
                owner.stats.add(structured=1)
                owner.log_route("json_schema (response_format; decoding constrained by the server)")
                return out
        owner.log_route("repair path (the server refused response_format)")
        return await call({})
