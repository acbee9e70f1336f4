"""Trained tiny models, not stand-ins: the captioner and QA answerers of every demo's warm start,
RubiCap's rubric judge and the comparison's Likert judge; all cached by a hash of their settings."""
