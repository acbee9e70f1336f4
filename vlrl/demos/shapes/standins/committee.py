"""Rule-based stand-ins for RubiCap's teacher committee and rubric writer, in the shapes world.

RubiCap's rubrics come from several strong VLM teachers and an LLM rubric writer. On a laptop
there are none, so the shapes world provides stand-ins that run *through the real code*: each is a
``py:`` backend (:mod:`vlrl.core.backends.python`), so ``vlrl data teacher-captions`` and
``vlrl data rubrics`` call them exactly as they would call a served model, and the writer's JSON
goes through the real schema, strictness checks and corrective retries.

**Teachers** (``py:vlrl.demos.shapes.standins.committee:teacher?profile=...&rate=...``) read the picture with
a pixel rule (:func:`~vlrl.demos.shapes.standins.perception.perceive`: connected regions of the palette colours; fill ratio tells square,
circle and triangle apart, width tells size; no access to the scene's facts) and then make the
mistakes of their *profile*, seeded by the image so a rerun gives the same caption:

* ``omit`` — leaves each attribute out with probability ``rate`` (a terse teacher);
* ``wrong`` — states each attribute wrongly with probability ``rate`` (a careless one);
* ``invent`` — with probability ``rate`` adds a shape that is not there (a hallucinating one);
* ``exact`` — none of the above.

**Writer** (``py:vlrl.demos.shapes.standins.committee:writer``) implements the paper's rules over the
world's grammar: a *consensus fact* is a statement at least two teachers make that no more teachers
contradict; each consensus fact the student caption contradicts or leaves out is a *deficiency*
with a severity (critical: wrong shape count or wrong shape type; important: a wrong colour or size,
or a missing colour or shape; minor: a missing size), and each deficiency gets one self-contained
binary rubric. It is a deterministic stand-in for an LLM writer, documented as such.
"""

from __future__ import annotations

import json
import random
import re
from collections import Counter
from typing import Any

from vlrl.demos.shapes.kit import world as W
from vlrl.demos.shapes.standins.perception import image_of, image_seed, perceive

PROFILES = ("exact", "omit", "wrong", "invent")
# The RubiCap demo's committee, (name, error profile, rate): omissions, wrong attributes, invented
# shapes. The demo runs it, and its rubric judge is trained on rubrics this committee produces.
COMMITTEE = (("terse", "omit", 0.35), ("careless", "wrong", 0.15), ("dreamer", "invent", 0.3))
_ATTRS = ("shape", "colour", "size")


# -- teachers ----------------------------------------------------------------------------------


def teacher_items(seen: list[W.Item], profile: str, rate: float, rng: random.Random) -> list[W.Item]:
    """What a teacher of ``profile`` says about the items it perceived."""
    if profile == "omit":
        return W.stated_items(W.Scene("t", seen), rng, rate)
    if profile == "wrong":
        out = []
        pools = {"shape": W.SHAPES, "colour": tuple(W.COLOURS), "size": W.SIZES}
        for it in seen:
            vals = {a: getattr(it, a) for a in _ATTRS}
            for a in _ATTRS:
                if rng.random() < rate:
                    vals[a] = rng.choice([v for v in pools[a] if v != vals[a]])
            out.append(W.Item(position=it.position, **vals))
        return out
    if profile == "invent" and len(seen) < 3 and rng.random() < rate:
        extra = W.Item(position="", shape=rng.choice(W.SHAPES), colour=rng.choice(list(W.COLOURS)),
                       size=rng.choice(W.SIZES))
        things = list(seen)
        things.insert(rng.randrange(len(things) + 1), extra)
        return [W.Item(position=p, shape=t.shape, colour=t.colour, size=t.size)
                for p, t in zip(W.POSITIONS[len(things)], things, strict=True)]
    return [W.Item(position=it.position, shape=it.shape, colour=it.colour, size=it.size) for it in seen]


def teacher(profile: str = "exact", rate: str = "0.3", name: str = ""):
    """``py:`` factory of one teacher (see the module docstring); ``name`` only salts its randomness."""
    if profile not in PROFILES:
        raise ValueError(f"teacher profile {profile!r} is not one of {PROFILES}")
    p = float(rate)

    def reply(messages, sampling):
        image = image_of(messages)
        seen = perceive(image)
        if not seen:
            return "an empty dark image."
        said = teacher_items(seen, profile, p, image_seed(image, f"{profile}/{rate}/{name}"))
        return W.caption_from_items(said)

    return reply


# -- rubric writer -----------------------------------------------------------------------------

_BLOCK = re.compile(r"^\[(T\d+|STUDENT)\]\n(.*?)(?=\n\n|\Z)", re.M | re.S)


def facts_of(items: list[W.Item] | None) -> dict[tuple[str, str], str]:
    """A caption's statements as ``{(subject, attribute): value}``; the count is one of them."""
    if not items:
        return {}
    shapes = [it for it in items if not it.is_word]
    out = {("scene", "count"): W.NUMBERS[len(shapes) - 1]} if shapes else {}
    for it in shapes:
        for a in _ATTRS:
            v = getattr(it, a)
            if v:
                out[(it.position, a)] = v
    return out


def rubric_for(key: tuple[str, str], value: str) -> tuple[str, str]:
    where, attr = key
    if attr == "count":
        n = value
        return (f"The caption describes exactly {n} shape{'s' if n != 'one' else ''}.",
                f"Pass if the caption describes {n} shape{'s' if n != 'one' else ''} and no other; "
                "fail if it describes more or fewer.")
    place = W.WHERE[where]
    if attr == "shape":
        return (f"The caption says the shape {place} is a {value}.",
                f"Pass if the caption names the shape {place} as a {value}; fail if it names another shape or none.")
    word = "colour" if attr == "colour" else "size"
    return (f"The caption says the shape {place} is {value}.",
            f"Pass if the caption gives the shape {place} the {word} {value}; fail if it gives another {word} or none.")


def _fact(key: tuple[str, str], value: str) -> str:
    if key[1] == "count":
        return f"The image holds {value} shape{'s' if value != 'one' else ''}."
    return f"The {key[1]} of the shape {W.WHERE[key[0]]} is {value}."


def write_rubrics(teachers: dict[str, str], student: str) -> dict[str, Any]:
    """The writer's answer for one image in the schema of
    :func:`vlrl.methods.rubicap.schema.validate_writer_output`: consensus facts with ids, the facts
    the student states correctly, deficiencies citing the fact they rest on (and the student's
    wrong word as ``student_span``), one rubric each, and ``student_meets_all``."""
    stated = {label: facts_of(W.parse_caption(cap)) for label, cap in teachers.items()}
    support: dict[tuple[str, str], Counter] = {}
    for facts in stated.values():
        for k, v in facts.items():
            support.setdefault(k, Counter())[v] += 1
    consensus = []
    for k, votes in support.items():
        (value, n), *rest = votes.most_common()
        if n >= 2 and (not rest or rest[0][1] < n):
            consensus.append((k, value, sorted(lab for lab, f in stated.items() if f.get(k) == value)))
    # an attribute of a slot counts only if the slot exists in the consensus layout
    count = next((v for k, v, _ in consensus if k == ("scene", "count")), None)
    layout = W.POSITIONS[W.NUMBERS.index(count) + 1] if count else ()
    consensus = [c for c in consensus if c[0][0] == "scene" or c[0][0] in layout]
    consensus.sort(key=lambda c: (c[0][0] != "scene", c[0]))
    fid = {k: f"f{n}" for n, (k, _, _) in enumerate(consensus, 1)}
    mine = facts_of(W.parse_caption(student))
    deficiencies, rubrics, correct = [], [], []
    for k, value, _ in consensus:
        got = mine.get(k)
        if got == value:
            correct.append(fid[k])
            continue
        if got is None and k[1] != "count" and mine.get(("scene", "count")) not in (None, count):
            continue  # the student's layout differs: the count rubric already says so
        if k[1] == "count" or (k[1] == "shape" and got is not None):
            severity = "critical"
        elif got is not None or k[1] in ("colour", "shape"):
            severity = "important"
        else:
            severity = "minor"
        did = f"d{len(deficiencies) + 1}"
        where = "the scene" if k[0] == "scene" else f"the shape {W.WHERE[k[0]]}"
        what = f"states {got} for the {k[1]} of {where}" if got else f"does not give the {k[1]} of {where}"
        span = got if got and re.search(rf"\b{re.escape(got)}\b", student) else None
        deficiencies.append({"id": did, "severity": severity, "description": f"The caption {what}; it is {value}.",
                             "facts": [fid[k]], "student_span": span})
        criterion, rule = rubric_for(k, value)
        rubrics.append({"id": f"r{len(rubrics) + 1}", "deficiency": did, "criterion": criterion, "pass_rule": rule,
                        "pitfall": False})
    facts = [{"id": fid[k], "fact": _fact(k, v), "sources": labels} for k, v, labels in consensus]
    return {"consensus_facts": facts, "student_correct": correct, "deficiencies": deficiencies, "rubrics": rubrics,
            "student_meets_all": not deficiencies}


def writer():
    """``py:`` factory of the rubric writer: reads the rendered writer prompt, answers its JSON."""

    def reply(messages, sampling):
        text = next(p.get("text", "") for m in messages if m["role"] == "user"
                    for p in (m["content"] if isinstance(m["content"], list) else [{"text": m["content"]}]))
        blocks = dict((label, body.strip()) for label, body in _BLOCK.findall(text))
        student = blocks.pop("STUDENT", None)
        if student is None or len(blocks) < 2:
            raise ValueError("the writer prompt holds no student caption or fewer than two teacher captions")
        return json.dumps(write_rubrics(blocks, student))

    return reply
