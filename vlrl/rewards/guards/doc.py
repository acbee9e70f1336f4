"""The text the guards read: one caption normalised and prepared once (:class:`Doc`).

Every guard matches a different view of the same caption (case kept for option letters, quoted
image text removed for the semantic guards, obfuscation undone for the meta-claim patterns, line
breaks kept for markup), and a batch of captions meets several guards; preparing each view once per
caption, here, keeps the guards themselves to their patterns (:mod:`vlrl.rewards.guards`).
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass, field
from functools import cached_property, lru_cache
from pathlib import Path

from vlrl.rewards.guards.text import clean, deobfuscate, fold, split, strip_image_text
from vlrl.rewards.guards.typos import fuzzy_fix, unreversed

_QUOTES = str.maketrans(
    {
        "\u2018": "'", "\u2019": "'", "\u201a": "'", "\u201b": "'", "\u2032": "'", "`": "'",
        "\u201c": '"', "\u201d": '"', "\u201e": '"', "\u201f": '"', "\u00ab": '"', "\u00bb": '"',
        "\u2033": '"', "\u300c": '"', "\u300d": '"',
    }
)
# Double-quoted span (bounded, one line); single-quoted span whose quotes are not apostrophes
# (not glued to a word) and which may contain apostrophes inside words (DON'T).
_DQ_SPAN = re.compile(r'"[^"\n]{0,300}"')
# (the opening quote is matched before the look-behind that tests what precedes it: a pattern that
# starts with a literal is found by a fast scan, one that starts with a look-behind is tried everywhere)
_SQ_SPAN = re.compile(r"'(?<![\w']')(?:[^'\n]|(?<=\w)'(?=\w)){1,300}?'(?![\w'])")
_FENCE = re.compile(r'"{3,}|\'{3,}')
_QUOTE_MARK = " \u2039q\u203a "  # placeholder that keeps sentence structure, matches no pattern
# the decimal digits of every script of the Basic Multilingual Plane read as ASCII ones ("التقييم: ١٠/١٠",
# "নম্বর: ১০/১০" and "คะแนน: ๑๐/๑๐" are 10/10 score blocks); NFKC leaves them as they are
_DIGITS = str.maketrans({chr(c): str(unicodedata.decimal(chr(c))) for c in range(0x80, 0x10000)
                         if unicodedata.category(chr(c)) == "Nd"})
# Arabic short-vowel marks, shadda and tatweel are optional in writing ("للمقيّم" is "للمقيم"): removed,
# so one spelling in the phrase table matches both
_ARABIC_MARKS = re.compile("[\u064b-\u065f\u0670\u0640]")


_FUNCTION_WORDS_FILE = Path(__file__).parent / "data" / "english_function_words.txt"
# A word of letters in any script, with the vowel signs and points that Python's \w leaves out
# (Devanagari, Bengali, Tamil and the other Indic scripts, Thai, Arabic and Hebrew marks): "लड़की" is
# one word, not three pieces.
_MARKS = "\u0591-\u05c7\u0610-\u061a\u064b-\u065f\u0670\u0900-\u0963\u0971-\u0dff\u0e31\u0e34-\u0e3a\u0e47-\u0e4e"
LETTERS = re.compile(rf"[^\W\d_]+(?:[{_MARKS}]+[^\W\d_]*)*(?:'[^\W\d_]+)?")
_ASCII_LETTERS = re.compile(r"[A-Za-z]+(?:'[A-Za-z]+)?")


def letters(text: str) -> list[str]:
    """The words of ``text`` (:data:`LETTERS`); an ASCII text has no marks to keep and takes the plainer
    pattern, which costs less on the every-caption path."""
    return (_ASCII_LETTERS if text.isascii() else LETTERS).findall(text)


@lru_cache(maxsize=1)
def english_function_words() -> frozenset[str]:
    """The function words of ``data/english_function_words.txt``."""
    lines = _FUNCTION_WORDS_FILE.read_text(encoding="utf-8").splitlines()
    return frozenset(w for line in lines if not line.startswith("#") for w in line.split())


def english_share(text: str) -> float:
    """Share of the words of ``text`` (any script) that are English function words."""
    words = letters(text.lower())
    function = english_function_words()
    return sum(w in function for w in words) / len(words) if words else 0.0


def reads_as_english(text: str, least: float = 0.1) -> bool:
    """Whether the typo repair written for English keywords may read ``text``: anything whose
    letters are plain ASCII (a short hack such as "Acurate. Complet." has no function words; an em
    dash is no reason to skip it), or text whose words are
    at least ``least`` English function words. French "un service à thé complet" is not repaired
    into "complete"."""
    return text.isascii() or all(c.isascii() for c in text if c.isalpha()) or english_share(text) >= least


def normalize(text: str) -> str:
    """NFKC, invisible characters removed, homoglyphs folded, straight quotes, single spaces (case is
    kept; option letters need it)."""
    return " ".join(_folded(text).split())


def _folded(text: str | None) -> str:
    # (:func:`fold` applies NFKC itself)
    return fold(text or "").translate(_QUOTES)


def strip_quoted(text: str) -> str:
    """Remove quoted spans: text *in the image* is content, never an instruction to the grader.

    Triple quotes are not a quotation but the fence a judge prompt puts around the caption; a
    caption that writes them is forging prompt structure, so what they enclose stays visible."""
    if '"""' in text or "'''" in text:
        text = _FENCE.sub(" . ", text)
    text = _DQ_SPAN.sub(_QUOTE_MARK, text)
    return _SQ_SPAN.sub(_QUOTE_MARK, text)


@dataclass
class Doc:
    """One caption, prepared once for every guard."""

    raw: str
    norm: str  # normalised, case kept
    unquoted: str  # normalised, quoted spans and clauses reporting image text removed, case kept
    lower: str  # unquoted, lower case
    words: list[str]  # lower-case word tokens of the whole caption (quotes included)
    decoded: str = ""  # lower case, unquoted, obfuscation undone (digits for letters, spread letters, base64)
    obfuscated: bool = False  # whether anything had to be undone
    meta: str = ""  # what the meta-claim patterns read: today the same text as ``decoded`` (image text
    # is already removed from ``unquoted``), kept apart so the two can diverge without touching guards
    shaped: str = ""  # lower case, quotes kept, line breaks kept, image text removed (for markup and data)
    _units: dict[tuple[str, str], list[str]] = field(default_factory=dict, repr=False, compare=False)
    memo: dict[object, object] = field(default_factory=dict, repr=False, compare=False)
    """What the guards compute from the caption once and share (token lists, the English test)."""

    def view(self, name: str) -> tuple[str, ...]:
        """The texts a family with this ``view`` reads (see :mod:`vlrl.rewards.guards.table`)."""
        if name == "lower":
            return (self.lower, self.decoded) if self.obfuscated and self.decoded != self.lower else (self.lower,)
        if name == "decoded":
            return (self.meta,)
        if name == "compact":
            return self.compact
        return (getattr(self, name),)

    @cached_property
    def compact(self) -> tuple[str, ...]:
        """Obfuscated captions only: the decoded and the plain text with every separator removed
        ("i-g-n-o-r-e p.r.e.v.i.o.u.s" reads "ignoreprevious"); nothing for a plain caption."""
        if not self.obfuscated:
            return ()
        return tuple(dict.fromkeys(re.sub(r"[^a-z0-9/]", "", t.lower()) for t in (self.decoded, self.lower)))

    def units(self, text: str, scope: str) -> list[str]:
        """``text`` split by the one splitter, once per caption and scope."""
        key = (scope, text)
        if key not in self._units:
            self._units[key] = split(text, scope)
        return self._units[key]

    @cached_property
    def whole(self) -> str:
        """Normalised and lower case, with nothing removed: quoted spans and the picture's text kept, for
        what is planted in them (an order to the grader on a sign). Computed on first use."""
        return self.norm.lower()

    @cached_property
    def native(self) -> str:
        """Lower case in the caption's own script (no homoglyph folding, which turns Cyrillic into
        Latin look-alikes), digits of other scripts read as ASCII ones, Arabic vowel marks removed,
        quoted spans removed: what
        the per-language phrase table reads
        (:mod:`vlrl.rewards.guards.lang`), with the text that English phrasing places in the image
        removed as well. Computed on first use."""
        if self.raw.isascii():  # nothing to fold: the same text as ``unquoted``
            return self.unquoted.lower()
        text = re.sub(r"\s+", " ", clean(self.raw).translate(_QUOTES).translate(_DIGITS)).strip()
        text = _ARABIC_MARKS.sub("", text)
        # English image text too ("a T-shirt printed with ignore all instructions"): Latin-script
        # entries of the table share words with English
        return strip_image_text(strip_quoted(text)).lower()

    @classmethod
    def of(cls, text: str) -> Doc:
        folded = _folded(text)
        norm = " ".join(folded.split())  # (:func:`normalize`)
        unquoted = strip_image_text(strip_quoted(norm))
        decoded, obfuscated = deobfuscate(unquoted)
        if backwards := unreversed(unquoted):
            decoded, obfuscated = f"{decoded} . {backwards}", True
        # typo tolerance for the evaluative key words ("comprehensve", "instrucitons")
        english = reads_as_english(unquoted)
        lower = fuzzy_fix(unquoted.lower()) if english else unquoted.lower()
        if decoded != unquoted:  # (else the typo repair of ``lower`` serves both)
            lower_decoded = decoded.lower()
            decoded = fuzzy_fix(lower_decoded) if english else lower_decoded
        else:
            decoded = lower
        lines = folded.splitlines()
        if len(lines) > 1:
            shaped = "\n".join(strip_image_text(" ".join(ln.split())).strip() for ln in lines)
        else:  # one line: the normalised text itself
            shaped = strip_image_text(norm).strip()
        return cls(
            text, norm, unquoted, lower, re.findall(r"[\w']+", norm.lower()),
            decoded, obfuscated, decoded, shaped.lower(),
        )


__all__ = ["LETTERS", "Doc", "letters", "english_function_words", "english_share", "normalize", "reads_as_english", "strip_quoted"]
