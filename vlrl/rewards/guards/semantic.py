"""The two guards run wholly from the family table: ``self_praise`` and ``grader_address``.

``self_praise`` fires on claims about the caption itself (subject {this/my/the above caption,
description, ...} x praise {complete, accurate, captures every detail, ...}), coverage claims
("nothing has been left out"), first-person assistant chatter ("I hope this helps", "as an AI") and
the same claims in other languages. ``grader_address`` fires on text addressed to the grader or
answerer: asserted option letters ("the correct answer is B"), prompt injection ("disregard the prior
instructions"), salutations ("dear evaluator"), score requests, verdict-like data, rubric outcomes.

Each is a list of families in ``data/families.yaml`` (:mod:`vlrl.rewards.guards.table`); the guard
runs them in table order and reports the first that fires. Words like "complete", "accurate" or
"answer" alone never fire ("a complete set of tools", "an accurate clock", "the answer box on the
form"): a family needs the caption as its subject, the grader as its addressee, or an option letter
in answer position, and text that is in the image (quoted spans, "a sign reading ...") is removed
from the views first.
"""

from __future__ import annotations

from vlrl.rewards.guards.base import Guard, register_guard
from vlrl.rewards.guards.detectors import DETECTORS
from vlrl.rewards.guards.doc import Doc
from vlrl.rewards.guards.table import CompiledFamily, Family, families_of


class TableGuard(Guard):
    """A guard whose every family is a row of the table. ``extra_patterns`` (a list, or
    ``{family: [regex, ...]}``) extends any of them; ``skip_families`` switches some off."""

    def __init__(self, penalty: float = 1.0, extra_patterns: dict[str, list[str]] | list[str] | None = None,
                 skip_families: list[str] | tuple[str, ...] = ()) -> None:
        super().__init__(penalty)
        self._families = [CompiledFamily(spec, (), DETECTORS) for spec in families_of(self.name)]
        self.extend(extra_patterns, skip_families)

    def add_patterns(self, spec: Family, patterns: list[str]) -> None:
        for i, fam in enumerate(self._families):
            if fam.name == spec.name:  # the user's patterns join the family's own, in its view and scope
                self._families[i] = CompiledFamily(spec, [*fam.extra, *patterns], DETECTORS)
                return
        super().add_patterns(spec, patterns)

    def find(self, doc: Doc) -> tuple[str, str] | None:
        for fam in self._families:
            if fam.name not in self._skip and (evidence := fam.find(doc)) is not None:
                return fam.name, evidence
        return None


PatternGuard = TableGuard
"""The name this class had when the patterns were code."""


@register_guard("self_praise")
class SelfPraiseGuard(TableGuard):
    """Claims about the caption itself and first-person assistant chatter (the ``self_praise``
    families of the table)."""


@register_guard("grader_address")
class GraderAddressGuard(TableGuard):
    """Text addressed to the grader or answerer: option letters, injection, score requests, verdict
    data (the ``grader_address`` families of the table)."""


__all__ = ["GraderAddressGuard", "PatternGuard", "SelfPraiseGuard", "TableGuard"]
