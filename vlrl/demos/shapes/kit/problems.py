"""Shapes-world reasoning problems with gold answers: the task of the Vision-R1 demo.

Each problem asks one question about a scene of one or two shapes (the world the demo's captioner
was warm-started on) whose answer needs a short chain: find the relevant items, then count, compare
or subtract. Three kinds:

* ``count`` — "how many red shapes are there?" (0, 1 or 2);
* ``not_count`` — "how many shapes are not red?" (the shape count minus the colour count);
* ``larger`` — "which shape is larger?" in two-shape scenes ("left", "right" or "same").

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


def make_problem(scene: W.Scene, rng: random.Random, kind: str | None = None) -> dict[str, Any]:
    """One problem about ``scene``: ``{"kind", "question", "answer"}``; ``larger`` only with two shapes."""
    shapes = scene.shapes
    kinds = [k for k in KINDS if k != "larger" or len(shapes) == 2]
    kind = kind or rng.choice(kinds)
    if kind not in kinds:
        raise ValueError(f"problem kind {kind!r} needs two shapes; the scene has {len(shapes)}")
    if kind == "larger":
        return {"kind": kind, "question": LARGER, "answer": answer_larger(shapes)}
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
                  split: str | None = None) -> list[tuple[W.Scene, dict[str, Any]]]:
    """``n`` scenes with one problem each, reproducible from ``seed`` and ``prefix`` (split name);
    ``split`` restricts the scenes to the world's training or evaluation layouts (:func:`W.layout_split`)."""
    rng = random.Random(f"vr1-problems/{prefix}/{seed}")
    return [(sc, make_problem(sc, rng)) for sc in W.make_scenes(n, seed, world, prefix=f"vr1{prefix}-", split=split)]


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
                 split: str | None = None) -> tuple[list[tuple[W.Scene, dict[str, Any]]], int]:
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
        cands = make_problems(m, seed, world, prefix, split)
        fresh = [(sc, p) for sc, p in cands if not (seen_keys([(sc, p)]) & training)]
        if len(fresh) >= n:
            last = cands.index(fresh[n - 1])
            return fresh[:n], last + 1 - n
        if m > 64 * n:
            raise ValueError(f"only {len(fresh)} of {m} {prefix} problems are unseen in training; need {n}")
        m *= 2

