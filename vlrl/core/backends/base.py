"""The one seam between vlrl and every model.

Pipelines, rewards and evaluators never import ``transformers`` or ``openai`` to talk to a model:
they build :class:`ChatRequest` / :class:`ChoiceRequest` objects and hand a *batch* of them to a
:class:`Backend`. Batching is the backend's business (left-padded ``generate`` in-process, many
requests in flight over HTTP), which is why the interface takes lists and never single requests.

Messages use the OpenAI chat layout. A user turn's ``content`` is either a string or a list of parts:

* ``{"type": "text", "text": "..."}``
* ``{"type": "image", "image": <PIL.Image | path str>}``

Each backend converts images itself (processor pixels in-process, base64 data URLs over HTTP).

Failures are per request: one bad record must never sink a batch, so results carry ``error`` instead
of raising. Callers decide whether an error means "quarantine", "retry later" or "reward is None".
"""

from __future__ import annotations

import abc
import dataclasses
import hashlib
import json
import logging
import os
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class SamplingParams:
    """Generation settings shared by every backend.

    ``temperature == 0`` means greedy decoding. ``seed`` makes sampling reproducible where the
    backend supports it, and is part of the cache key so two seeds never share a cached answer.
    """

    max_tokens: int = 256
    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int = 0
    """0 disables top-k (the OpenAI API has no top-k; HTTP backends send it only when > 0)."""
    n: int = 1
    seed: int | None = None
    stop: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        # A bad setting fails where it is made, not as n empty answers or one error per request.
        if self.max_tokens < 1 or self.n < 1 or self.top_k < 0:
            raise ValueError(f"sampling: need max_tokens >= 1, n >= 1 and top_k >= 0 (got {self})")
        if not (self.temperature >= 0 and 0 < self.top_p <= 1):
            raise ValueError(f"sampling: need temperature >= 0 and 0 < top_p <= 1 (got {self})")
        # stop="###" must not become three "#" stops; a list must stay hashable (batches group by params)
        if isinstance(self.stop, str):
            object.__setattr__(self, "stop", (self.stop,))
        elif not isinstance(self.stop, tuple):
            object.__setattr__(self, "stop", tuple(self.stop))

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["stop"] = list(self.stop)
        return d


@dataclass
class ChatRequest:
    """One chat generation: ``n`` samples of the assistant's next turn."""

    messages: list[dict[str, Any]]
    sampling: SamplingParams = field(default_factory=SamplingParams)
    id: str | None = None
    """Record id used in error messages and logs (e.g. the image path); not part of the cache key."""
    json_schema: dict[str, Any] | None = None
    """A JSON schema the answer must follow (judges that answer in JSON). A server with structured
    output (vLLM's ``response_format: json_schema``) constrains decoding to it; every other backend
    ignores it and the caller's repair path (:func:`vlrl.judge.structured.chat_structured`) copes.
    Part of the cache key: a constrained answer is not the unconstrained one."""
    prompt: str | None = None
    """A prompt already rendered to text, sent exactly as it is: no chat template, no system turn,
    no added special tokens (a text completion: ``/v1/completions`` over HTTP, the tokenizer's
    plain encoding in process). For parity with code that renders its own prompt string (the
    public CapRL reward's, which begins with ``<|im_start|>user`` and ends inside the assistant
    turn), where any chat template would add a system turn or a think block. ``messages`` then
    holds the same text as one user turn, for logs and for backends that see conversations (a
    ``py:`` reply function). Backends that cannot send a raw prompt (``raw_prompts`` false) fail
    such a request with that reason rather than send another prompt. Part of the cache key."""


@dataclass
class ChatResult:
    texts: list[str] = field(default_factory=list)
    finish_reasons: list[str] = field(default_factory=list)
    prompt_tokens: int = 0
    completion_tokens: int = 0
    error: str | None = None
    cached: bool = False

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def text(self) -> str:
        """The first sample (most callers ask for one)."""
        return self.texts[0] if self.texts else ""


@dataclass
class ChoiceRequest:
    """Ask for the probability of each of a fixed set of answer strings.

    The prompt is ``messages`` followed by the start of the assistant turn and ``prefix`` (e.g.
    ``"The answer is "``); each choice (e.g. ``"A"``) is a candidate continuation. Backends score
    only the *first token* of each choice, so choices must differ in their first token (option
    letters do).
    """

    messages: list[dict[str, Any]]
    choices: list[str]
    prefix: str = ""
    id: str | None = None
    samples: int = 16
    """How many samples estimate the distribution when the backend cannot read logprobs."""
    seed: int | None = None
    temperature: float = 1.0
    """The sampling temperature whose first-token distribution is wanted: probabilities are the
    softmax of ``logits / temperature`` over the full vocabulary (0: greedy, all mass on the argmax
    token). Exact scoring is only the expectation of sampled answers at the temperature they use."""

    def __post_init__(self) -> None:
        if not self.temperature >= 0:
            raise ValueError(f"choice request: temperature must be >= 0 (got {self.temperature})")


Method = Literal["logits", "logprobs", "sampled"]


@dataclass
class ChoiceResult:
    probs: dict[str, float] = field(default_factory=dict)
    """Probability of each choice, renormalised over the choices (sums to 1 unless error)."""
    method: Method | None = None
    """``logits``/``logprobs``: exact; ``sampled``: a Monte-Carlo estimate from ``samples`` draws."""
    mass: float | None = None
    """Unnormalised probability mass the model put on the choices at the request's temperature,
    summed over every token that reads as a choice (``"A"``, ``" A"``, ``"\nA"``): the *letter
    mass*. Low mass means an off-format answer; callers treat it as a failure, not as chance.
    ``None``: the backend does not report it (a third-party backend); ``probs`` are then taken as
    they are."""
    error: str | None = None
    cached: bool = False

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def exact(self) -> bool:
        return self.method in ("logits", "logprobs")

    def argmax(self) -> str | None:
        return max(self.probs, key=self.probs.__getitem__) if self.probs else None


@dataclass
class Accounting:
    """Counters every backend keeps; returned to callers and logged by pipelines."""

    requests: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    retries: int = 0
    cache_hits: int = 0
    failures: int = 0
    structured: int = 0
    """Requests answered under server-side structured output (their JSON schema constrained decoding)."""
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def add(self, **deltas: int) -> None:
        with self._lock:
            for k, v in deltas.items():
                setattr(self, k, getattr(self, k) + v)

    def snapshot(self) -> dict[str, int]:
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if not f.name.startswith("_")}

    def __sub__(self, other: dict[str, int]) -> dict[str, int]:
        return {k: v - other.get(k, 0) for k, v in self.snapshot().items()}


OBSERVERS: list[Any] = []
"""Callables given every batch of results a backend produced, and ``None`` before each call (the
running job's circuit breaker, see :mod:`vlrl.core.jobs`); they may raise to stop the job."""


_HTML_HEADS = ("<!doctype html", "<html", "<head>", "<body")


def answer_problem(texts: Sequence[Any]) -> str | None:
    """Why a chat result's texts are no answer (None: they are one).

    A 200 is not proof of an answer: a proxy's error page passed through as completion text, or a
    server that returns empty content, would otherwise be committed as a caption, scored as a wrong
    answer, and cached so that every rerun replays it. So a result is a failure of its request
    (retried, never cached) when no text has any character, or when a text is an HTML page (a
    caption never starts with ``<html>``). Whitespace is an answer, a bad one: a model that
    generated newline tokens did answer, and the caller's own checks (a caption's minimum words)
    judge that. An empty sample among others that answered is kept: with ``n`` samples, "no
    answer" is one of the outcomes being sampled.
    """
    if not texts or all(not isinstance(t, str) or not t for t in texts):
        return "the reply is empty (no text in any choice)"
    for t in texts:
        head = t.lstrip()[:64].lower() if isinstance(t, str) else ""
        if head.startswith(_HTML_HEADS):
            return f"the reply is an HTML page, not an answer ({' '.join(t.split())[:80]!r})"
    return None


def _reject_non_answers(requests: Sequence[ChatRequest], results: Sequence[ChatResult]) -> None:
    """Turn a result without an answer into an error of its request (see :func:`answer_problem`)."""
    for i, (req, r) in enumerate(zip(requests, results, strict=False)):
        if r.ok and (why := answer_problem(r.texts)):
            r.error, r.texts, r.finish_reasons = f"{req.id or f'request {i}'}: {why}", [], []


def _redact_errors(results: Sequence[Any]) -> None:
    """Error texts end in failure records and logs; a server that echoes the API key must not put it there."""
    from vlrl.core.redact import redact

    for r in results:
        if getattr(r, "error", None):
            r.error = redact(r.error)


class BackendError(RuntimeError, ValueError):
    """A backend could not be built or reached at all (not a per-request failure).

    Also a ``ValueError``: like a malformed spec, it is a bad setting the user must fix, so every
    command that reports ``ValueError`` as one line reports this one the same way.
    """


class Backend(abc.ABC):
    """Base class of every model backend. Subclasses implement ``_chat`` and ``_score_choices``."""

    kind: str = "base"
    raw_prompts: bool = False
    """Whether ``_chat`` sends a :attr:`ChatRequest.prompt` as it is (see there)."""

    def __init__(self, model: str) -> None:
        self.model = model
        self.stats = Accounting()

    # -- public API (batched) ------------------------------------------------------------------
    def chat(self, requests: Sequence[ChatRequest]) -> list[ChatResult]:
        if not requests:
            return []
        self._notify(None)  # an open circuit breaker stops the call before anything is sent
        if not self.structured_output and any(r.json_schema is not None for r in requests):
            self.log_route("repair path (this backend does not constrain decoding to a JSON schema)")
        if not self.raw_prompts and any(r.prompt is not None for r in requests):
            why = f"the {self.kind} backend cannot send a raw prompt (no chat template); use an hf:, openai: or py: answerer"
            results = [ChatResult(error=why) if r.prompt is not None else None for r in requests]
            rest = [r for r in requests if r.prompt is None]
            done = iter(self._chat(rest) if rest else [])
            results = [res if res is not None else next(done) for res in results]
        else:
            results = self._chat(list(requests))
        _reject_non_answers(requests, results)
        _redact_errors(results)
        self._account(results)
        self._notify(results)
        return results

    def score_choices(self, requests: Sequence[ChoiceRequest]) -> list[ChoiceResult]:
        if not requests:
            return []
        results: list[ChoiceResult | None] = [None] * len(requests)
        valid = []
        for i, r in enumerate(requests):
            bad = choices_problem(r.choices)
            if bad:
                results[i] = ChoiceResult(error=f"{r.id or f'request {i}'}: {bad}")
            else:
                valid.append(i)
        if valid:
            self._notify(None)
            scored = self._score_choices([requests[i] for i in valid])
            _redact_errors(scored)
            self._notify(scored)
            for i, res in zip(valid, scored, strict=True):
                results[i] = res
        out = [r if r is not None else ChoiceResult(error="not processed") for r in results]
        _redact_errors(out)
        self.stats.add(requests=len(requests), failures=sum(not r.ok for r in out))
        return out

    structured_output = False
    """Whether this backend can send a request's ``json_schema`` as server-side structured output
    (the openai backend: :mod:`vlrl.core.backends.openai_structured`); the others take the repair path."""

    def log_route(self, route: str) -> None:
        """Say once per backend (and again if it changes) how JSON answers are obtained: a user reading
        a judge's repaired/rejected counts needs to know whether decoding was constrained at all."""
        if self.__dict__.get("_route_logged") != route:
            self._route_logged = route
            url = self.identity().get("base_url")
            logger.info("backend %s %s: structured output: %s", self.kind, f"{url}@{self.model}" if url else self.model, route)

    observed = True
    """Whether results are reported to :data:`OBSERVERS` (a wrapper such as the cache says no: its
    inner backend reports what really went to the model)."""

    def _notify(self, results: Sequence[Any]) -> None:
        if self.observed:
            for fn in list(OBSERVERS):
                fn(results)

    def identity(self) -> dict[str, Any]:
        """What makes two backends give the same answers (the cache key's backend part)."""
        return {"kind": self.kind, "model": self.model}

    def choice_method(self) -> str:
        """How ``score_choices`` will compute probabilities now (``logits``, ``logprobs``, ``sampled``).

        Part of the choice cache key: a sampled estimate stored while a server looked unable to
        return logprobs must never be replayed as an exact answer by a later, healthy run.
        """
        return "logits"

    def close(self) -> None:
        """Release resources (HTTP sessions, GPU memory) and log the accounting.

        Subclasses release their own resources and then call ``super().close()``: every job that
        closes its backends (caption, QA curation, teacher captions, ...) thereby ends with one log
        line of what it cost, without each job formatting its own.
        """
        self.log_accounting()

    def log_accounting(self) -> dict[str, int]:
        """Log the counters at INFO (once per change: closing twice logs once) and return them."""
        snap = self.stats.snapshot()
        if snap != self.__dict__.get("_last_logged"):
            self._last_logged = snap
            url = self.identity().get("base_url")
            logger.info(
                "backend %s %s: %s", self.kind, f"{url}@{self.model}" if url else self.model,
                " ".join(f"{k}={v}" for k, v in snap.items()),
            )
        return snap

    # -- for subclasses ------------------------------------------------------------------------
    @abc.abstractmethod
    def _chat(self, requests: list[ChatRequest]) -> list[ChatResult]: ...

    @abc.abstractmethod
    def _score_choices(self, requests: list[ChoiceRequest]) -> list[ChoiceResult]: ...

    def _account(self, results: list[ChatResult]) -> None:
        self.stats.add(
            requests=len(results),
            prompt_tokens=sum(r.prompt_tokens for r in results if not r.cached),
            completion_tokens=sum(r.completion_tokens for r in results if not r.cached),
            failures=sum(not r.ok for r in results),
        )

    def __enter__(self) -> Backend:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# -- helpers shared by backends -------------------------------------------------------------------


def choices_problem(choices: Sequence[str]) -> str | None:
    """Why a set of answer strings cannot be scored (None: it can): none, empty or repeated ones."""
    if not choices:
        return "no choices given"
    if any(not isinstance(c, str) or not c.strip() for c in choices):
        return f"choices {list(choices)!r} include an empty one"
    if len({c.strip() for c in choices}) != len(choices):
        return f"choices {list(choices)!r} repeat a choice"
    return None


def choices_from_samples(texts: Sequence[str], choices: Sequence[str]) -> tuple[dict[str, float], float]:
    """Estimate choice probabilities from sampled answers: the first choice each text starts with.

    Returns (probs renormalised over choices, fraction of samples that named a choice). Used by
    backends that cannot return logprobs (``transformers serve`` ignores them).
    """
    counts = dict.fromkeys(choices, 0)
    for t in texts:
        c = first_choice(t, choices)
        if c is not None:
            counts[c] += 1
    hit = sum(counts.values())
    if hit == 0:
        return {c: 1.0 / len(choices) for c in choices}, 0.0
    return {c: counts[c] / hit for c in choices}, hit / max(len(texts), 1)


def choice_of_token(token: str, choices: Sequence[str]) -> str | None:
    """The choice a single generated token reads as, or None.

    Every backend counts the same token variants for a choice: the token's text with surrounding
    whitespace removed must equal the choice's (``"A"``, ``" A"``, ``"\nA"`` and ``"\tA"`` all read
    as ``A``; ``"A."`` or ``"Apple"`` do not). Keeping this rule in one place is what makes exact
    scores agree across the in-process and HTTP backends.
    """
    core = token.strip()
    if not core:
        return None
    for c in choices:
        if c.strip() == core:
            return c
    return None


def first_choice(text: str, choices: Sequence[str]) -> str | None:
    """The choice the answer text names first, ignoring leading whitespace and punctuation."""
    s = text.strip().lstrip("([*\"' ")
    for c in sorted(choices, key=lambda c: len(c.strip()), reverse=True):
        # Choices often carry the space that follows a prefix (" B" after "The answer is"); the
        # answer text was stripped, so compare stripped. A letter must stand alone: "Apple" is not "A".
        core = c.strip()
        if core and s.startswith(core):
            rest = s[len(core):]
            if not (core[-1].isalnum() and rest[:1].isalnum()):
                return c
    return None


def request_key(identity: dict[str, Any], payload: dict[str, Any]) -> str:
    """Stable hash of (backend identity, request payload); images are hashed by their pixels, and
    images given as file paths by the file's bytes (a regenerated image at the same path is a new
    request, not a stale cache hit)."""
    if "messages" in payload:
        payload = dict(payload, messages=[_digest_image_paths(m) for m in payload["messages"]])
    blob = json.dumps({"backend": identity, "request": payload}, sort_keys=True, default=_jsonable)
    return hashlib.sha256(blob.encode()).hexdigest()


def _digest_image_paths(message: Any) -> Any:
    content = message.get("content") if isinstance(message, dict) else None
    if not isinstance(content, list):
        return message
    parts = []
    for part in content:
        video = part.get("video") if isinstance(part, dict) and part.get("type") == "video" else None
        if isinstance(video, (str, os.PathLike)):  # a video file keys by its content, read in chunks
            try:
                with open(video, "rb") as fh:
                    part = dict(part, video={"video_file_sha256": hashlib.file_digest(fh, "sha256").hexdigest()})
            except OSError:
                pass
        image = part.get("image") if isinstance(part, dict) and part.get("type") == "image" else None
        if isinstance(image, (str, os.PathLike)) and not str(image).startswith(("http://", "https://", "data:")):
            try:
                digest = hashlib.sha256(Path(image).read_bytes()).hexdigest()
            except OSError:  # missing/unreadable: the backend reports it; the path alone keys the error
                digest = None
            if digest is not None:
                part = dict(part, image={"image_file_sha256": digest})
        parts.append(part)
    return dict(message, content=parts)


def _jsonable(obj: Any) -> Any:
    try:
        from PIL import Image
    except ImportError:  # pragma: no cover
        Image = None
    if Image is not None and isinstance(obj, Image.Image):
        return {"image_sha256": hashlib.sha256(obj.tobytes()).hexdigest(), "size": obj.size, "mode": obj.mode}
    from vlrl.core.video import Clip

    if isinstance(obj, Clip):  # decoded frames: their pixels and times, never a deep copy of them
        h = hashlib.sha256()
        for f in obj.frames:
            h.update(f.tobytes())
        return {"video_frames_sha256": h.hexdigest(), "times": obj.times, "sample_fps": obj.sample_fps}
    if dataclasses.is_dataclass(obj):
        return dataclasses.asdict(obj)
    if isinstance(obj, (set, tuple)):
        return list(obj)
    return str(obj)
