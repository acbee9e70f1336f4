"""Broken captions of the shapes world: one attribute mis-stated, or the text garbled.

The tiny models that read captions (the QA answerers, the rubric judge, the Likert judge) are all
trained on these, so that a caption stating something false, or a run-on a drifting policy writes,
is read for what it says rather than for the words it contains. The draws from ``rng`` are part of
every cached model's training data: change the order and each of them trains on other examples.
"""

from __future__ import annotations

import random
from dataclasses import replace

from vlrl.demos.shapes.kit import world as W


def corrupt(items: list[W.Item], rng: random.Random) -> list[W.Item]:
    """Mis-state one stated attribute (what a hallucinating captioner would write)."""
    cands = [(i, a) for i, it in enumerate(items) for a in ("colour", "shape", "size", "word") if getattr(it, a)]
    if not cands:
        return items
    i, a = rng.choice(cands)
    pool = {"colour": list(W.COLOURS), "shape": W.SHAPES, "size": W.SIZES, "word": W.WORDS}[a]
    items = [replace(it) for it in items]
    setattr(items[i], a, rng.choice([v for v in pool if v != getattr(items[i], a)]))
    return items


def garble(text: str, rng: random.Random) -> str:
    """A broken version of a caption, like a drifting policy writes (see ``ans_garble_p``)."""
    w = text.rstrip(".").split()
    op = rng.randrange(5)
    if op == 0 and len(w) > 3:  # repeat a span
        i = rng.randrange(len(w) - 2)
        k = rng.randint(2, min(5, len(w) - i))
        w = w[: i + k] + w[i : i + k] + w[i + k :]
    elif op == 1 and len(w) > 4:  # drop a span
        i = rng.randrange(len(w) - 1)
        del w[i : i + rng.randint(1, 3)]
    elif op == 2 and len(w) > 2:  # swap neighbours
        i = rng.randrange(len(w) - 1)
        w[i], w[i + 1] = w[i + 1], w[i]
    elif op == 3 and len(w) > 2:  # truncated
        return " ".join(w[: rng.randint(2, len(w) - 1)])
    else:  # items chained with "on", the run-on style of a drifting policy
        phrases = [f"{rng.choice(['a ', ''])}{rng.choice(W.SIZES + ('',))} {rng.choice(list(W.COLOURS))} "
                   f"{rng.choice(W.SHAPES + ('shape',))}".replace("  ", " ").strip() for _ in range(rng.randint(2, 5))]
        return " on ".join(phrases) + rng.choice(["", " on", "."])
    return " ".join(w) + rng.choice([".", ""])
