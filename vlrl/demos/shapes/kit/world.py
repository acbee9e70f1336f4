"""The shapes world: tiny synthetic scenes whose every fact is known.

``vlrl demo`` has to show the whole CapRL loop *learning* on a laptop CPU, so it needs images a
~1M-parameter vision tower can read and questions whose answers are certain. A scene here holds one
to three *items* placed in fixed slots (one item centred; two in the left/right halves; three in
thirds), each a coloured shape of a given size or a short printed word. Fixed slots matter: with 4
image tokens per 56×56 image the tower binds "what is on the left" only when the left item always
falls in the left token column (random placement left shape recognition at chance).

Three things come out of a scene:

* **facts** — the ground truth (:class:`Scene`),
* **captions** — full or with attributes dropped at random (:func:`caption`), used to warm-start a
  captioner that *can* say everything but usually does not,
* **MCQs** — two concrete options per question (colour, shape, size, count, position, word), and
  questions about *absent* things ("is there a green triangle?" → no). Absence and count questions
  are what make invented content cost reward: a caption that states a shape that is not there gets
  them wrong, whereas one that omits a fact only earns "cannot answer".

:func:`answer_from_caption` is the oracle a perfect caption reader would follow (it labels the tiny
answerer's training data): the answer a question has *given what a caption states*, or ``None``
when the caption does not settle it.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from PIL import Image, ImageDraw, ImageFont

COLOURS: dict[str, tuple[int, int, int]] = {
    "red": (230, 40, 40),
    "green": (40, 190, 60),
    "blue": (50, 90, 240),
    "yellow": (240, 210, 30),
}
SHAPES = ("circle", "square", "triangle")
SIZES = ("small", "large")
WORDS = ("go", "up", "hi", "ok")
POSITIONS = {1: ("middle",), 2: ("left", "right"), 3: ("left", "middle", "right")}
NUMBERS = ("one", "two", "three")
CANNOT = "cannot answer"
BACKGROUND = (20, 20, 20)
CAPTION_PROMPT = "Describe this image."


@dataclass
class Item:
    """One thing in a scene: a shape (``shape``/``colour``/``size``) or a printed ``word``."""

    position: str
    shape: str | None = None
    colour: str | None = None
    size: str | None = None
    word: str | None = None

    @property
    def is_word(self) -> bool:
        return self.word is not None


@dataclass
class Scene:
    id: str
    items: list[Item]
    jitter: list[tuple[int, int]] = field(default_factory=list)

    @property
    def shapes(self) -> list[Item]:
        return [it for it in self.items if not it.is_word]

    @property
    def word(self) -> str | None:
        return next((it.word for it in self.items if it.is_word), None)

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "items": [asdict(it) for it in self.items], "jitter": [list(j) for j in self.jitter]}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Scene:
        return cls(d["id"], [Item(**it) for it in d["items"]], [tuple(j) for j in d.get("jitter", [])])


@dataclass(frozen=True)
class WorldConfig:
    """How scenes are drawn. The demo's defaults are what a 56×56, 4-token tower can bind."""

    image_size: int = 56
    max_shapes: int = 2
    """Shapes per scene are drawn uniformly from 1..max_shapes (at most 3)."""
    word_prob: float = 0.0
    """Chance that a scene also carries a printed word (it takes a slot of its own)."""
    jitter: int = 2
    heldout_layouts: float = 0.2
    """Share of the world's layouts kept for evaluation only (:func:`layout_split`): every training
    set of every model (captioner SFT, answerers, judges, GRPO, Vision-R1's student) draws from the
    other layouts, so no evaluation scene shares a layout, let alone its pixels, with any training
    image. 0 turns the split off (every scene may be drawn by every split)."""


SPLITS = ("train", "eval")


def layout(scene: Scene) -> tuple:
    """What a scene shows, jitter aside: its items in order. Two scenes with one layout differ by a few pixels."""
    return tuple((it.position, it.shape, it.colour, it.size, it.word) for it in scene.items)


def share(key: str) -> float:
    """A number in [0, 1) fixed by ``key`` alone: a hash, not a draw, so reruns agree and no random
    stream moves when one more thing is decided this way."""
    return int.from_bytes(hashlib.sha1(key.encode()).digest()[:8], "big") / 2**64


def layout_split(lay: tuple, heldout: float) -> str:
    """``"eval"`` for a fixed share ``heldout`` of all layouts, ``"train"`` for the rest.

    A hash of the layout, not a draw: the same layouts are held out for every seed and every model,
    so a judge or answerer of another seed never trains on a layout some demo evaluates on. The
    world is small (24 one-shape and 576 two-shape layouts by default) and each split is only a
    different RNG stream of it, which is why scene ids or seeds alone never made evaluation new.
    """
    if heldout <= 0:
        return "train"
    return "eval" if share(repr(lay)) < heldout else "train"


# -- scenes and rendering -----------------------------------------------------------------------


def scene_questions(scene: Scene, rng: random.Random, cfg: WorldConfig) -> list[Question]:
    """:func:`questions` with the distractor ranges of the world ``cfg`` describes."""
    return questions(scene, rng, max_count=max(2, cfg.max_shapes), ask_writing=cfg.word_prob > 0)


def random_scene(rng: random.Random, cfg: WorldConfig, scene_id: str) -> Scene:
    n_shapes = rng.randint(1, cfg.max_shapes)
    has_word = rng.random() < cfg.word_prob and n_shapes < 3
    n = n_shapes + has_word
    positions = POSITIONS[n]
    word_slot = rng.randrange(n) if has_word else -1
    items = []
    for i, pos in enumerate(positions):
        if i == word_slot:
            items.append(Item(position=pos, word=rng.choice(WORDS)))
        else:
            items.append(
                Item(position=pos, shape=rng.choice(SHAPES), colour=rng.choice(list(COLOURS)), size=rng.choice(SIZES))
            )
    jit = [(rng.randint(-cfg.jitter, cfg.jitter), rng.randint(-cfg.jitter, cfg.jitter)) for _ in items]
    return Scene(scene_id, items, jit)


def make_scenes(n: int, seed: int, cfg: WorldConfig, prefix: str = "s", split: str | None = None) -> list[Scene]:
    """``n`` random scenes, reproducible from ``seed`` and ``prefix``; with ``split`` ("train" or
    "eval") only scenes whose layout :func:`layout_split` puts in that split (drawn in order, the
    others skipped). ``split=None`` draws from the whole world, as before the split existed."""
    rng = random.Random(f"scenes/{prefix}/{seed}")
    return draw_split(n, lambda i: random_scene(rng, cfg, f"{prefix}{seed}-{i}"), layout, split, cfg.heldout_layouts,
                      "make_scenes")


def draw_split(n: int, draw: Callable[[int], Any], key: Callable[[Any], tuple], split: str | None, heldout: float,
               who: str = "draw_split") -> list:
    """``n`` items from ``draw(i)`` (``i``: the index the next kept item gets), keeping only those
    whose ``key`` (a layout, or another world's counterpart) :func:`layout_split` puts in ``split``;
    ``split=None`` or ``heldout`` 0 keeps every draw. Every demo world splits through this one function."""
    if split is None or heldout <= 0:
        return [draw(i) for i in range(n)]
    if split not in SPLITS:
        raise ValueError(f"{who}: split must be one of {SPLITS} or None, not {split!r}")
    out: list = []
    tries = 0
    while len(out) < n:
        item = draw(len(out))
        tries += 1
        if layout_split(key(item), heldout) == split:
            out.append(item)
        elif tries > 1000 * (n + 10):
            raise ValueError(f"{who}: the {split} split of this world is (nearly) empty")
    return out


def render(scene: Scene, cfg: WorldConfig) -> Image.Image:
    """Draw the scene with Pillow. Item centres sit in fixed slots (± jitter)."""
    s = cfg.image_size
    img = Image.new("RGB", (s, s), BACKGROUND)
    draw = ImageDraw.Draw(img)
    n = len(scene.items)
    jitter = scene.jitter or [(0, 0)] * n
    slot_w = s / n
    for i, (it, (jx, jy)) in enumerate(zip(scene.items, jitter, strict=True)):
        cx = slot_w * (i + 0.5) + jx
        cy = s / 2 + jy
        if it.is_word:
            font = ImageFont.load_default(size=max(8, round(s * 0.22)))
            x0, y0, x1, y1 = font.getbbox(it.word)
            draw.text((cx - (x0 + x1) / 2, cy - (y0 + y1) / 2), it.word, fill=(255, 255, 255), font=font)
            continue
        # Sizes are absolute for one or two items ("large" is the same pixels in both); three items
        # shrink a little to fit their thirds.
        half = (0.36 if it.size == "large" else 0.19) * s / 2 * (2 / max(n, 2))
        colour = COLOURS[it.colour]
        box = [cx - half, cy - half, cx + half, cy + half]
        if it.shape == "circle":
            draw.ellipse(box, fill=colour)
        elif it.shape == "square":
            draw.rectangle(box, fill=colour)
        else:
            draw.polygon([(cx, cy - half), (cx - half, cy + half), (cx + half, cy + half)], fill=colour)
    return img


# -- captions -----------------------------------------------------------------------------------

WHERE = {"left": "on the left", "right": "on the right", "middle": "in the middle"}


def stated_items(scene: Scene, rng: random.Random | None = None, drop: float = 0.0) -> list[Item]:
    """The scene's items with each attribute independently dropped (set to None) with prob ``drop``."""
    out = []
    for it in scene.items:
        def keep(v):
            return v if (rng is None or rng.random() >= drop) else None

        if it.is_word:
            out.append(Item(position=it.position, word=keep(it.word) or ""))
        else:
            out.append(Item(position=it.position, shape=keep(it.shape), colour=keep(it.colour), size=keep(it.size)))
    return out


def item_phrase(it: Item) -> str:
    if it.is_word:
        return f"the word {it.word}" if it.word else "a word"
    words = ["a"] + [w for w in (it.size, it.colour) if w] + [it.shape or "shape"]
    return " ".join(words)


def caption_from_items(items: list[Item]) -> str:
    parts = [f"{item_phrase(it)} {WHERE[it.position]}" for it in items]
    if len(parts) <= 2:
        return " and ".join(parts) + "."
    return ", ".join(parts[:-1]) + " and " + parts[-1] + "."


def caption(scene: Scene, rng: random.Random | None = None, drop: float = 0.0) -> str:
    """Full caption (``drop=0``) or one with attributes dropped at random."""
    return caption_from_items(stated_items(scene, rng, drop))


def parse_caption(text: str) -> list[Item] | None:
    """Read a caption in the world's own grammar back into stated items (None if it does not parse).

    Only used for reporting (e.g. how many facts a caption states); rewards and accuracies never
    depend on it, because a policy's wording can drift away from any fixed grammar.
    """
    t = text.strip().rstrip(".").replace(",", " and")
    chunks = [c.strip() for c in t.split(" and ") if c.strip()]
    items = []
    for c in chunks:
        pos = next((p for p, w in WHERE.items() if c.endswith(w)), None)
        if pos is None:
            return None
        body = c[: -len(WHERE[pos])].split()
        if body[:2] == ["the", "word"] and len(body) == 3:
            items.append(Item(position=pos, word=body[2]))
            continue
        if body == ["a", "word"]:
            items.append(Item(position=pos, word=""))
            continue
        # "a [size] [colour] (shape|<shape>)", in that order and nothing else
        if len(body) < 2 or body[0] != "a" or not (body[-1] in SHAPES or body[-1] == "shape"):
            return None
        mids = body[1:-1]
        size = mids.pop(0) if mids and mids[0] in SIZES else None
        colour = mids.pop(0) if mids and mids[0] in COLOURS else None
        if mids:
            return None
        items.append(Item(position=pos, shape=body[-1] if body[-1] in SHAPES else None, colour=colour, size=size))
    return items or None


# -- questions ----------------------------------------------------------------------------------


@dataclass
class Question:
    """A two-option MCQ about a scene. ``key`` says what fact it asks (the oracle's handle)."""

    id: str
    kind: str
    question: str
    options: list[str]
    answer: str
    key: dict[str, Any]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def wrong_value(rng: random.Random, values, true) -> str:
    """A value of ``values`` other than ``true`` (an MCQ's wrong option)."""
    return rng.choice([v for v in values if v != true])


def shuffled_pair(rng: random.Random, true: str, other: str) -> list[str]:
    """The two options of an MCQ in a random order."""
    opts = [true, other]
    rng.shuffle(opts)
    return opts


def questions(scene: Scene, rng: random.Random, n_absent: int = 1, max_count: int = 3,
              ask_writing: bool = True) -> list[Question]:
    """Every fact of the scene as an MCQ, one "is there X?" about a present shape and ``n_absent``
    about absent ones. Positions are asked through position-referenced attribute questions ("what
    colour is the shape on the left?"). Count distractors stay within ``1..max_count`` and "is there
    any writing?" is asked only with ``ask_writing``: in a world that never prints words (or never
    holds three shapes) those would be answerable without the image."""
    qs: list[Question] = []

    def add(kind, text, true, other, key):
        qs.append(Question(f"{scene.id}/q{len(qs)}", kind, text, shuffled_pair(rng, true, other), true, key))

    n_shapes = len(scene.shapes)
    for it in scene.items:
        where = WHERE[it.position]
        if it.is_word:
            add("word", "what word is written?", it.word, wrong_value(rng, WORDS, it.word), {"kind": "word"})
            continue
        key = {"position": it.position}
        add("colour", f"what colour is the shape {where}?", it.colour, wrong_value(rng, COLOURS, it.colour),
            {"kind": "colour", **key})
        add("shape", f"what shape is {where}?", it.shape, wrong_value(rng, SHAPES, it.shape), {"kind": "shape", **key})
        add("size", f"what size is the shape {where}?", it.size, wrong_value(rng, SIZES, it.size), {"kind": "size", **key})
    counts = NUMBERS[: max(2, max_count, n_shapes)]
    add("count", "how many shapes are there?", NUMBERS[n_shapes - 1], wrong_value(rng, counts, NUMBERS[n_shapes - 1]),
        {"kind": "count"})
    if scene.word is None and ask_writing:
        add("word_absent", "is there any writing?", "no", "yes", {"kind": "any_word"})
    # Existence questions come in both polarities, so "no" is not a free answer without the image.
    present = {(it.colour, it.shape) for it in scene.shapes}
    absent = [(c, s) for c in COLOURS for s in SHAPES if (c, s) not in present]
    for c, s in rng.sample(sorted(present), 1):
        add("present", f"is there a {c} {s}?", "yes", "no", {"kind": "exists", "colour": c, "shape": s})
    for c, s in rng.sample(absent, min(n_absent, len(absent))):
        add("absent", f"is there a {c} {s}?", "no", "yes", {"kind": "exists", "colour": c, "shape": s})
    return qs


def answer_from_caption(stated: list[Item] | None, q: Question) -> str | None:
    """The answer ``q`` has given only what a caption states (None: the caption does not settle it).

    A caption lists every item of its scene (the grammar has no way to skip one), so "no" follows
    when every stated shape contradicts the asked colour/shape.
    """
    if not stated:
        return None
    k = q.key
    kind = k["kind"]
    if kind == "count":
        return NUMBERS[sum(not it.is_word for it in stated) - 1] if any(not it.is_word for it in stated) else None
    if kind == "any_word":
        return "yes" if any(it.is_word for it in stated) else "no"
    if kind == "word":
        w = next((it.word for it in stated if it.is_word), None)
        return w or None
    if kind == "exists":
        shapes = [it for it in stated if not it.is_word]
        if any(it.colour == k["colour"] and it.shape == k["shape"] for it in shapes):
            return "yes"
        if all((it.colour is not None and it.colour != k["colour"]) or (it.shape is not None and it.shape != k["shape"])
               for it in shapes):
            return "no"
        return None
    it = next((x for x in stated if x.position == k["position"] and not x.is_word), None)
    return None if it is None else getattr(it, kind)


def gold_letter(q: Question, options: list[str], stated: list[Item] | None = None, letters: str = "ABC") -> str:
    """Letter of the right option among ``options + [cannot answer]`` (given a caption if ``stated``)."""
    full = list(options) + [CANNOT]
    ans = q.answer if stated is None else answer_from_caption(stated, q)
    return letters[full.index(ans if ans is not None else CANNOT)]


def world_texts(cfg: WorldConfig, n: int = 400, seed: int = 0) -> list[str]:
    """Sample of every string the world produces (captions, questions, options): tokenizer corpus."""
    rng = random.Random(f"texts/{seed}")
    out = [CAPTION_PROMPT, CANNOT, *COLOURS, *SHAPES, *SIZES, *WORDS, *NUMBERS, "yes", "no"]
    big = WorldConfig(cfg.image_size, 3, max(cfg.word_prob, 0.5), cfg.jitter)
    for sc in make_scenes(n, seed, big, prefix="tok"):
        out.append(caption(sc, rng, rng.random() * 0.7))
        out.extend(q.question + " " + " ".join(q.options) for q in questions(sc, rng))
    return out
