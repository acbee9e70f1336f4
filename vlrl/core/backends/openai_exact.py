"""Exact choice logprobs over HTTP when the letters are not among the listed top logprobs.

A chat completion lists only the ``top_logprobs`` most likely first tokens (vLLM caps it at 20 by
default). When the option letters are not among them (a random tiny model, or an answerer that is
about to go off-format), the reply says nothing about the letters, and renormalising nothing would
invent credit. vLLM can still say exactly how likely any given token is. The route:

1. Each choice's *token variants* (the letter alone and with common whitespace before or after it:
   ``"A"``, ``" A"``, ``"\\nA"``, ``"A\\n"``..., :func:`variant_texts`) are tokenized once per
   backend with the server's ``/tokenize``; those that are one token are the candidates. They are
   the tokens :func:`~vlrl.core.backends.base.choice_of_token` counts in process, less any rarer
   whitespace form (``"\\t\\tA"``), which the in-process count alone includes.
2. One more chat request, the same conversation and prefix, asks for exactly those tokens'
   logprobs (vLLM's ``logprob_token_ids``, with ``return_tokens_as_token_ids`` so they are matched
   by id). Like the first request it is served from the prefix cache.
3. A server that ignores ``logprob_token_ids`` (older vLLM) is answered through
   ``/v1/completions`` instead: ``/tokenize`` renders the conversation with the server's template,
   and one request with one prompt per candidate (ids + candidate, ``prompt_logprobs`` 0) reads
   each candidate's logprob at the last position. vLLM skips the prefix cache for such requests,
   and ``/v1/completions`` carries no images, so this is the slow route, and text-only.

The candidates' logprobs are merged into the listed ones, and the temperature is applied as for the
listed tokens: the letters' relative probabilities are exact at any temperature, their total mass
is exact at temperature 1 and otherwise keeps the listed tokens' estimate of the rest. Deliberate
limits: a server without ``/tokenize`` (not vLLM) keeps the listed logprobs, and so does a
conversation with images on a server without ``logprob_token_ids``; an ask with no letter among
them is then a parse failure, never chance.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Sequence
from typing import Any

logger = logging.getLogger(__name__)

WHITESPACE_PREFIXES = ("", " ", "  ", "\t", "\n", "\n\n", "\r\n", " \n")
"""What may stand before a letter in one token and still read as the letter (see ``choice_of_token``)."""

WHITESPACE_SUFFIXES = (" ", "\n", "\n\n")
"""What may follow it in the same token: ``choice_of_token`` strips both sides, so ``"A\n"`` counts."""


def variant_texts(core: str) -> list[str]:
    """The texts whose one-token forms read as the choice ``core``: whitespace before, after, or both
    (one space then a newline, the usual ``" A\n"``)."""
    return ([w + core for w in WHITESPACE_PREFIXES] + [core + w for w in WHITESPACE_SUFFIXES]
            + [" " + core + "\n"])

HIDDEN_MASS_TOLERANCE = 1e-4
"""``auto`` takes the exact route when the unlisted letter tokens could hold more than this share
of the listed letter mass (each unlisted token is at most as likely as the least likely listed one)."""


def needs_exact(top: Sequence[tuple[str, float]], choices: Sequence[str], listed_mass: float) -> bool:
    """Whether the listed logprobs may hide letter mass that matters (see :data:`HIDDEN_MASS_TOLERANCE`)."""
    if listed_mass <= 0:
        return True
    probs = [math.exp(lp) for _, lp in top]
    # at most this many letter tokens are missing from the list, none likelier than the least likely
    # listed token, and together no likelier than what the list leaves over
    unlisted = len(choices) * len(variant_texts("A"))
    hidden = min(unlisted * min(probs), max(0.0, 1.0 - sum(probs)))
    return hidden > HIDDEN_MASS_TOLERANCE * listed_mass


def has_images(messages: Sequence[dict[str, Any]]) -> bool:
    return any(
        isinstance(m.get("content"), list) and any(p.get("type") != "text" for p in m["content"]) for m in messages
    )


class NoTokenize(Exception):
    """The server answered ``/tokenize`` with something other than vLLM's token list."""


class ExactLetters:
    """The exact letter route of one backend: its candidate-token table, what the server supports,
    and the calls (sent once each: a failure fails that ask, as the backend's own requests do after
    their retries)."""

    def __init__(self, client: Any, root: str, model: str, sem: asyncio.Semaphore, timeout: float,
                 failure: type[Exception] = RuntimeError, stats: Any = None) -> None:
        self.client = client
        self.stats = stats
        """The backend's :class:`~vlrl.core.backends.base.Accounting`: these requests' tokens count too."""
        self.failure = failure
        """What a failed call raises: the backend's per-request failure, so one ask fails, not the batch."""
        self.root = root
        """The server root (``http://host:port``, without ``/v1``): vLLM serves ``/tokenize`` there."""
        self.model = model
        self.sem = sem
        self.timeout = timeout
        self.unsupported = False
        """Set once the server showed it has no ``/tokenize`` (not vLLM): the listed logprobs are all there is."""
        self.named: bool | None = None
        """Whether the server honours ``logprob_token_ids`` on chat completions (None: not known yet)."""
        self.variants: dict[str, list[tuple[str, int]]] = {}
        """Stripped choice → [(variant text, token id)] of its one-token variants."""
        self._pending: dict[str, asyncio.Future] = {}

    async def _post(self, url: str, body: dict[str, Any]) -> dict[str, Any]:
        async with self.sem:
            data = await asyncio.wait_for(self.client.post(url, body=body, cast_to=dict), self.timeout)
        if not isinstance(data, dict):
            raise ValueError(f"{url}: the reply is not a JSON object: {str(data)[:200]!r}")
        usage = data.get("usage") or {}
        if self.stats is not None and usage:
            self.stats.add(prompt_tokens=int(usage.get("prompt_tokens") or 0),
                           completion_tokens=int(usage.get("completion_tokens") or 0))
        return data

    async def _tokenize(self, body: dict[str, Any]) -> list[int]:
        tokens = (await self._post(self.root + "/tokenize", {"model": self.model, **body})).get("tokens")
        if not isinstance(tokens, list):
            raise NoTokenize("its /tokenize reply has no token list")
        return [int(t) for t in tokens]

    async def _candidates(self, choice: str) -> list[tuple[str, int]]:
        core = choice.strip()
        if core not in self.variants:
            # the first asks of a batch arrive together: one lookup per letter, awaited by all
            task = self._pending.get(core)
            if task is None:
                task = self._pending[core] = asyncio.ensure_future(self._find_variants(core))
            try:
                self.variants[core] = await task
            finally:  # a failed lookup fails the asks waiting on it, never the later ones
                if self._pending.get(core) is task and task.done():
                    del self._pending[core]
        return self.variants[core]

    async def _find_variants(self, core: str) -> list[tuple[str, int]]:
        found: dict[int, str] = {}
        for text in variant_texts(core):
            ids = await self._tokenize({"prompt": text, "add_special_tokens": False})
            if len(ids) == 1:
                found.setdefault(ids[0], text)
        return [(t, i) for i, t in found.items()]

    async def _logprobs(self, ids: list[int], tokens: list[int]) -> list[float]:
        """The logprob of each of ``tokens`` right after ``ids``: one request, one prompt per token."""
        body = {"model": self.model, "prompt": [[*ids, t] for t in tokens], "max_tokens": 1, "temperature": 0.0,
                "prompt_logprobs": 0}
        data = await self._post("/completions", body)
        by_index = {int(c.get("index", i)): c for i, c in enumerate(data["choices"])}
        return [float(by_index[i]["prompt_logprobs"][-1][str(t)]["logprob"]) for i, t in enumerate(tokens)]

    async def _named(self, messages: list[dict[str, Any]], continued: bool, tokens: list[int]) -> list[float] | None:
        """The logprobs of ``tokens`` as the first generated token, from one chat request (vLLM's
        ``logprob_token_ids``); None when the reply does not carry them (a server without the field)."""
        body: dict[str, Any] = {"model": self.model, "messages": messages, "max_tokens": 1, "temperature": 0.0,
                                "logprobs": True, "logprob_token_ids": tokens, "return_tokens_as_token_ids": True}
        if continued:
            body.update(continue_final_message=True, add_generation_prompt=False)
        data = await self._post("/chat/completions", body)
        try:
            first = data["choices"][0]["logprobs"]["content"][0]
            alts = [*first.get("top_logprobs", []), first]
            seen = {a["token"]: float(a["logprob"]) for a in alts if a.get("logprob") is not None}
            return [seen[f"token_id:{t}"] for t in tokens]
        except (KeyError, IndexError, TypeError):
            return None

    async def letter_logprobs(
        self, messages: list[dict[str, Any]], choices: Sequence[str], continued: bool
    ) -> list[tuple[str, float]] | None:
        """``[(variant text, exact logprob)]`` of every one-token variant of every choice (None: no route).

        ``messages`` already carry the prefix (as the final assistant turn when ``continued``, else
        inside the last user turn), exactly as the chat request that listed the top logprobs.
        """
        cands = [c for ch in choices for c in await self._candidates(ch)]
        tokens = [tok for _, tok in cands]
        lps = await self._named(messages, continued, tokens) if self.named is not False else None
        if lps is None and self.named is None:
            logger.info("server %s ignores logprob_token_ids: exact letters come from prompt_logprobs", self.root)
        self.named = lps is not None
        if lps is None:
            if has_images(messages):  # /v1/completions carries no images
                return None
            body: dict[str, Any] = {"messages": messages}
            if continued:
                body.update(continue_final_message=True, add_generation_prompt=False)
            lps = await self._logprobs(await self._tokenize(body), tokens)
        return [(text, lp) for (text, _), lp in zip(cands, lps, strict=True)]

    async def complete(
        self, top: list[tuple[str, float]], messages: list[dict[str, Any]], prefix: str, choices: Sequence[str],
        temperature: float, continued: bool | None,
    ) -> list[tuple[str, float]]:
        """``top`` with the exact letter logprobs merged in, where the list may hide letter mass.

        ``messages`` are the conversation before the prefix; ``continued`` says whether the prefix
        went out as a continued assistant turn (else it was appended to the last user turn).
        """
        from vlrl.core.backends.openai_wire import append_to_last_user, probs_from_top_logprobs

        _, listed = probs_from_top_logprobs(top, choices, temperature)
        if self.unsupported or not needs_exact(top, choices, listed):
            return top
        if prefix:
            messages = ([*messages, {"role": "assistant", "content": prefix}] if continued
                        else append_to_last_user(messages, prefix))
        try:
            exact = await self.letter_logprobs(messages, choices, bool(prefix and continued))
        except Exception as e:
            status = getattr(e, "status_code", None)
            if status not in (404, 405) and not isinstance(e, NoTokenize):
                raise self.failure(f"exact letter logprobs: {type(e).__name__}: {e}") from e
            logger.warning("server %s has no /tokenize (%s): choice scores use the listed top logprobs only, "
                           "and an ask whose letters are not listed is a parse failure", self.root,
                           f"HTTP {status}" if status else e)
            self.unsupported = True
            return top
        return top if exact is None else merge_logprobs(top, exact)


def merge_logprobs(top: Sequence[tuple[str, float]], exact: Sequence[tuple[str, float]]) -> list[tuple[str, float]]:
    """The listed alternatives with the exact letter logprobs put in (each token once)."""
    merged = dict(top)
    merged.update(exact)
    return list(merged.items())


__all__ = ["HIDDEN_MASS_TOLERANCE", "ExactLetters", "WHITESPACE_PREFIXES", "WHITESPACE_SUFFIXES", "has_images",
           "merge_logprobs", "needs_exact", "variant_texts"]
