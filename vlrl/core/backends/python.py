"""``py:package.module:factory`` — Python code as a model behind the backend seam.

Every pipeline stage takes a backend spec, so a stand-in for a model (a rule-based teacher, a
deterministic rubric writer, a scripted reasoner, a fault-injecting test double) should plug in
where a model would, and run through exactly the code a real model runs through. The spec names
an importable factory; its options (``?key=value&...``) are passed to it as keyword arguments
(strings, as written). The factory returns either

* a ready :class:`~vlrl.core.backends.base.Backend` (full control: chat and choice scoring), or
* a *reply function* ``reply(messages, sampling) -> str | list[str]``, wrapped in
  :class:`FunctionBackend`: it answers ``chat`` requests (one string, or ``sampling.n`` strings
  for ``n`` samples) and, for ``score_choices``, puts all the mass on the choice its reply
  starts with.

The factory's module path and options are the backend's identity, so the response cache keeps two
differently configured stand-ins apart; bump an option (e.g. ``version=2``) when the code changes.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable, Sequence
from typing import Any

from vlrl.core.backends.base import (
    Backend,
    BackendError,
    ChatRequest,
    ChatResult,
    ChoiceRequest,
    ChoiceResult,
    SamplingParams,
    first_choice,
)
from vlrl.core.progress import requests_done

Reply = Callable[[list[dict[str, Any]], SamplingParams], "str | Sequence[str]"]


class FunctionBackend(Backend):
    """A backend whose answers come from a Python reply function (see the module docstring).

    A reply that raises becomes that request's one-line error, like a failed model call; the
    rest of the batch goes on.
    """

    kind = "py"
    raw_prompts = True  # the reply function sees a raw prompt as one user turn (ChatRequest.prompt)

    def __init__(self, reply: Reply, name: str, options: dict[str, str] | None = None) -> None:
        super().__init__(name)
        self.reply = reply
        self.options = dict(options or {})

    def identity(self) -> dict[str, Any]:
        return {"kind": self.kind, "model": self.model, "options": self.options}

    def _texts(self, r: ChatRequest) -> list[str]:
        out = self.reply(r.messages, r.sampling)
        texts = [out] if isinstance(out, str) else list(out) if isinstance(out, (list, tuple)) else None
        if not texts or not all(isinstance(t, str) for t in texts):
            raise TypeError(f"reply function returned {type(out).__name__}, not a string or a list of strings")
        if len(texts) == 1 and r.sampling.n > 1:
            texts = texts * r.sampling.n
        if len(texts) != r.sampling.n:
            raise ValueError(f"reply function returned {len(texts)} texts for n={r.sampling.n}")
        return texts

    def _chat(self, requests: list[ChatRequest]) -> list[ChatResult]:
        results = []
        for i, r in enumerate(requests):
            try:
                texts = self._texts(r)
            except Exception as e:  # noqa: BLE001 - one bad request must not sink the batch
                msg = " ".join(str(e).split()) or type(e).__name__
                results.append(ChatResult(error=f"{r.id or f'request {i}'}: {self.model}: {msg}"))
            else:
                results.append(ChatResult(texts=texts, finish_reasons=["stop"] * len(texts),
                                          completion_tokens=sum(len(t.split()) for t in texts)))
            requests_done(1)
        return results

    def _score_choices(self, requests: list[ChoiceRequest]) -> list[ChoiceResult]:
        results = []
        for i, r in enumerate(requests):
            rid = r.id or f"request {i}"
            # the pre-fill reaches the reply function as the start of the assistant turn, as a model sees it
            messages = [*r.messages, {"role": "assistant", "content": r.prefix}] if r.prefix else list(r.messages)
            try:
                text = self._texts(ChatRequest(messages, SamplingParams(max_tokens=16), id=r.id))[0]
            except Exception as e:  # noqa: BLE001
                msg = " ".join(str(e).split()) or type(e).__name__
                results.append(ChoiceResult(error=f"{rid}: {self.model}: {msg}"))
                requests_done(1)
                continue
            requests_done(1)
            picked = first_choice(text, r.choices)
            if picked is None:
                results.append(ChoiceResult(error=f"{rid}: reply {text[:60]!r} names none of {r.choices}"))
                continue
            # one deterministic draw is the whole distribution, but it was read from text, not logits
            results.append(ChoiceResult(probs={c: float(c == picked) for c in r.choices}, method="sampled", mass=1.0))
        return results


def load_python_backend(target: str, opts: dict[str, str]) -> Backend:
    """Import ``package.module:factory`` and build the backend it describes (see the module docstring)."""
    module_name, sep, attr = target.partition(":")
    if not sep or not module_name or not attr:
        raise BackendError(f"py backend: expected 'py:package.module:factory', got 'py:{target}'")
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        raise BackendError(f"py backend: cannot import {module_name!r}: {e}") from None
    factory = getattr(module, attr, None)
    if factory is None or not callable(factory):
        raise BackendError(f"py backend: {module_name!r} has no callable {attr!r}")
    try:
        inspect.signature(factory).bind(**opts)
    except TypeError as e:
        raise BackendError(f"py backend: {target} does not take the options {sorted(opts)}: {e}") from None
    except ValueError:  # builtins without a signature: let the call decide
        pass
    made = factory(**opts)
    if isinstance(made, Backend):
        return made
    if callable(made):
        return FunctionBackend(made, name=target, options=opts)
    raise BackendError(f"py backend: {target} returned {type(made).__name__}; expected a Backend or a reply function")
