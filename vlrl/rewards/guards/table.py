"""The one table of guard families (``data/families.yaml``), its schema, and the engine that runs it.

A *family* is one kind of hack a guard looks for. Each row of the table names it and says

* ``guard`` — which guard reports it (``self_praise``, ``grader_address``, ...; a family's hit is
  logged as ``guard/<guard>/<family>``);
* ``view`` — which preparation of the caption it reads (:class:`~vlrl.rewards.guards.doc.Doc`):
  ``lower`` (lower case, quoted spans and image text removed, typos repaired; the deobfuscated text
  too when the caption was obfuscated), ``decoded`` (the same with obfuscation undone), ``unquoted``
  (case kept, for option letters), ``shaped`` (line breaks kept, for markup and data), ``native``
  (the caption's own script, for other languages), ``norm`` (normalised, case kept), ``whole``
  (normalised, lower case, nothing removed: quotes and the picture's text kept) or ``compact``
  (obfuscated captions only: every separator removed);
* ``scope`` — what one match may span: the whole ``text``, one ``sentence``, one ``clause``
  (sentences cut further at dashes and bars), one ``aside`` (at brackets too) or one ``phrase`` (at
  colons too),
  all from the one splitter :func:`vlrl.rewards.guards.text.split`;
* ``patterns`` — regular expressions, any of which fires the family; ``requires`` — patterns one
  of which must also occur in the same unit; ``exemptions`` — named entries of the ``exemptions``
  table (a hedge, a scene) whose presence in the unit keeps the family quiet;
* ``confirm`` — for a family whose shape honest captions share (a long list of nouns: a menu, a
  toolbox, a form's fields), a probability: its hit counts only where the set's ``learned`` guard gives
  the caption at least that probability of a hack. The model has read thousands of honest dense
  captions beside keyword stuffing and tells a menu from a dump; the pattern cannot. Without a
  ``learned`` guard in the set every hit counts, and user patterns are never second-guessed. Only a
  ``detector: own`` family may carry it: a guard written in code lists every family it sees, so one
  set aside lets the next speak, where a pattern guard would fall silent;
* ``detector`` — for the few families that count or parse rather than match (verdict-like data,
  dimension scores, cue co-occurrence, other languages, the judge-hack guards): the name of a
  function in :mod:`vlrl.rewards.guards.detectors` or of a guard's own check, with ``options``.

Patterns are written with named *fragments* (``{{praise}}``, ``{{subj}}``, ``{{words:4}}``): one
vocabulary, written once, shared by every family that needs it. Users extend any family from the
settings (``extra_patterns: {family: [regex, ...]}``); an extra pattern reads the family's view and
scope and obeys its ``requires`` and exemptions. The table is validated by :class:`FamilyTable` when first read, so a
typo in a pattern or an unknown view fails at start-up, not mid-run.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from vlrl.rewards.guards import gates

TABLE = Path(__file__).parent / "data" / "families.yaml"
View = Literal["lower", "decoded", "unquoted", "shaped", "native", "norm", "whole", "compact"]
Scope = Literal["text", "sentence", "clause", "aside", "phrase"]
_REF = re.compile(r"\{\{(\w+)(?::(\d+))?\}\}")


class Exemption(BaseModel):
    model_config = ConfigDict(extra="forbid")
    about: str
    patterns: list[str] = Field(min_length=1)


class Family(BaseModel):
    """One row of the table (see the module docstring)."""

    model_config = ConfigDict(extra="forbid")
    name: str
    guard: str
    view: View
    scope: Scope = "text"
    about: str = ""
    patterns: list[str] = Field(default_factory=list)
    requires: list[str] = Field(default_factory=list)
    exemptions: list[str] = Field(default_factory=list)
    detector: str | None = None
    options: dict[str, Any] = Field(default_factory=dict)
    confirm: float | None = Field(default=None, gt=0.0, lt=1.0)

    @model_validator(mode="after")
    def _does_something(self) -> Family:
        if not self.patterns and self.detector is None:
            raise ValueError(f"family {self.name!r}: needs patterns or a detector")
        if self.confirm is not None and self.detector != "own":
            # a pattern guard reports its first family only: one set aside would silence the whole guard
            raise ValueError(f"family {self.name!r}: confirm is for families of guards written in code (detector: own), "
                             "which report every family they see")
        return self


class FamilyTable(BaseModel):
    """The whole table: fragments, cue categories, vocabularies, exemptions and the families."""

    model_config = ConfigDict(extra="forbid")
    fragments: dict[str, str]
    cues: dict[str, str] = Field(default_factory=dict)
    vocabularies: dict[str, str] = Field(default_factory=dict)
    exemptions: dict[str, Exemption] = Field(default_factory=dict)
    families: list[Family]

    @model_validator(mode="after")
    def _consistent(self) -> FamilyTable:
        seen: set[tuple[str, str]] = set()
        for f in self.families:
            if (f.guard, f.name) in seen:
                raise ValueError(f"family {f.guard}/{f.name} is listed twice")
            seen.add((f.guard, f.name))
            if unknown := set(f.exemptions) - set(self.exemptions):
                raise ValueError(f"family {f.name!r}: unknown exemptions {sorted(unknown)}")
            for p in [*f.patterns, *f.requires]:
                compile_pattern(p, self.fragments)
        for name, e in self.exemptions.items():
            for p in e.patterns:
                compile_pattern(p, self.fragments, what=f"exemption {name!r}")
        for name, p in self.cues.items():
            compile_pattern(p, self.fragments, what=f"cue {name!r}")
        return self

    @field_validator("fragments")
    @classmethod
    def _fragments_resolve(cls, v: dict[str, str]) -> dict[str, str]:
        for name in v:
            expand(f"{{{{{name}}}}}", v)
        return v


def expand(pattern: str, fragments: dict[str, str], depth: int = 0) -> str:
    """``pattern`` with every ``{{name}}`` (or ``{{name:N}}``, filling ``$n``) replaced by its fragment."""
    if depth > 12:
        raise ValueError(f"fragments nest too deep (a cycle?) in {pattern[:60]!r}")

    def sub(m: re.Match[str]) -> str:
        name, arg = m.group(1), m.group(2)
        if name not in fragments:
            raise ValueError(f"unknown fragment {{{{{name}}}}}")
        value = fragments[name]
        return expand(value.replace("$n", arg) if arg else value, fragments, depth + 1)

    return _REF.sub(sub, pattern)


def compile_pattern(pattern: str, fragments: dict[str, str], what: str = "pattern") -> re.Pattern[str]:
    try:
        return re.compile(expand(pattern, fragments))
    except (re.error, ValueError) as e:
        raise ValueError(f"bad {what} {pattern[:80]!r}: {e}") from None


def load_table(path: str | Path = TABLE) -> FamilyTable:
    """Read and validate a family table."""
    return FamilyTable(**yaml.safe_load(Path(path).read_text(encoding="utf-8")))


@lru_cache(maxsize=4)
def table(path: str = str(TABLE)) -> FamilyTable:
    return load_table(path)


@lru_cache(maxsize=4)
def cue_patterns(path: str = str(TABLE)) -> dict[str, re.Pattern[str]]:
    t = table(path)
    return {name: compile_pattern(p, t.fragments) for name, p in t.cues.items()}


@lru_cache(maxsize=4)
def exemption_patterns(path: str = str(TABLE)) -> dict[str, re.Pattern[str]]:
    t = table(path)
    return {name: _any(e.patterns, t.fragments) for name, e in t.exemptions.items()}


def vocabulary(name: str, path: str = str(TABLE)) -> frozenset[str]:
    return frozenset(table(path).vocabularies[name].split())


def _any(patterns: Iterable[str], fragments: dict[str, str]) -> re.Pattern[str]:
    """One regex for a list: each alternative in its own group, so the leftmost match wins."""
    return re.compile("|".join(gates.group(expand(p, fragments)) for p in patterns))


def families_of(guard: str, path: str = str(TABLE)) -> list[Family]:
    return [f for f in table(path).families if f.guard == guard]


def markdown(path: str = str(TABLE)) -> str:
    """The table as the Markdown table of ``docs/guards.md``: a row a family, in table order, with what it
    reads, what one match may span, what it fires on and how it finds it. Generated, so the docs cannot
    fall behind the data (``dev/guard_family_table.py`` writes it there; a test compares)."""
    rows = ["| guard | family | view | scope | fires on | how |", "|---|---|---|---|---|---|"]
    for f in table(path).families:
        how = ["guard's own code" if f.detector == "own" else f"detector `{f.detector}`" if f.detector
               else f"{len(f.patterns)} pattern(s)"]
        if f.requires:
            how.append(f"requires one of {len(f.requires)} further pattern(s)")
        if f.exemptions:
            how.append("exempt: " + ", ".join(f.exemptions))
        if f.confirm is not None:
            how.append(f"confirmed by `learned` at {f.confirm:g}")
        about = " ".join(f.about.split()).replace("|", "\\|")  # one line: a line break would end the row
        rows.append(f"| `{f.guard}` | `{f.name}` | {f.view} | {f.scope} | {about} | {'; '.join(how)} |")
    return "\n".join(rows) + "\n"


Detector = Callable[..., "str | None"]


class CompiledFamily:
    """One family ready to run on a :class:`~vlrl.rewards.guards.doc.Doc`."""

    def __init__(self, spec: Family, extra: Iterable[str] = (), detectors: dict[str, Detector] | None = None,
                 path: str = str(TABLE)) -> None:
        fragments = table(path).fragments
        self.spec = spec
        self.name = spec.name
        self.extra = tuple(extra)
        patterns = [*spec.patterns, *self.extra]
        self.pattern = _any(patterns, fragments) if patterns else None
        self.requires = _any(spec.requires, fragments) if spec.requires else None
        # per-pattern gates (:mod:`.gates`): a text runs only the patterns that can match in it
        self.alternation = gates.Alternation([expand(p, fragments) for p in patterns])
        self.requires_gate = gates.cnf(self.requires.pattern) if self.requires is not None else None
        gates.register([self.requires_gate])
        exempt = exemption_patterns(path)
        self.exemptions = tuple(exempt[e] for e in spec.exemptions)
        # what a text must hold for any pattern to run in it; a family that runs a detector cannot be skipped so
        self.quick = self.alternation.first if spec.detector is None and self.alternation.whole is not None else None
        self.detector = None
        if spec.detector is not None:
            if detectors is None or spec.detector not in detectors:
                raise ValueError(f"family {spec.name!r}: unknown detector {spec.detector!r}")
            self.detector = detectors[spec.detector]

    def find(self, doc: Any) -> str | None:
        """The evidence (a snippet) when the family fires on ``doc``, else ``None``."""
        for text in doc.view(self.spec.view):
            if self.quick is not None and gates.ENABLED and gates.present(text).isdisjoint(self.quick):
                continue  # (what ``_runnable`` would find first, asked without the calls: most families, most texts)
            pattern = self._runnable(text)
            detector = self.detector
            # a detector may say that no unit of the text can give it a hit (:mod:`.detectors`)
            if detector is not None and gates.ENABLED and (possible := getattr(detector, "possible", None)) \
                    and not possible(text, **self.spec.options):
                detector = None
            if pattern is None and detector is None:
                continue
            units = doc.units(text, self.spec.scope)
            # a long text passes a gate that most of its units fail: the patterns are then chosen unit by
            # unit (the same match: a pattern that cannot match in a unit is left out of its alternation)
            by_unit = pattern is not None and len(units) > 1
            for unit in units:
                # an exempt unit is skipped; asked only of a unit where the detector or a pattern found a hit
                exempt = None
                if detector is not None and (hit := detector(unit, doc, **self.spec.options)):
                    exempt = self._exempt(unit)
                    if not exempt:
                        return hit[:80]
                if by_unit:
                    pattern = self._runnable(unit)
                if pattern is not None and (m := pattern.search(unit)) and (
                        self.requires is None or self.requires.search(unit)) and not (
                        self._exempt(unit) if exempt is None else exempt):
                    return m.group(0)[:80]
        return None

    def _exempt(self, unit: str) -> bool:
        return any(e.search(unit) for e in self.exemptions)

    def _runnable(self, text: str) -> re.Pattern[str] | None:
        """The family's patterns that can match in ``text`` (by their gates, :mod:`.gates`), as one
        alternation in table order; ``None`` if none can."""
        if self.pattern is None or not gates.passes(self.requires_gate, text):
            return None
        return self.alternation.runnable(text)


__all__ = ["TABLE", "CompiledFamily", "Exemption", "Family", "FamilyTable", "compile_pattern", "cue_patterns",
           "exemption_patterns", "expand", "families_of", "load_table", "markdown", "table", "vocabulary"]
