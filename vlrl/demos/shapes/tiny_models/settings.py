"""The warm starts' settings: one frozen config whose parts key the cached models.

:meth:`WarmStartConfig.key` hashes only the fields a model depends on (``cap_*`` and the SFT
settings for the captioner, ``ans_*`` and the prompt for the answerers, ``vocab_size`` for the
tokenizer), so changing one model's settings leaves the others cached. The keys name folders in
every user's cache: they must not change for unchanged settings.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field

from vlrl.demos.shapes.kit import world as W

VERSION = 1
CAPTIONER_VERSION = 2
"""Part of the captioner's key only (tokenizer and answerers stay cached): 2 is the captioner trained
by the project's SFT recipe; 1 was the hand-written loop's, never reused for the new training."""
ANSWER_PROMPT = "shapes_answer"
# The tiny answerer's own chat template: the rendered prompt, one line per message. A compact
# format keeps the answerer's sequences short on CPU; the backend applies it like any template.
ANSWERER_CHAT_TEMPLATE = "{%- for message in messages %}{{ message['content'] }}{{ '\n' }}{%- endfor %}"


@dataclass(frozen=True)
class WarmStartConfig:
    world: W.WorldConfig = field(default_factory=W.WorldConfig)
    vocab_size: int = 512
    # captioner (tiny Qwen2.5-VL)
    cap_hidden: int = 128
    cap_layers: int = 2
    cap_mrope: tuple[int, int, int] = (4, 6, 6)
    vision_hidden: int = 128
    vision_depth: int = 2
    cap_init: float = 0.05
    sft_images: int = 6000
    sft_steps: int = 1000
    sft_batch: int = 64
    sft_lr: float = 3e-3
    full_caption_steps: int = 400
    drop_p: float = 0.65
    """Attribute drop rate after the curriculum. Above 0.5 so that *greedy* decoding usually omits
    an attribute (at 0.5 greedy is a coin flip per attribute and can state most facts already)."""
    # answerer (tiny Qwen2)
    ans_hidden: int = 128
    ans_layers: int = 4
    ans_init: float = 0.06
    ans_steps: int = 400
    ans_batch: int = 128
    ans_lr: float = 3e-3
    ans_pool: int = 24000
    ans_drop_max: float = 0.6
    ans_corrupt_p: float = 0.2
    """Share of training captions with one attribute mis-stated (teaches reading, not guessing)."""
    ans_garble_p: float = 0.15
    """Share of training captions garbled (a span repeated or dropped, words swapped, truncated,
    items chained with "on"). Every caption is labelled by what a strict reader of the world's
    grammar gets from it (:func:`vlrl.demos.shapes.kit.world.parse_caption`), so a garbled caption answers
    nothing: keyword-stuffed run-ons cannot hack the reward."""
    ans_empty_p: float = 0.0
    """Share of empty captions labelled "cannot answer". 0 by default: what the answerer then says
    with no caption is its prior, which is exactly what the text-only QA filter should probe."""
    aux_weight: float = 1.0
    answer_prompt: str = ANSWER_PROMPT

    def key(self, part: str) -> str:
        d = asdict(self)
        keep = {k: v for k, v in d.items() if k == "world" or k == "vocab_size" or k.startswith(part)}
        if part == "ans":
            keep["prompt"] = self.answer_prompt
            if self.aux_weight != 1.0:
                keep["aux_weight"] = self.aux_weight
        elif part == "cap":
            keep.update({k: d[k] for k in ("vision_hidden", "vision_depth", "sft_images", "sft_steps", "sft_batch",
                                           "sft_lr", "full_caption_steps", "drop_p")})
            keep["captioner_version"] = CAPTIONER_VERSION
        blob = json.dumps([VERSION, part, keep], sort_keys=True, default=str)
        return hashlib.sha1(blob.encode()).hexdigest()[:10]
