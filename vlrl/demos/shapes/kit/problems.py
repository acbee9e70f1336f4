"""Shapes-world reasoning problems with gold answers: the task of the Vision-R1 demo.

Each problem asks one question about a scene of one or two shapes (the world the demo's captioner
was warm-started on) whose answer needs a short chain: find the relevant items, then count, compare
or subtract. Three kinds:

* ``count`` — "how many red shapes are there?" (0, 1 or 2);
* ``not_count`` — "how many shapes are not red?" (the shape count minus the colour count);
* ``larger`` — "which shape is larger?" in two-shape scenes ("left", "right" or "same").

Those three kinds (the question set ``counts``) have at most three answers each, so a guesser's
pass@8 is 0.96 on them and pass@k cannot tell a sometimes-right procedure from coverage of the
answer space. The question sets ``items`` and ``item_mix`` (the demo's default) ask about
two-shape scenes only, with shape names for answers:

* ``larger_item`` — "what is the larger shape?" → the larger shape's colour and shape ("red
  circle"), or "same" when the sizes are equal: 4 × 3 + 1 = 13 answers, read off the stated
  scene after one comparison (``items`` is this kind alone; a 2-layer student learns it in SFT);
* ``smaller_item`` — "what is the smaller shape?", the same the other way round;
* ``other_item`` — "which shape is not red?", asked of a colour exactly one of the two shapes has:
  the other shape's name (12 answers). The step depends on the question's words (compare the
  asked colour with the stated ones), the step the student learns only sometimes. The set
  ``others`` is this kind alone (an experiment; where both shapes share a colour it asks
  ``larger_item`` instead).

The gold answer is a short string graded by HFRRF's own checker (numbers as numbers, words as
normalised text). The set is deliberately small: the student is a ~1M-parameter Qwen2.5-VL that
sees each 56×56 image as 4 tokens, and these are the questions whose facts that tower is known to
bind (colour, shape and size per slot, from the CapRL demo's warm start). The rule-based reasoner
that solves them from a description is a stand-in (:mod:`vlrl.demos.shapes.standins.reasoning`).
"""

from __future__ import annotations

import hashlib
import random
from typing import Any

from vlrl.demos.shapes.kit import world as W

KINDS = ("count", "not_count", "larger")
LARGER = "which shape is larger?"
LARGER_ITEM = "what is the larger shape?"
SMALLER_ITEM = "what is the smaller shape?"
QUESTION_SETS: dict[str, tuple[str, ...]] = {"counts": KINDS, "items": ("larger_item",),
                                             "item_mix": ("larger_item", "smaller_item", "other_item"), "others": ("other_item",)}
"""Question sets: the kinds a problem set draws from. ``items``, ``item_mix`` and ``others`` need two-shape
scenes; ``others`` asks *which shape is not ‹colour›?* (the larger shape where both share a colour), an
experiment of docs/demo-vision-r1.md."""
TWO_SHAPES = {"larger", "larger_item", "smaller_item", "other_item"}
_OTHER = "which shape is not {}?"


def answer_space(kind: str) -> list[str]:
    """Every answer a problem of ``kind`` can have (for the chance level of pass@k)."""
    if kind in ("count", "not_count"):
        return ["0", "1", "2"]
    if kind == "larger":
        return ["left", "right", "same"]
    if kind in ("larger_item", "smaller_item"):
        return [f"{c} {s}" for c in W.COLOURS for s in W.SHAPES] + ["same"]
    if kind == "other_item":
        return [f"{c} {s}" for c in W.COLOURS for s in W.SHAPES]
    raise ValueError(f"unknown problem kind {kind!r}")


def scene_answers(scene: W.Scene, kind: str) -> list[str]:
    """The answers a guesser that reads the scene right but guesses the step could give: for
    ``larger_item`` each shape's name and "same"; for the other kinds their whole answer space."""
    if kind in ("larger_item", "smaller_item"):
        return sorted({item_name(it) for it in scene.shapes} | {"same"})
    if kind == "other_item":
        return sorted({item_name(it) for it in scene.shapes})
    return answer_space(kind)


def chance_pass_at_k(n_answers: int, k: int) -> float:
    """pass@k of a guesser that samples uniformly from ``n_answers`` answers: 1 - (1 - 1/n)^k."""
    return 1 - (1 - 1 / n_answers) ** k


def item_name(it: W.Item) -> str:
    return f"{it.colour} {it.shape}"


def answer_larger_item(shapes: list[W.Item], size: str = "large") -> str:
    """The shape of ``size`` (large: the larger one) by name, or "same" when the sizes are equal."""
    a, b = shapes[0], shapes[1]
    return "same" if a.size == b.size else item_name(a if a.size == size else b)


def make_problem(scene: W.Scene, rng: random.Random, kind: str | None = None,
                 kinds: tuple[str, ...] = KINDS) -> dict[str, Any]:
    """One problem about ``scene``: ``{"kind", "question", "answer"}``, its kind drawn from ``kinds``
    (or ``kind``); ``larger`` and ``larger_item`` only with two shapes."""
    shapes = scene.shapes
    fits = [k for k in kinds if k not in TWO_SHAPES or len(shapes) == 2]
    if kind is not None and kind in TWO_SHAPES and len(shapes) != 2:
        raise ValueError(f"problem kind {kind!r} needs two shapes; the scene has {len(shapes)}")
    if kind is None and not fits:
        raise ValueError(f"no problem kind of {kinds} fits a scene of {len(shapes)} shape(s)")
    kind = kind or rng.choice(fits)
    if kind == "larger":
        return {"kind": kind, "question": LARGER, "answer": answer_larger(shapes)}
    if kind == "larger_item":
        return {"kind": kind, "question": LARGER_ITEM, "answer": answer_larger_item(shapes)}
    if kind == "smaller_item":
        return {"kind": kind, "question": SMALLER_ITEM, "answer": answer_larger_item(shapes, "small")}
    if kind == "other_item":  # asked about a colour exactly one shape has, or, failing that, the larger shape
        single = [it for it in shapes if sum(o.colour == it.colour for o in shapes) == 1]
        if not single:
            return {"kind": "larger_item", "question": LARGER_ITEM, "answer": answer_larger_item(shapes)}
        it = rng.choice(single)
        other = next(o for o in shapes if o is not it)
        return {"kind": kind, "question": _OTHER.format(it.colour), "answer": item_name(other)}
    # ask about a colour present in the scene half the time (else counts would mostly be 0)
    present = [it.colour for it in shapes]
    colour = rng.choice(present) if rng.random() < 0.5 else rng.choice(list(W.COLOURS))
    n = sum(it.colour == colour for it in shapes)
    if kind == "count":
        return {"kind": kind, "question": f"how many {colour} shapes are there?", "answer": str(n)}
    return {"kind": kind, "question": f"how many shapes are not {colour}?", "answer": str(len(shapes) - n)}


def answer_larger(shapes: list[W.Item]) -> str:
    a, b = shapes[0].size, shapes[1].size
    return "same" if a == b else ("left" if a == "large" else "right")


def make_problems(n: int, seed: int, world: W.WorldConfig, prefix: str,
                  split: str | None = None, questions: str = "counts") -> list[tuple[W.Scene, dict[str, Any]]]:
    """``n`` scenes with one problem each, reproducible from ``seed`` and ``prefix`` (split name);
    ``split`` restricts the scenes to the world's training or evaluation layouts (:func:`W.layout_split`).
    ``questions`` names the question set (:data:`QUESTION_SETS`); where every kind of the set needs two
    shapes, scenes with one are skipped (drawn in order, so a shorter set is a prefix of a longer one)."""
    kinds = QUESTION_SETS[questions]
    rng = random.Random(f"vr1-problems/{prefix}/{seed}" + ("" if questions == "counts" else f"/{questions}"))
    if not set(kinds) <= TWO_SHAPES:
        return [(sc, make_problem(sc, rng, kinds=kinds))
                for sc in W.make_scenes(n, seed, world, prefix=f"vr1{prefix}-", split=split)]
    m = 2 * n + 8
    while True:
        scenes = [sc for sc in W.make_scenes(m, seed, world, prefix=f"vr1{prefix}-", split=split) if len(sc.shapes) == 2]
        if len(scenes) >= n:
            return [(sc, make_problem(sc, rng, kinds=kinds)) for sc in scenes[:n]]
        m *= 2


def problem_id(scene_id: str, question: str) -> str:
    return f"{scene_id}/{hashlib.sha1(question.encode()).hexdigest()[:6]}"


layout = W.layout


def seen_keys(problems: list[tuple[W.Scene, dict[str, Any]]]) -> set[tuple]:
    """The keys a held-out problem must not share with ``problems`` (a training set):
    its (layout, question) pair, and its exact scene (layout and jitter, i.e. the same pixels)."""
    keys: set[tuple] = set()
    for sc, prob in problems:
        keys.add(("pair", layout(sc), prob["question"]))
        keys.add(("pixels", layout(sc), tuple(map(tuple, sc.jitter))))
    return keys


def make_heldout(n: int, seed: int, world: W.WorldConfig, prefix: str, training: set[tuple],
                 split: str | None = None, questions: str = "counts") -> tuple[list[tuple[W.Scene, dict[str, Any]]], int]:
    """``n`` problems none of whose keys (:func:`seen_keys`) is in ``training``, and how many were skipped.

    The world is small (24 one-shape layouts, 576 two-shape ones, nine questions), so fresh scene
    seeds alone do not make a problem new: with an 800-problem cold start most one-shape
    (layout, question) pairs recur. Candidates are drawn in :func:`make_problems`'s order and the
    seen ones skipped, so the split is reproducible and, by construction, disjoint. The demo draws
    them with ``split="eval"`` (the world's held-out layouts, :func:`W.layout_split`) and its
    training problems with ``split="train"``, so the check here is a second guard: no held-out
    problem can share a layout, and so neither pixels nor a (layout, question) pair, with training."""
    m = n
    while True:
        cands = make_problems(m, seed, world, prefix, split, questions)
        fresh = [(sc, p) for sc, p in cands if not (seen_keys([(sc, p)]) & training)]
        if len(fresh) >= n:
            last = cands.index(fresh[n - 1])
            return fresh[:n], last + 1 - n
        if m > 64 * n:
            raise ValueError(f"only {len(fresh)} of {m} {prefix} problems are unseen in training; need {n}")
        m *= 2

