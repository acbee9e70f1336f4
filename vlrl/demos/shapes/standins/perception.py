"""How the stand-ins see: a pixel rule that reads a rendered shapes scene, with no access to its facts.

Both the RubiCap teachers (:mod:`vlrl.demos.shapes.standins.committee`) and the Vision-R1 cold
start's VLM (:mod:`vlrl.demos.shapes.standins.reasoning`) perceive through :func:`perceive`, and
seed their deliberate mistakes by the image (:func:`image_seed`), so a rerun says the same thing.
"""

from __future__ import annotations

import hashlib
import random
from typing import Any

from vlrl.demos.shapes.kit import world as W


def perceive(image: Any) -> list[W.Item]:
    """The items of a rendered scene read from its pixels (shapes only; words are not read).

    Pixels of each palette colour are grouped into 4-connected regions; tiny regions (antialiasing
    specks) are ignored. A region's fill ratio (area over bounding box) names its shape (square ~1,
    circle ~0.79, triangle ~0.5), its width its size, and the regions' left-to-right order their
    slots.
    """
    from PIL import Image

    img = image if isinstance(image, Image.Image) else Image.open(image)
    img = img.convert("RGB")
    w, h = img.size
    px = img.load()
    palette = {rgb: name for name, rgb in W.COLOURS.items()}
    seen = [[False] * w for _ in range(h)]
    regions = []
    for y in range(h):
        for x in range(w):
            colour = palette.get(px[x, y])
            if colour is None or seen[y][x]:
                continue
            stack, cells = [(x, y)], []
            seen[y][x] = True
            while stack:
                cx, cy = stack.pop()
                cells.append((cx, cy))
                for nx, ny in ((cx + 1, cy), (cx - 1, cy), (cx, cy + 1), (cx, cy - 1)):
                    if 0 <= nx < w and 0 <= ny < h and not seen[ny][nx] and px[nx, ny] == px[x, y]:
                        seen[ny][nx] = True
                        stack.append((nx, ny))
            if len(cells) >= 6:
                regions.append((colour, cells))
    regions.sort(key=lambda r: sum(c[0] for c in r[1]) / len(r[1]))
    positions = W.POSITIONS.get(len(regions))
    if positions is None:
        return []
    items = []
    for pos, (colour, cells) in zip(positions, regions, strict=True):
        xs, ys = [c[0] for c in cells], [c[1] for c in cells]
        bw, bh = max(xs) - min(xs) + 1, max(ys) - min(ys) + 1
        fill = len(cells) / (bw * bh)
        shape = "square" if fill > 0.9 else "circle" if fill > 0.65 else "triangle"
        # large items are 0.36 of the image (or of a third's share), small ones 0.19
        share = w * (2 / max(len(regions), 2))
        size = "large" if bw > 0.275 * share else "small"
        items.append(W.Item(position=pos, shape=shape, colour=colour, size=size))
    return items


def image_of(messages: list[dict[str, Any]]) -> Any:
    """The first image part of a chat request (what a ``py:`` stand-in is shown)."""
    for m in messages:
        if isinstance(m.get("content"), list):
            for p in m["content"]:
                if p.get("type") == "image":
                    return p["image"]
    raise ValueError("no image in the request")


def image_seed(image: Any, salt: str) -> random.Random:
    """A random stream decided by the image's pixels and ``salt``: a rerun (or a second prompt about
    the same image) makes the same mistakes."""
    from PIL import Image

    img = image if isinstance(image, Image.Image) else Image.open(image)
    return random.Random(hashlib.sha1(img.convert("RGB").tobytes() + salt.encode()).hexdigest())
