"""The completions log: what the policy wrote at each logging step, with its rewards and images.

Every logging step after a fresh generation batch, :func:`write_completions` writes
``<output_dir>/completions/step-NNNNN.jsonl``, one line per completion: the prompt text, the
completion, each reward's value, the advantage, the image files (saved once each under
``completions/images/``, named by content) and any column a reward logged with TRL's ``log_extra``
(e.g. hfrrf's gold answer and parsed prediction). A run can be audited from these files alone,
without wandb.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from vlrl.core.pipeline import write_jsonl


def message_text(messages: Any) -> str:
    """A prompt or completion as plain text: ``role: text`` per message (image parts left out)."""
    if isinstance(messages, str):
        return messages
    parts = []
    for m in messages or []:
        c = m.get("content")
        if isinstance(c, list):
            c = "".join(p.get("text", "") for p in c if p.get("type") == "text")
        parts.append(f"{m.get('role')}: {c}")
    return "\n".join(parts)


_CONTROL = {c: f"\\x{c:02x}" for c in (*range(0x00, 0x09), 0x0B, 0x0C, *range(0x0E, 0x20), *range(0x7F, 0xA0))}
"""Control characters (all but tab, newline and carriage return) as visible ``\\xNN`` escapes."""


def printable(value: Any) -> Any:
    """``value`` (a text, or messages: lists and dicts of them) with every control character but
    tab and line breaks written as ``\\xNN``. A random policy writes NULs and terminal escapes; TRL's
    completions table prints them raw into the training log, where ``grep`` then calls the whole log
    binary and an escape sequence can clear the terminal. Images and numbers pass through."""
    if isinstance(value, str):
        return value.translate(_CONTROL)
    if isinstance(value, list):
        return [printable(v) for v in value]
    if isinstance(value, dict):
        return {k: printable(v) for k, v in value.items()}
    return value


def write_completions(logs: dict[str, Any], output_dir: Path, step: int) -> Path:
    """Write the latest generation batch to ``completions/step-NNNNN.jsonl`` (images saved once each)."""
    out = output_dir / "completions"
    img_dir = out / "images"
    img_dir.mkdir(parents=True, exist_ok=True)
    prompts, completions = list(logs["prompt"]), list(logs["completion"])
    images = list(logs.get("images") or [])
    rewards = {k: list(v) for k, v in logs["rewards"].items()}
    adv = list(logs["advantages"])
    extra = {k: list(v) for k, v in (logs.get("extra") or {}).items()}
    path = out / f"step-{step:05d}.jsonl"

    def rows():
        for i, (p, c) in enumerate(zip(prompts, completions, strict=False)):
            files = []
            for img in (images[i] if i < len(images) and images[i] else []):
                if hasattr(img, "tobytes"):
                    name = hashlib.sha1(img.tobytes()).hexdigest()[:16] + ".png"
                    if not (img_dir / name).exists():
                        img.save(img_dir / name)
                    files.append(f"images/{name}")
            rec = {
                "step": step,
                "prompt": message_text(p),
                "completion": message_text(c).removeprefix("assistant: "),
                "images": files,
                "rewards": {k: (v[i] if i < len(v) else None) for k, v in rewards.items()},
                "advantage": adv[i] if i < len(adv) else None,
            }
            for k, v in extra.items():  # reward-logged columns, e.g. hfrrf's gold answer and parsed prediction
                rec.setdefault(k, v[i] if i < len(v) else None)
            yield rec

    write_jsonl(path, rows())
    return path
