"""A captioner at the backend seam whose captions are a function of the pixels, with scripted one-off failures."""

from __future__ import annotations

import numpy as np

from vlrl.core.backends import Backend, ChatResult


class ScriptedBackend(Backend):
    """Captions are a function of the image pixels; ids in ``fail`` error once each."""

    kind = "scripted"

    def __init__(self, fail: set[str] | None = None) -> None:
        super().__init__("scripted-captioner")
        self.fail = set(fail or ())
        self.seen: list[str] = []
        self.calls = 0

    def _chat(self, requests):
        self.calls += 1
        out = []
        for r in requests:
            self.seen.append(r.id)
            img = r.messages[0]["content"][0]["image"]
            if r.id in self.fail:
                self.fail.discard(r.id)
                out.append(ChatResult(error=f"{r.id}: server said 503"))
            else:
                out.append(ChatResult(texts=[f"mean {np.asarray(img).mean():.2f} for {r.id}"], finish_reasons=["stop"], completion_tokens=4))
        return out

    def _score_choices(self, requests):  # pragma: no cover - not used by captioning
        raise NotImplementedError
