"""A test-only model at the backend seam: answers each request from a function of it.

The function returns the answer text, a ready :class:`ChatResult` (e.g. an error), or ``None``
for a failed request. Every call's requests are recorded so tests can assert what was (not) sent.
"""

from __future__ import annotations

from vlrl.core.backends import Backend, ChatResult


class Scripted(Backend):
    kind = "scripted"

    def __init__(self, name, answer) -> None:
        super().__init__(name)
        self.answer = answer
        self.requests = []

    def _chat(self, requests):
        self.requests.extend(requests)
        out = []
        for r in requests:
            a = self.answer(r)
            if a is None:
                out.append(ChatResult(error="server exploded"))
            elif isinstance(a, ChatResult):
                out.append(a)
            else:
                out.append(ChatResult(texts=[a], finish_reasons=["stop"], completion_tokens=len(a.split())))
        return out

    def _score_choices(self, requests):
        raise AssertionError("scripted chat backend: score_choices is not expected here")
