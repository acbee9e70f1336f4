"""Claims, grader addresses, score requests and injections in other languages, as a phrase table.

The English families of the family table (:mod:`vlrl.rewards.guards.table`) are blind to "这段描述完整准确" or "Ignora las instrucciones anteriores", and a policy trained
against a multilingual judge finds that out. Every language is one entry of a data file,
``data/languages.yaml``, validated by :class:`LanguageTable` when it is first read: a new
language, or a new phrasing, is an edit to that file, not to code.

Each entry holds four families of regular expressions — ``claim`` (read by ``self_praise``),
``address``, ``score`` and ``injection`` (read by ``grader_address``) — plus the words that name a
score (``score_labels``: "评分: 10/10" or "Bewertung: 10/10", a maximal score block) and the words
that introduce text written in the image (``image_text``; the rest of that clause is content).

Why a view of its own: the English guards read text with homoglyphs folded to Latin letters (a
Cyrillic "а" in an English hack reads as "a"), which turns Russian into Latin-looking noise. The
table reads the caption lower-cased in its own script, with quoted spans removed
(:attr:`vlrl.rewards.guards.doc.Doc.native`). A language is tried only when the caption contains its
script, so an English caption costs the six Latin-script entries and a Chinese one only Chinese
and Japanese.

Patterns need the caption as their subject, the grader as their addressee, or an imperative
("three judges watch", "the scoreboard shows 9.5" and "assembly instructions on the table" stay
clean in every language); ``tests/fixtures/guard_lang_dev.jsonl`` holds honest captions written
wholly in each language, hard ones included, and hacks of each family.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from functools import lru_cache
from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict, Field, field_validator

from vlrl.rewards.guards import gates
from vlrl.rewards.guards.doc import english_share
from vlrl.rewards.guards.gates import Alternation, Gated, remembered
from vlrl.rewards.guards.text import fold

FOREIGN_SHARE = 0.15
"""A sentence with fewer English function words than this share does not read as English."""

TABLE = Path(__file__).parent / "data" / "languages.yaml"
FAMILY_GUARD = {"claim": "self_praise", "address": "grader_address", "score": "grader_address",
                "injection": "grader_address"}
"""Which guard reads each family."""

SCRIPTS = {
    "latin": re.compile(r"[a-zà-ɏḀ-ỿ]"),
    "han": re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]"),
    "kana": re.compile(r"[\u3040-\u30ff]"),
    "hangul": re.compile(r"[\uac00-\ud7af\u1100-\u11ff]"),
    "cyrillic": re.compile(r"[\u0400-\u04ff]"),
    "arabic": re.compile(r"[\u0600-\u06ff]"),
    "devanagari": re.compile(r"[\u0900-\u097f]"),
    "greek": re.compile(r"[\u0370-\u03ff\u1f00-\u1fff]"),
    "hebrew": re.compile(r"[\u0590-\u05ff]"),
    "thai": re.compile(r"[\u0e00-\u0e7f]"),
    "bengali": re.compile(r"[\u0980-\u09ff]"),
}
# (a full score of 10 or 100 in words: "10 из 10", "10 su 10", "100 von 100", "10 out of 10"; not a tie,
# "10 a 10", nor the start of a longer number, "10 von 100"; five of five is a common star rating)
_OF = r"(?:из|з|de|su|von|sur|out\s+of|of|av|van|op|na|στα|از|จาก)"
_MAX_SCORE = (rf"(?:10\s*/\s*10|5\s*/\s*5|20\s*/\s*20|100\s*/\s*100|100\s*%|(?P<full>10|100)\s+{_OF}\s+(?P=full)(?!\d|[.,]\d)"
              r"|10\s*分|100\s*[分点점]|満点|만점)")


@lru_cache(maxsize=64)
def _scripts_in(text: str) -> frozenset[str]:
    """The scripts ``text`` holds (an ASCII text only Latin letters, if any)."""
    if text.isascii():
        return frozenset({"latin"}) if SCRIPTS["latin"].search(text) else frozenset()
    return frozenset(name for name, pat in SCRIPTS.items() if pat.search(text))


WORD_FIELDS = ("hedges", "alternatives", "stuff_labels", "image_words", "padding_words", "self_words", "praise_words", "adds")
"""The word lists the judge-hack guards count in sentences that are not English (:func:`foreign_words`)."""

# a word of a script with spaces starts and ends where no letter, mark or apostrophe touches it
# (Devanagari vowel signs are marks, not word characters)
_WORD_EDGE = r"[\w'\u0300-\u036f\u0900-\u09ff]"
_LEFT_EDGE = r"[\w\u0300-\u036f\u0900-\u09ff]"  # an elided article may come before: "l'image", "un'immagine"
# (Korean particles and endings attach to the word before; Thai writes no spaces between words)
_UNSPACED = {"han", "kana", "hangul", "thai"}


def _word_pattern(words: list[str], scripts: list[str]) -> str:
    """One language's words as a pattern (longest first), with word edges where its script has spaces;
    compiled once per script in :func:`_word_list`, beside the other languages' groups."""
    alt = "|".join(f"(?:{w})" for w in sorted(words, key=len, reverse=True))
    if _UNSPACED & set(scripts):
        return alt
    return rf"(?<!{_LEFT_EDGE})(?:{alt})(?!{_WORD_EDGE})"


def _check(patterns: list[str]) -> list[str]:
    for p in patterns:
        try:
            re.compile(p)
        except re.error as e:
            raise ValueError(f"bad pattern {p!r}: {e}") from None
    return patterns


class Language(BaseModel):
    """One language's phrase table (see the module docstring)."""

    model_config = ConfigDict(extra="forbid")
    name: str
    scripts: list[str] = Field(min_length=1)
    claim: list[str] = Field(default_factory=list)
    address: list[str] = Field(default_factory=list)
    score: list[str] = Field(default_factory=list)
    injection: list[str] = Field(default_factory=list)
    score_labels: list[str] = Field(default_factory=list)
    image_text: list[str] = Field(default_factory=list)
    image_text_before: list[str] = Field(default_factory=list)
    hedges: list[str] = Field(default_factory=list)
    alternatives: list[str] = Field(default_factory=list)
    stuff_labels: list[str] = Field(default_factory=list)
    image_words: list[str] = Field(default_factory=list)
    padding_words: list[str] = Field(default_factory=list)
    self_words: list[str] = Field(default_factory=list)
    praise_words: list[str] = Field(default_factory=list)
    self_openers: list[str] = Field(default_factory=list)
    adds: list[str] = Field(default_factory=list)
    function_words: list[str] = Field(default_factory=list)

    @field_validator("claim", "address", "score", "injection", "image_text", "image_text_before", "hedges",
                     "alternatives", "stuff_labels", "image_words", "padding_words", "self_words", "praise_words", "self_openers",
                     "adds")
    @classmethod
    def _compiles(cls, v: list[str]) -> list[str]:
        return _check(v)

    @field_validator("scripts")
    @classmethod
    def _known_scripts(cls, v: list[str]) -> list[str]:
        if unknown := set(v) - set(SCRIPTS):
            raise ValueError(f"unknown scripts {sorted(unknown)}; known: {sorted(SCRIPTS)}")
        return v


class LanguageTable(BaseModel):
    """The whole table: language code -> :class:`Language`."""

    model_config = ConfigDict(extra="forbid")
    languages: dict[str, Language]


class _Compiled:
    def __init__(self, code: str, lang: Language) -> None:
        self.code = code
        self.scripts = [SCRIPTS[s] for s in lang.scripts]
        self.script_names = tuple(lang.scripts)
        # each family's patterns run only where their literals occur (:mod:`.gates`; the same matches)
        self.families = {f: Alternation(getattr(lang, f)) for f in FAMILY_GUARD if getattr(lang, f)}
        if lang.score_labels:
            labels = "|".join(re.escape(w) for w in lang.score_labels)
            # (the label may name what is scored: "Оценка подписи: 10 из 10", "Puntuación de la descripción: 10 de 10")
            # (and may name the criterion after it, one word: "التقييم: الدقة ١٠/١٠"; not in scripts without
            # spaces, where any run of characters would do)
            self.score_block = Gated(rf"(?:{labels})(?:\s+[^\W\d]+){{0,3}}\s*[:：=]\s*(?:[^\W\d]{{1,12}}\s+)?{_MAX_SCORE}")
        else:
            self.score_block = None
        end = r"(?=[.;!?,，。；！？،\n]|$)"
        self.image_text = (Gated(rf"(?:{'|'.join(lang.image_text)})[^.;!?,，。；！？،\n]{{0,120}}?{end}")
                           if lang.image_text else None)
        self.image_text_before = (Gated(rf"[^.;!?,，。；！？،、\n]{{0,120}}?(?:{'|'.join(lang.image_text_before)})")
                                  if lang.image_text_before else None)

        self.words = {f: _word_pattern(getattr(lang, f), lang.scripts) for f in WORD_FIELDS if getattr(lang, f)}

    def strip_image_text(self, text: str) -> str:
        if self.image_text is not None:
            text = self.image_text.sub(" \u2039t\u203a ", text)
        if self.image_text_before is not None:
            text = self.image_text_before.sub(" \u2039t\u203a ", text)
        return text


def load_table(path: str | Path = TABLE) -> LanguageTable:
    """Read and validate a phrase table (a YAML mapping of language code to entry)."""
    data = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    return LanguageTable(languages=data)


@lru_cache(maxsize=4)
def _table(path: str = str(TABLE)) -> LanguageTable:
    """:func:`load_table`, read and validated once per path: every helper below reads the same table."""
    return load_table(path)


@lru_cache(maxsize=4)
def _compiled(path: str = str(TABLE)) -> tuple[_Compiled, ...]:
    return tuple(_Compiled(code, lang) for code, lang in _table(path).languages.items())


def language_hit(native: str, guard: str, path: str | Path = TABLE) -> str | None:
    """The evidence (``lang <code> <family>: snippet``) of the first family read by ``guard``
    (``self_praise`` or ``grader_address``) that matches ``native`` (lower case, own script, quoted
    spans removed), else ``None``."""
    families = [f for f, g in FAMILY_GUARD.items() if g == guard]
    for lang, text in _readings(native, str(path)):
        for family in families:
            pat = lang.families.get(family)
            if pat is not None and (m := pat.search(text)):
                return f"lang {lang.code} {family}: {m.group(0)[:80]}"
        if guard == "grader_address" and lang.score_block is not None and (m := lang.score_block.search(text)):
            return f"lang {lang.code} score: {m.group(0)[:80]}"
    return None


@remembered
@lru_cache(maxsize=256)
def _readings(native: str, path: str) -> tuple[tuple[_Compiled, str], ...]:
    """Each language whose script ``native`` holds, with the text its image-text words leave."""
    langs = _applying(_scripts_in(native), path)
    if gates.ENABLED and (first := _image_text_literals(path)) is not None and gates.present(native).isdisjoint(first):
        return tuple((lang, native) for lang in langs)  # no language's image-text words are in it
    return tuple((lang, lang.strip_image_text(native)) for lang in langs)


@lru_cache(maxsize=64)
def _applying(held: frozenset[str], path: str) -> tuple[_Compiled, ...]:
    """The languages of the table written in one of the scripts ``held`` (a Latin caption asks a score of them)."""
    return tuple(lang for lang in _compiled(path) if any(s in held for s in lang.script_names))


@lru_cache(maxsize=4)
def _image_text_literals(path: str) -> frozenset[str] | None:
    """The first-clause literals of every language's image-text patterns (:mod:`.gates`): a text holding none
    of them is what :meth:`_Compiled.strip_image_text` leaves it, in every language."""
    return gates.first_literals([p.gate for lang in _compiled(path) for p in (lang.image_text, lang.image_text_before)
                                 if p is not None])


@lru_cache(maxsize=16)
def _first_literals(family: str, path: str) -> frozenset[str] | None:
    """The first-clause literals of every pattern of ``family`` in every language (:mod:`.gates`)."""
    langs = _compiled(path)
    found = [g for lang in langs if family in lang.families for g in lang.families[family].gates]
    if family == "score":
        found += [lang.score_block.gate for lang in langs if lang.score_block is not None]
    return gates.first_literals(found)


def language_family_hit(native: str, family: str, path: str | Path = TABLE) -> str | None:
    """The evidence of one family (``claim``, ``address``, ``score`` with the maximal score block, or
    ``injection``) in whatever language of the table matches ``native``, else ``None``."""
    readings = _readings(native, str(path))
    if gates.ENABLED and all(text is native for _, text in readings) and \
            (first := _first_literals(family, str(path))) is not None and gates.present(native).isdisjoint(first):
        return None  # no language's pattern of the family can match (no image text was removed)
    for lang, text in readings:
        pat = lang.families.get(family)
        if pat is not None and (m := pat.search(text)):
            return f"lang {lang.code} {family}: {m.group(0)[:80]}"
        if family == "score" and lang.score_block is not None and (m := lang.score_block.search(text)):
            return f"lang {lang.code} score: {m.group(0)[:80]}"
    return None


@lru_cache(maxsize=4)
def score_labels(path: str = str(TABLE)) -> frozenset[str]:
    """Every language's words that name a score ("puntuación", "оценка"): a data object keyed by one
    (``{"puntuación": 10}``) is a score block (:func:`vlrl.rewards.guards.detectors.verdict_data`)."""
    # not the short Latin ones, which are English words or keys of anything ("note", "not", "nota")
    words = [w.lower() for lang in _table(path).languages.values() for w in lang.score_labels
             if not (w.isascii() and len(w) < 5)]
    return frozenset(words) | frozenset(fold(w) for w in words)  # as the homoglyph-folded views read them


@lru_cache(maxsize=256)
def _word_list(field: str, script: str, only: frozenset[str] | None, path: str) -> re.Pattern[str] | None:
    """One pattern of ``field`` for every language that writes ``script`` (or only those in ``only``):
    a group per language, named by its code, each with the word edges of its own script."""
    groups = [f"(?P<{lang.code}>{lang.words[field]})" for lang in _compiled(path)
              if field in lang.words and script in lang.script_names and (only is None or lang.code in only)]
    return re.compile("|".join(groups)) if groups else None


@lru_cache(maxsize=4)
def function_words(path: str = str(TABLE)) -> dict[str, frozenset[str]]:
    """Each language's ``function_words`` (its commonest words; Chinese characters; Korean particles)."""
    return {code: frozenset(lang.function_words) for code, lang in _table(path).languages.items()
            if lang.function_words}


@lru_cache(maxsize=4)
def table_words(field: str, path: str = str(TABLE)) -> frozenset[str]:
    """Every language's words of one field of the table (``image_words``: "imagen", "Foto", "写真"),
    lower case, for checks that need the words and not which language they belong to."""
    return frozenset(w.lower() for lang in _table(path).languages.values() for w in getattr(lang, field))


_LATIN_WORDS = re.compile(r"[^\W\d_]+")


def latin_language(sentence: str, path: str | Path = TABLE) -> frozenset[str] | None:
    """The Latin-script languages whose function words ``sentence`` holds most of ("o gato está no
    sofá" is Portuguese, where "o" is an article, not Spanish "or"); ``None`` when it holds none.
    (Remembered for sentences of ordinary length: each word list of the judge-hack guards asks again
    of the same sentence.)"""
    counts = (_latin_counts(sentence, str(path)) if len(sentence) <= 1000
              else latin_counts(_LATIN_WORDS.findall(sentence), path))
    best = max(counts.values(), default=0)
    return frozenset(c for c, n in counts.items() if n == best) if best else None


def latin_counts(words: list[str], path: str | Path = TABLE) -> dict[str, int]:
    """How many of ``words`` are function words of each Latin-script language of the table."""
    owners = _function_word_owners(str(path))
    counts: dict[str, int] = {}
    for w in words:
        for code in owners.get(w, ()):
            counts[code] = counts.get(code, 0) + 1
    return counts


@lru_cache(maxsize=4096)
def _latin_counts(sentence: str, path: str) -> dict[str, int]:
    return latin_counts(_LATIN_WORDS.findall(sentence), path)


@lru_cache(maxsize=4)
def _function_word_owners(path: str) -> dict[str, tuple[str, ...]]:
    """Each Latin-script function word, with the languages that have it."""
    owners: dict[str, list[str]] = {}
    for code, words in latin_function_words(path).items():
        for w in words:
            owners.setdefault(w, []).append(code)
    return {w: tuple(codes) for w, codes in owners.items()}


@lru_cache(maxsize=4)
def latin_function_words(path: str = str(TABLE)) -> dict[str, frozenset[str]]:
    """The ``function_words`` of each Latin-script language of the table."""
    langs = _table(path).languages
    return {code: fw for code, fw in function_words(path).items() if "latin" in langs[code].scripts}


def foreign_words(sentence: str, field: str, path: str | Path = TABLE) -> list[tuple[str, str, int]]:
    """``(language code, word, where)`` for each word of ``field`` (one of :data:`WORD_FIELDS`) that a table
    language whose script ``sentence`` holds finds in it (lower case, own script), each place once
    however many languages share the word ("foto", "o": the first language of the table). In a
    Latin-script sentence only the languages whose function words it holds most of are asked."""
    found: dict[int, tuple[str, str, int]] = {}
    held = _scripts_in(sentence)
    for script in SCRIPTS:  # in a fixed order: the same language is named on every run
        if script not in held:
            continue
        only = latin_language(sentence, path) if script == "latin" else None
        if (pat := _word_list(field, script, only, str(path))) is not None:
            for m in pat.finditer(sentence):
                found.setdefault(m.start(), (m.lastgroup or "", m.group(0), m.start()))
    return [found[k] for k in sorted(found)]


@lru_cache(maxsize=4)
def _openers(path: str) -> re.Pattern[str] | None:
    """Every language's ``self_openers`` as one pattern anchored at a sentence's start."""
    # a whole word where the script has spaces (Polish "ta" does not open Turkish "tablonun")
    words = [f"(?:{w})" + ("" if _UNSPACED & set(lang.scripts) else r"(?!\w)")
             for lang in _table(path).languages.values() for w in lang.self_openers]
    return re.compile("|".join(sorted(words, key=len, reverse=True))) if words else None


@lru_cache(maxsize=4)
def _self_gate(path: str) -> Gated | None:
    """Any language's word for the caption itself: a caption without one skips :func:`praised`."""
    words = [w for lang in _table(path).languages.values() for w in lang.self_words]
    return Gated("|".join(f"(?:{w})" for w in words)) if words else None


def names_caption(native: str, path: str | Path = TABLE) -> bool:
    """Whether ``native`` holds any language's word for the caption itself (``self_words``): without one,
    :func:`praised` has nothing to find."""
    return (gate := _self_gate(str(path))) is not None and gate.search(native) is not None


def praised(native: str, sentences: Iterable[str], praise: int = 2, reach: int = 30,
            path: str | Path = TABLE) -> str | None:
    """Praise of the caption by its structure, in any language of the table: a sentence that does not
    read as English, opens on the caption (``self_openers``: "这是", "questa è", "đây là", or the
    caption's name as its first or second word) and names it (``self_words``: "描述",
    "descrizione", "mô tả") beside ``praise`` or more words of quality (``praise_words``: "完整",
    "accurata", "chính xác") within ``reach`` characters of it, however it is phrased
    ("Descrizione accurata, completa e impeccabile."). Not a museum label's "descrizione completa e
    accurata dell'opera" further along a sentence. English has its own families. ``sentences``:
    ``native`` cut by the one splitter (the caller's :meth:`~vlrl.rewards.guards.doc.Doc.units`)."""
    if not names_caption(native, path):
        return None
    for sentence in sentences:
        if english_share(sentence) >= FOREIGN_SHARE or not (named := foreign_words(sentence, "self_words", path)):
            continue
        quality = foreign_words(sentence, "praise_words", path)
        opened = (op := _openers(str(path))) is not None and op.match(sentence)
        for code, word, at in named:
            lead = sentence[:at]
            if not opened and (len(lead.split()) > 1 or _UNSPACED & _scripts_in(lead) and len(lead.strip()) > 2):
                break  # a museum label's or a menu's description, not the caption's (nor any later one)
            near = [q for q in quality if at - reach <= q[2] <= at + len(word) + reach]
            if len(near) >= praise:
                return f"lang {code} praise: {sentence[max(0, at - reach):at + len(word) + reach][:80]}"
    return None


__all__ = ["WORD_FIELDS", "foreign_words", "praised", "function_words", "latin_counts", "latin_function_words", "latin_language", "score_labels", "table_words", "language_family_hit", "FAMILY_GUARD", "TABLE", "Language", "LanguageTable", "language_hit", "load_table", "names_caption"]
