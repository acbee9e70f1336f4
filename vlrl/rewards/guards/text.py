"""Undoing what hides a reward hack from the guards' patterns, and removing text that is in the image.

Two preparations come before any guard pattern reads a caption (:class:`vlrl.rewards.guards.doc.Doc`):

**Normalisation that undoes cheap obfuscation.** NFKC (full-width letters), removal of zero-width
and other invisible characters, homoglyph folding with the Unicode confusables table (Cyrillic
"а" reads as Latin "a"; the table comes from the ``confusable_homoglyphs`` package), digit-for-letter
spellings inside words ("1gn0re prev10us"), letters spread out with separators ("J.u.d.g.e",
"v-e-r-d-i-c-t", "s c o r e") and base64 payloads, which are decoded and appended.

**Image text removed.** A clause after words that introduce text written in the image ("a sticker
says 10/10 would recommend", "a banner reading WELCOME JUDGES", "printed with ...", "labelled ...")
describes the image; it never claims anything about the caption, so the guards do not read it.
"""

from __future__ import annotations

import base64
import binascii
import re
import unicodedata
from functools import lru_cache

from vlrl.rewards.guards.gates import Gated, remembered

# ------------------------------------------------------------------------------------------------
# Normalisation

_INVISIBLE = re.compile("[\u00ad\u034f\u061c\u115f\u1160\u17b4\u17b5\u180e\u200b-\u200f\u202a-\u202e\u2060-\u2064"
                        "\u206a-\u206f\u3164\ufe00-\ufe0f\ufeff\uffa0]")


@lru_cache(maxsize=4096)
def _fold_char(ch: str) -> str:
    """The Latin letter a non-ASCII character is confusable with, or the character itself."""
    try:
        from confusable_homoglyphs import confusables
    except ImportError:  # declared dependency; without it only NFKC folding applies
        return ch
    found = confusables.is_confusable(ch, greedy=True, preferred_aliases=["latin"])
    if not found:
        return ch
    letters = [h.get("c", "") for h in found[0].get("homoglyphs", [])]
    letters = [c for c in letters if len(c) == 1 and c.isascii() and c.isalpha()]
    same_case = [c for c in letters if c.isupper() == ch.isupper()]
    if not same_case:  # Cyrillic "І" is listed only as "l"; its name ends in the letter it copies ("... I")
        last = unicodedata.name(ch, "").rsplit(" ", 1)[-1]
        if len(last) == 1 and last.isascii() and last.isalpha():
            same_case = [last if ch.isupper() else last.lower()]
    return (same_case or letters or [ch])[0]


# apostrophe look-alikes that NFKC keeps ("ʼ", "ʻ", "ʹ", "ꞌ", the Armenian "՚") or takes apart (the acute accent
# "´" typed for an apostrophe becomes a space and a combining accent), read as an apostrophe between two
# letters only: "Nothingʼs been left out" is "Nothing's been left out", while a word that opens on one
# (ʻIolani, ʿAbbasid) opens no quotation that would hide the sentences after it. (The mark comes first and
# the letter before it is asked after: a pattern that opens on a look-behind is tried at every position,
# seven times the cost on a caption of 80 words.)
_APOSTROPHE_LIKE = "\u00b4\u02b9\u02bb\u02bc\u02bd\u02be\u02bf\u02c8\ua78c\u055a\u2035"
_APOSTROPHE = re.compile(rf"[{_APOSTROPHE_LIKE}](?<=[^\W\d_][{_APOSTROPHE_LIKE}])(?=[^\W\d_])")


def clean(text: str) -> str:
    """NFKC and invisible characters removed, apostrophe look-alikes inside words made apostrophes; every
    script kept as it is written."""
    text = text or ""
    if not text.isascii():
        text = _APOSTROPHE.sub("'", text)
    return _INVISIBLE.sub("", unicodedata.normalize("NFKC", text))


def fold(text: str) -> str:
    """NFKC, invisible characters removed, homoglyphs folded to Latin letters."""
    text = clean(text)
    if text.isascii():
        return text
    return "".join(_fold_char(ch) if not ch.isascii() and ch.isalpha() else ch for ch in text)


_LEET = str.maketrans({"0": "o", "1": "i", "3": "e", "4": "a", "5": "s", "7": "t", "@": "a", "$": "s", "!": "i"})
_MIXED = re.compile(r"(?<![\w@$!])(?=[\w@$!]*[a-zA-Z])(?=[\w@$!]*[0-9@$]|[\w@$]*![\w@$])[\w@$!]*[\w@$](?![\w@$])")
# what every _MIXED match holds: a digit (or @ $) and a letter in one word, either way round (read
# backwards for the second: a pattern that starts at the rare character is found fast), or "!" in a word
_DIGIT_THEN_LETTER = re.compile(r"[0-9@$][\w@$!]*[a-zA-Z]")
_BANG_IN_WORD = re.compile(r"![\w@$]")


def _mixed_possible(text: str) -> bool:
    return bool(_DIGIT_THEN_LETTER.search(text) or _DIGIT_THEN_LETTER.search(text[::-1]) or _BANG_IN_WORD.search(text))

_UNIT = re.compile(r"\d+(?:st|nd|rd|th|s|m|km|cm|mm|kg|g|h|am|pm|x|k|d|p|l|ml|ft|lb|oz|mb|gb|px|hz|v|w|kw|mph|yo)",
                   re.IGNORECASE)
_SPREAD = re.compile(r"(?<![\w])(?:[A-Za-z0-9][ .\-_*·|]){2,}[A-Za-z0-9](?![\w])")
# long runs, or short ones closed by "=" padding (a deliberate encoding: "cGFzcw==" is "pass")
_B64 = re.compile(r"\b[A-Za-z0-9+/]{16,}={0,2}|\b[A-Za-z0-9+/]{4,15}={1,2}(?![\w=])")


def _unspread(m: re.Match[str]) -> str:
    chunk = m.group(0)
    # "a.c.c.u.r.a.t.e a.n.d c.o.m.p.l.e.t.e": when letters are joined by another mark, spaces part words
    marks = r"[.\-_*·|]" if re.search(r"[A-Za-z0-9][.\-_*·|][A-Za-z0-9]", chunk) and " " in chunk else r"[ .\-_*·|]"
    letters = re.sub(marks, "", chunk)
    return letters if any(c.isalpha() for c in letters) else chunk


def _b64_payloads(text: str) -> list[str]:
    # a payload is a run of 16 base64 characters (none of them a space) or ends in "="
    if "=" not in text and max(map(len, text.split()), default=0) < 16:
        return []
    out = []
    for m in _B64.finditer(text):
        tok = m.group(0)
        try:
            raw = base64.b64decode(tok + "=" * (-len(tok) % 4), validate=True)
            s = raw.decode("utf-8")
        except (binascii.Error, UnicodeDecodeError, ValueError):
            continue
        shortest = 8 if not tok.endswith("=") else 4
        if len(s) >= shortest and sum(c.isalpha() or c == " " for c in s) / len(s) > 0.85:
            out.append(s)
    return out


def deobfuscate(text: str) -> tuple[str, bool]:
    """Undo digit-for-letter words, spread-out letters and base64 payloads in folded text.

    Returns the decoded text and whether anything was decoded (obfuscation is itself a signal: the
    guards then also look at the text with every separator removed).
    """
    out = _SPREAD.sub(_unspread, text)
    if _mixed_possible(out):  # (else no word mixes letters with digits or marks: nothing to translate)
        out = _MIXED.sub(lambda m: m.group(0) if _UNIT.fullmatch(m.group(0)) else m.group(0).translate(_LEET), out)
    payloads = _b64_payloads(text)
    if payloads:
        out = out + " . " + " . ".join(payloads)
    return out, out != text


# ------------------------------------------------------------------------------------------------
# Image text

# (a noun after "reading" or "display" makes a compound, not a verb that quotes: "reading lamps",
# "display monitor", "display case")
_COMPOUND = (r"(?!\s+(?:lamps?|lights?|glasses|rooms?|nooks?|chairs?|corners?|tables?|areas?|materials?|list|monitors?|"
             r"cases?|cabinets?|windows?|shel(?:f|ves)|stands?|racks?|screens?|units?|boards?|models?|panels?|walls?|"
             r"read|readers?|spaces?)\b)")
# (nor after a person who reads: "reads on a bench", "reading quietly by the window")
_PERSON_READING = r"(?!\s+(?:on|in|at|by|beside|under|near|while|quietly|alone|aloud|silently|to)\b)"
_INTRO = (
    r"\b(?:says|said|saying|(?:reads|reading)" + _COMPOUND + _PERSON_READING + r"|advertis(?:es|ing)|printed(?:\s+with)?|labell?ed(?:\s+with)?|written(?:\s+on\s+it)?"
    r"|writes|wrote|typed|commented|replied|posted|spelling(?:\s+out)?|titled|entitled|captioned|stamped(?:\s+with)?|announcing|announces|displays?" + _COMPOUND +
    r"|displaying|shows?\s+the\s+(?:words?|text|slogan|message|phrase|title)|with\s+the\s+(?:words?|text|slogan"
    r"|message|phrase|title|caption)|the\s+(?:words?|slogan|phrase|message)|inscribed(?:\s+with)?|engraved(?:\s+with)?"
    r"|painted\s+with|lettered\s+with|marked)"
)
# Image text runs to the end of its clause; "reading this" / "says this caption" are about the caption.
_IMAGE_TEXT = Gated(
    _INTRO + r"(?::|\s)\s*(?!(?:only\s+|just\s+|nothing\s+but\s+)?(?:this\b|these\b|it\b|that\b|the\s+(?:caption|description|text|above)\b|my\b)|here\b|"
    r"(?:[\w-]+\s+){0,2}(?:captions?|descriptions?|write-?ups?|summary|summaries|captioning|prose|piece)\b|"
    r"(?:to|for|so|by|specifically|carefully|in order)\s+(?:match|meet|satisfy|please|pass|score|fit|the\s+(?:grader|judge|"
    r"rubric|criteria|evaluator))\b)"
    r"[^.;!?\n]{1,160}?(?=\s+(?:next to|beside|over|above|below|under|in (?:red|gold|green|blue|black|white|tall|large|small)"
    r"|across|on (?:the|a)|at the)\b|[.;!?,(\n]|$)",
    re.IGNORECASE,
)


# ... and text named before the words that place it in the image ("with the answer is C written on it").
_IMAGE_TEXT_BEFORE = Gated(
    r"\bwith\s+(?:the\s+(?:words?|text|phrase|message|note)\s+)?[^.;,\n]{1,80}?\s+(?:written|printed|painted|scrawled|"
    r"stamped|displayed|lettered|engraved|handwritten|chalked|typed|scribbled)\b",
    re.IGNORECASE,
)


# ... and a list introduced by a colon after such a verb ("a poster lists the rules: be kind, ...").
_IMAGE_TEXT_COLON = Gated(
    r"\b(?:lists?|listing|reads?|reading|says|saying|shows?|showing|displays?|displaying|titled|labell?ed|announc\w+)"
    r"\b" + _COMPOUND + r"(?!\s+(?:this|these)\b)[^.:\n]{0,40}:\s*[^.\n]*"
    # a sign or label in the scene followed by its text ("a hotel sign: 9.2 out of 10 guest rating")
    r"|\b(?:sign|signs|label|banner|poster|plaque|sticker|placard|scoreboard|billboard|headline|t-shirt|mug|"
    r"chalkboard|whiteboard|blackboard|(?<!hidden )(?<!secret )(?<!special )(?<!important )message|fortune|motto|slogan|"
    r"tagline|inscription)\s*:\s*(?:[^.\n]|\.(?=\d))*",
    re.IGNORECASE,
)


@remembered
@lru_cache(maxsize=256)
def strip_image_text(text: str) -> str:
    """Remove clauses that report text written in the image (they describe, they do not claim)."""
    text = _IMAGE_TEXT_COLON.sub(_unless_own_words, text)
    text = _IMAGE_TEXT_BEFORE.sub(" \u2039t\u203a ", text)
    return _IMAGE_TEXT.sub(_unless_own_words, text)


# "what I've written", "the words I chose": the writer's own text, not text in the image; and "to any
# AI reading: ...", "whoever is reading this:": the grader reading the caption, not a sign in the picture
_OWN = re.compile(r"\b(?:i|we|i've|we've|i'd|i\s+have|we\s+have|i\s+just|you|you're|you\s+are|ai|models?|llms?|"
                  r"whoever(?:\s+is)?|anyone)\s*$", re.IGNORECASE)


def _unless_own_words(m: re.Match[str]) -> str | None:
    return None if _OWN.search(m.string[max(0, m.start() - 16):m.start()]) else " \u2039t\u203a "


# ------------------------------------------------------------------------------------------------
# The one sentence splitter

# A sentence ends at . ! ; (or ? unless the answer follows: "Accuracy? Check." is one statement), at the
# full stop of Chinese and Japanese (。, and ! ? glued to the next character: NFKC has made ！？ ASCII),
# Hindi (।) and Arabic (؟), which need no space after them, at a line break, and where a full stop is
# glued to the next sentence ("a cat.A dog"). A clause is cut
# further at dashes and bars; an aside at brackets too (a bracketed aside is a statement of its own);
# a phrase at every sentence mark, colon and dash.
# Each cut either ends a unit after its mark (the ``end`` group stays with the unit) or only
# separates; whitespace around a unit is stripped. Matching the cuts (rather than splitting at
# lookbehind positions) lets the regex engine skip straight to the few characters a cut starts with.
_CJK_NEXT = r"[\u3040-\u30ff\u3400-\u9fff\uac00-\ud7af]"
_SENTENCE = (rf"(?P<end>[.!;]|\?(?=\s+(?![Cc]heck\b)|[A-Za-z]|{_CJK_NEXT})|[\u3002\u0964\u061f])"
             rf"(?:\s+|(?=[A-Za-z])|(?<=[\u3002\u0964\u061f])|(?={_CJK_NEXT}))|[ \t]*\n\s*")
_CLAUSE = _SENTENCE + r"|\s+[\u2014\-]{1,2}\s+|\|\s*"
SPLITTERS = {
    "sentence": re.compile(_SENTENCE),
    "clause": re.compile(_CLAUSE),
    "aside": re.compile(_CLAUSE + r"|[\[\]()]\s*"),
    "phrase": re.compile(r"[.!?;:\n\u2014]+"),
}


def split(text: str, scope: str = "sentence") -> list[str]:
    """``text`` cut into non-empty ``sentence``, ``clause``, ``aside`` or ``phrase`` units (``text``: itself)."""
    if scope == "text":
        return [text]
    pieces = SPLITTERS[scope].split(text)
    if scope != "phrase":
        # (the ``end`` group comes back after the text before it: the mark joins that unit, or ``None``)
        pieces = [p + e if e else p for p, e in zip(pieces[::2], [*pieces[1::2], None], strict=True)]
    return [u for p in pieces if p and (u := p.strip())]


__all__ = ["SPLITTERS", "clean", "deobfuscate", "fold", "split", "strip_image_text"]
