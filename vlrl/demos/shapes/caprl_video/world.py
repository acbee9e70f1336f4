"""The shapes world in motion: four-frame clips whose every fact is known by construction.

``vlrl demo --method caprl-video`` needs clips a tiny video tower can read and questions whose
answers are certain and need more than one frame. A clip is 4 frames of 56×56 (2 frames a second),
so a Qwen2.5-VL tower sees 2 temporal patches (frames 0-1 and 2-3) of 2×2 merged tokens: 8 video
tokens. Everything that happens, happens between the two patches:

* the **mover**, a coloured shape in the top half, crosses from one half to the other (left or
  right): it sits in one token column during frames 0-1 and in the other during frames 2-3;
* it may **change colour** at frame 2;
* a grey **second shape** in the bottom half may be there from the start ("waits"), **enter** at
  frame 2, or not be there at all.

Questions (two options each): which way the mover moves, what shape it is, its colour at the start
and at the end, whether it changes colour, how many shapes enter, which shape appears first, and
what shape the second one is. No single frame answers a clip's questions: the first frame cannot
tell the end colour nor whether a shape will enter, the last frame cannot tell the start colour
nor whether the second shape was there from the start (:func:`frames_needed` says which frames
each kind needs). The direction is also readable from where the mover is in the first frame
(right-movers start in the left half); a shape that enters needs two frames.

The caption grammar states every shape (none can be skipped) but may leave out any attribute:
``a red square moves right and turns blue and a circle enters.`` ← full;
``a square moves and a shape is there.`` ← most attributes left out. :func:`parse_caption` reads a
caption back; :func:`answer_from_caption` is the reader that answers a question from what a
caption states (``None``: it does not say). That reader, run on captions, is the demo's judge.
"""

from __future__ import annotations

import random
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from PIL import Image, ImageDraw

from vlrl.demos.shapes.kit.world import BACKGROUND, COLOURS, SHAPES, Question, draw_split, shuffled_pair, wrong_value

WAYS = ("left", "right")
EVENTS = ("waits", "enters")
COUNTS = ("zero", "one")
GREY = (200, 200, 200)
CAPTION_PROMPT = "Describe this video."
FRAMES = 4
FPS = 2
SIZE = 56
VIDEO_SPEC = {"nframes": FRAMES, "min_pixels": SIZE * SIZE, "max_pixels": SIZE * SIZE}
"""The recipe's ``data.video`` (qwen-vl-utils keys): all 4 frames, at 56×56."""


@dataclass
class Mover:
    shape: str | None
    colour: str | None
    way: str | None
    change: str | None
    """The colour it turns at frame 2; ``"keeps"`` when it keeps its colour; ``None`` (in a caption only): not said."""


@dataclass
class Still:
    shape: str | None
    event: str | None
    """``"waits"`` (there from the first frame) or ``"enters"`` (appears at frame 2); ``None``: not said."""


@dataclass
class ClipFacts:
    id: str
    mover: Mover
    still: Still | None
    jitter: list[tuple[int, int]]

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "mover": asdict(self.mover), "still": asdict(self.still) if self.still else None,
                "jitter": [list(j) for j in self.jitter]}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ClipFacts:
        return cls(d["id"], Mover(**d["mover"]), Still(**d["still"]) if d.get("still") else None,
                   [tuple(j) for j in d.get("jitter", [])])


def random_clip(rng: random.Random, clip_id: str) -> ClipFacts:
    colour = rng.choice(list(COLOURS))
    change = wrong_value(rng, COLOURS, colour) if rng.random() < 0.5 else "keeps"
    mover = Mover(rng.choice(SHAPES), colour, rng.choice(WAYS), change)
    kind = rng.randrange(3)
    still = None if kind == 0 else Still(rng.choice(SHAPES), EVENTS[kind - 1])
    jitter = [(rng.randint(-2, 2), rng.randint(-2, 2)), (rng.choice((-14, 14)) + rng.randint(-1, 1), rng.randint(-2, 2))]
    return ClipFacts(clip_id, mover, still, jitter)


def configuration(clip: ClipFacts) -> tuple:
    """What a clip shows, jitter aside: the mover's shape, colour, way and change, and the still
    shape and its event (none: no second shape). 3×4×2×4×7 = 672 configurations; two clips of one
    configuration differ by a few pixels. The clip world's counterpart of the image world's
    :func:`~vlrl.demos.shapes.kit.world.layout`."""
    m, s = clip.mover, clip.still
    return (m.shape, m.colour, m.way, m.change, None if s is None else (s.shape, s.event))


def make_clips(n: int, seed: int, prefix: str = "c", split: str | None = None, heldout: float = 0.0) -> list[ClipFacts]:
    """``n`` random clips, reproducible from ``seed`` and ``prefix``; with ``split`` ("train" or
    "eval") only clips whose :func:`configuration` the image world's
    :func:`~vlrl.demos.shapes.kit.world.layout_split` puts in that split for the held-out share
    ``heldout`` (drawn in order, the others skipped), so no held-out clip shows what a training
    clip of any model shows. ``split=None`` (or ``heldout`` 0) draws from the whole world
    (:func:`~vlrl.demos.shapes.kit.world.draw_split`, the image world's own draw)."""
    rng = random.Random(f"clips/{prefix}/{seed}")
    return draw_split(n, lambda i: random_clip(rng, f"{prefix}{seed}-{i}"), configuration, split, heldout, "make_clips")


# -- rendering ----------------------------------------------------------------------------------

MOVER_X = (12, 20, 36, 44)
"""The right-mover's centre per frame: the left token column in frames 0-1, the right one in 2-3."""


def _shape(draw: ImageDraw.ImageDraw, shape: str, cx: float, cy: float, half: float, colour) -> None:
    box = [cx - half, cy - half, cx + half, cy + half]
    if shape == "circle":
        draw.ellipse(box, fill=colour)
    elif shape == "square":
        draw.rectangle(box, fill=colour)
    else:
        draw.polygon([(cx, cy - half), (cx - half, cy + half), (cx + half, cy + half)], fill=colour)


def render_frames(clip: ClipFacts) -> list[Image.Image]:
    """The clip's frames (Pillow): the mover in the top half, the still shape in the bottom half."""
    (jx, jy), (sx, sy) = clip.jitter
    m = clip.mover
    frames = []
    for k in range(FRAMES):
        img = Image.new("RGB", (SIZE, SIZE), BACKGROUND)
        draw = ImageDraw.Draw(img)
        x = MOVER_X[k] if m.way == "right" else SIZE - MOVER_X[k]
        colour = m.colour if k < 2 or m.change == "keeps" else m.change
        _shape(draw, m.shape, x + jx, 14 + jy, 7, COLOURS[colour])
        if clip.still is not None and (clip.still.event == "waits" or k >= 2):
            _shape(draw, clip.still.shape, SIZE / 2 + sx, 42 + sy, 7, GREY)
        frames.append(img)
    return frames


def write_video(clip: ClipFacts, path: Path) -> Path:
    """The clip as a lossless H.264 MP4 (RGB: colours decode exactly), ``FPS`` frames a second."""
    import av
    import numpy as np

    path.parent.mkdir(parents=True, exist_ok=True)
    with av.open(str(path), "w", format="mp4") as out:
        stream = out.add_stream("libx264rgb", rate=FPS, options={"crf": "0", "preset": "ultrafast"})
        stream.width = stream.height = SIZE
        stream.pix_fmt = "rgb24"
        for img in render_frames(clip):
            for packet in stream.encode(av.VideoFrame.from_ndarray(np.asarray(img), format="rgb24")):
                out.mux(packet)
        for packet in stream.encode():
            out.mux(packet)
    return path


def load_clip(path: str | Path):
    """A written clip decoded as every stage sees it (:func:`vlrl.core.video.load_video`, ``VIDEO_SPEC``)."""
    from vlrl.core.video import VideoSpec, load_video

    return load_video(path, VideoSpec(**VIDEO_SPEC))


def filmstrip(clip: ClipFacts, scale: int = 2) -> Image.Image:
    """The frames side by side (for the report)."""
    frames = render_frames(clip)
    strip = Image.new("RGB", (SIZE * FRAMES + 3 * (FRAMES - 1), SIZE), (255, 255, 255))
    for k, f in enumerate(frames):
        strip.paste(f, (k * (SIZE + 3), 0))
    return strip.resize((strip.width * scale, strip.height * scale), Image.NEAREST)


# -- captions -----------------------------------------------------------------------------------


def stated(clip: ClipFacts, rng: random.Random | None = None, drop: float = 0.0) -> ClipFacts:
    """The clip's facts with each attribute independently left out (None) with probability ``drop``."""
    def keep(v):
        return v if rng is None or rng.random() >= drop else None

    m = clip.mover
    mover = Mover(keep(m.shape), keep(m.colour), keep(m.way), keep(m.change))
    still = None if clip.still is None else Still(keep(clip.still.shape), keep(clip.still.event))
    return ClipFacts(clip.id, mover, still, clip.jitter)


def caption(facts: ClipFacts) -> str:
    m = facts.mover
    words = ["a"] + ([m.colour] if m.colour else []) + [m.shape or "shape", "moves"] + ([m.way] if m.way else [])
    if m.change == "keeps":
        words += ["and", "keeps", "its", "colour"]
    elif m.change:
        words += ["and", "turns", m.change]
    if facts.still is not None:
        words += ["and", "a", facts.still.shape or "shape"] + ([facts.still.event] if facts.still.event else ["is", "there"])
    return " ".join(words) + "."


def full_caption(clip: ClipFacts) -> str:
    return caption(clip)


def parse_caption(text: str) -> ClipFacts | None:
    """Read a caption in the grammar back into stated facts (None if it does not parse)."""
    w = text.strip().rstrip(".").split()
    if w[:1] != ["a"]:
        return None
    i = 1
    colour = w[i] if i < len(w) and w[i] in COLOURS else None
    i += colour is not None
    if i >= len(w) or w[i] not in (*SHAPES, "shape"):
        return None
    shape = w[i] if w[i] in SHAPES else None
    i += 1
    if w[i : i + 1] != ["moves"]:
        return None
    i += 1
    way = w[i] if i < len(w) and w[i] in WAYS else None
    i += way is not None
    change = None
    if w[i : i + 4] == ["and", "keeps", "its", "colour"]:
        change, i = "keeps", i + 4
    elif w[i : i + 2] == ["and", "turns"] and i + 2 < len(w) and w[i + 2] in COLOURS:
        change, i = w[i + 2], i + 3
    still = None
    if i < len(w):
        if w[i : i + 2] != ["and", "a"] or i + 2 >= len(w) or w[i + 2] not in (*SHAPES, "shape"):
            return None
        s_shape = w[i + 2] if w[i + 2] in SHAPES else None
        rest = w[i + 3 :]
        if rest == ["is", "there"]:
            event = None
        elif len(rest) == 1 and rest[0] in EVENTS:
            event = rest[0]
        else:
            return None
        still = Still(s_shape, event)
    return ClipFacts("", Mover(shape, colour, way, change), still, [])


# -- questions ----------------------------------------------------------------------------------


def frames_needed(kind: str) -> str:
    """Which frames a question of ``kind`` needs (documentation, and the report's table)."""
    return {"way": "first and last (or the first, knowing the layout)", "shape": "any",
            "colour_start": "first", "colour_end": "last", "change": "first and last",
            "enter_count": "first and last", "first": "first and last", "still_shape": "last"}[kind]


def questions(clip: ClipFacts, rng: random.Random) -> list[Question]:
    qs: list[Question] = []

    def add(kind, text, true, other):
        qs.append(Question(f"{clip.id}/q{len(qs)}", kind, text, shuffled_pair(rng, true, other), true, {"kind": kind}))

    m = clip.mover
    end = m.colour if m.change == "keeps" else m.change
    add("way", "which way does the coloured shape move?", m.way, wrong_value(rng, WAYS, m.way))
    add("shape", "what shape is the coloured shape?", m.shape, wrong_value(rng, SHAPES, m.shape))
    add("colour_start", "what colour is the moving shape at the start?", m.colour, wrong_value(rng, COLOURS, m.colour))
    add("colour_end", "what colour is the moving shape at the end?", end, wrong_value(rng, COLOURS, end))
    add("change", "does the moving shape change colour?", "no" if m.change == "keeps" else "yes",
        "yes" if m.change == "keeps" else "no")
    enters = clip.still is not None and clip.still.event == "enters"
    add("enter_count", "how many shapes enter?", COUNTS[enters], COUNTS[not enters])
    if enters and clip.still.shape != m.shape:
        add("first", "which shape appears first?", m.shape, clip.still.shape)
    if clip.still is not None:
        add("still_shape", "what shape is the grey shape?", clip.still.shape, wrong_value(rng, SHAPES, clip.still.shape))
    return qs


def answer_from_caption(facts: ClipFacts | None, q: Question | dict[str, Any]) -> str | None:
    """The answer ``q`` has given only what a caption states (None: the caption does not settle it)."""
    if facts is None:
        return None
    kind = (q.key if isinstance(q, Question) else q["key"])["kind"]
    m, s = facts.mover, facts.still
    if kind == "way":
        return m.way
    if kind == "shape":
        return m.shape
    if kind == "colour_start":
        return m.colour
    if kind == "colour_end":
        return m.colour if m.change == "keeps" else m.change
    if kind == "change":
        return None if m.change is None else ("no" if m.change == "keeps" else "yes")
    if kind == "enter_count":
        if s is None:
            return "zero"
        return None if s.event is None else COUNTS[s.event == "enters"]
    if kind == "first":
        if s is None or s.event is None:
            return None
        if s.event == "waits":
            return None  # both there from the start: the question has no answer in the caption
        return m.shape
    if kind == "still_shape":
        return None if s is None else s.shape
    raise ValueError(f"unknown question kind {kind!r}")


# -- noise for the answerer's training ----------------------------------------------------------


def corrupt(facts: ClipFacts, rng: random.Random) -> ClipFacts:
    """Mis-state one stated attribute (what a hallucinating captioner writes)."""
    m, s = replace(facts.mover), replace(facts.still) if facts.still else None
    cands = [(m, a) for a in ("shape", "colour", "way") if getattr(m, a)]
    if m.change and m.change != "keeps":
        cands.append((m, "change"))
    if s is not None:
        cands += [(s, a) for a in ("shape", "event") if getattr(s, a)]
    if not cands:
        return facts
    obj, a = rng.choice(cands)
    pool = {"shape": SHAPES, "colour": list(COLOURS), "way": WAYS, "change": list(COLOURS), "event": EVENTS}[a]
    setattr(obj, a, rng.choice([v for v in pool if v != getattr(obj, a)]))
    return ClipFacts(facts.id, m, s, facts.jitter)


def garble(text: str, rng: random.Random) -> str:
    """A broken caption, as a drifting policy writes: a span repeated or dropped, neighbours swapped, truncated."""
    w = text.rstrip(".").split()
    op = rng.randrange(4)
    if op == 0:
        i = rng.randrange(len(w) - 1)
        k = rng.randint(2, min(5, len(w) - i)) if len(w) - i >= 2 else 1
        w = w[: i + k] + w[i : i + k] + w[i + k :]
    elif op == 1 and len(w) > 3:
        i = rng.randrange(len(w) - 1)
        del w[i : i + rng.randint(1, 3)]
    elif op == 2:
        i = rng.randrange(len(w) - 1)
        w[i], w[i + 1] = w[i + 1], w[i]
    else:
        w = w[: rng.randint(1, max(1, len(w) - 1))]
    return " ".join(w) + rng.choice([".", ""])


def world_texts(n: int = 400, seed: int = 0) -> list[str]:
    """Every string the world produces (captions, questions, options): the tokenizer's corpus."""
    rng = random.Random(f"video-texts/{seed}")
    out = [CAPTION_PROMPT, *COLOURS, *SHAPES, *WAYS, *EVENTS, *COUNTS, "yes", "no", "keeps its colour", "is there"]
    for c in make_clips(n, seed, prefix="tok"):
        out.append(caption(stated(c, rng, rng.random() * 0.7)))
        out.extend(q.question + " " + " ".join(q.options) for q in questions(c, rng))
    return out
