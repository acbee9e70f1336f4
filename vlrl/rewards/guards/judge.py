"""Guards against the hacks aimed at rubric and QA judges: say everything, hedged, so something passes.

A rubric judge asks "does the caption say the car is red?"; a QA answerer reads the caption to
answer "what colour is the car?". Neither is fooled by praise, but both reward a caption that states
every candidate: "the car is red, silver or black" meets the criterion whichever it is, and a
caption that ends in a dump of object nouns mentions whatever the rubric asks for. A policy trained
against such a judge learns exactly that (the RubiCap demo's policy does). Four guards, each over
lower-case caption text with quoted spans and image text removed:

* ``hedging`` — alternatives instead of a fact: an "or" list of more than ``max_alternatives``
  parallel items ("red, silver or black", "a phone, a book, a cup or a wallet", "red/silver/black"),
  more than ``max_or`` alternatives in one caption, a guess followed by a list of
  ``speculative_items`` or more things ("possibly a phone, keys and a wallet") or straight into
  ``speculative_long`` short items or more ("likely chairs, a laptop, a newspaper, a sugar bowl,
  ..."), one guess repeated
  ``speculative_items`` times in a sentence ("maybe blue, maybe green, maybe grey"), or more than
  ``max_hedges`` guesses. One honest hedge ("possibly a heron", "a drone or a large bird", "two or
  three boats") stays clean, and so does a list after a negation or a choice in the scene ("no cars,
  bikes or people", "available in red, blue or green").
* ``keyword_stuffing`` — nouns for the judge to find, not a description: a labelled dump ("Tags:",
  "Objects:", "Also visible:") of ``labelled_items`` or more items, a verbless list sentence beside
  the caption of ``list_items`` or more bare nouns (no article or number), a parenthesised noun
  list, a list of ``max_list`` items or more, ``short_run`` one-noun sentences or lines in a row,
  a run of ``run_words`` words with no function word, ``hashtags`` or more hashtags, or a list whose
  items mostly repeat what the caption already said. A real inventory ("Inside: two screwdrivers, a claw
  hammer, pliers, a tape measure and a box of nails"; a flea-market table "holds old cameras, vinyl
  records, brass candlesticks, ...") has articles and numbers, or a verb, and stays clean.
* ``rewording`` — the same content said again in other words: two sentences (of ``min_content``
  content words or more, at most ``reach`` sentences apart) whose content words, with word families
  folded (car/vehicle, big/large), overlap by ``max_overlap`` (Jaccard) or more, or a restatement marker ("in other words", "to
  reiterate") on a sentence that overlaps an earlier one by ``marker_overlap``, or one fact said over
  and over (``repeat_share`` of the content words repeat an earlier one, one of them ``repeat_top``
  times and ``repeat_top_share`` of them, and a clause adds nothing new). Exact loops are the
  ``repetition`` guard's.
* ``padding`` — words toward a length: ``generic_sentences`` or more sentences made of words that fit
  any image ("The overall atmosphere creates a sense of calm.") when they are at least
  ``generic_share`` of the caption, ``fillers`` or more filler phrases ("it is worth noting that",
  "in other words", "lorem ipsum"), or runs of symbols (more than ``symbol_share`` of the characters,
  or ``symbol_run`` repeated marks).

The English-shape checks (noun runs, bare lists, word families) run only on captions that read as
English (at least ``min_function_share`` of their words are English function words): a caption in
another language has none of them and would otherwise be one long "noun run". The same hacks in
other languages are found by counting each language's own few words (guesses, "or", tag labels,
words for the picture: ``hedges``, ``alternatives``, ``stuff_labels`` and ``image_words`` in
``data/languages.yaml``) in the sentences that do not read as English, and by two checks that need
no words at all: content keys said again (rewording) and sentences about the picture itself
(padding), both over keys cut from words of any script (:func:`_keys`).

Every vocabulary — hedge words, list exemptions, stuffing labels, function words, generic words,
filler phrases, restatement markers, word families — is data in ``data/judge_hacks.yaml``,
validated by :class:`JudgeVocab`; each guard also takes ``extra_*`` settings that extend its lists.
All of it is regular expressions and token counts: well under a millisecond a caption
(``vlrl bench guards``). The rubric judge's prompts carry the matching rule on the judge side: a
criterion met only inside a hedge or a list of alternatives fails.
"""

from __future__ import annotations

import re
import unicodedata
from collections import Counter
from collections.abc import Iterable, Iterator
from functools import lru_cache
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, field_validator

from vlrl.rewards.guards.base import Guard, register_guard
from vlrl.rewards.guards.doc import Doc, english_function_words, letters
from vlrl.rewards.guards.gates import Gated
from vlrl.rewards.guards.lang import (
    FOREIGN_SHARE,
    foreign_words,
    function_words,
    latin_counts,
    latin_language,
    table_words,
)
from vlrl.rewards.guards.text import split

VOCAB = Path(__file__).parent / "data" / "judge_hacks.yaml"


class JudgeVocab(BaseModel):
    """The vocabularies of the judge-hack guards (``data/judge_hacks.yaml``)."""

    model_config = ConfigDict(extra="forbid")
    hedges: list[str]
    list_exemptions: list[str]
    or_idioms: list[str]
    stuff_labels: list[str]
    generic_words: str
    filler_phrases: list[str]
    restatement_markers: list[str]
    placeholders: list[str]
    synonyms: list[list[str]]
    padding_words: str = ""
    tautologies: list[str] = []
    list_verbs: list[str] = []
    shown_lists: list[str] = []
    image_words: list[str] = []
    abstract_suffix: str = "(?!)"
    clashes: list[list[str]] = []
    clash_exemptions: list[str] = []
    specifics: str = "(?!)"
    place_words: str = ""
    nowhere_words: str = ""
    continuation_words: str = ""

    @field_validator("hedges", "list_exemptions", "or_idioms", "stuff_labels", "filler_phrases", "restatement_markers",
                     "placeholders", "tautologies", "list_verbs", "shown_lists", "image_words", "abstract_suffix", "clashes",
                     "clash_exemptions", "specifics")
    @classmethod
    def _compiles(cls, v: Any) -> Any:
        for p in ([v] if isinstance(v, str) else [q for item in v for q in ([item] if isinstance(item, str) else item)]):
            try:
                re.compile(p)
            except re.error as e:
                raise ValueError(f"bad pattern {p!r}: {e}") from None
        return v


@lru_cache(maxsize=4)
def load_vocab(path: str = str(VOCAB)) -> JudgeVocab:
    return JudgeVocab(**yaml.safe_load(Path(path).read_text(encoding="utf-8")))


def _alt(words: Iterable[str]) -> str:
    return "|".join(f"(?:{w})" for w in words)


def _words_re(words: Iterable[str]) -> re.Pattern[str]:
    return re.compile(rf"(?<![\w'-])(?:{_alt(words)})(?![\w'-])")


_TOKEN = re.compile(r"[a-z][a-z'-]*|\d+")


def sentences(text: str) -> list[str]:
    """The sentences of ``text`` (the one splitter of :func:`vlrl.rewards.guards.text.split`)."""
    return split(text, "sentence")


class _Vocab:
    """Compiled views of a :class:`JudgeVocab` plus a guard's ``extra_*`` words."""

    def __init__(self, vocab: JudgeVocab) -> None:
        self.function = english_function_words()
        self.generic = frozenset(vocab.generic_words.split())
        self.synonym = {w: group[0] for group in vocab.synonyms for w in group}
        self._stems: dict[str, str] = {}

    def content(self, tokens: list[str]) -> list[str]:
        """The content words of ``tokens``: no function word, no word that fits any image ("image", "shows",
        "scene"), nothing of two letters or less, no number."""
        return [t for t in tokens if t not in self.function and t not in self.generic and len(t) > 2 and not t.isdigit()]

    def stem(self, word: str) -> str:
        """:func:`_stem` with this vocabulary's word families, remembered."""
        if (got := self._stems.get(word)) is None:
            if len(self._stems) > 65536:
                self._stems.clear()
            got = self._stems[word] = _stem(word, self.synonym)
        return got


def _share(tokens: list[str], function: frozenset[str]) -> float:
    return sum(map(function.__contains__, tokens)) / len(tokens) if tokens else 0.0


def _stem(word: str, synonym: dict[str, str]) -> str:
    if word in synonym:
        return synonym[word]
    if len(word) > 5 and word.endswith("ing"):
        word = word[:-3]
    elif len(word) > 4 and word.endswith("ed"):
        word = word[:-2]
    elif len(word) > 3 and word.endswith("s") and not word.endswith("ss"):
        word = word[:-1]
    return synonym.get(word, word)


class _JudgeGuard(Guard):
    """Shared set-up: the vocabulary file (``vocab``: another path) and the English gate."""

    rank = 1  # after the praise and grader guards

    def __init__(self, penalty: float = 1.0, vocab: str | None = None, min_function_share: float = FOREIGN_SHARE) -> None:
        super().__init__(penalty)
        self.vocab = load_vocab(str(vocab or VOCAB))
        self.v = _Vocab(self.vocab)
        self.min_function_share = float(min_function_share)

    def english(self, doc: Doc) -> bool:
        """Whether the caption reads as English: the whole of it, or its first sentence (a stuffed
        caption is a plausible sentence followed by nouns, which lower the share of the whole).
        Read in the caption's own script: folded to Latin look-alikes, Russian would pass."""
        key = ("english", self.min_function_share, id(self.v.function))
        if key not in doc.memo:
            text = doc.native
            parts = [letters(text)]
            if first := doc.units(text, "sentence")[:1]:
                parts.append(letters(first[0]))
                # or its first clause, when that has words enough to tell ("A cat sleeping on a
                # windowsill, cat, window, sill, curtain, plant, ...")
                if len(clause := letters(re.split(r"[,;:\u2014\u2013]", first[0], maxsplit=1)[0])) >= 4:
                    parts.append(clause)
            # or ASCII letters that no language of the table claims ("alt: man woman child dog cat car
            # bus tree ... — family crossing"): a noun dump has no function words of any language
            doc.memo[key] = any(_share(p, self.v.function) >= self.min_function_share for p in parts) or (
                all(w.isascii() for w in parts[0]) and latin_language(text) is None)
        return bool(doc.memo[key])

    def foreign(self, doc: Doc) -> list[str]:
        """The sentences of the caption, lower case in their own script, that do not read as English
        (under ``min_function_share`` English function words): what the per-language word lists of
        ``data/languages.yaml`` are counted in: none in an English caption, every sentence of a Spanish
        one, the added sentence of an English caption with a German sentence added."""
        key = ("foreign", self.min_function_share, id(self.v.function))
        if key not in doc.memo:
            doc.memo[key] = [s for s, words in zip(doc.units(doc.native, "sentence"), sentence_words(doc), strict=True)
                             if _share(words, self.v.function) < self.min_function_share or self._other_latin(words)]
        return doc.memo[key]  # type: ignore[return-value]

    def _other_latin(self, words: list[str]) -> bool:
        """Whether a sentence with accented letters holds more function words of another Latin-script
        language than of English ("a composição convida o observador a um momento ..." has English's
        "a" three times, and Portuguese's "um", "com", "e", "em" more)."""
        if all(map(str.isascii, words)):
            return False
        english = sum(map(self.v.function.__contains__, words))
        return max(latin_counts(words).values(), default=0) > english


def sentence_words(doc: Doc) -> list[list[str]]:
    """The words (letters, any script) of each sentence of the caption in its own script, once; for an
    ASCII caption whose own-script text is the English guards' text (most are), their tokens."""
    if "words" not in doc.memo:
        native = doc.native
        doc.memo["words"] = ([[t for t in toks if t.isalpha()] for toks in sentence_tokens(doc, doc.lower)]
                             if native.isascii() and native == doc.lower else
                             [letters(s) for s in doc.units(native, "sentence")])
    return doc.memo["words"]  # type: ignore[return-value]


def sentence_keys(doc: Doc, skip: frozenset[str]) -> list[list[str]]:
    """:func:`_keys` of each sentence of the caption in its own script, once per caption."""
    key = ("keys", id(skip))
    if key not in doc.memo:
        doc.memo[key] = [_keys(words, skip) for words in sentence_words(doc)]
    return doc.memo[key]  # type: ignore[return-value]


def _keys(words: list[str], skip: frozenset[str] = frozenset()) -> list[str]:
    """Content keys of a sentence's words in any script, for overlap without a stemmer or a word list: the
    first four letters of each word of four or more not in ``skip`` (Latin, Cyrillic, Arabic,
    Devanagari: "улице" and "улица" share "улиц"), the first two syllables of a Korean word without
    its particle ("개가", "개를": "개"), and each Chinese character but the function ones of the
    language table (的, 一, 子, ...) or katakana word (Japanese particles are hiragana)."""
    if all(map(str.isascii, words)):
        return [w[:4] for w in words if len(w) >= 4 and w not in skip]
    keys = []
    fw = function_words()
    fw_any = _all_function_words()
    for w in words:
        if w.isascii():
            if len(w) >= 4 and w not in skip:
                keys.append(w[:4])
        elif _CJK.search(w):
            keys += [k for k in _HAN_KEY.findall(w) if k not in fw.get("zh", ())]
        elif _HANGUL.match(w):
            stem = _PARTICLE.sub("", w) or w
            keys.append(stem[:2])
        elif _SEMITIC.match(w):
            if len(bare := _CLITIC.sub("", w)) >= 3 and w not in fw_any:
                keys.append(bare[:3])
        elif len(w) >= 4 and w not in skip:
            keys.append(w[:4])
    return keys


_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u9fff]")
# the article and one-letter words that Arabic and Hebrew write onto the next word ("الكرسي" is "كرسي"
# with "the"; "בשדה" is "שדה" with "in the"): a key is the three letters after them, a root's length.
# Hebrew's ה (the), alone or after ו ב ל כ ש; one of those five alone only before four letters more; never
# מ, which begins as many words as it prefixes ("מטוס", "מכונית")
_SEMITIC = re.compile(r"[\u0590-\u05ff\u0600-\u06ff]")
_CLITIC = re.compile(r"^(?:[\u0648\u0641\u0628\u0643\u0644]?\u0627\u0644|\u0644\u0644|[\u05d5\u05d1\u05dc\u05db\u05e9]?\u05d4(?=[\u05d0-\u05ea]{3})"
                     r"|[\u05d5\u05d1\u05dc\u05db\u05e9](?=[\u05d0-\u05ea]{4}))")
# a word of any script with spaces, vowel signs and all (Devanagari's are marks, not word characters)
_ANY_WORD = re.compile(r"[^\s\d.,;:!?\u0964\u3002\u3001\u060c\"'()\[\]\u00ab\u00bb\u2014\u2013-]+")
_PARTICLE = re.compile("(?:" + "|".join(sorted(function_words().get("ko", ()), key=len, reverse=True)) + ")$")
_HANGUL = re.compile(r"[\uac00-\ud7af]")
_HAN_KEY = re.compile(r"[\u3400-\u9fff]|[\u30a0-\u30ff]{2,}")
_LIST_SEP = re.compile(r"\s*[,\u3001\u060c]\s*")  # NFKC has made the full-width comma ASCII


def _short(item: str) -> bool:
    """An item of a list of guesses in any language: up to three words (Vietnamese writes a word as
    several syllables: "xe đạp", "quầy bán nước"), six Chinese or Japanese characters, or one word
    of a script with spaces ("fishermen")."""
    item = item.strip(" .")
    return bool(item) and (len(item.split()) <= 3 if " " in item else len(item) <= 6 or not _CJK.search(item))


@lru_cache(maxsize=1)
def _all_function_words() -> frozenset[str]:
    """Every language's function words together: whether an item opens with one needs no language ID."""
    return frozenset(w for words in function_words().values() for w in words)


def _reads_as_other_latin(words: list[str], least: int = 2, share: float = 0.2) -> bool:
    """Whether ``words`` hold ``least`` function words of one other Latin-script language of the table,
    a ``share`` of them at least: a Swahili or Dutch clause in a caption read as English. One such
    word in a dump ("dog park grass tree bench die sky cloud") is an English noun, not German."""
    best = max(latin_counts(words).values(), default=0)
    return best >= least and best >= share * len(words)


def _marked(item: str) -> bool:
    """Whether a list item opens with a function word of some language ("con tomates", "ein Buch"), or,
    unspaced, holds a Chinese function character ("桌上有咖啡杯"). The items of one list share it: in
    "probablemente es un mercado, con tomates, pimientos, ..." the guess named one thing and a list
    of what is there follows."""
    item = item.strip()
    if _CJK.search(item) and " " not in item:
        return any(c in _all_function_words() for c in item)
    return item.split(" ", 1)[0] in _all_function_words()


def _item(item: str) -> bool:
    """One alternative of a list: one or two words, or four characters without spaces."""
    item = item.strip(" .")
    if " " in item:
        return len(item.split()) <= 2
    return bool(item) and (len(item) <= 4 if _CJK.search(item) else True)


# ------------------------------------------------------------------------------------------------
# hedging


_WORD = r"(?!(?:or|and|but|nor|either|with|of|in|on|at)\b)[a-z0-9][\w'-]*"
_ITEM = rf"{_WORD}(?:\s+{_WORD}){{0,2}}"
_OR_LIST = re.compile(rf"(?<![\w'-])({_ITEM}(?:\s*,\s*{_ITEM})+)\s*,?\s+or\s+({_ITEM})(?![\w'-])")
_ANY_LIST = re.compile(rf"(?<![\w'-])({_ITEM}(?:\s*,\s*{_ITEM})+)\s*,?\s+(?:or|and)\s+({_ITEM})(?![\w'-])")
# after a hedge and a verb or colon that governs a list, the list may go without "and"/"or" ("could be
# present: a coat rack, an umbrella stand, a mirror, a shoe cabinet")
_COMMA_LIST = re.compile(rf"(?<![\w'-])({_ITEM}(?:\s*,\s*{_ITEM})+)\s*,\s*({_ITEM})(?![\w'-])")
_OR_CHAIN = re.compile(rf"(?<![\w'-]){_ITEM}(?:\s+or\s+{_ITEM}){{2,}}(?![\w'-])")
_SLASHES = re.compile(r"(?<![\w/])[a-z]{2,}(?:\s*/\s*[a-z]{2,}){2,}(?![\w/])")
_GOVERNS = r"(?:\s+(?:objects?|items?|things?|contents?|candidates?|elements?|options?))?\s*(?:be\s+|also\s+)?(?:{verbs})\s+"
_TO_COLON = re.compile(r"(?:\s+[\w'-]+){0,4}?\s*:\s*")
_PHRASE_END = re.compile(r"[,;:.]|\s(?:or|and)\s")  # where the phrase a guess opens ends
_OR_WORD = re.compile(r"\bor\b")  # every "or" pattern above needs the word
_DET = re.compile(r"^(?:a|an|the|some|one|two|three|four|five|six|\d+)\s")
_DET_END = re.compile(r"\b(?:a|an|the|some|two|three|four|five|six|\d+)(?:\s+[\w'-]+){1,2}\s*$")


_PLACE_LEAD = re.compile(r"(?:in|on|at|near|by|from|behind|inside|outside|under|with|which|that|where|who|while)\b")
# a guess's phrase that ends at a comma, before a clause that holds the list ("likely the vendor's own, hold
# apples, ...", "probably a school lab, there are also beakers, ...")
_ASIDE = re.compile(r"(?![^,:;]*\b(?:here|there|too|present|nearby|around|visible)\b)[^,:;]{1,40},\s*(?:also\s+|too\s+)?(?:is|are|was|were|has|have|had|holds?|contains?|sells?|shows?|"
                    r"carr(?:y|ies)|includes?|stands?|sits?|lies|hangs?|there\s+(?:is|are))\b")
_WITH = re.compile(r"(?:with|con|mit|avec|com|met|ze?|ile|dengan|với|с|со)\s", re.IGNORECASE)
_LEAD_END = re.compile(r":|\s[\u2014\u2013-]{1,2}\s")
# What makes a guessed list one of things added to the scene, not what is seen after a guess at the
# place ("likely a classroom, desks, chairs, a whiteboard ... fill the frame"): the sentence adds,
# places out of sight, or says there is something
_ADDS = re.compile(r"\b(?:also|too|as well|other|additional(?:ly)?|not (?:clearly )?(?:visible|shown|seen|pictured)"
                   r"|out of (?:the )?(?:frame|shot|view)|outside (?:the )?(?:frame|shot|view)|off[- ]?(?:camera|frame)"
                   r"|hidden|nearby|there (?:is|are|could|might|may|would|will)|includes?|typically|usually|commonly"
                   r"|expect(?:ed)?|present|close by|ruled out|typical|implied)\b")
_LIST_LEAD = re.compile(r"\b(?:includes?|including|such as|like|find|are|is|be|has|have|contains?|holds?)\s+")
_GUESS_SEP = re.compile(r"\s*(?:,\s*(?:and|or)\s|,|\s(?:and|or)\s)\s*")
# ... and in any language of the table, with its own "and" and "or" ("Ordner, Stifte, Klebeband und Papier")
_GUESS_SEP_ANY = re.compile(r"\s*(?:,\s*(?:and|or|und|oder|y|o|e|ou|et|и|или|і|та|або|ve|veya|dan|atau|và|hoặc|och|eller"
                            r"|oraz|lub|og|και|ή|és|vagy)\s|[,\u3001\u060c]|\s(?:and|or|und|oder|y|o|e|ou|et|и|или|і|та|або"
                            r"|ve|veya|dan|atau|và|hoặc|och|eller|oraz|lub|og|και|ή|és|vagy)\s)\s*")


def _guessed_list(after: str) -> list[str]:
    """The items of the list a guess leads straight into, or ``[]``: after a colon a few words on
    ("possibly nearby, though not visible: a sofa, a lamp, ..."), or from the guess itself when the
    words before its first comma are few ("one might also find swings, a slide, ..."; "likely chairs,
    a laptop, ..."). Not a place or a clause of its own: "probably in Thailand, with mangoes, ...",
    "probably a bakery, with bread, rolls, ..." name one guess, then what is there."""
    if (lead := _LEAD_END.search(after)) and len(after[:lead.start()].split()) <= 8:
        return _GUESS_SEP.split(after[lead.end():].strip())
    parts = _GUESS_SEP.split(after.strip())
    if len(parts) < 2 or any(_PLACE_LEAD.match(p) for p in parts[:2]):
        return []
    if len(parts[0].split()) > 4:
        # a longer lead that ends in a verb or "such as" before the first item ("likely present but
        # not clearly visible include a keyboard, mouse, ...")
        leads = list(_LIST_LEAD.finditer(parts[0]))  # the last one leads into the list
        if not leads or len(parts[0][:(m := leads[-1]).start()].split()) > 8 or len(parts[0][m.end():].split()) > 3:
            return []
        parts[0] = parts[0][m.end():]
    return parts


@lru_cache(maxsize=64)
def _adds(sentence: str) -> bool:
    """Whether ``sentence`` adds things to the scene (``_ADDS``): asked for each of its guesses,
    looked up once (a few sentences are remembered: the ones of the caption being read)."""
    return bool(_ADDS.search(sentence))


def _until_clause(items: list[str]) -> list[str]:
    """The items of a list up to the first that opens with a verb: a clause ends the list ("probably a
    carpenter's, is covered with chisels, planes, ..." names one guess, then says what is there)."""
    return next((items[:k] for k, item in enumerate(items) if k and _LIST_LEAD.match(item.strip())), items)


def _tail(after: str) -> str:
    """What follows a word to the end of its sentence."""
    return re.split(r"[.;!?\u3002]", after, maxsplit=1)[0].strip()


# after a guess that closes a list, words that make it a guess at what is there ("could well be
# around", "are possibly stored"), not at what the listed things are like ("are probably fresh")
_PRESENCE = re.compile(r"(?:(?:be|are|is)\s+)?(?:around|present|there|nearby|close by|here|about|stored|kept|included|"
                       r"visible|hidden|out of (?:sight|frame|view)|in (?:the )?(?:room|scene|area|background|frame|shot))?"
                       r"(?:\s+(?:too|as well|also))?$")


def _ending_only(tail: str) -> bool:
    """A few kana and nothing else: the end of a Japanese or Korean predicate ("ません", "습니다")."""
    return bool(re.fullmatch(r"[\u3040-\u309f\uac00-\ud7af]{0,4}", tail))


_REACH = 400
"""How far before or after a guess its list is read (a list of short items is far shorter): a caption of
many guesses costs what its length does, not its length squared."""


def _guess_closes_list(before: str, after: str, least: int) -> bool:
    """Whether a guess closes the list it follows: ``least`` short items or more end right before it
    and its sentence ends a few words later ("balloons, a cake, candles, party hats ... could well be
    around", "hammers, wrenches, a drill, ... are possibly stored", "冷蔵庫、電子レンジ、炊飯器、
    ...などがあるかもしれません"); not a guess at where the listed things come from ("grapes and figs,
    probably from a local farm"). The callers ask what the guess is about."""
    tail = _tail(after)
    if len(tail.split()) > 3 or _PLACE_LEAD.match(tail):
        return False
    parts = _GUESS_SEP.split(before.strip(" ,\u2014-"))
    parts = [*parts[:-1], *_LIST_SEP.split(parts[-1])]  # (Chinese and Japanese lists part with 、)
    # (the last part also holds any words between the list and the guess: "hiking boots are")
    return len(parts) > least and sum(map(_short, parts[-least - 1:])) >= least


def _short_run(sent: str, cuts: re.Pattern[str] = _GUESS_SEP) -> tuple[int, int, list[tuple[int, int]]]:
    """The longest run of short items (:func:`_short`) among the parts ``cuts`` cuts ``sent`` into:
    (first, end) part indices and every part's (start, end) offsets."""
    spans, pos = [], 0
    for m in cuts.finditer(sent):
        spans.append((pos, m.start()))
        pos = m.end()
    spans.append((pos, len(sent)))
    best, k = (0, 0), 0
    while k < len(spans):
        j = k
        while j < len(spans) and _short(sent[spans[j][0]:spans[j][1]]):
            j += 1
        if j - k > best[1] - best[0]:
            best = (k, j)
        k = j + 1
    return best[0], best[1], spans


def _list_under_guess(sent: str, guesses: list[tuple[int, int]], least: int, lead_words: int = 4,
                      closes: bool = True, cuts: re.Pattern[str] = _GUESS_SEP) -> bool:
    """Whether a guess governs a run of ``least`` short items or more, wherever its words fall: it
    leads straight into the run from the part before it ("one can assume a fire pit, cooler, lantern,
    ...", "reasonable to infer that ovens, flour sacks, ...") or closes it ("..., tongs and a picnic
    table are presumably close by"). Not a guess at something else that the list then describes
    ("likely a student's, is covered with books, pens, ...", "probably twenty people in the square,
    some sitting, some standing, ...": more words between), nor one about a place ("probably in
    Spain, selling oranges, ..."). ``guesses``: (start, end) of each guess in ``sent``; the caller asks
    that the sentence adds things (``_ADDS``, or the language's ``adds``). ``closes``: whether a guess
    after the list counts (English only: what follows it must say the things are there, ``_PRESENCE``)."""
    first, end, spans = _short_run(sent, cuts)
    if end - first < least or _WITH.match(sent[spans[first][0]:]):
        return False  # a list after "with" is what is there: "probablemente un mercado, con manzanas, peras, ..."
    start = spans[first][0]
    # the guess nearest the run on either side speaks for it (and a caption of a thousand guesses is read once)
    after = [g for g in guesses if g[0] >= spans[end - 2][1]]  # in or after the run's last item: it closes it
    before = [g for g in guesses if first and spans[first - 1][0] <= g[0] and g[1] <= start  # in the part before,
              and not _ASIDE.match(sent, g[1], g[1] + 160)]  # not a guess at something else (:data:`_ASIDE`)
    if after and closes and _PRESENCE.match(_tail(sent[after[0][1]:])):
        # a guess at what is there ("are presumably close by"), not at what it is like ("probably fresh")
        return True
    if before:
        lead = sent[before[-1][1]:start]
        return len(lead.split()) <= lead_words and not _PLACE_LEAD.match(re.sub(r"^that\s+", "", lead.strip(" ,:")))
    return False


def _items(head: str, last: str) -> list[str]:
    return [i.strip() for i in head.split(",")] + [last.strip()]


def _parallel(items: list[str]) -> bool:
    """Whether the items after the first share a shape (all with an article or number, or none),
    and are short: a list of alternatives, not a clause that happens to hold commas."""
    rest = items[1:]
    with_det = [bool(_DET.match(i + " ")) for i in rest]
    if len(set(with_det)) > 1:
        return False
    return all(len(i.split()) <= (3 if d else 2) for i, d in zip(rest, with_det, strict=True))


@register_guard("hedging")
class HedgingGuard(_JudgeGuard):
    """Alternatives and guesses in place of facts (see the module docstring for the settings)."""

    def __init__(self, penalty: float = 1.0, max_alternatives: int = 2, max_or: int = 2, max_hedges: int = 3,
                 speculative_items: int = 3, speculative_long: int = 4, extra_hedges: Iterable[str] = (), extra_exemptions: Iterable[str] = (),
                 **kw) -> None:
        super().__init__(penalty, **kw)
        self.max_alternatives = max_alternatives
        self.max_or = max_or
        self.max_hedges = max_hedges
        self.speculative_items = speculative_items
        self.speculative_long = speculative_long
        self.hedge = _words_re([*self.vocab.hedges, *extra_hedges])
        self.exempt = _words_re([*self.vocab.list_exemptions, *extra_exemptions])
        self.idiom = _words_re(self.vocab.or_idioms)
        self.governs = re.compile(_GOVERNS.format(verbs=_alt(self.vocab.list_verbs)))
        # two alternatives and a guessed third: "a dog or a cat, perhaps a rabbit", "three or four,
        # possibly five or six"
        self.or_guess = re.compile(rf"(?<![\w'-]){_ITEM}\s+or\s+{_ITEM}\s*,\s*(?:{_alt([*self.vocab.hedges, *extra_hedges])})"
                                   rf"\s+{_ITEM}(?![\w'-])")
        # literal gates (:mod:`.gates`): a caption without a hedge word, "or" or "/" has nothing to check
        self._hedge_gate, self._idiom_gate = Gated(self.hedge), Gated(self.idiom)

    def _exempt_before(self, sentence: str, start: int) -> bool:
        return bool(self.exempt.search(sentence[max(0, start - 60):start]))

    def hits(self, doc: Doc) -> Iterator[tuple[str, str]]:
        text = doc.lower
        ors = hedges = 0
        has_or, has_slash, hedgy = bool(_OR_WORD.search(text)), "/" in text, self._hedge_gate.possible(text)
        if not (has_or or has_slash or hedgy) and not self.foreign(doc):
            return
        idioms = self._idiom_gate.possible(text)
        for sent in doc.units(text, "sentence"):
            bare = self.idiom.sub(" ", sent) if idioms else sent
            for m in (_OR_LIST.finditer(bare) if has_or else ()):
                # (a guessed last item is still an alternative: "red, blue or possibly green"; a guess
                # after the first comma is one guess between two: "a bird of prey, maybe a hawk or a kite")
                items = _items(m.group(1), m.group(2))
                if hedgy:
                    items[-1] = self.hedge.sub("", items[-1]).strip() or items[-1]
                if (len(items) > self.max_alternatives and _parallel(items)
                        and not self._exempt_before(bare, m.start() + len(m.group(1).split(",")[0]))):
                    yield "alternatives", f"alternatives: {m.group(0)[:80]}"
            if has_slash and (m := _SLASHES.search(bare)) and len(m.group(0).split("/")) > self.max_alternatives \
                    and not self._exempt_before(bare, m.start()):
                yield "alternatives", f"alternatives: {m.group(0)[:80]}"
            if has_or and hedgy and (m := self.or_guess.search(bare)) \
                    and not self._exempt_before(bare, m.start()):  # "a dog or a cat, perhaps a rabbit"
                yield "alternatives", f"alternatives: {m.group(0)[:80]}"
            for m in (_OR_CHAIN.finditer(bare) if has_or else ()):  # "red or silver or black"
                items = re.split(r"\s+or\s+", m.group(0))
                if len(items) > self.max_alternatives and _parallel(items) and not self._exempt_before(bare, m.start()):
                    yield "alternatives", f"alternatives: {m.group(0)[:80]}"
            for h in (self.hedge.finditer(bare) if hedgy else ()):
                hedges += 1
                after = bare[h.end():h.end() + 160]
                if _ASIDE.match(after):
                    continue  # a guess whose phrase ends at a comma before a clause of its own is about what it
                    # names, and the clause says what is there ("a toolbox, probably the mechanic's, also holds
                    # wrenches, ...", "in what is probably a school lab, there are also beakers, ...")
                # "possibly holds X, Y and Z" lists what is held; "possibly a phone, a book and a cup"
                # must be a parallel list ("probably a tourist, holds a map" is an aside and a clause)
                verb = self.governs.match(after) or _TO_COLON.match(after)
                governs = bool(verb) or bool(re.search(r"(?:have|include|contain|hold|show)$", h.group(0)))
                lm = _ANY_LIST.match(after[verb.end():] if verb else after.lstrip(" ,:"))
                if lm is None and verb is not None:
                    lm = _COMMA_LIST.match(after[verb.end():])
                if lm:
                    items = _items(lm.group(1), lm.group(2))
                    shaped = all(len(i.split()) <= 3 for i in items[1:]) if governs else _parallel(items)
                    if len(items) >= self.speculative_items and shaped:
                        yield "speculative_list", f"speculative list: {(h.group(0) + after)[:80]}"
                # however the guess is phrased, a long list of short items after it in its sentence whose
                # first item the guess's clause ends with ("could be present include a toaster, a kettle,
                # a knife block, a fruit bowl, ..."; not "probably in Thailand, with mangoes, papayas, ...", nor
                # "probably a paella, with rice, prawns, ...": a list after "with" is what is there)
                if (len(parts := _LIST_SEP.split(after)) > self.speculative_long and _DET_END.search(parts[0])
                        and not _PLACE_LEAD.match(parts[1].strip())
                        and sum(map(_short, parts[1:])) >= self.speculative_long) or (
                        sum(map(_short, _until_clause(_guessed_list(after)))) >= self.speculative_long
                        and _adds(bare)) or (_guess_closes_list(bare[max(0, h.start() - _REACH):h.start()], after, self.speculative_long)
                                                    and _PRESENCE.match(_tail(after))):
                    yield "speculative_list", f"speculative list: {(h.group(0) + after)[:80]}"
            guesses = list(self.hedge.finditer(bare)) if hedgy else []
            if guesses and _adds(bare) and _list_under_guess(bare, [g.span() for g in guesses], self.speculative_long):
                yield "speculative_list", f"speculative list: {bare[:80]}"
            same = Counter(h.group(0) for h in guesses)
            if same and max(same.values()) >= self.speculative_items:  # "maybe a cup, maybe a glass, maybe a jar"
                word, n = same.most_common(1)[0]
                yield "repeated_guess", f"alternatives: {word!r} x{n} in one sentence"
            elif len(guesses) >= self.speculative_items and sum(
                    1 <= len(_PHRASE_END.split(bare[g.end():], maxsplit=1)[0].split()) <= 3 for g in guesses
            ) >= self.speculative_items:  # one guess after another, in other words: "perhaps five, maybe eight, possibly a dozen"
                yield "repeated_guess", f"alternatives: {len(guesses)} short guesses in one sentence"
            for o in (re.finditer(r"\bor\b", bare) if has_or else ()):
                if not self._exempt_before(bare, o.start()):
                    ors += 1
        for sent in self.foreign(doc):  # other languages: their own guess and "or" words
            guesses = foreign_words(sent, "hedges")
            hedges += len(guesses)
            if len(guesses) >= self.speculative_items:
                yield "speculative_list", f"{len(guesses)} guesses ({guesses[0][0]}): {sent[:60]}"
            for code, word, at in guesses[-1:]:  # a list, then the guess: "...、鍋、やかんなどがあるかもしれません"
                # (about what is there: the sentence adds things, or the guess ends it with no more than
                # a verb ending, as Japanese guesses do: "...などがあるかもしれません"; not "...があり、
                # たぶん新鮮だ", a guess at what they are like)
                if _guess_closes_list(sent[max(0, at - _REACH):at], sent[at + len(word):at + len(word) + _REACH], self.speculative_long) and (
                        foreign_words(sent, "adds") or _ending_only(_tail(sent[at + len(word):]))):
                    yield "speculative_list", f"speculative list ({code}): {sent[max(0, at - 60):at + 10]}"
            if guesses and foreign_words(sent, "adds") and _list_under_guess(
                    sent, [(at, at + len(word)) for _, word, at in guesses], self.speculative_long, lead_words=6,
                    closes=False, cuts=_GUESS_SEP_ANY):
                # ("Möglicherweise befinden sich dort auch ein Laptop, eine Lampe, Stifte, ...": a verb
                # of several words may lead in where the language puts it first)
                yield "speculative_list", f"speculative list ({guesses[0][0]}): {sent[:60]}"
            for code, word, at in guesses[:1]:  # a guess, then a list: "可能还有书架、地毯、绿植、..."
                # (set off by a comma, or leading in with a verb: "возможно, есть чайник, хлеб, ...",
                # "Möglicherweise sind auch eine Lampe, ein Buch, ..."; the last item holds the "and")
                # — when the sentence adds things ("auch", "còn", "还有": "Probablemente es un mercado:
                # tomates, pimientos, ..." guesses the place, then lists what is there)
                items = _LIST_SEP.split(sent[at + len(word):])
                if _item(items[0]) and sum(map(_item, items[1:])) >= self.speculative_long:
                    yield "speculative_list", f"speculative list ({code}): {sent[at:at + 60]}"
                items = _LIST_SEP.split(sent[at + len(word):].lstrip(" ,\u3001\u060c"))
                if len(items[0].split()) <= 4 and len(items) > self.speculative_long \
                        and sum(map(_short, items[1:-1])) >= self.speculative_long - 1 \
                        and (len(items) < 3 or _marked(items[1]) == _marked(items[2])) \
                        and foreign_words(sent, "adds"):
                    yield "speculative_list", f"speculative list ({code}): {sent[at:at + 60]}"
            last = None  # where the previous "or" word ended
            for code, word, at in foreign_words(sent, "alternatives"):
                ors += 1
                # "rojo, naranja o rosa", "银色、白、あるいは青": a list item of one or two words (four
                # characters unspaced) right before the word; not "pan, queso y dos o tres manzanas"
                before = _LIST_SEP.split(sent[max(0, at - 60):at].rstrip(" ,\u3001\u060c"))
                if len(before) > 1 and _item(before[-1]) and len(before) + 1 > self.max_alternatives:
                    yield "alternatives", f"alternatives ({code}): {sent[max(0, at - 30):at + 20]}"
                # or a chain, one short item between two "or" words: "rojo o verde o azul", "ペンか鉛筆か筆"
                elif last is not None and _item(sent[last:at]) and sent[last:at].strip():
                    yield "alternatives", f"alternatives ({code}): {sent[max(0, last - 20):at + 20]}"
                last = at + len(word)
        if ors > self.max_or:
            yield "or_count", f"{ors} alternatives joined by 'or'"
        if hedges > self.max_hedges:
            yield "guess_count", f"{hedges} guesses"
        return


# ------------------------------------------------------------------------------------------------
# keyword stuffing


_PAREN = re.compile(r"[(\[]([^()\[\]]{8,300})[)\]]")
# (a hashtag in a script with vowel signs, "#चाय", holds marks that are not word characters)
_HASHTAG = re.compile(r"#[^\W\d_][\w\u0900-\u0dff\u0e00-\u0e7f-]+")
# pictographs and their modifiers: a run of them stands for nouns ("🐄🐖🐑🐓🐴🚜🌽🌾")
_EMOJI_RUN = re.compile(r"(?:[\U0001F300-\U0001FAFF][\ufe0f\u200d\U0001F3FB-\U0001F3FF]*\s*){%d,}")
_EMOJI = re.compile(r"[\U0001F300-\U0001FAFF]")
# emoji that are in the scene: stickers, magnets, a keyboard, a chat or a sign
_EMOJI_SCENE = re.compile(r"\b(?:stickers?|magnets?|keyboard|screen|phone|chat|messages?|reactions?|comments?|sign|poster|"
                          r"menu|shirt|t-shirt|label|emoji|emojis|badges?|buttons?|keys?)\b")
_LIST_SPLIT = re.compile(r"\s*(?:[,;|/\u2022\u00b7]|\s-\s|\band\b|\bor\b)\s*")
_PLACE_LABEL = re.compile(r"^(?:inside|in|on|at|under|behind|beside|above|below|near|around|within|from|"
                          r"on the \w+|in the \w+|left|right|top|bottom|foreground|background)\b")


def _separators(text: str) -> int:
    """At least as many as the cuts ``_LIST_SPLIT`` makes in ``text`` (each cut holds one of these)."""
    return len(_SEPARATOR.findall(text))


_SEPARATOR = re.compile("[,;|/\u2022\u00b7-]|and|or")


def sentence_tokens(doc: Doc, text: str) -> list[list[str]]:
    """The ``_TOKEN`` words of each sentence of ``text``, once per caption."""
    key = ("tokens", text)
    if key not in doc.memo:
        doc.memo[key] = [_TOKEN.findall(s) for s in doc.units(text, "sentence")]
    return doc.memo[key]  # type: ignore[return-value]


@register_guard("keyword_stuffing")
class KeywordStuffingGuard(_JudgeGuard):
    """Noun dumps and tag lines behind (or instead of) a caption (see the module docstring)."""

    def __init__(self, penalty: float = 1.0, labelled_items: int = 4, list_items: int = 5, bare_share: float = 0.7,
                 run_words: int = 8, hashtags: int = 4, repeat_items: int = 4, repeat_share: float = 0.6,
                 max_list: int = 10, short_run: int = 4, emoji_run: int = 6, extra_labels: Iterable[str] = (), **kw) -> None:
        super().__init__(penalty, **kw)
        self.max_list = max_list
        self.short_run = short_run
        self.labelled_items = labelled_items
        self.list_items = list_items
        self.bare_share = bare_share
        self.run_words = run_words
        self.hashtags = hashtags
        self.repeat_items = repeat_items
        self.repeat_share = repeat_share
        self.emoji_run = re.compile(_EMOJI_RUN.pattern % emoji_run)
        self.emoji_distinct = emoji_run
        self.clashes = [_words_re(group) for group in self.vocab.clashes]
        self.clash_exempt = _words_re(self.vocab.clash_exemptions or ["(?!)"])
        labels = _alt([*self.vocab.stuff_labels, *extra_labels])
        self.label = re.compile(rf"(?:^|(?<=[\s(\[]))(?:{labels})\s*(?::|-|\u2013|\u2014)\s*(.+)$")
        self.shown = _words_re(self.vocab.shown_lists or ["(?!)"])

    def _shown(self, sent: str) -> bool:
        """Whether a list's sentence introduces it as what the image shows, written or labelled: a word of
        ``shown_lists`` in the clause before the list's first separator, after a function word, with at
        most three words between it and the separator ("the sidebar lists System, Bluetooth, ...", "a
        diagram ... labels the pinna, ear canal, ...", "columns headed Time, Destination, ..."); not a
        label of its own ("Labels: ...") nor an item of the list. A screenshot's menu, a diagram's labels
        or a table's columns are the picture's content, however many nouns they hold."""
        lead = _LIST_SPLIT.split(sent, 1)[0]
        found = list(self.shown.finditer(lead))
        m = found[-1] if found else None  # the last one: the word that introduces the list
        if m is None or ":" in lead[m.end():]:
            return False
        return len(_TOKEN.findall(lead[m.end():])) <= 3 and any(t in self.v.function for t in _TOKEN.findall(lead[:m.start()]))

    def _list(self, body: str, tokens: int | None = None, cuts: int | None = None) -> list[str] | None:
        """The items of ``body`` when it is a list of short phrases (no clause among them).
        ``tokens``: the number of ``_TOKEN`` words in ``body``, when known (a sentence with more
        words than three per possible item, plus its "and"/"or" cuts, is no such list: not split)."""
        if tokens is not None and tokens > 4 * (_separators(body) if cuts is None else cuts) + 3:
            return None
        items = [i for i in _LIST_SPLIT.split(body.strip(" .!:")) if i and i.strip()]
        if len(items) < 3 or any(len(_TOKEN.findall(i)) > 3 for i in items):
            return None
        return items

    def _clash(self, text: str) -> bool:
        """Whether the caption names two things or more of two ``clashes`` groups each (snow and
        penguins, camels and palms) and no place that holds any mix (a zoo, a shop, a drawing)."""
        return sum(len(set(group.findall(text))) >= 2 for group in self.clashes) >= 2 and not self.clash_exempt.search(text)

    def _bare(self, item: str) -> bool:
        toks = _TOKEN.findall(item)
        return bool(toks) and not any(t in self.v.function or t.isdigit() for t in toks)

    def hits(self, doc: Doc) -> Iterator[tuple[str, str]]:
        text = doc.lower
        if "#" in text and len(tags := _HASHTAG.findall(doc.native)) >= self.hashtags:  # any language
            yield "hashtags", f"{len(tags)} hashtags"
        # (``emoji_run`` different ones at least, and no sticker, chat or sign that would show them)
        if not doc.native.isascii() and (m := self.emoji_run.search(doc.native)) \
                and len(set(_EMOJI.findall(m.group(0)))) >= self.emoji_distinct and not _EMOJI_SCENE.search(text):
            yield "emoji_dump", f"pictographs in a row: {m.group(0)[:40]}"
        for sent in self.foreign(doc):  # "Từ khóa: phở, bát, đũa, ...", "キーワード：寿司、箸、..."
            for code, label, at in foreign_words(sent, "stuff_labels"):
                rest = sent[at + len(label):].lstrip()
                items = _LIST_SEP.split(rest[1:].strip(" .\u3002"))
                if len(items) == 1 and _CJK.search(rest):  # Chinese and Japanese words parted by spaces
                    items = rest[1:].split()
                if rest[:1] in (":", "-", "\u2013", "\u2014") and len(items) >= self.labelled_items \
                        and sum(map(_item, items)) >= self.labelled_items:
                    yield "tag_line", f"tag line ({code}): {sent[:80]}"
            # a list of ``max_list`` short items or more, in any language, as the English rule
            if len(items := _LIST_SEP.split(sent.strip(" .\u3002"))) >= self.max_list \
                    and sum(map(_item, items)) >= 0.8 * len(items) and not self._shown(sent):
                yield "long_list", f"{len(items)}-item list: {sent[:80]}"
            # Chinese and Japanese words parted by spaces, which neither language writes ("灯笼 对联 鞭炮 ...")
            # (and no grammar word among them: "一本 书 放 在 桌子 上" is a sentence written word by word)
            elif " " in sent and len(words := sent.split()) >= self.short_run * 2 and \
                    all(len(w) <= 4 and _CJK.search(w) and w not in _all_function_words() for w in words):
                yield "long_list", f"{len(words)} words parted by spaces: {sent[:80]}"
        if not self.english(doc):
            return
        sents = doc.units(text, "sentence")
        toks_of = sentence_tokens(doc, text)
        labelled = any(c in text for c in ":-\u2013\u2014")  # a label is followed by one of these
        for m in (_PAREN.finditer(text) if "(" in text or "[" in text else ()):  # "(dog, park, grass, tree, bench)"
            if (items := self._list(m.group(1))) and len(items) >= self.labelled_items and \
                    sum(map(self._bare, items)) / len(items) >= self.bare_share:
                yield "noun_dump", f"noun dump: {m.group(0)[:80]}"
        run = 0
        for toks, sent in zip(toks_of, sents, strict=True):  # "Dog. Park. Grass. Tree." or one noun per line
            short = 0 < len(toks) <= 3 and all(t.isalpha() and len(t) > 2 and t not in self.v.function for t in toks)
            run = run + 1 if short else 0
            if run >= self.short_run:
                yield "noun_run", f"{run} one-noun sentences in a row: {sent[:40]}"
        stems: list[set[str]] = []  # content stems of each sentence before the current one, filled when a list needs them

        def seen_before(k: int) -> set[str]:
            while len(stems) < k:
                stems.append({self.v.stem(t) for t in toks_of[len(stems)] if t not in self.v.function})
            return set().union(*stems[:k])

        clash = None  # whether the caption names two climates: looked up once, when a list asks
        for k, sent in enumerate(sents):
            if labelled and (m := self.label.search(sent)) and (items := self._list(m.group(1))) and \
                    len(items) >= self.labelled_items:
                yield "tag_line", f"tag line: {sent[:80]}"
            cuts = _separators(sent)
            if cuts + 1 >= self.max_list and \
                    len(long := [i for i in _LIST_SPLIT.split(sent) if i.strip()]) >= self.max_list and \
                    all(len(_TOKEN.findall(i)) <= 4 for i in long[1:-1]) and not self._shown(sent):
                yield "long_list", f"{len(long)}-item list: {sent[:80]}"
            if cuts + 1 >= self.list_items and (clash if clash is not None else (clash := self._clash(text))):
                yield "clash", f"an inventory no one place holds: {sent[:80]}"
            items = self._list(sent, len(toks_of[k]), cuts)
            if items and (k > 0 or len(sents) > 1) and not _PLACE_LABEL.match(sent):
                bare = [i for i in items if self._bare(i)]
                if len(items) >= self.list_items and len(bare) / len(items) >= self.bare_share and \
                        not self._shown(sent):
                    yield "noun_dump", f"noun dump: {sent[:80]}"
                heads = [self.v.stem(_TOKEN.findall(i)[-1]) for i in items if _TOKEN.findall(i)]
                if len(heads) >= self.repeat_items and \
                        sum(map(seen_before(k).__contains__, heads)) / len(heads) >= self.repeat_share:
                    yield "repeated_nouns", f"repeated nouns: {sent[:80]}"
        for piece in re.split(r"[^\w\s'-]", text):
            run = 0
            if piece.count(" ") + 1 < self.run_words:
                continue  # too few words for a run
            words = piece.split()
            if len(words) - sum(map(self.v.function.__contains__, words)) < self.run_words:
                continue  # too few words outside the function words for a run
            if _reads_as_other_latin(words):
                continue  # a clause in another language ("op de voorgrond staat een rode fiets"), no dump
            for t in words:
                run = 0 if (t in self.v.function or not (t.isascii() and t.isalpha())) else run + 1
                if run >= self.run_words:
                    yield "function_free_run", f"{run} words without a function word: {piece.strip()[:80]}"
                    break
        return


# ------------------------------------------------------------------------------------------------
# rewording


# (a restatement hides in a clause as often as in a sentence: "three apples sit on a plate — that is,
# there are three apples", so the check that nothing is new cuts at commas too)
_CLAUSE_CUT = re.compile(r"[.;:,!?\u2014]+")


@register_guard("rewording")
class RewordingGuard(_JudgeGuard):
    """The same content stated again in other words (see the module docstring)."""

    def __init__(self, penalty: float = 1.0, min_content: int = 3, max_overlap: float = 0.5, marker_overlap: float = 0.4,
                 restated_share: float = 0.6, restated_sentences: int = 2, repeat_share: float = 0.25,
                 repeat_top: int = 3, repeat_top_share: float = 0.18, chain_sentences: int = 3, chain_new: float = 1.0,
                 reach: int = 50, **kw) -> None:
        super().__init__(penalty, **kw)
        self.reach = reach
        self.chain_sentences = chain_sentences
        self.chain_new = chain_new
        # keys of the words for the picture itself: "En la imagen hay frutas. En la imagen hay gente." ties
        # its sentences by the picture, not by a thing said again
        self._picture_keys = frozenset(k for w in (*table_words("image_words"), *self.vocab.image_words)
                                       for k in _keys(letters(w.lower())))
        self.repeat_share = repeat_share
        self.repeat_top = repeat_top
        self.repeat_top_share = repeat_top_share
        self.restated_share = restated_share
        self.restated_sentences = restated_sentences
        self.min_content = min_content
        self.max_overlap = max_overlap
        self.marker_overlap = marker_overlap
        self.marker = _words_re(self.vocab.restatement_markers)
        self._marker_gate = Gated(self.marker)

    def _restated(self, doc: Doc) -> Iterator[tuple[str, str]]:
        """Any language, read without a stemmer or word families: sentences whose content
        keys (:func:`_keys`) were nearly all said before, at least ``restated_sentences`` of them and
        at least half of the sentences after the first ("Автобус на улице. Автобус стоит на улице.
        На улице находится автобус.")."""
        sents = doc.units(doc.native, "sentence")
        if len(sents) <= self.restated_sentences:
            return
        seen: set[str] = set()
        again = []
        for k, (sent, listed) in enumerate(zip(sents, sentence_keys(doc, self.v.function), strict=True)):
            keys = set(listed)
            if sent in sents[:k]:
                continue  # an exact repeat is the repetition guard's
            if k and len(keys) >= 2 and len(keys & seen) / len(keys) >= self.restated_share:
                again.append(sent)
            seen |= keys
        if len(again) >= self.restated_sentences and len(again) * 2 >= len(sents) - 1:
            yield "reworded", f"{len(again)} sentences restate earlier ones: {again[0][:60]}"
        elif (chain := self._chained(sents, sentence_keys(doc, self.v.function))) is not None:
            yield "reworded", chain

    def _chained(self, sents: list[str], listed: list[list[str]]) -> str | None:
        """Short sentences that each say the one thing again, a word or two changed ("Un chien qui court.
        Le chien court. Un toutou en train de courir."; "Two horses. A pair of horses. 2 horses
        standing."): ``chain_sentences`` or more, every one after the first shares a content key with
        what came before (the picture's own words do not count), and together they add fewer than
        ``chain_new`` new keys a sentence. Synonyms defeat the overlap of :meth:`_restated`; they do not
        hide that nothing new is named. A caption that goes on to a new thing breaks the chain."""
        if len(sents) < self.chain_sentences or not (seen := set(listed[0]) - self._picture_keys):
            return None
        new = 0
        for keys in map(set, listed[1:]):
            keys -= self._picture_keys
            if not keys & seen:
                return None
            new += len(keys - seen)
            seen |= keys
        if new >= self.chain_new * (len(sents) - 1):
            return None  # one new word a sentence is a description going on: "A boat. The boat is small. The lake is calm."
        return f"{len(sents) - 1} sentences add {new} new words to the first: {sents[1][:60]}"

    def _stems(self, tokens: list[str]) -> list[str]:
        # words that fit any image ("image", "shows", "scene") say nothing; they would only dilute the overlap
        return [self.v.stem(t) for t in self.v.content(tokens)]

    def _sentence_stems(self, doc: Doc, tokens: list[list[str]]) -> list[list[str]]:
        """Each sentence's content stems, once per caption: both rewording checks read them."""
        key = ("rewording stems", id(self.v))
        if key not in doc.memo:
            doc.memo[key] = [self._stems(t) for t in tokens]
        return doc.memo[key]  # type: ignore[return-value]

    def _repeated(self, doc: Doc, tokens: list[list[str]]) -> Iterator[tuple[str, str]]:
        """One fact said over and over, each time a little differently ("The bus is yellow. It is a
        yellow bus. The colour of this bus is yellow, ..."): at least ``repeat_share`` of the content
        words (word families folded) repeat an earlier one, one of them ``repeat_top`` times or more
        and as ``repeat_top_share`` of them (a long caption of a small world repeats its few words
        without saying one thing over), and some clause of two content words or more says nothing
        new. A caption that names a new thing in every clause ("a white wall has white shelves;
        white shelves hold white vases") adds something each time."""
        stems = [w for sentence in self._sentence_stems(doc, tokens) for w in sentence]
        if len(stems) < 4:
            return
        counts = Counter(stems)
        word, top = counts.most_common(1)[0]
        if top < self.repeat_top or top < self.repeat_top_share * len(stems) or \
                (len(stems) - len(counts)) / len(stems) < self.repeat_share:
            return
        seen: set[str] = set()
        said: set[str] = set()
        for clause in _CLAUSE_CUT.split(doc.lower):
            if (clause := clause.strip()) in said:
                continue  # an exact repeat is the repetition guard's
            said.add(clause)
            got = set(self._stems(_TOKEN.findall(clause)))
            if seen and len(got) >= 2 and got <= seen:
                yield "restated", f"{word!r} x{top}; nothing new in: {clause[:60]}"
                return
            seen |= got

    def hits(self, doc: Doc) -> Iterator[tuple[str, str]]:
        text = doc.lower
        yield from self._restated(doc)
        if not self.english(doc):
            return
        sents = doc.units(text, "sentence")
        tokens = sentence_tokens(doc, text)
        yield from self._repeated(doc, tokens)
        sets = [set(stems) for stems in self._sentence_stems(doc, tokens)]
        markers = self._marker_gate.possible(text)
        for j in range(1, len(sents)):
            b = sets[j]
            marked = markers and bool(self.marker.search(sents[j]))
            if not b or (len(b) < self.min_content and not (marked and len(b) >= 2)):
                continue  # neither check below can fire on this sentence
            for i in range(max(0, j - self.reach), j):  # (a bounded reach: a caption of thousands of
                a = sets[i]                                 # sentences costs its length, not its square)
                if not a or sents[i] == sents[j] or (len(a) < self.min_content and not marked):
                    continue  # an exact repeat is the repetition guard's; a short sentence needs a marker
                shared = len(a & b)
                jac = shared / (len(a) + len(b) - shared)
                if min(len(a), len(b)) >= self.min_content and jac >= self.max_overlap:
                    yield "reworded", f"reworded ({jac:.2f}): {sents[j][:80]}"
                if marked and jac >= self.marker_overlap and len(b) >= 2:
                    yield "restated", f"restated ({jac:.2f}): {sents[j][:80]}"
        return


# ------------------------------------------------------------------------------------------------
# padding


_ASCII_SYMBOL = re.compile(r"[!-/:-@\[-`{-~]")  # every ASCII character of Unicode category P or S


def _symbols(text: str) -> int:
    """How many characters of ``text`` are punctuation or symbols (Unicode categories P and S;
    vowel signs are not symbols)."""
    if text.isascii():
        return len(_ASCII_SYMBOL.findall(text))
    return sum(unicodedata.category(c)[0] in "PS" for c in text)


_SYMBOL_RUN = re.compile(r"([^\w\s])(?:\s*\1){%d,}")


@register_guard("padding")
class PaddingGuard(_JudgeGuard):
    """Words toward a length that say nothing about the image (see the module docstring)."""

    def __init__(self, penalty: float = 1.0, generic_sentences: int = 2, generic_share: float = 0.25,
                 generic_word_share: float = 0.75, generic_min_words: int = 2, fillers: int = 3, symbol_share: float = 0.3, symbol_run: int = 8,
                 meta_sentences: int = 3, meta_share: float = 0.5, meta_keys: int = 8, foreign_generic_share: float = 0.5,
                 mostly_share: float = 0.5, mostly_words: int = 14, mostly_chars: int = 60, padded_share: float = 0.6,
                 placeless_share: float = 0.15, extra_fillers: Iterable[str] = (), **kw) -> None:
        super().__init__(penalty, **kw)
        self.placeless_share = placeless_share
        self.place = frozenset(self.vocab.place_words.split())
        self.nowhere = frozenset(self.vocab.nowhere_words.split())
        self.goes_on = frozenset(self.vocab.continuation_words.split())
        self.mostly_share = mostly_share
        self.mostly_words = mostly_words
        self.mostly_chars = mostly_chars
        self.padded_share = padded_share
        self.specific = re.compile(self.vocab.specifics)
        self.foreign_generic_share = foreign_generic_share
        self.generic_sentences = generic_sentences
        self.generic_share = generic_share
        self.generic_word_share = generic_word_share
        self.generic_min_words = generic_min_words
        self.fillers = fillers
        self.symbol_share = symbol_share
        self.symbol_run = re.compile(_SYMBOL_RUN.pattern % (symbol_run - 1))
        self.filler = Gated(_words_re([*self.vocab.filler_phrases, *extra_fillers]))
        self.placeholder = Gated(_words_re(self.vocab.placeholders))
        self.boilerplate = self.v.generic | frozenset(self.vocab.padding_words.split())
        # "photographs", "captured", "viewers": any inflection of a boilerplate word is one
        self._boilerplate_stems = frozenset(_stem(w, {}) for w in self.boilerplate)
        self._abstract = re.compile(self.vocab.abstract_suffix)
        self._boilerplate_seen: dict[str, bool] = {}
        self.tautology = [re.compile(p) for p in self.vocab.tautologies]
        self.meta_sentences = meta_sentences
        self.meta_share = meta_share
        self.meta_keys = meta_keys
        self.image_word = _words_re(self.vocab.image_words) if self.vocab.image_words else None

    def _about_picture(self, doc: Doc) -> Iterator[tuple[str, str]]:
        """Sentences after the first that talk about the picture, not what is in it: they name the
        picture (``image_words``, in English or the caption's language) or say a thing is itself (a
        content key twice: "Die Aufnahme ist eine Aufnahme", "写真には写っているものが写っています"),
        at least ``meta_sentences`` of them (or two that name the picture) and ``meta_share`` of the
        sentences after the first."""
        sents = doc.units(doc.native, "sentence")
        if len(sents) <= min(self.meta_sentences, 2):
            return
        foreign = set(self.foreign(doc))
        meta, tautologies, named_only = [], 0, 0
        for sent, keys in list(zip(sents, sentence_keys(doc, self.v.function), strict=True))[1:]:
            named = (len(foreign_words(sent, "image_words")) if sent in foreign
                     else len(self.image_word.findall(sent)) if self.image_word is not None else 0)
            itself = len(set(keys)) < len(keys)
            # (a long sentence is about the picture when it names it twice: "la composition de la
            # photographie présente la scène ..., comme dans toute image")
            if (named or itself) and (len(set(keys)) <= self.meta_keys or named >= 2):
                meta.append(sent)
                tautologies += itself
                named_only += bool(named) and sent in foreign
        # naming the picture is also how honest captions place things ("写真の左側に", "en la imagen
        # hay"): one sentence at least must say that a thing is itself; two are enough when each of
        # them names the picture in another language ("C'est une photographie. ... Cette image montre
        # ce qu'elle montre."; English has its generic sentences, and "in the photo, a small boat
        # beside a bigger boat" says a word twice without saying anything twice)
        enough = len(meta) >= self.meta_sentences or named_only >= 2
        if tautologies and enough and len(meta) >= self.meta_share * (len(sents) - 1):
            yield "about_picture", f"{len(meta)}/{len(sents) - 1} later sentences are about the picture: {meta[0][:60]}"

    def _boilerplate(self, word: str) -> bool:
        """Whether ``word`` or its stem is a boilerplate word, or the word is abstract by its ending
        (``abstract_suffix``: "intention", "stillness", "harmoniously"; remembered: called on every
        content word)."""
        if (got := self._boilerplate_seen.get(word)) is None:
            if len(self._boilerplate_seen) > 65536:
                self._boilerplate_seen.clear()
            got = self._boilerplate_seen[word] = (word in self.boilerplate or _stem(word, {}) in self._boilerplate_stems
                                                  or bool(self._abstract.search(word)))
        return got

    def _generic_foreign(self, sentence: str) -> bool:
        """A sentence in another language that fits any image: two words or more of its language's
        ``padding_words`` and ``image_words`` (languages.yaml: composition, light, mood, the viewer,
        abstract endings) covering at least ``foreign_generic_share`` of the letters of its content
        words ("La composición es equilibrada y los elementos visuales se combinan de forma
        armoniosa, ..."). Letters, not words: it reads scripts with and without spaces alike, and a
        Vietnamese word of two syllables ("bố cục") is one word."""
        hits = {at: word for _, word, at in foreign_words(sentence, "padding_words")}
        if not hits:
            return False
        hits.update({at: word for _, word, at in foreign_words(sentence, "image_words")})
        if len(hits) < self.generic_min_words:
            return False
        if _CJK.search(sentence) or _HANGUL.search(sentence):
            letters = len(_CJK.findall(sentence)) + len(_HANGUL.findall(sentence))
        else:
            skip = _all_function_words()
            letters = sum(len(w) for w in _ANY_WORD.findall(sentence) if len(w) >= 3 and w not in skip)
        return bool(letters) and sum(map(len, hits.values())) >= self.foreign_generic_share * letters

    def _boilerplate_count(self, tokens: list[str]) -> tuple[int, int]:
        """(content words, boilerplate words among them) of a sentence's tokens."""
        content = [t for t in tokens if t not in self.v.function]
        return len(content), sum(map(self._boilerplate, content))

    def _padded(self, sents: list[str], counts: list[tuple[int, int]], tokens: list[list[str]]) -> str | None:
        """One long sentence about any picture after a short subject is padding too ("Girl on a swing. In
        terms of composition, lighting, colour, texture, mood, ... the image offers a great deal to
        consider, ..."): the sentences whose content words are ``mostly_share`` or more boilerplate,
        that name no colour or number (``specifics``) and none of the first sentence's own things
        ("... the shapes of the trees and the bench are arranged ..." describes the bench it named)
        hold ``mostly_words`` content words or more and ``padded_share`` of the caption's. After the
        first sentence, a sentence that also names no place (``place_words``: on, behind, left, ...)
        needs only ``placeless_share`` of its words boilerplate: a description says where things are,
        and "Elevate your wardrobe with a piece designed to inspire" says nothing of where, what colour
        or how many. Such a sentence that opens on a bare noun, no article or number before it, speaks
        of a kind and not of this picture ("Newspapers have informed the public for centuries", "Sport
        brings people together"), and counts whatever its words and whether or not it names the
        subject; so does one that goes on from a pronoun (``continuation_words``: "It teaches
        discipline ...") after a sentence that padded."""
        total = padded = 0
        went_on = False
        subject = {self.v.stem(t) for t in (tokens[0] if tokens else ()) if t not in self.v.function
                   and not self._boilerplate(t)}
        for k, (sent, (content, boiler)) in enumerate(zip(sents, counts, strict=True)):
            total += content
            # (cheapest tests first: most sentences open on an article and hold few boilerplate words)
            kind = k > 0 and content > 0 and (self._generic_subject(tokens[k]) or (went_on and tokens[k][0] in self.goes_on))
            pads = False
            if kind or (content and boiler >= self.placeless_share * content):
                placeless = k > 0 and not self._places(tokens[k])
                pads = (placeless and kind) or (
                    boiler >= (self.placeless_share if placeless else self.mostly_share) * content and
                    (k == 0 or not subject & {self.v.stem(t) for t in tokens[k]}))
                pads = pads and not self.specific.search(sent)
            padded += content if pads else 0
            went_on = pads
        if padded >= self.mostly_words and padded >= self.padded_share * total:
            return f"{padded}/{total} content words are in sentences about any picture"
        return None

    def _places(self, tokens: list[str]) -> bool:
        """Whether a sentence places something: a place word not followed, within two words, by a word
        for nowhere in the picture (``nowhere_words``: "around the world", "across cultures")."""
        if self.place.isdisjoint(tokens):
            return False
        return any(t in self.place and self.nowhere.isdisjoint(tokens[i + 1:i + 3]) for i, t in enumerate(tokens))

    def _generic_subject(self, tokens: list[str]) -> bool:
        """Whether a sentence opens on a bare noun (no function word of any language, no number, no adverb,
        no one- or two-letter word) and is a clause (three words or more, a function word among them):
        "Cities are places where ...", "Water is wet.", not "The city", "Two cities", "Slowly, ...", "O
        gato" or the fragments of a list cut at its letters ("Oxygen, B. Carbon dioxide, C.")."""
        first = tokens[0]
        return not (len(first) < 3 or first in self.v.function or first in _all_function_words() or first[0].isdigit()
                    or first.endswith("ly")) and len(tokens) >= 3 and any(t in self.v.function for t in tokens)

    def _generic(self, sentence: str, content: int, boiler: int) -> bool:
        """A sentence that fits any image: its ``content`` words are words about any picture or text
        (``boiler`` of them), or it says that a thing is itself with at least half its content words
        such words ("The scene is a scene.", "The colours in the image are colours.")."""
        if not content:
            return False
        share = boiler / content
        if content >= self.generic_min_words and share >= self.generic_word_share:
            return True
        return share >= 0.5 and any(p.search(sentence) for p in self.tautology)

    def hits(self, doc: Doc) -> Iterator[tuple[str, str]]:
        raw = doc.norm
        if raw:
            if len(raw) >= 40:
                symbols = _symbols(raw)
                if symbols / len(raw) > self.symbol_share:
                    yield "symbols", f"{symbols}/{len(raw)} characters are symbols"
            if m := self.symbol_run.search(raw):
                yield "symbols", f"symbol run: {m.group(0)[:40]}"
        text = doc.lower
        if m := self.placeholder.search(text):
            yield "placeholder", f"placeholder text: {m.group(0)}"
        yield from self._about_picture(doc)
        others = self.foreign(doc)
        # one long sentence in another language about any picture after a short subject ("Una playa. La
        # imagen transmite una sensación de paz y armonía, invitando al espectador a ...")
        long = [s for s in others if len(s) >= self.mostly_chars]
        if long and sum(map(len, long)) >= self.padded_share * len(doc.native):
            long = [s for s in long if self._generic_foreign(s)]
        if long and sum(map(len, long)) >= self.padded_share * len(doc.native):
            yield "mostly_generic", f"{sum(map(len, long))}/{len(doc.native)} characters fit any image: {long[0][:60]}"
        if not self.english(doc):
            foreign = [s for s in others if self._generic_foreign(s)] if len(others) >= self.generic_sentences else []
            if len(foreign) >= self.generic_sentences and \
                    len(foreign) >= self.generic_share * len(doc.units(doc.native, "sentence")):
                yield "generic_sentences", f"{len(foreign)} sentences fit any image: {foreign[0][:60]}"
            return
        fill = [m.group(0) for m in self.filler.finditer(text)]
        if len(fill) >= self.fillers:
            yield "fillers", f"{len(fill)} filler phrases: {', '.join(fill)[:80]}"
        sents = doc.units(text, "sentence")
        counts = [self._boilerplate_count(toks) for toks in sentence_tokens(doc, text)]
        generic = [s for s, (content, boiler) in zip(sents, counts, strict=True) if self._generic(s, content, boiler)]
        if (padded := self._padded(sents, counts, sentence_tokens(doc, text))) is not None:
            yield "mostly_generic", padded
        if others and len(generic) + len(others) >= self.generic_sentences:  # a sentence in another language added
            generic += [s for s in others if self._generic_foreign(s)]
        if len(generic) >= self.generic_sentences and len(generic) / len(sents) >= self.generic_share:
            yield "generic_sentences", f"{len(generic)}/{len(sents)} sentences fit any image: {generic[0][:60]}"
        return


JUDGE_GUARDS = ("hedging", "keyword_stuffing", "rewording", "padding")

__all__ = ["JUDGE_GUARDS", "VOCAB", "HedgingGuard", "JudgeVocab", "KeywordStuffingGuard", "PaddingGuard",
           "RewordingGuard", "load_vocab", "sentences"]
