"""Scripted ``py:`` models for the first-hour path on real photos (caption → qa-curate → reward
score → eval caption-qa → eval prism), each a reply function as docs/captioning.md describes.

They read what a real model would: the image in the message (its size and mean colour, decoded
from the data URL) and the prompt text. ``terse`` / ``style`` options change what they write, so
a spec's options matter to the outputs, as a real model's ``dtype`` does.
"""

from __future__ import annotations

import base64
import io
import re

from PIL import Image

from vlrl.core.backends import Backend, ChatResult


def _image(messages) -> Image.Image | None:
    for m in messages:
        content = m.get("content")
        for part in content if isinstance(content, list) else []:
            if part.get("type") == "image":
                return part["image"].convert("RGB")
            if part.get("type") == "image_url":
                url = part["image_url"]["url"]
                return Image.open(io.BytesIO(base64.b64decode(url.split(",", 1)[1]))).convert("RGB")
    return None


def _text(messages) -> str:
    out = []
    for m in messages:
        c = m.get("content")
        out += [c] if isinstance(c, str) else [p.get("text", "") for p in c or [] if p.get("type") == "text"]
    return "\n".join(out)


def _facts(img: Image.Image) -> tuple[str, str, str]:
    """(orientation, brightness, dominant channel) of an image: what the scripted VLM 'sees'."""
    w, h = img.size
    r, g, b = (sum(c) / len(c) for c in zip(*img.resize((16, 16)).getdata(), strict=True))
    orient = "wide" if w > h * 1.1 else "tall" if h > w * 1.1 else "square"
    bright = "bright" if (r + g + b) / 3 > 110 else "dark"
    dom = max((("red", r), ("green", g), ("blue", b)), key=lambda t: t[1])[0] if max(r, g, b) - min(r, g, b) > 12 else "grey"
    return orient, bright, dom


def captioner(terse: str = "0"):
    """A captioner that describes what it measures; ``terse=1`` writes only the orientation."""
    def reply(messages, sampling):
        img = _image(messages)
        if img is None:
            raise ValueError("no image in the request")
        orient, bright, dom = _facts(img)
        if terse == "1":
            return f"A {orient} photo."
        return f"A {orient}, {bright} photo whose colours lean {dom}."
    return reply


ORIENTATIONS = ("wide", "tall", "square", "round")
BRIGHTNESS = ("bright", "dark", "striped", "blurred")
COLOURS = ("red", "green", "blue", "grey")
QUESTIONS = (("What is the shape of the photo's frame?", ORIENTATIONS, 0),
             ("Is the photo bright or dark overall?", BRIGHTNESS, 1),
             ("Which colour does the photo lean towards?", COLOURS, 2))


def _options(text: str) -> dict[str, str]:
    return dict(re.findall(r"^\(?([A-H])[.)] (.+?)\s*$", text, re.M))


def vlm():
    """A question-writing VLM that also answers with the image in front of it (qa-curate's ``--vlm``):
    three questions per photo about what :func:`_facts` measures, answered correctly when asked."""
    def reply(messages, sampling):
        img, text = _image(messages), _text(messages)
        if img is None:
            raise ValueError("the VLM needs the image")
        facts = _facts(img)
        if "multiple-choice questions about this image" in text:
            blocks = []
            for n, (q, opts, which) in enumerate(QUESTIONS, 1):
                lines = [f"Question {n}: {q}", *(f"{'ABCD'[j]}. {o}" for j, o in enumerate(opts))]
                blocks.append("\n".join([*lines, f"Answer: {'ABCD'[opts.index(facts[which])]}"]))
            return "\n\n".join(blocks)
        options = _options(text)
        return next((k for k, v in options.items() if v in facts), "A")
    return reply


def reader():
    """A text-only answerer: from a caption, the option the description names (else the 'cannot
    answer' option); with no description at all (qa-curate's blind half), always 'A'."""
    def reply(messages, sampling):
        text = _text(messages)
        options = _options(text)
        m = re.search(r"<description>(.*?)</description>", text, re.S)
        if m is None:
            return "A"
        words = set(re.findall(r"[a-z]+", m.group(1).lower()))
        named = [k for k, v in options.items() if v.lower() in words]
        if named:
            return named[0]
        return next((k for k, v in options.items() if "cannot" in v.lower()), "A")
    return reply


class _RandomVLM(Backend):
    """A tiny random VLM's habits: a word repeated up to the length limit, or (for every image whose
    id's number is divisible by 3, if ``newlines``) nothing but newlines, also to the limit."""

    kind = "py"

    def __init__(self, newlines: bool) -> None:
        super().__init__("random-vlm")
        self.newlines = newlines

    def _chat(self, requests):
        out = []
        for r in requests:
            k = r.sampling.max_tokens
            digits = "".join(ch for ch in str(r.id) if ch.isdigit())
            blank = self.newlines and bool(digits) and int(digits) % 3 == 0
            text = "\n" * k if blank else " ".join(["the"] * k)
            out.append(ChatResult(texts=[text] * r.sampling.n, finish_reasons=["length"] * r.sampling.n,
                                  completion_tokens=k * r.sampling.n))
        return out

    def _score_choices(self, requests):
        raise AssertionError("the random VLM only captions")


def random_vlm(newlines: str = "1"):
    return _RandomVLM(newlines == "1")
