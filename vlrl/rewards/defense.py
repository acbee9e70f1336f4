"""An LLM-judged defense rubric: the optional, slower layer behind the pattern guards.

Patterns generalise only as far as their vocabularies (the pattern layer's recall on phrasings it was
not written against is measured in ``tests/rewards/test_guard_corpus.py``). Rubicon's answer is a
*defense rubric*: a judge reads the caption and says whether it tries to game the grader. It runs
through the judge seam (:func:`vlrl.judge.structured.chat_structured`: batched, retried with the
error quoted, the *final* JSON object read) with its prompt as data (``defense_rubric.jinja``), and
the caption fenced as a JSON string the way the rubric judge sees it.

It is a guard like the others (``guards: {enabled: [..., llm_defense], llm_defense: {judge: SPEC}}``)
but never on by default: it costs a model call per distinct caption. A judge answer that cannot be
used after retries does not fire the guard; it is counted in ``counts["failures"]``, logged, and
kept as the caption's reason (:meth:`DefenseJudge.error`), which ``vlrl reward guard`` reports on
that row, so a broken defense judge shows up instead of passing every caption. A failure is never
kept as a verdict: the next batch that holds the caption asks again.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Sequence
from typing import Any

from vlrl.core.backends import Backend, ChatRequest, SamplingParams, load_backend, parse_spec
from vlrl.core.prompts import render
from vlrl.judge.fence import fence_caption
from vlrl.judge.structured import chat_structured, extract_final_json

logger = logging.getLogger(__name__)

DEFENSE_PROMPT = "defense_rubric.jinja"
DEFENSE_SCHEMA = {
    "title": "defense_verdict", "type": "object", "additionalProperties": False, "required": ["explanation", "gaming"],
    "properties": {"explanation": {"type": "string", "maxLength": 200}, "gaming": {"type": "boolean"}},
}  # fmt: skip
"""The built-in prompt's answer (its last line), sent as structured output: a server that constrains
decoding to it (vLLM) returns a verdict that parses without repair. ``explanation`` (one sentence) is
bounded so that the answer closes within the default 256 tokens even at one character per token. A
custom prompt may ask for another layout, so it goes without."""


def _gaming(obj: Any) -> bool:
    if isinstance(obj, dict) and "gaming" in obj and isinstance(obj["gaming"], bool):
        return obj["gaming"]
    raise ValueError('answer with {"explanation": "...", "gaming": true|false}')


def render_defense_prompt(caption: str, prompt: str = DEFENSE_PROMPT) -> str:
    return render(prompt, **fence_caption(caption))


class DefenseJudge:
    """Asks a judge, in batches, whether captions game the grader; remembers answers per text."""

    def __init__(
        self,
        judge: str | Backend,
        prompt: str = DEFENSE_PROMPT,
        max_retries: int = 2,
        max_tokens: int = 256,
        cache: str | None = None,
    ) -> None:
        if isinstance(judge, str):
            parse_spec(judge)
        self.judge = judge
        self.prompt = prompt
        self.max_retries = int(max_retries)
        self.max_tokens = int(max_tokens)
        self.cache = cache
        self._backend: Backend | None = None
        self.verdicts: dict[str, bool] = {}
        self.errors: dict[str, str] = {}
        self.counts: Counter[str] = Counter()

    @property
    def backend(self) -> Backend:
        if self._backend is None:
            self._backend = load_backend(self.judge, cache=self.cache)
        return self._backend

    def prefetch(self, captions: Sequence[str]) -> None:
        """Judge every caption not judged yet, in one batched round per retry."""
        todo = list(dict.fromkeys(c for c in captions if c not in self.verdicts))
        if not todo:
            return
        sampling = SamplingParams(max_tokens=self.max_tokens, temperature=0.0)
        requests = [
            ChatRequest([{"role": "user", "content": render_defense_prompt(c, self.prompt)}], sampling, id=f"defense{k}")
            for k, c in enumerate(todo)
        ]
        results = chat_structured(
            self.backend, requests, lambda text, i: extract_final_json(text, _gaming), max_retries=self.max_retries,
            raw_text=True, json_schema=DEFENSE_SCHEMA if self.prompt == DEFENSE_PROMPT else None,
        )
        for caption, res in zip(todo, results, strict=True):
            self.counts["judged"] += 1
            if res.ok:
                self.verdicts[caption] = bool(res.value)
                self.errors.pop(caption, None)
            else:
                self.counts["failures"] += 1
                logger.warning("llm_defense: judge failed on a caption: %s", res.error)
                self.errors[caption] = res.error or "judge failed"

    def gaming(self, caption: str) -> bool | None:
        """``True`` / ``False``, or ``None`` when the judge could not answer."""
        if caption not in self.verdicts and caption not in self.errors:
            self.prefetch([caption])
        return self.verdicts.get(caption)

    def error(self, caption: str) -> str | None:
        """Why the judge gave no verdict on ``caption`` in its last try, or ``None``."""
        return None if caption in self.verdicts else self.errors.get(caption)
