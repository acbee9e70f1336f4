"""The guard contract and its registry, below every guard module.

A guard is a cheap check that fires on a caption (:class:`Guard`); guards are chosen by name from a
settings block (:class:`vlrl.rewards.guards.GuardSet`). The base class lives apart from the guards
themselves so that guard families in their own modules (the rubric-judge hacks of
:mod:`vlrl.rewards.guards.judge`) register the same way as the guards of :mod:`vlrl.rewards.guards`
without an import cycle.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from vlrl.rewards.guards.doc import Doc
from vlrl.rewards.guards.table import CompiledFamily, Family, compile_pattern, families_of

GUARDS: dict[str, type[Guard]] = {}


def register_guard(name: str) -> Callable[[type[Guard]], type[Guard]]:
    def deco(cls: type[Guard]) -> type[Guard]:
        _require_detection(cls, name)
        cls.name = name
        GUARDS[name] = cls
        return cls

    return deco


def _require_detection(cls: type, name: str) -> None:
    """A guard must say how it detects (:meth:`Guard.hits`, :meth:`Guard.find` or :meth:`Guard.match`):
    one that overrides none would loop through the defaults, each calling the next. Refused when the
    class is registered or built, before it meets a caption."""
    if all(getattr(cls, m) is getattr(Guard, m) for m in ("hits", "find", "match")):
        raise TypeError(f"guard {name!r} implements none of hits, find and match")


class Guard:
    """A check that fires on a caption.

    A guard reports *which family* fired (:meth:`check` returns ``(family, evidence)``), so the trainer
    logs ``guard/<guard>/<family>``. Guards written in code implement :meth:`hits` (or :meth:`find`); the families of
    ``data/families.yaml`` with ``detector: own`` name what they return. A guard written against the
    older contract implements only :meth:`match` (the evidence, or ``None``) and reports one family:
    its first row of the table (``llm_defense``: ``judged``), or its own name. Whatever the guard, user patterns (``extra_patterns``) extend any of its families
    (:meth:`extend`)."""

    name = "guard"
    default = True
    """Whether ``enabled`` left unset turns the guard on (an LLM-judged guard is opt-in)."""
    rank = 0
    """Default guards run in (rank, registration) order, whatever module was imported first."""
    fallback = False
    """A second opinion: when it fires beside another guard it is reported, but its penalty is not added
    (a hack the patterns caught loses their penalty, not one more for the same words); alone, it costs
    its penalty like any guard."""
    confirms = False
    """Whether the guard has a ``probability(doc)`` of a hack that confirms the hits of other guards'
    uncertain families (a family's ``confirm`` in the table). The ``learned`` guard does; a guard that
    sets this must define that method."""

    def __init__(self, penalty: float = 1.0) -> None:
        _require_detection(type(self), self.name)
        self.penalty = float(penalty)
        self._user: list[CompiledFamily] = []
        self._skip: frozenset[str] = frozenset()
        # family → the probability a confirming guard must give a hit of it (the table's ``confirm``)
        self._confirm = {f.name: f.confirm for f in families_of(self.name) if f.confirm is not None}

    # -- families -----------------------------------------------------------------------------

    @property
    def family_names(self) -> list[str]:
        """Every family this guard can report (its table rows, then user families)."""
        names = [f.name for f in families_of(self.name)] or [self.name]
        return [n for n in dict.fromkeys([*names, *(f.name for f in self._user)]) if n not in self._skip]

    def extend(self, extra_patterns: dict[str, list[str]] | list[str] | None = None,
               skip_families: list[str] | tuple[str, ...] = ()) -> None:
        """Add user patterns to families (``{family: [regex, ...]}``; a plain list goes to the family
        ``user``, on the ``lower`` view) and switch families off (``skip_families``)."""
        known = {f.name: f for f in families_of(self.name)}
        if unknown := set(skip_families) - set(known):
            raise ValueError(f"guard {self.name!r}: unknown families {sorted(unknown)}; known: {sorted(known)}")
        self._skip = frozenset(skip_families)
        if not extra_patterns:
            return
        if not isinstance(extra_patterns, dict):
            extra_patterns = {"user": list(extra_patterns)}
        for family, patterns in extra_patterns.items():
            if isinstance(patterns, str):
                patterns = [patterns]
            # user patterns match case-insensitively (the views are lower case, a user's words may not be)
            patterns = [f"(?i:{p})" for p in patterns]
            for p in patterns:
                compile_pattern(p, {}, what=f"extra pattern of {self.name}/{family}")
            spec = known.get(family) or Family(name=family, guard=self.name, view="lower", about="user patterns",
                                               patterns=list(patterns))
            if family not in known and family != "user":
                raise ValueError(f"guard {self.name!r}: extra_patterns for unknown family {family!r}; "
                                 f"known: {sorted(known)} (or a plain list, for the family 'user')")
            self.add_patterns(spec, list(patterns))

    def add_patterns(self, spec: Family, patterns: list[str]) -> None:
        """User patterns for ``spec``: a family of their own with the spec's view, scope and exemptions."""
        user = spec.model_copy(update={"patterns": [], "requires": [], "detector": None, "options": {}, "confirm": None})
        self._user.append(CompiledFamily(user.model_copy(update={"patterns": patterns}), ()))

    # -- checking -----------------------------------------------------------------------------

    def hits(self, doc: Doc) -> Iterator[tuple[str, str]]:
        """Every ``(family, evidence)`` the guard's own logic finds, in order, lazily. Guards written
        in code yield one per family they see, so a family switched off (``skip_families``) hides
        only itself: the next family the caption shows is still reported."""
        if (hit := self.find(doc)) is not None:
            yield hit

    def find(self, doc: Doc) -> tuple[str, str] | None:
        """``(family, evidence)`` from the guard's own logic, else ``None``. A guard that implements
        only :meth:`match` reports its first family of the table (or its own name)."""
        evidence = self.match(doc)
        if evidence is None:
            return None
        return self.family_names[0] if self.family_names else self.name, evidence

    def check(self, doc: Doc, opinion: Callable[[Doc], float] | None = None,
              doubted: dict[str, str] | None = None) -> tuple[str, str] | None:
        """``(family, evidence)`` when the guard fires on ``doc``, else ``None``.

        ``opinion``: a confirming guard's :meth:`probability` (the set passes its ``learned`` guard's).
        A hit of a family with a ``confirm`` probability counts only where ``opinion`` gives at least
        that; one set aside is written to ``doubted`` (guard → why), and the next family is asked.
        Without ``opinion`` (:meth:`match`, :meth:`fires`, a guard used on its own) every hit counts."""
        for family, evidence in self.hits(doc):
            if family in self._skip:
                continue
            if opinion is not None and (need := self._confirm.get(family)) is not None and (p := opinion(doc)) < need:
                if doubted is not None:
                    doubted.setdefault(self.name, f"{family} set aside, learned probability {p:.2f} < {need}: {evidence}")
                continue
            return family, evidence
        for fam in self._user:
            if fam.name not in self._skip and (evidence := fam.find(doc)) is not None:
                return fam.name, evidence
        return None

    def match(self, doc: Doc) -> str | None:
        """The evidence (a snippet of the caption) when the guard fires, else ``None``."""
        hit = self.check(doc)
        return hit[1] if hit else None

    def fires(self, text: str) -> bool:
        return self.check(Doc.of(text)) is not None

    def unjudged(self, doc: Doc) -> str | None:
        """Why the guard could not decide on ``doc`` (a judge that failed), or ``None``. A pattern
        always decides; a guard that asks a model must say when the model gave no answer, or a dead
        judge would pass every caption as clean."""
        return None


__all__ = ["GUARDS", "Guard", "register_guard"]
