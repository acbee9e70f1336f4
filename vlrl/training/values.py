"""Range and type checks for recipe values, so a typo fails in ``vlrl train check``, not mid-run.

TRL and transformers accept many nonsensical values silently (a negative learning rate trains
backwards; ``temperature: -1`` is sent to vLLM and rejected hours later) or fail with a type error
deep inside the trainer (``learning_rate: "1e-5 "`` as text). Each rule here is one line: the key,
what it must be, and the value found.
"""

from __future__ import annotations

import math
from typing import Any

# key → (kind, minimum, strict): kind "int" | "float"; strict means value must be > minimum.
TRAINER_RULES: dict[str, tuple[str, float, bool]] = {
    "learning_rate": ("float", 0.0, True),
    "per_device_train_batch_size": ("int", 1, False),
    "gradient_accumulation_steps": ("int", 1, False),
    "num_generations": ("int", 1, False),
    "max_completion_length": ("int", 1, False),
    "max_prompt_length": ("int", 1, False),
    "max_length": ("int", 1, False),
    "temperature": ("float", 0.0, False),
    "top_p": ("float", 0.0, True),
    "beta": ("float", 0.0, False),
    "epsilon": ("float", 0.0, True),
    "warmup_ratio": ("float", 0.0, False),
    "warmup_steps": ("float", 0.0, False),  # an int, or a float in [0, 1): a ratio (transformers 5)
    "weight_decay": ("float", 0.0, False),
    "max_grad_norm": ("float", 0.0, False),
    "num_train_epochs": ("float", 0.0, True),
    "logging_steps": ("float", 0.0, True),
    "save_steps": ("float", 0.0, True),
    "steps_per_generation": ("int", 1, False),
    "generation_batch_size": ("int", 1, False),
    "num_iterations": ("int", 1, False),
    "vllm_gpu_memory_utilization": ("float", 0.0, True),
    # refused only when generation or the optimizer starts, after the policy loaded
    "repetition_penalty": ("float", 0.0, True),
    "top_k": ("int", 0, False),
    "adam_beta1": ("float", 0.0, False),
    "adam_beta2": ("float", 0.0, False),
    "adam_epsilon": ("float", 0.0, False),
}


def _bad(key: str, value: Any, kind: str, low: float, strict: bool) -> str | None:
    if value is None:
        return None
    noun = "an integer" if kind == "int" else "a number"
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return f"{key} is {value!r} ({type(value).__name__}); it must be {noun}"
    if kind == "int" and not (isinstance(value, int) or float(value).is_integer()):
        return f"{key} is {value!r}; it must be {noun}"
    if not math.isfinite(value):
        return f"{key} is {value!r}; it must be finite"
    if (strict and value <= low) or (not strict and value < low):
        return f"{key} is {value!r}; it must be {'>' if strict else '≥'} {low:g}"
    return None


def value_problems(recipe) -> list[str]:
    """Every out-of-range or mistyped value in the trainer, data, run and reward-weight blocks."""
    out = []
    for key, (kind, low, strict) in TRAINER_RULES.items():
        if key in recipe.trainer and (msg := _bad(f"trainer.{key}", recipe.trainer[key], kind, low, strict)):
            out.append(msg)
    top_p = recipe.trainer.get("top_p")
    if isinstance(top_p, (int, float)) and not isinstance(top_p, bool) and top_p > 1:
        out.append(f"trainer.top_p is {top_p!r}; it must be in (0, 1]")
    for key in ("adam_beta1", "adam_beta2"):  # torch's AdamW refuses them when training starts
        b = recipe.trainer.get(key)
        if isinstance(b, (int, float)) and not isinstance(b, bool) and b >= 1:
            out.append(f"trainer.{key} is {b!r}; it must be in [0, 1)")
    if recipe.trainer.get("reward_weights") is not None and getattr(recipe, "method", "grpo") != "sft":
        # the trainer sets reward_weights from the rewards block: a value here would be silently replaced
        out.append("trainer.reward_weights is set, but each reward's weight comes from its rewards[i].weight; "
                   "set the weights there")
    for key in ("max_samples", "min_pixels", "max_pixels"):
        if (msg := _bad(f"data.{key}", getattr(recipe.data, key, None), "int", 1, False)):
            out.append(msg)
    lo, hi = getattr(recipe.data, "min_pixels", None), getattr(recipe.data, "max_pixels", None)
    if isinstance(lo, int) and isinstance(hi, int) and lo > hi:
        out.append(f"data.min_pixels ({lo}) is above data.max_pixels ({hi}); swap them")
    run = getattr(recipe, "run", None)
    if run is not None and (msg := _bad("run.max_none_reward_steps", run.max_none_reward_steps, "int", 0, False)):
        out.append(msg)
    for i, r in enumerate(recipe.rewards):
        if isinstance(r.weight, (int, float)) and not isinstance(r.weight, bool) and not math.isfinite(r.weight):
            out.append(f"rewards[{i}].weight is {r.weight!r}; it must be finite")
    return out
