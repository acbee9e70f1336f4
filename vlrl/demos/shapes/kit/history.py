"""Every demo's training history: a trainer callback that logs each step to ``history.jsonl``, and
the reader that turns a resumed run's log back into one record per step.

Recipes name the callback by its dotted path (``vlrl.demos.shapes.kit.history:HistoryCallback``),
like any user callback, so a demo's recipe stays runnable with ``vlrl train``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from vlrl.core.pipeline import read_jsonl

CALLBACK = "vlrl.demos.shapes.kit.history:HistoryCallback"
"""The recipes' ``callbacks`` entry for :class:`HistoryCallback`."""


def _history_callback_class():
    from transformers import TrainerCallback

    class HistoryCallback(TrainerCallback):
        """Append every trainer log (reward, completion length, ...) to ``output_dir/history.jsonl``."""

        def on_log(self, args, state, control, logs=None, **kwargs):
            if logs and state.is_world_process_zero:
                with open(Path(args.output_dir) / "history.jsonl", "a", encoding="utf-8") as fh:
                    fh.write(json.dumps({"step": state.global_step, **logs}) + "\n")

    return HistoryCallback


def __getattr__(name: str):  # the callback class is built lazily so importing this module stays light
    if name == "HistoryCallback":
        return _history_callback_class()
    raise AttributeError(name)


def read_history(grpo_dir: Path) -> list[dict[str, Any]]:
    """Logged training steps (the last record per step wins after a resume)."""
    path = grpo_dir / "history.jsonl"
    if not path.exists():
        return []
    by_step = {}
    for rec in read_jsonl(path):
        if "reward" in rec:
            by_step[rec["step"]] = rec
    return [by_step[k] for k in sorted(by_step)]


def window_mean(vals: list[float], window: int, last: bool) -> float | None:
    """Mean of the first (or last) ``window`` values, rounded to 4 places; None when there are none."""
    part = vals[-window:] if last else vals[:window]
    return round(sum(part) / len(part), 4) if part else None
