"""The arena tests' contestants and judge: fixed captions per image and a judge biased to position A."""

from __future__ import annotations

import json
import re

from PIL import Image

from tests.support.scripted import Scripted


def pair(text: str) -> tuple[str, str]:
    """Captions A and B out of the fenced prompt (each a JSON string inside its element)."""
    body = text.split("Caption A:", 1)[1]
    found = re.findall(r"<(caption-[0-9a-f]+)>\n(.*?)\n</\1>", body, re.S)
    return json.loads(found[0][1]), json.loads(found[1][1])


def biased_judge(req) -> str:
    """Prefers the caption that says GOOD; when neither or both do, always picks position A."""
    text = req.messages[0]["content"][1]["text"]
    a, b = pair(text)
    if "GOOD" in a and "GOOD" not in b:
        return '{"reason": "A is right", "winner": "A"}'
    if "GOOD" in b and "GOOD" not in a:
        return '```json\n{"reason": "B is right", "winner": "B"}\n```'
    return '{"reason": "first one", "winner": "A"}'


def arena_images(tmp_path, n):
    d = tmp_path / "imgs"
    d.mkdir()
    for i in range(n):
        Image.new("RGB", (16, 16), (20 * i, 0, 0)).save(d / f"{i}.png")
    return d


CAND = {"0.png": "GOOD one two three", "1.png": "GOOD one two three", "2.png": "plain", "3.png": "plain caption"}


BASE = {"0.png": "plain", "1.png": "plain", "2.png": "GOOD words", "3.png": "another plain one"}


def captioner(name, table):
    return Scripted(name, lambda r: table[r.id])
