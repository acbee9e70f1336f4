"""The two rule-based stand-ins of the Vision-R1 demo's cold start, used through the ``py:`` backend seam.

Vision-R1's cold start needs a VLM (pseudo chain of thought, then a description) and a strong text
reasoner. Here, for the problems of :mod:`vlrl.demos.shapes.kit.problems`:

* :func:`vlm` reads the image with the committee's pixel-rule reader
  (:func:`vlrl.demos.shapes.standins.perception.perceive`) and states what it saw in the caption
  grammar; with ``error_rate`` it mis-states one attribute of a scene now and then, like a real VLM,
  so the cold start's correctness filter has something to reject;
* :func:`reasoner` never sees the image: it parses the description with the world's grammar
  (:func:`vlrl.demos.shapes.kit.world.parse_caption`) and works the question out by rule
  (:func:`solve`). A description it cannot read gets "unknown" as the answer, which the cold start
  then rejects as wrong.

**The chain.** :func:`solve` turns the facts a description states into a reasoning chain in the
world's own caption grammar followed by the step the question needs::

    <think>a large red circle on the left and a small blue square on the right. red shapes: 1.</think><answer>1</answer>

**Varied routes and reasoned slips** (``reasoner(styles=3, slip=p)``, the demo's default cold start).
A real R1-style reasoner does not write one template: it reaches the same answer by different
routes, and where it errs it errs for a reason. :func:`solve_varied` picks, per problem (from a
hash of the description and question, so reruns agree), one of three routes for the question's
kind, and with probability ``slip`` makes the mistake that kind invites:

* *count* — it **miscounts under clutter**: in a two-shape scene it overlooks one shape;
* *not count* — it **compares the wrong pair**: it counts the shapes that *are* the colour instead
  of those that are not;
* *larger* — it **compares the wrong pair** the other way round (right against left);
* *what is the larger shape?* — it **compares the wrong way round** and names the smaller shape
  (a slip that only shows when the sizes differ, so it is always thrown away).

A slip mostly changes the answer, and the cold start's answer filter throws the chain away; where
it does not (the overlooked shape was not the asked colour; one of two shapes is the colour;
the sizes are equal), a chain that took a wrong route to the right answer is kept, as the paper's
filter keeps any chain whose final answer is right. The kept set so teaches the right procedure
as one of several routes, not the only one.
"""

from __future__ import annotations

import hashlib
import random
import re
from typing import Any

from vlrl.demos.shapes.kit import world as W
from vlrl.demos.shapes.kit.problems import (
    LARGER,
    LARGER_ITEM,
    SMALLER_ITEM,
    answer_larger,
    answer_larger_item,
    item_name,
)

_COUNT = re.compile(r"^how many (\w+) shapes are there\?$")
_NOT = re.compile(r"^how many shapes are not (\w+)\?$")
_OTHER = re.compile(r"^which shape is not (\w+)\?$")


def solve(items: list[W.Item] | None, question: str) -> tuple[str, str] | None:
    """``(chain, answer)`` for ``question`` given the stated ``items``; None when they do not settle it."""
    if not items or any(it.is_word or None in (it.colour, it.shape, it.size) for it in items):
        return None
    said = W.caption_from_items(items)
    if m := _COUNT.match(question):
        n = sum(it.colour == m.group(1) for it in items)
        return f"{said} {m.group(1)} shapes: {n}.", str(n)
    if m := _NOT.match(question):
        n = sum(it.colour == m.group(1) for it in items)
        return f"{said} shapes: {len(items)}, {m.group(1)}: {n}, {len(items)} - {n} = {len(items) - n}.", str(len(items) - n)
    if question == LARGER and len(items) == 2:
        ans = answer_larger(items)
        return f"{said} left {items[0].size}, right {items[1].size}.", ans
    if question in (LARGER_ITEM, SMALLER_ITEM) and len(items) == 2:
        word, size = ("larger", "large") if question == LARGER_ITEM else ("smaller", "small")
        ans = answer_larger_item(items, size)
        return f"{said} left {items[0].size}, right {items[1].size}. {word}: {ans}.", ans
    if (m := _OTHER.match(question)) and len(items) == 2:
        rest = [it for it in items if it.colour != m.group(1)]
        if len(rest) != 1:
            return None
        return f"{said} not {m.group(1)}: {item_name(rest[0])}.", item_name(rest[0])
    return None


ROUTES = 3
"""Routes per question kind in :func:`solve_varied`."""


def solve_varied(items: list[W.Item] | None, question: str, rng: random.Random, styles: int = ROUTES,
                 slip: float = 0.0) -> tuple[str, str] | None:
    """``(chain, answer)`` by one of ``styles`` routes, with a reasoned slip at rate ``slip`` (module docstring).

    Every route starts with the description (what :func:`recheck` re-states after); ``styles=1``
    and ``slip=0`` give :func:`solve`'s chain exactly."""
    if not items or any(it.is_word or None in (it.colour, it.shape, it.size) for it in items):
        return None
    said = W.caption_from_items(items)
    route = rng.randrange(styles)
    slipped = rng.random() < slip
    if (m := _COUNT.match(question)) or (m := _NOT.match(question)):
        colour, negated = m.group(1), question.startswith("how many shapes are not")
        seen = items
        if slipped and not negated and len(items) > 1:  # miscounts under clutter: overlooks one shape
            seen = [items[rng.randrange(len(items))]]
        if slipped and negated:  # compares the wrong pair: counts the colour, not the rest
            negated = False
        hit = [it for it in seen if (it.colour == colour) != negated]
        n = len(hit)
        what = f"not {colour}" if negated else colour
        if route == 0:
            if negated:
                k = len(seen) - n
                return f"{said} shapes: {len(seen)}, {colour}: {k}, {len(seen)} - {k} = {n}.", str(n)
            return f"{said} {colour} shapes: {n}.", str(n)
        if route == 1:
            marks = " ".join(f"{it.position} {it.colour}: {'yes' if it in hit else 'no'}." for it in seen)
            return f"{said} {what}? {marks} count: {n}.", str(n)
        names = ", ".join(f"{it.size} {it.shape}" for it in hit) or "none"
        return f"{said} {what}: {names}. so {n}.", str(n)
    if question == LARGER and len(items) == 2:
        a, b = (items[1], items[0]) if slipped else (items[0], items[1])  # the wrong pair: right against left
        ans = answer_larger([a, b])
        if route == 0:
            return f"{said} left {a.size}, right {b.size}.", ans
        if route == 1:
            return f"{said} sizes: {a.size} then {b.size}, larger: {ans}.", ans
        return f"{said} {'same size' if ans == 'same' else f'the {ans} one is larger'}.", ans
    if (m := _OTHER.match(question)) and len(items) == 2:
        colour = m.group(1)
        rest = [it for it in items if it.colour != colour]
        if len(rest) != 1:
            return None
        pick = [it for it in items if it.colour == colour][0] if slipped else rest[0]  # the wrong pair: the colour's own
        ans = item_name(pick)
        if route == 0:
            return f"{said} not {colour}: {ans}.", ans
        if route == 1:
            marks = ", ".join(f"{it.position} {it.colour}: {'no' if it.colour == colour else 'yes'}" for it in items)
            return f"{said} not {colour}? {marks}. so {ans}.", ans
        own = [it for it in items if it.colour == colour][0]
        return f"{said} the {colour} one is the {item_name(own)}, the other is the {ans}.", ans
    if question in (LARGER_ITEM, SMALLER_ITEM) and len(items) == 2:
        word, size = ("larger", "large") if question == LARGER_ITEM else ("smaller", "small")
        # the three routes: compare the sizes by position, then name; name the larger straight away;
        # restate each shape with its size, then name
        ans = answer_larger_item(items, size)
        if slipped and ans != "same":  # compares the wrong way round: takes the smaller for the larger
            ans = answer_larger_item(items, "small" if size == "large" else "large")
        if route == 0:
            return f"{said} left {items[0].size}, right {items[1].size}. {word}: {ans}.", ans
        if route == 1:
            return f"{said} {'same size' if ans == 'same' else f'the {word} one is the {ans}'}.", ans
        sizes = ", ".join(f"{item_name(it)} {it.size}" for it in items)
        return f"{said} {sizes}. so {ans}.", ans
    return None


def format_response(chain: str, answer: str) -> str:
    return f"<think>{chain}</think><answer>{answer}</answer>"


# -- stand-ins behind the py: backend seam -------------------------------------------------------


def _text_of(messages: list[dict[str, Any]]) -> str:
    parts = []
    for m in messages:
        c = m.get("content")
        if isinstance(c, str):
            parts.append(c)
        elif isinstance(c, list):
            parts += [p.get("text", "") for p in c if p.get("type") == "text"]
    return "\n".join(parts)


def _slip(items: list[W.Item], rng: random.Random) -> list[W.Item]:
    """Mis-state one attribute of one item (a VLM's perception error)."""
    items = [W.Item(position=it.position, shape=it.shape, colour=it.colour, size=it.size) for it in items]
    it = rng.choice(items)
    attr = rng.choice(("colour", "shape", "size"))
    pool = {"colour": list(W.COLOURS), "shape": W.SHAPES, "size": W.SIZES}[attr]
    setattr(it, attr, rng.choice([v for v in pool if v != getattr(it, attr)]))
    return items


def vlm(error_rate: str = "0.1", version: str = "1"):
    """``py:`` factory of the stand-in VLM of the cold start (see the module docstring).

    It answers both cold-start VLM prompts: the pseudo chain of thought (the prompt carries the
    question and its correct answer) gets the perceived scene and the answer; the description gets
    the perceived scene alone, so it never states the answer. A mis-perception (``error_rate`` per
    image, decided by the image's pixels so both prompts see the same mistake) goes into both.
    """
    from vlrl.demos.shapes.standins.perception import image_of, image_seed, perceive

    p = float(error_rate)

    def reply(messages, sampling):
        image = image_of(messages)
        seen = perceive(image)
        if not seen:
            return "an empty dark image."
        rng = image_seed(image, f"vr1-vlm/{error_rate}/{version}")
        if rng.random() < p:
            seen = _slip(seen, rng)
        said = W.caption_from_items(seen)
        text = _text_of(messages)
        if "Correct answer:" in text:
            m = re.search(r"Question: (.*)", text)
            answer = re.search(r"Correct answer: (.*)", text)
            return (f"The image shows {said} The question is \"{m.group(1).strip() if m else ''}\"; "
                    f"reading the shapes above leads to {answer.group(1).strip() if answer else ''}.")
        return said

    return reply


def recheck(chain: str, said: str, times: int) -> str:
    """``chain`` with its final step re-stated ``times`` more times, each after "check:"."""
    if not chain.startswith(said):  # the step is what follows the description; anything else is a bug
        raise ValueError(f"chain {chain!r} does not start with its description {said!r}")
    step = chain[len(said):].strip()
    return chain + "".join(f" check: {step}" for _ in range(times))


def at_a_glance(answer: str) -> str:
    """The chain of a reasoner that answers at a glance: the answer alone, neither the scene nor the step."""
    return f"at a glance: {answer}."


def reasoner(version: str = "1", rechecks: str = "0", styles: str = "1", slip: str = "0", glance: str = "0"):
    """``py:`` factory of the rule-based text reasoner: it solves from the description alone.

    ``rechecks=N`` makes it *overthink* the way R1-style reasoners do: after its step it re-states
    the step 0..N more times ("check: red shapes: 1."), the number drawn per problem from a hash of
    the description and question. The re-checks never change the answer, so the cold start's
    answer filter keeps and rejects what it would without them; they only lengthen the chains a
    student learns to imitate. That long-chain habit is the premise of PTST (a short length cap
    first), which the default stand-in (``rechecks=0``) does not give the demo.

    ``styles=N`` (routes per question kind) and ``slip=p`` (rate of reasoned mistakes) switch to
    :func:`solve_varied`; the defaults give the single-route, never-wrong reasoner.

    ``glance=g`` makes it answer a share ``g`` of the problems *at a glance*
    (:func:`at_a_glance`): the answer it reached, without writing the scene or the step, as
    reasoners do on questions that look easy. Which problems glance is drawn from a hash of the
    description and question, apart from the route and slip draws, so it says nothing about the
    scene; the answer is the one its route reached (slips included), so the cold start's answer
    filter keeps and rejects exactly what it would without the glance. A glance is never re-checked.
    """
    most, routes, p, look = int(rechecks), int(styles), float(slip), float(glance)
    if not 0 <= look <= 1:
        raise ValueError(f"glance is a share of problems in [0, 1], got {glance}")

    def reply(messages, sampling):
        text = _text_of(messages)
        desc = re.search(r"<description>\s*(.*?)\s*</description>", text, re.S)
        q = re.search(r"Question: (.*)", text)
        items = W.parse_caption(desc.group(1)) if desc else None
        if q and (routes > 1 or p > 0):
            key = f"{desc.group(1) if desc else ''}|{q.group(1).strip()}|{version}"
            solved = solve_varied(items, q.group(1).strip(), random.Random(hashlib.sha1(key.encode()).hexdigest()),
                                  routes, p)
        else:
            solved = solve(items, q.group(1).strip()) if q else None
        if solved is None:
            return format_response("the description does not settle the question.", "unknown")
        chain, answer = solved
        # without ``version``: the key the docs' glance runs were measured with, so they reproduce
        if look and W.share(f"{desc.group(1)}|{q.group(1).strip()}|glance") < look:
            return format_response(at_a_glance(answer), answer)
        if most:
            times = hashlib.sha1(f"{desc.group(1)}|{q.group(1)}".encode()).digest()[0] % (most + 1)
            chain = recheck(chain, W.caption_from_items(items), times)
        return format_response(chain, answer)

    return reply
