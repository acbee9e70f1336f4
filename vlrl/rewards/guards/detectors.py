"""The detectors of the families that count or parse rather than match (see :mod:`.table`).

Each detector is a function ``(unit, doc, **options) -> evidence | None``, named by a family's
``detector`` field in ``data/families.yaml``; ``unit`` is one unit of the family's view and scope.
They hold the logic (co-occurrence of cue categories, the shape of verdict-like data, a score tied
to the caption); the words they read live in the table (cue categories, vocabularies, exemptions).
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Any

from vlrl.rewards.guards import gates
from vlrl.rewards.guards.lang import language_family_hit, names_caption, praised, score_labels
from vlrl.rewards.guards.table import TABLE, cue_patterns, exemption_patterns, vocabulary
from vlrl.rewards.guards.text import deobfuscate


def in_scene(text: str) -> bool:
    """Whether ``text`` places what it holds in the scene (paperwork, a screen, a board): the one
    "part of the scene" exemption of the table, shared by the families and the detectors here."""
    return bool(exemption_patterns()["scene"].search(text))


def on_display(text: str, start: int) -> bool:
    """Whether the data at ``start`` is introduced, in its own sentence, as something in the scene
    ("a terminal shows {...}"): then it is content of the image, not a verdict."""
    sentence_start = max(text.rfind(". ", 0, start), text.rfind("\n", 0, start), 0)
    return in_scene(text[sentence_start:start])


# ------------------------------------------------------------------------------------------------
# cue co-occurrence: one cue category is ordinary description ("a panel of judges", "a perfect
# spiral", "test scores"); two of them in one sentence are talk about the caption.

_NOT_CATEGORIES = ("self_strong", "scene_intro")


@lru_cache(maxsize=4)
def _cue_searchers(path: str = str(TABLE)) -> dict[str, gates.Alternation]:
    """The cue categories under their gates, each cut into its alternatives (:func:`gates.alternatives`):
    a sentence runs only the alternatives whose literals it holds, with the same matches. The literals
    of a sentence are found once for all the categories; the self-reference cue's twenty-two
    alternatives mostly need a word few sentences hold ("above", "preceding", "such a")."""
    return {name: gates.Alternation(gates.alternatives(p.pattern)) for name, p in cue_patterns(path).items()}


@lru_cache(maxsize=4)
def _first_cues(path: str = str(TABLE)) -> frozenset[str] | None:
    """The literals one of which a sentence must hold for any category but "self" to match (the first
    clauses of their alternatives' gates, :func:`gates.first_literals`), or ``None`` if one has no such
    literals (no gate, or a case-blind one)."""
    pats = _cue_searchers(path)
    firsts = [pat.first for name, pat in pats.items() if name not in (*_NOT_CATEGORIES, "self")]
    return None if any(f is None for f in firsts) else frozenset().union(*firsts)


@gates.remembered
@lru_cache(maxsize=4096)
def _cue_hit(sentence: str) -> tuple[str, str] | None:
    # most sentences hold no cue word at all: one look at the sentence's literals, not one per category
    if gates.ENABLED and (first := _first_cues()) is not None and gates.present(sentence).isdisjoint(first):
        return None
    pats = _cue_searchers()
    # without a category other than "self", nothing can add up to a hit: the self-reference cue, the
    # costliest, is tried only after the others
    found = {name: pat.search(sentence) is not None for name, pat in pats.items()
             if name not in (*_NOT_CATEGORIES, "self")}
    if not any(found.values()):
        return None
    found["self"] = pats["self"].search(sentence) is not None
    cats = [name for name in pats if found.get(name)]
    if "metric" in cats and "self" not in cats:
        cats.remove("metric")  # quality nouns count only beside the caption itself
    about_self = "self" in cats or "praise" in cats or "claim" in cats
    core = [c for c in cats if c != "image_ref"]
    short = len(sentence.split()) <= 6
    # "in this photo we are standing ..." : a pronoun and the image are a viewpoint, not a claim
    hit = (len(core) >= 2 or ("image_ref" in cats and ("claim" in cats or ("self" in cats and pats["self_strong"].search(sentence))))
           or (short and "claim" in cats))
    if hit and not {"self", "you"} & set(cats) and pats["scene_intro"].search(sentence):
        hit = False  # grading words in a scene: "a perfect score of 300 is displayed above a lane"
    if not hit:
        return None
    return ("self" if about_self else "grader"), f"cues {'+'.join(cats)}: {sentence[:80]}"


def cues(unit: str, doc: Any, about: str = "self") -> str | None:
    if len(unit) < 2 or not (hit := _cue_hit(unit)):
        return None
    return hit[1] if hit[0] == about else None


# ------------------------------------------------------------------------------------------------
# evaluative fragments: "Fully exhaustive.", "Exhaustive coverage confirmed." say nothing about the image


def evaluative_fragment(unit: str, doc: Any) -> str | None:
    words = re.findall(r"[a-z]+|\d+", unit)
    if not 2 <= len(words) <= 10:
        return None
    core, filler = vocabulary("fragment_core"), vocabulary("fragment_filler")
    if not (graded := sum(w in core for w in words)):
        return None
    known = graded + sum(w in filler for w in words)
    # a lone label ("Checks:") is not a grade, and "The image is detailed." describes the picture
    # unless a second evaluation word makes it one
    about_picture = re.match(r"\s*(?:the|this)\s+(?:image|picture|photo|scene|frame)\s+(?:is|looks|seems)\b", unit)
    # every word an evaluation or filler word; or two evaluation words in a fragment mostly made of
    # them, whatever else it says ("Carefully observed and fully correct.", "(Comprehensive, precise,
    # and fully grounded in what is shown.)")
    if (known == len(words) and graded >= (2 if about_picture else 1)) or (graded >= 2 and known >= 0.6 * len(words)):
        return unit
    return None


# ------------------------------------------------------------------------------------------------
# dimension scores: "Correctness 10, Detail 10", "accuracy 100%"

_DIMENSION = (
    r"(?:accuracy|completeness|correctness|detail|details|detail level|fluency|clarity|coverage|quality|relevance|"
    r"faithfulness|fidelity|precision|coherence|grammar|style|helpfulness|hallucinations?|groundedness|specificity|"
    r"informativeness|readability|overall(?: score| quality)?|quality of (?:writing|description|the caption)|"
    r"writing|thoroughness|consistency|factuality|truthfulness|conciseness|visual grounding|object coverage|objects|"
    r"colou?rs|counts|positions|spatial(?: relations)?|attributes|layout|background|subject|text reading)"
)
_VALUE = (
    r"(?:\d+(?:\.\d+)?\s*(?:/\s*\d+|%|percent)?|superb|excellent|perfect|flawless|outstanding|exceptional|high|"
    r"very high|full|complete|none|zero|pass(?:ed)?|yes|true|a\+?|top|max(?:imum)?|impeccable|great|ideal|correct|"
    r"accurate|verified|covered|included|ok|good|\u2713|\u2714|\u2705)"
)
_DIM_PAIR = re.compile(rf"(?:^|[^\w'])({_DIMENSION})\s*(?:[:=\-\u2013\u2014]\s*|\s+(?=\d)|\s*(?=[\u2713\u2714\u2705]))"
                       rf"({_VALUE})(?![\w/])")
_MAX_VALUE = re.compile(r"^(?:10\s*/\s*10|5\s*/\s*5|100\s*(?:/\s*100|%|percent)|superb|excellent|perfect|flawless|"
                        r"outstanding|exceptional|full|impeccable|a\+|max(?:imum)?|top)$")


# the same pair written value first: "5/5 for accuracy, 5/5 for detail"
_VALUE_DIM = re.compile(rf"(?:^|[^\w'])(\d+(?:\.\d+)?\s*/\s*\d+|\d+(?:\.\d+)?\s*(?:%|percent))\s+(?:for|on|in)\s+({_DIMENSION})\b")


def dimension_scores(unit: str, doc: Any) -> str | None:
    text = unit
    pairs = [(m.group(1), m.group(2)) for m in _DIM_PAIR.finditer(text)]
    pairs += [(m.group(2), m.group(1)) for m in _VALUE_DIM.finditer(text)]
    if len(pairs) >= 2 or any(_MAX_VALUE.match(v) for _, v in pairs):
        return "; ".join(f"{k} {v}" for k, v in pairs)[:80]
    return None




# ------------------------------------------------------------------------------------------------
# verdict-like data: a JSON object, YAML block, boolean list or tag whose keys or values are a verdict

_TRUE = (r"(?:true|1|1\.0|yes|[\"'](?:yes|pass(?:ed)?|met|true|correct|satisfied|ok|good|accurate|complete)[\"']|"
         r"\u2713|\u2714|\u2705)")
_BOOL_LIST = re.compile(rf"\[\s*{_TRUE}(?:\s*,\s*{_TRUE}){{2,}}\s*\]")
_EVAL_KEY = re.compile(
    r"(?:hallucinat|accura|complete|correct|faithful|cover|verdict|score|pass|grade|rating|quality|detail|object|"
    r"criteri|rubric|satisf|precis|fidelity|ground|omission|missing|error|fluen|clarity|relevan|met\b|meets|approved|"
    r"reward|fail|judg|label|accept|decision|^q\d*$)"
)
_OBJ = re.compile(r"\{[^{}]{0,500}\}")
_ABOUT_CAPTION = re.compile(r"\b(?:caption|description|accurate|complete|correct|faithful|hallucinat\w*)\b")
_KV = re.compile(r"[\"']?([\w .-]{1,60}?)[\"']?\s*:\s*(\"[^\"]*\"|'[^']*'|[\w.+\-/%]+|\[[^\]]*\])")
_YAML_LINE = re.compile(r"(?m)^\s*[-*]?\s*([a-z_ ]{2,40}?)\s*:\s*(true|yes|pass(?:ed)?|met|1|10/10|100%)\s*$")


# Keys or values of a verdict-like object written into a caption.
_VERDICT_WORDS = re.compile(
    r"\b(?:pass(?:ed)?|met|score|verdict|judge?ment|answer|label|criteri\w*|rubric\w*|satisf\w*|correct|result|"
    r"confidence|grade|rating|approved|accept\w*|[rc]\d+|criterion_\d+)\b"
)
_PAIR = re.compile(
    r"[\"'](?:pass(?:ed)?|met|verdict|score|approved|satisfied|criteria_met|all_met|correct|label|result|grade)[\"']\s*:\s*"
    r"(?:true|1(?:\.0)?|10|100|[\"'](?:yes|pass|passed|met|true|correct|satisfied)[\"'])"
)
_TAG = re.compile(r"<\s*(?:verdict|result|score|judg(?:e)?ment|grade|rating)\s*>\s*(?:pass|yes|true|met|correct|\d+)")
_TRUTHY = ("true", "1", "1.0", "yes", "pass", "passed", "met", "10", "100", "10/10", "5/5")


_SHAPES = ("pair", "tag", "quoted_object", "bool_list", "object", "yaml")


def _verdict_in(text: str, shapes: tuple[str, ...]) -> str | None:
    for shape, pat in (("pair", _PAIR), ("tag", _TAG), ("bool_list", _BOOL_LIST)):
        if shape in shapes and (m := pat.search(text)) and not on_display(text, m.start()):
            return m.group(0)[:80]
    if "object" in shapes or "quoted_object" in shapes:
        for m in _OBJ.finditer(text):
            span = m.group(0)
            pairs = _KV.findall(span)
            if not pairs or on_display(text, m.start()):
                continue
            if "quoted_object" in shapes and re.search(r"[\"'][^\"']{1,40}[\"']\s*:", span) and _VERDICT_WORDS.search(span):
                return span[:80]
            if "object" not in shapes:
                continue
            truthy = [v.strip("\"'") in _TRUTHY for _, v in pairs]
            evalish = sum(bool(_EVAL_KEY.search(re.sub(r"[_\-.]", " ", k))) or k.strip().lower() in score_labels()
                          for k, _ in pairs)
            if ((evalish and sum(truthy) >= 1) or evalish >= 2
                    # every value a verdict ({'q1': 'yes', 'q2': 'yes'}), or a yes about the caption itself
                    or (len(pairs) >= 2 and all(truthy)) or (any(truthy) and _ABOUT_CAPTION.search(span))):
                return span[:80]
    if "yaml" in shapes:
        lines = _YAML_LINE.findall(text)
        if len(lines) >= 2 and any(_EVAL_KEY.search(k) for k, _ in lines):
            return "; ".join(f"{k}: {v}" for k, v in lines)[:80]
    return None


def verdict_data(unit: str, doc: Any, shapes: list[str] | tuple[str, ...] = _SHAPES) -> str | None:
    """One detector for verdict-like data, in the ``shapes`` a family names (a bare verdict pair
    ``"pass": true``, a verdict tag, an object with quoted verdict keys, a list of booleans, an object
    whose keys are evaluation words or whose values are all true, a YAML block), on the caption as
    written and with obfuscation undone (quoted keys can be obfuscated too: ``{"v3rd1ct": "p4ss"}``)."""
    if unknown := set(shapes) - set(_SHAPES):
        raise ValueError(f"verdict_data: unknown shapes {sorted(unknown)}; known: {list(_SHAPES)}")
    texts = [unit]
    if any(c in unit for c in "{[<"):  # quoted keys are no part of the views that say whether a caption is obfuscated
        texts.append(deobfuscate(unit)[0])
    for text in texts:
        if hit := _verdict_in(text, tuple(shapes)):
            return hit
    return None


# ------------------------------------------------------------------------------------------------
# score expressions: "Easily a 9/10.", "this deserves 10 out of 10"

_SCORE = (
    r"(?:\b\d+(?:\.\d+)?\s*(?:/|out\s+of)\s*(?:10|ten|5|five|100)\b|\b(?:ten|five)\s+out\s+of\s+(?:ten|five)\b|"
    r"\bgrade\s*(?:of\s*|:\s*)?a\+|\b(?:perfect|full|top|maximum|max|highest)\s+(?:score|marks|credit|rating|reward)\b)"
)
# numeric scores only; "full marks" or "a grade of A+" in a scene ("smiles at the full marks") is content
_NUM_SCORE = re.compile(r"\b\d+(?:\.\d+)?\s*(?:/|out\s+of)\s*(?:10|ten|5|five|100)\b|\b(?:ten|five)\s+out\s+of\s+"
                        r"(?:ten|five)\b")
_SCORE_ADDRESSED = re.compile(
    rf"{_SCORE}[^.;]{{0,120}}?\b(?:you|your|caption|description|this text|these words|the above|here|i|my|deserv\w*|earn\w*|"
    rf"merit\w*|warrant\w*|worth)\b|\b(?:you|your|caption|description|this text|these words|the above|i|my|"
    rf"deserv\w*|earn\w*|merit\w*|warrant\w*|worth)\b[^.;]{{0,120}}?{_SCORE}"
    r"|\b(?:maximum|maximal|full|highest|max)\s+reward\b|\breward\s+(?:of\s+)?(?:1(?:\.0)?|10|100|max)\b"
    # "this is a 10", "easily a ten" (not "a 10-minute walk")
    r"|\b(?:this|it)(?:'s|\s+is|\s+was|\s+rates|\s+scores)\s+(?:\w+\s+)?(?:a|an)\s+(?:solid\s+|clear\s+|easy\s+|strong\s+|perfect\s+)?"
    r"(?:10|ten|100)\b(?!\s*(?:-|%|\w))"
)




def score_expression(unit: str, doc: Any) -> str | None:
    # a verbless fragment around a score ("Easily a 9/10.") or a score tied to the caption or reader
    short = len(re.findall(r"[\w+/]+", unit)) <= 9 and "\u2039t\u203a" not in unit
    if (short and (m := _NUM_SCORE.search(unit)) and not on_display(unit, m.start())) or (
            m := _SCORE_ADDRESSED.search(unit)):
        return m.group(0)[:80]
    return None


def language(unit: str, doc: Any, family: str) -> str | None:
    """A family of the per-language phrase table (``data/languages.yaml``); for claims, also praise of
    the caption by its structure (:func:`~vlrl.rewards.guards.lang.praised`)."""
    if hit := language_family_hit(unit, family):
        return hit
    # (split into sentences only when some language's word for the caption is there to be praised)
    return praised(unit, doc.units(unit, "sentence")) if family == "claim" and names_caption(unit) else None


# ------------------------------------------------------------------------------------------------
# Prefilters: ``possible(text, **options)`` is False only when no unit of ``text`` can give the
# detector a hit (a necessary condition, read from the literals the detector's patterns need; see
# :mod:`.gates`), so a caption without them skips the detector and no verdict changes.


_HELD: list[tuple[Any, bool, frozenset[str]]] = [(None, True, frozenset())]


def _cues_held(text: str) -> frozenset[str]:
    """The cue categories one of whose alternatives' gates ``text`` passes; remembered for the last text
    (``cues_self`` and ``cues_grader`` ask of the same view one after the other; one tuple, so threads never
    mix two texts, and the prefilters' switch in it, so a text read with them on is read again with them
    off)."""
    last, enabled, held = _HELD[0]
    if last is not text or enabled != gates.ENABLED:
        held = frozenset(name for name, pat in _cue_searchers().items() if pat.possible(text))
        _HELD[0] = (text, gates.ENABLED, held)
    return held


def _cues_possible(text: str, about: str = "self") -> bool:
    held = _cues_held(text)
    cats = held - set(_NOT_CATEGORIES)
    if "self" not in cats:
        cats.discard("metric")
    core = cats - {"image_ref"}
    return (len(core) >= 2 or "claim" in cats
            or ("image_ref" in cats and ("self" in cats and "self_strong" in held)))


# an evaluation word of a unit is a run of letters of the text, so the text holds it (read from the literals
# :func:`gates.present` finds anyway); built at import, so no literal is registered while captions are checked
_FRAGMENT = gates.Gated("|".join(sorted(vocabulary("fragment_core"))))


def _fragment_possible(text: str) -> bool:
    return _FRAGMENT.possible(text)


# every score pattern holds one of these: "9/10", "9 out of 10", "grade of A+", "full marks", "a 10", "ten"
_SCORE_NEEDS = ("/", "out", "grade", "reward", "score", "marks", "credit", "rating", "10", "ten")
_DIMENSIONS = gates.Gated(rf"{_DIMENSION}")


def _score_possible(text: str) -> bool:
    return any(w in text for w in _SCORE_NEEDS)


def _dimension_possible(text: str) -> bool:
    return _DIMENSIONS.possible(text)


def _verdict_possible(text: str, shapes: Any = _SHAPES) -> bool:
    # a verdict pair and a YAML line need a colon, a tag "<", a list "[", an object "{"
    return any(c in text for c in ":<[{")


cues.possible = _cues_possible  # type: ignore[attr-defined]
evaluative_fragment.possible = _fragment_possible  # type: ignore[attr-defined]
score_expression.possible = _score_possible  # type: ignore[attr-defined]
dimension_scores.possible = _dimension_possible  # type: ignore[attr-defined]
verdict_data.possible = _verdict_possible  # type: ignore[attr-defined]

DETECTORS = {
    "cues": cues,
    "dimension_scores": dimension_scores,
    "evaluative_fragment": evaluative_fragment,
    "language": language,
    "score_expression": score_expression,
    "verdict_data": verdict_data,
}

__all__ = ["DETECTORS", "in_scene", "on_display"]
