"""Putting untrusted text (a caption under evaluation) into a judge prompt so it cannot forge structure.

A caption is written by the policy being trained, so it is adversarial input to the judge: if it sits
between plain delimiters it can close them and write its own criteria, instructions or verdict after
them. Here it becomes a JSON string literal (one line, quotes and newlines escaped, so it cannot end
the block) inside an element whose name carries a nonce derived from the caption's hash (which the
caption cannot contain without changing its own hash). Templates include ``_caption_block.jinja``,
which renders ``fence`` and ``caption_json`` and tells the judge that the block is data.
"""

from __future__ import annotations

import hashlib
import json


def fence_caption(caption: str) -> dict[str, str]:
    """Template variables ``caption_json``, ``fence`` (and the raw ``caption``) for one caption."""
    nonce = hashlib.sha256(("fence\x00" + caption).encode("utf-8")).hexdigest()[:10]
    return {"caption_json": json.dumps(caption, ensure_ascii=False), "fence": f"caption-{nonce}", "caption": caption}
