"""CapRL curation's scripted models: a VLM that writes and answers colour questions, a text-only answerer that guesses."""

from __future__ import annotations

import re
from pathlib import Path

from PIL import Image

from vlrl.core.backends import Backend, ChatResult

COLOURS = {"red": (220, 20, 20), "green": (20, 200, 20), "blue": (20, 20, 220)}


def make_images(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name, rgb in COLOURS.items():
        Image.new("RGB", (56, 56), rgb).save(folder / f"{name}.png")
    (folder / "broken.png").write_bytes(b"<html>not an image</html>")
    return folder


def colour_of(img) -> str:
    px = img.getpixel((5, 5))
    return max(COLOURS, key=lambda c: -sum(abs(a - b) for a, b in zip(COLOURS[c], px, strict=False)))


def prompt_text(messages) -> str:
    content = messages[0]["content"]
    return content if isinstance(content, str) else "".join(p.get("text", "") for p in content)


def prompt_image(messages):
    content = messages[0]["content"]
    return next((p["image"] for p in content if p.get("type") == "image"), None) if isinstance(content, list) else None


def letter_of(text: str, wanted: str) -> str:
    return next(L for L, o in re.findall(r"^([A-Z])\. (.*)$", text, re.M) if o == wanted)


class ScriptedVLM(Backend):
    """Writes 3 questions (one visual, one common-sense, one malformed); answers visual ones correctly."""

    kind = "scripted-vlm"

    def __init__(self, fail_on: str | None = None):
        super().__init__("vlm")
        self.fail_on = fail_on
        self.calls = 0

    def _chat(self, requests):
        self.calls += 1
        out = []
        for r in requests:
            text, img = prompt_text(r.messages), prompt_image(r.messages)
            if "Write" in text:
                colour = colour_of(img)
                if self.fail_on == colour:
                    out.append(ChatResult(error="endpoint down"))
                    continue
                opts = ["red", "green", "blue", "yellow"]
                out.append(ChatResult(texts=[
                    "Sure, here you go!\n\nQuestion 1: What colour is the square?\n"
                    + "\n".join(f"{L}. {o}" for L, o in zip("ABCD", opts, strict=False))
                    + f"\nAnswer: {'ABCD'[opts.index(colour)]}\n\n"
                    "Question 2: What colour is the sky on a clear day?\nA. blue\nB. pink\nC. black\nAnswer: A\n\n"
                    "Question 3: What is it?\nA. a\nB. b\nC. c\nAnswer: E\n"
                ]))
            else:
                wanted = colour_of(img) if "square" in text else "blue"
                out.append(ChatResult(texts=[f" {letter_of(text, wanted)}"]))
        return out

    def _score_choices(self, requests):
        raise NotImplementedError


class ScriptedTextAnswerer(Backend):
    """Knows the sky is blue; for anything else always picks 'yellow' (never right here)."""

    kind = "scripted-text"

    def __init__(self):
        super().__init__("text")

    def _chat(self, requests):
        out = []
        for r in requests:
            text = prompt_text(r.messages)
            assert prompt_image(r.messages) is None and "None of the above" not in text
            out.append(ChatResult(texts=[f" {letter_of(text, 'blue' if 'sky' in text else 'yellow')}"]))
        return out

    def _score_choices(self, requests):
        raise NotImplementedError
