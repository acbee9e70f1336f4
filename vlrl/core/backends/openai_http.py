"""OpenAI-compatible HTTP backend: ``vllm serve``, SGLang, ``transformers serve`` or OpenAI itself.

Why it looks the way it does:

* **Async inside, sync outside.** Throughput over HTTP comes from many requests in flight, so every
  batch runs as coroutines on the ``openai`` package's ``AsyncOpenAI`` client, bounded by an
  ``asyncio.Semaphore`` (``concurrency``). Callers keep the plain batched ``chat()`` /
  ``score_choices()`` API. The coroutines always run on a private event loop in a daemon thread
  owned by the backend (:class:`~vlrl.core.backends.loop_thread.LoopThread`).
* **Retries are ours.** The client's built-in retries are disabled so every retry is counted in
  ``stats.retries``. 429, 408, 5xx, timeouts and dropped connections are retried with exponential
  backoff and jitter (tenacity); other 4xx are the caller's fault and fail at once. A request that
  still fails comes back as ``ChatResult(error=...)`` with one line naming the request id and the
  reason: one bad record never sinks a batch.
* **Servers differ; detect, log once, remember.** ``transformers serve`` ignores ``n`` and
  ``logprobs``, and rejects ``continue_final_message``. Asking for ``n`` samples sends ``n`` and
  tops up with separate requests when fewer come back. ``score_choices`` reads the first token's
  ``top_logprobs`` (exact, ``method="logprobs"``; letters the list leaves out are asked for by id,
  :mod:`~vlrl.core.backends.openai_exact`); a server that returns none is detected and
  answered by sampling ``request.samples`` short answers (``method="sampled"``) — never silently
  wrong numbers.
* **Where the choice prefix goes.** A :class:`ChoiceRequest` prefix (``"The answer is "``) belongs
  at the start of the assistant turn. With ``prefix_mode=auto`` (default) it is sent as a partial
  assistant message with ``continue_final_message=True, add_generation_prompt=False`` (vLLM, SGLang);
  a server that rejects those fields (OpenAI, ``transformers serve``: HTTP 400/422) is remembered and
  from then on the prefix is appended to the last user message instead (``prefix_mode=user`` forces
  that, ``prefix_mode=assistant`` forbids the fallback). Sampled answers that echo the prefix have
  it stripped before they are matched to the choices.
* **A trailing assistant message in a chat request is a pre-fill** (the CapRL answerer's "The
  answer is"): it goes out the same way as a choice prefix, so the model continues it instead of
  closing that turn and starting afresh.
* **A 200 is not proof of an answer.** A reply that breaks the schema (an HTML page, a body that is
  not JSON, empty ``choices``, ``content: null``) is an error of that request: retried like a 5xx,
  then reported with its reason, never read as an empty answer (which a cache would then keep).
  ``Retry-After`` on a 429/503 is honoured (up to ``retry_after_max``).
* **A feature is switched off only on evidence.** ``logprobs=auto`` falls back to sampling after
  ``logprobs_evidence`` valid replies in a row carry no logprobs (or the server rejects the field),
  never after one odd reply, and never once logprobs were seen; the switch is logged and
  :meth:`choice_method` puts it in the cache key.
* **Images** travel as base64 PNG (lossless, the default) or JPEG data URLs, loaded as in process.
* **A JSON schema** goes out as ``response_format`` until refused (:mod:`~vlrl.core.backends.openai_structured`).
* **Secrets.** The API key is read from the environment variable ``api_key_env`` and lives only
  inside the client: never in the spec, :meth:`identity`, logs or the cache.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from vlrl.core.backends.base import (
    Accounting,
    Backend,
    ChatRequest,
    ChatResult,
    ChoiceRequest,
    ChoiceResult,
    choices_from_samples,
)
from vlrl.core.backends.loop_thread import LoopThread
from vlrl.core.backends.openai_exact import ExactLetters
from vlrl.core.backends.openai_structured import StructuredRoute
from vlrl.core.backends.openai_wire import (
    MalformedReply,
    append_to_last_user,
    assistant_tail,
    choice_text,
    describe_error,
    gather_all,
    gather_or_raise,
    image_data_url,
    is_retryable,
    one_line,
    probs_from_top_logprobs,
    raw_prompt_body,
    reply_problem,
    retry_after_seconds,
    sampling_kwargs,
    strip_prefix,
    to_openai_messages,
    top_k_body,
    top_logprobs_from_response,
    tristate,
)
from vlrl.core.progress import requests_done
from vlrl.core.redact import register_secret_env

logger = logging.getLogger(__name__)

_CONTINUE_FIELDS = ("continue_final_message", "add_generation_prompt")


class RequestFailed(Exception):
    """One HTTP request failed for good (retries exhausted, or an error not worth retrying)."""

    def __init__(self, reason: str, status: int | None = None) -> None:
        super().__init__(reason)
        self.status = status


class OpenAIBackend(Backend):
    """Backend over any OpenAI-compatible ``/v1/chat/completions`` endpoint."""

    kind = "openai"
    structured_output = True
    raw_prompts = True  # sent to /v1/completions

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        concurrency: int = 16,
        timeout: float = 60.0,
        max_retries: int = 4,
        api_key_env: str = "OPENAI_API_KEY",
        logprobs: str = "auto",
        prefix_mode: str = "auto",
        image_format: str = "png",
        backoff: float = 0.5,
        backoff_max: float = 30.0,
        sample_tokens: int = 4,
        logprobs_evidence: int = 3,
        retry_after_max: float = 120.0,
    ) -> None:
        super().__init__(model)
        if not base_url.startswith(("http://", "https://")):
            raise ValueError(f"openai backend: base_url {base_url!r} must start with http:// or https://")
        from urllib.parse import urlsplit

        if urlsplit(base_url).netloc.rpartition("@")[1]:  # user:password@host (not echoed: it is a secret)
            raise ValueError(
                "openai backend: the base URL carries credentials (user:password@); never put a key in the "
                "spec, name its environment variable with api_key_env="
            )
        if not model.strip():
            raise ValueError(f"openai backend: no model name after '@' in {base_url}@ (e.g. @Qwen/Qwen2.5-VL-3B-Instruct)")
        if logprobs not in ("auto", "on", "off"):
            raise ValueError(f"openai backend: logprobs={logprobs!r}; use auto, on or off")
        if prefix_mode not in ("auto", "assistant", "user"):
            raise ValueError(f"openai backend: prefix_mode={prefix_mode!r}; use auto, assistant or user")
        if image_format not in ("png", "jpeg"):
            raise ValueError(f"openai backend: image_format={image_format!r}; use png or jpeg")
        if concurrency < 1 or max_retries < 0 or timeout <= 0:
            raise ValueError("openai backend: need concurrency >= 1, max_retries >= 0 and timeout > 0")
        self.base_url = base_url.rstrip("/")
        self.concurrency = concurrency
        self.timeout = timeout
        self.max_retries = max_retries
        self.api_key_env = api_key_env
        register_secret_env(api_key_env)  # its value is masked in every text vlrl writes (vlrl.core.redact)
        self.logprobs_mode = logprobs
        self.prefix_mode = prefix_mode
        self.image_format = image_format
        self.backoff = backoff
        self.backoff_max = backoff_max
        self.sample_tokens = sample_tokens
        self.logprobs_evidence = max(1, int(logprobs_evidence))
        self.retry_after_max = float(retry_after_max)
        self._logprob_misses = 0
        self._sleep: Callable[[float], Awaitable[Any]] | None = None  # tests record the waits here
        # What the server turned out to support (None: not known yet). Detected once, remembered.
        self.supports_n: bool | None = None
        self.supports_logprobs: bool | None = None if logprobs == "auto" else logprobs == "on"
        self.supports_continue: bool | None = {"auto": None, "assistant": True, "user": False}[prefix_mode]
        self._structured = StructuredRoute(self.base_url)
        self._client: Any = None
        self._sem: asyncio.Semaphore | None = None
        self._runner = LoopThread("OpenAIBackend", self._make_client, name="vlrl-openai-loop")

    @classmethod
    def from_spec(cls, base_url: str, model: str, **opts: Any) -> OpenAIBackend:
        """Build from ``openai:BASE_URL@MODEL?key=value&...`` options (values arrive as strings).

        Options and defaults: concurrency=16, timeout=60 (seconds per attempt), max_retries=4,
        api_key_env=OPENAI_API_KEY, logprobs=auto|on|off, prefix_mode=auto|assistant|user,
        image_format=png|jpeg, backoff=0.5, backoff_max=30, sample_tokens=4, logprobs_evidence=3
        (valid replies without logprobs before ``logprobs=auto`` switches to sampling),
        retry_after_max=120 (the longest ``Retry-After`` honoured, seconds).
        """
        conv: dict[str, Callable[[Any], Any]] = {
            "concurrency": int, "timeout": float, "max_retries": int, "api_key_env": str, "logprobs": tristate,
            "prefix_mode": str, "image_format": str, "backoff": float, "backoff_max": float, "sample_tokens": int,
            "logprobs_evidence": int, "retry_after_max": float,
        }  # fmt: skip
        unknown = sorted(set(opts) - set(conv))
        if unknown:
            raise ValueError(f"openai backend spec: unknown option(s) {', '.join(unknown)}; known: {', '.join(conv)}")
        return cls(base_url, model, **{k: conv[k](v) for k, v in opts.items()})

    def identity(self) -> dict[str, Any]:
        # Everything that changes answers; never the API key (nor the name of its variable).
        return {
            "kind": self.kind,
            "model": self.model,
            "base_url": self.base_url,
            "logprobs": self.logprobs_mode,
            "prefix_mode": self.prefix_mode,
            "image_format": self.image_format,
        }

    def choice_method(self) -> str:
        return "sampled" if self.supports_logprobs is False else "logprobs"

    def __getstate__(self) -> dict[str, Any]:
        # Picklable for Ray/multiprocessing: the loop (see LoopThread) and the client are rebuilt on first use.
        return dict(self.__dict__, _client=None, _sem=None, _exact=None, stats=self.stats.snapshot())

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state, stats=Accounting(**state["stats"]))

    def _run(self, coro: Awaitable[Any]) -> Any:
        return self._runner.run(coro)

    async def _make_client(self) -> None:
        """Run on each new loop: a client from before a fork (or a pickle) is never reused."""
        from openai import AsyncOpenAI

        self._sem = asyncio.Semaphore(self.concurrency)
        root = self.base_url.removesuffix("/v1")  # vLLM serves /tokenize beside /v1, not under it
        # Local servers take any key; the client insists on a non-empty one.
        self._client = AsyncOpenAI(
            base_url=self.base_url,
            api_key=os.environ.get(self.api_key_env) or "EMPTY",
            max_retries=0,
            timeout=self.timeout,
        )
        self._exact = ExactLetters(self._client, root, self.model, self._sem, self.timeout, RequestFailed, self.stats)

    def close(self) -> None:
        client = self._client
        if self._runner.stop(client.close if client is not None else None):
            self._client = None
        super().close()  # logs the accounting

    # -- one HTTP request, with timeout and retries ----------------------------------------------
    async def _create(self, rid: str, need_text: bool = False, **kwargs: Any) -> Any:
        """``chat.completions.create`` (``completions.create`` when ``kwargs`` hold a raw
        ``prompt``) with retries; raises :class:`RequestFailed` when it gives up. ``need_text``: a
        generation, so empty content or an HTML page is a bad reply (retried)."""
        from tenacity import AsyncRetrying, retry_if_exception, stop_after_attempt, wait_exponential_jitter

        def before_sleep(state: Any) -> None:
            self.stats.add(retries=1)
            logger.debug("openai request %s: attempt %d failed (%s); retrying", rid, state.attempt_number,
                         describe_error(state.outcome.exception(), self.timeout))

        backoff = wait_exponential_jitter(initial=self.backoff, max=self.backoff_max, jitter=self.backoff)

        def wait(state: Any) -> float:
            # A 429/503 that says when to come back is believed (up to retry_after_max): hammering
            # a rate-limited server earlier only earns more 429s.
            after = retry_after_seconds(state.outcome.exception())
            base = backoff(state)
            return base if after is None else max(base, min(after, self.retry_after_max))

        retrying = AsyncRetrying(
            stop=stop_after_attempt(self.max_retries + 1),
            wait=wait,
            retry=retry_if_exception(is_retryable),
            sleep=self._sleep or asyncio.sleep,
            before_sleep=before_sleep,
            reraise=True,
        )
        attempts = 0
        try:
            async for attempt in retrying:
                with attempt:
                    attempts = attempt.retry_state.attempt_number
                    raw = "prompt" in kwargs
                    async with self._sem:
                        api = self._client.completions if raw else self._client.chat.completions
                        resp = await asyncio.wait_for(api.create(model=self.model, **kwargs), self.timeout)
                    problem = reply_problem(resp, need_text, completion=raw)
                    if problem:
                        raise MalformedReply(problem)
                    return resp
        except Exception as e:
            reason = describe_error(e, self.timeout)
            if is_retryable(e):
                reason += f" (gave up after {attempts} attempt{'s' if attempts != 1 else ''})"
            raise RequestFailed(reason, getattr(e, "status_code", None)) from e
        raise AssertionError("unreachable")  # pragma: no cover

    async def _sample(
        self, rid: str, messages: list[dict] | str, n: int, seed: int | None, extra_body: dict | None,
        need_text: bool = False, **kw: Any,
    ) -> tuple[list[str], list[str], int, int]:
        """``n`` samples → (texts, finish reasons, prompt tokens, completion tokens); ``messages``
        as a string is a raw prompt, sent to ``/v1/completions``.

        Sends ``n`` in one request; if the server returns fewer choices (it ignores ``n``) the rest
        come from separate requests with seeds ``seed+1, seed+2, ...`` (so they differ when seeded).
        """

        def send(k: int, count: int) -> Awaitable[Any]:
            args = dict(kw, **({"prompt": messages} if isinstance(messages, str) else {"messages": messages}))
            if count > 1:
                args["n"] = count
            if seed is not None:
                args["seed"] = seed + k
            if extra_body:
                args["extra_body"] = extra_body
            return self._create(rid, need_text, **args)

        replies = [await send(0, n)] if n > 1 and self.supports_n is not False else []
        got = sum(len(r.choices) for r in replies)
        if replies and got < n and self.supports_n is None:
            logger.warning(
                "server %s returned %d of n=%d samples (it ignores 'n'); sending separate requests from now on",
                self.base_url, got, n,
            )
        if replies:
            self.supports_n = got >= n
        replies += await gather_or_raise([send(k, 1) for k in range(got, n)])
        texts, reasons = [], []
        for r in replies:
            for c in r.choices:
                texts.append(choice_text(c))
                reasons.append(c.finish_reason or "")
        usage = [getattr(r, "usage", None) for r in replies]
        return (
            texts[:n],
            reasons[:n],
            sum(u.prompt_tokens or 0 for u in usage if u),
            sum(u.completion_tokens or 0 for u in usage if u),
        )

    # -- chat ----------------------------------------------------------------------------------------
    def _chat(self, requests: list[ChatRequest]) -> list[ChatResult]:
        async def run_all() -> list[ChatResult]:
            coros = [_reported(self._chat_one(i, r)) for i, r in enumerate(requests)]
            # Probe whether the server continues a partial assistant turn before sending the batch.
            probe = self.supports_continue is None and any(assistant_tail(r.messages) is not None for r in requests)
            head = [await coros.pop(0)] if probe else []
            return head + await gather_all(coros)

        return self._run(run_all())

    async def _chat_one(self, i: int, req: ChatRequest) -> ChatResult:
        rid = req.id or f"#{i}"
        if req.prompt is not None:  # a raw prompt: a text completion, no template, no pre-fill route
            sp = req.sampling
            body = raw_prompt_body(sp)
            try:
                texts, reasons, pt, ct = await self._sample(rid, req.prompt, max(sp.n, 1), sp.seed, body, True,
                                                            **sampling_kwargs(sp))
            except RequestFailed as e:
                return ChatResult(error=f"openai request {rid}: {e}")
            return ChatResult(texts=texts, finish_reasons=reasons, prompt_tokens=pt, completion_tokens=ct)
        try:
            messages = to_openai_messages(req.messages, self.image_format)
        except Exception as e:
            return ChatResult(error=f"openai request {rid}: bad input: {one_line(e)}")
        sp, tail = req.sampling, assistant_tail(messages)

        async def send(fmt: dict) -> Any:  # fmt: the schema's response_format, while the server takes it
            async def call(msgs: list[dict], extra: dict | None) -> Any:
                body = {**(top_k_body(sp) or {}), **(extra or {})} or None
                return await self._sample(rid, msgs, max(sp.n, 1), sp.seed, body, True, **sampling_kwargs(sp), **fmt)

            if tail is None:
                return await call(messages, None)
            # a trailing assistant message is a pre-fill ("The answer is"): continued (see _with_prefix)
            texts, *rest = await self._with_prefix(messages[:-1], tail, call)
            return [strip_prefix(t, tail) for t in texts], *rest

        try:
            texts, reasons, pt, ct = await self._structured.send(self, req.json_schema, send)
        except RequestFailed as e:
            return ChatResult(error=f"openai request {rid}: {e}")
        return ChatResult(texts=texts, finish_reasons=reasons, prompt_tokens=pt, completion_tokens=ct)

    # -- score_choices -----------------------------------------------------------------------------
    def _score_choices(self, requests: list[ChoiceRequest]) -> list[ChoiceResult]:
        async def run_all() -> list[ChoiceResult]:
            coros = [_reported(self._score_one(i, r)) for i, r in enumerate(requests)]
            # Probe the server with the first request so a whole batch is not wasted on
            # logprob requests (or partial assistant turns) the server ignores or rejects.
            unknown = self.supports_logprobs is None or (
                self.supports_continue is None and any(r.prefix for r in requests)
            )
            head = [await coros.pop(0)] if unknown else []
            return head + await gather_all(coros)

        return self._run(run_all())

    async def _score_one(self, i: int, req: ChoiceRequest) -> ChoiceResult:
        rid = req.id or f"#{i}"
        if not req.choices:
            return ChoiceResult(error=f"openai request {rid}: no choices given")
        try:
            messages = to_openai_messages(req.messages, self.image_format)
        except Exception as e:
            return ChoiceResult(error=f"openai request {rid}: bad input: {one_line(e)}")
        try:
            if self.supports_logprobs is not False:
                result = await self._score_logprobs(rid, messages, req)
                if result is not None:
                    return result
            return await self._score_sampled(rid, messages, req)
        except RequestFailed as e:
            return ChoiceResult(error=f"openai request {rid}: {e}")

    async def _score_logprobs(self, rid: str, messages: list[dict], req: ChoiceRequest) -> ChoiceResult | None:
        """Probabilities from the first token's ``top_logprobs`` at ``req.temperature``; None: this
        server returns no logprobs (after ``logprobs_evidence`` valid replies without them)."""

        async def call(msgs: list[dict], extra: dict | None) -> Any:
            kw: dict[str, Any] = {"max_tokens": 1, "temperature": 0.0, "logprobs": True, "top_logprobs": 20}
            if req.seed is not None:
                kw["seed"] = req.seed
            if extra:
                kw["extra_body"] = extra
            return await self._create(rid, messages=msgs, **kw)

        for _ in range(self.logprobs_evidence):
            try:
                resp = await self._with_prefix(messages, req.prefix, call)
            except RequestFailed as e:
                if self.logprobs_mode == "auto" and e.status in (400, 422) and "logprob" in str(e).lower():
                    self._no_logprobs(f"it rejected the request: {e}")
                    return None
                raise
            self._add_usage([resp])
            top = top_logprobs_from_response(resp)
            if top is not None:
                merged = await self._exact.complete(top, messages, req.prefix, req.choices, req.temperature,
                                                    self.supports_continue)
                self.supports_logprobs = True
                self._logprob_misses = 0
                probs, mass = probs_from_top_logprobs(merged, req.choices, req.temperature, tail_from=top)
                return ChoiceResult(probs=probs, method="logprobs", mass=mass)
            # One reply without logprobs is not proof the server cannot give them (a flaky proxy,
            # one odd replica): only repeated evidence, and never after logprobs were seen, switches
            # this backend to sampling for good.
            if self.logprobs_mode == "auto" and self.supports_logprobs is None:
                self._logprob_misses += 1
                if self._logprob_misses >= self.logprobs_evidence:
                    self._no_logprobs(f"{self._logprob_misses} valid replies in a row carried none")
                    return None
            logger.debug("openai request %s: reply without logprobs; asking again", rid)
        why = "(logprobs=on)" if self.logprobs_mode == "on" else "although the server returned them before"
        raise RequestFailed(f"{self.logprobs_evidence} replies carried no logprobs {why}")

    async def _score_sampled(self, rid: str, messages: list[dict], req: ChoiceRequest) -> ChoiceResult:
        """Monte-Carlo estimate from ``req.samples`` short answers at ``req.temperature``."""

        async def call(msgs: list[dict], extra: dict | None) -> Any:
            return await self._sample(
                rid, msgs, max(req.samples, 1), req.seed, extra, max_tokens=self.sample_tokens,
                temperature=req.temperature,
            )

        texts, _, pt, ct = await self._with_prefix(messages, req.prefix, call)
        self.stats.add(prompt_tokens=pt, completion_tokens=ct)
        texts = [strip_prefix(t, req.prefix) for t in texts]
        probs, mass = choices_from_samples(texts, req.choices)
        return ChoiceResult(probs=probs, method="sampled", mass=mass)

    async def _with_prefix(
        self, messages: list[dict], prefix: str, call: Callable[[list[dict], dict | None], Awaitable[Any]]
    ) -> Any:
        """Call with the prefix as a partial assistant turn, or appended to the user turn (see module doc)."""
        if not prefix:
            return await call(messages, None)
        if self.supports_continue is not False:
            try:
                out = await call(
                    [*messages, {"role": "assistant", "content": prefix}],
                    {"continue_final_message": True, "add_generation_prompt": False},
                )
                self.supports_continue = True
                return out
            except RequestFailed as e:
                rejected = e.status in (400, 422) and any(f in str(e) for f in _CONTINUE_FIELDS)
                if not rejected or self.prefix_mode == "assistant":
                    raise
                if self.supports_continue is None:
                    logger.warning(
                        "server %s rejects continue_final_message; choice prefixes go into the user turn instead",
                        self.base_url,
                    )
                self.supports_continue = False
        return await call(append_to_last_user(messages, prefix), None)

    def _no_logprobs(self, why: str) -> None:
        """Switch ``score_choices`` to sampling for good (logged once; part of the cache key)."""
        if self.supports_logprobs is None:
            logger.warning(
                "server %s does not return logprobs (%s); score_choices falls back to sampling (method='sampled')",
                self.base_url, why,
            )
        self.supports_logprobs = False

    def _add_usage(self, replies: Sequence[Any]) -> None:
        for r in replies:
            u = getattr(r, "usage", None)
            if u is not None:
                self.stats.add(prompt_tokens=u.prompt_tokens or 0, completion_tokens=u.completion_tokens or 0)


__all__ = ["OpenAIBackend", "RequestFailed", "image_data_url", "probs_from_top_logprobs", "top_logprobs_from_response"]


async def _reported(coro: Awaitable[Any]) -> Any:
    """``coro``'s result, reported as one completed request (:mod:`vlrl.core.progress`) when it ends."""
    try:
        return await coro
    finally:
        requests_done(1)
