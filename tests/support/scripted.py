"""A test-only model at the backend seam: answers each request from a function of it.

``answer`` returns the answer text, a ready :class:`ChatResult` (e.g. an error), or ``None``
for a failed request. ``choose``, for answerers scored by choice probabilities, returns each
request's :class:`ChoiceResult`. Every call's requests are recorded so tests can assert what was
(not) sent; a call the script has no function for fails the test.
"""

from __future__ import annotations

from vlrl.core.backends import Backend, ChatResult


class Scripted(Backend):
    kind = "scripted"
    raw_prompts = True  # answer functions see the request, raw prompt included

    def __init__(self, name, answer=None, choose=None) -> None:
        super().__init__(name)
        self.answer = answer
        self.choose = choose
        self.requests = []

    def _chat(self, requests):
        if self.answer is None:
            raise AssertionError("scripted choice backend: chat is not expected here")
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
        if self.choose is None:
            raise AssertionError("scripted chat backend: score_choices is not expected here")
        self.requests.extend(requests)
        return [self.choose(r) for r in requests]
