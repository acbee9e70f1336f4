"""The TRL config a recipe trains with, built and checked before any model loads (``vlrl train check``).

:mod:`vlrl.training.validation` reads a recipe without importing TRL, so it knows the trainer keys
TRL takes but not what TRL does with their values. Some values TRL accepts when the config is built
and only fails on much later, after the policy, the dataset and a judge server are up:

* ``loss_type: grpoo`` is a plain string to ``GRPOConfig``; the trainer raises "Unknown loss type"
  in the loss of the first step, after the first rollout; so do ``scale_rewards``,
  ``importance_sampling_level`` and ``multi_objective_aggregation`` (and ``vllm_mode`` with vLLM);
* ``optim: adamw_bnb_8bit`` is a valid name; without ``bitsandbytes`` the optimizer fails to build
  when training starts;
* a typo in ``lr_scheduler_type`` (or any value transformers itself validates) fails when the
  config is built, which :func:`config_problems` does, so it is one line here, not a traceback;
* ``model.attn_implementation`` is read when the policy loads;
* some values are never refused: ``gradient_checkpointing: maybe`` is truthy, so it silently means
  true; ``epsilon_high`` below ``epsilon`` silently makes the clip range's upper side tighter than
  its lower one.

So :func:`config_problems` builds ``GRPOConfig`` (``SFTConfig`` for SFT; every PTST stage's) from the
recipe exactly as training will (the device defaults of this machine applied, so a GPU recipe checks
on a CPU), and checks those values against TRL and transformers themselves: the loss types from
``GRPOConfig``'s own field help, the attention backends from transformers' registry. Each problem is
one line naming the key, the value and what is accepted.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import re
import types
import typing
from typing import Any

# optimizer name fragments (transformers OptimizerNames) → (import name, pip name) they need
OPTIM_PACKAGES = (
    ("bnb", "bitsandbytes", "bitsandbytes"), ("8bit", "bitsandbytes", "bitsandbytes"),
    ("paged", "bitsandbytes", "bitsandbytes"), ("ademamix", "bitsandbytes", "bitsandbytes"),
    ("galore", "galore_torch", "galore-torch"), ("apollo", "apollo_torch", "apollo-torch"),
    ("lomo", "lomo_optim", "lomo-optim"), ("schedule_free", "schedulefree", "schedulefree"),
    ("anyprecision", "torchdistx", "torchdistx"), ("grokadamw", "grokadamw", "grokadamw"),
    ("stable_adamw", "optimi", "torch-optimi"),
)
# GRPOConfig string fields TRL takes as they are and only branches on inside the first step, after the first
# rollout ("Invalid value for scale_rewards", "Unknown importance sampling level"), as with loss_type
CHOICE_FIELDS = ("scale_rewards", "importance_sampling_level", "multi_objective_aggregation")
ATTENTION_BUILTIN = {"eager", "sdpa", "flash_attention_2", "flash_attention_3", "flex_attention", "paged_attention"}


def _config_class(method: str):
    if method == "sft":
        from trl import SFTConfig

        return SFTConfig
    from trl import GRPOConfig

    return GRPOConfig


def _kinds(tp: Any) -> set[type]:
    """The plain types a dataclass field annotation allows (``bool``, ``int | None`` → {int}, ...)."""
    if isinstance(tp, str):
        names = {"bool": bool, "int": int, "float": float, "str": str}
        parts = re.split(r"[|\[\],\s]+", tp.replace("Optional", "").replace("Union", ""))
        if any(p and p not in names and p != "None" for p in parts):
            return set()  # a richer annotation (a list, an enum, a dict): not checked here
        return {names[p] for p in parts if p in names}
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        out: set[type] = set()
        for a in typing.get_args(tp):
            if a is type(None):
                continue
            k = _kinds(a)
            if not k:
                return set()
            out |= k
        return out
    return {tp} if tp in (bool, int, float, str) else set()


def _type_problem(key: str, value: Any, kinds: set[type]) -> str | None:
    if value is None or not kinds:
        return None
    if kinds == {bool}:
        return None if isinstance(value, bool) else f"trainer.{key} is {value!r}; it must be true or false"
    if isinstance(value, bool):
        if bool in kinds:
            return None
        return f"trainer.{key} is {value!r}; it must be {' or '.join(sorted(k.__name__ for k in kinds))}"
    if int in kinds and isinstance(value, int):
        return None
    if float in kinds and isinstance(value, (int, float)):
        return None
    if str in kinds and isinstance(value, str):
        return None
    return f"trainer.{key} is {value!r} ({type(value).__name__}); it must be {' or '.join(sorted(k.__name__ for k in kinds))}"


def loss_types(cfg_cls) -> set[str]:
    """The loss types GRPOConfig documents as supported (its ``loss_type`` field help)."""
    field = next((f for f in dataclasses.fields(cfg_cls) if f.name == "loss_type"), None)
    help_text = str(field.metadata.get("help", "")) if field is not None else ""
    m = re.search(r"Supported values are (.*?)\.\s", help_text)
    return set(re.findall(r"'([a-z_]+)'", m.group(1))) if m else set()


def _documents_booleans(field: dataclasses.Field) -> bool:
    help_text = str(field.metadata.get("help", ""))
    return "`True`" in help_text and "`False`" in help_text


def documented_values(cfg_cls, name: str) -> set[str]:
    """The values ``cfg_cls``'s field ``name`` documents (quoted as ``'value'`` in its help), and its default."""
    field = next((f for f in dataclasses.fields(cfg_cls) if f.name == name), None)
    if field is None:
        return set()
    values = set(re.findall(r"`'([a-z_]+)'`", str(field.metadata.get("help", ""))))
    return values | ({field.default} if isinstance(field.default, str) else set())


def attention_backends() -> set[str]:
    """What ``attn_implementation`` may name: transformers' registered attention functions and eager."""
    names = set(ATTENTION_BUILTIN)
    try:
        from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

        names |= set(ALL_ATTENTION_FUNCTIONS.keys())
    except ImportError:
        pass
    return names


def _stage_overrides(recipe) -> list[dict[str, Any]]:
    if recipe.method != "ptst":
        return [{}]
    from vlrl.training.validation import plan_stages

    keys = ("per_device_train_batch_size", "gradient_accumulation_steps", "steps_per_generation",
            "generation_batch_size", "num_generations", "max_completion_length", "max_steps")
    return [{k: v for k, v in p.items() if k in keys and v is not None} for p in plan_stages(recipe)]


def _first_line(e: Exception) -> str:
    text = " ".join(str(e).split())
    return f"{type(e).__name__}: {text[:300]}"


def config_problems(recipe) -> list[str]:
    """One line per trainer value TRL or transformers would refuse (or silently misread) at start."""
    from vlrl.training.policy import device_defaults

    cfg_cls = _config_class(recipe.method)
    fields = {f.name: f for f in dataclasses.fields(cfg_cls)}
    hints: dict[str, Any] = {}
    try:
        hints = typing.get_type_hints(cfg_cls)
    except Exception:  # noqa: BLE001 - an annotation that does not resolve: fall back to the raw one
        pass
    out = []
    for key, value in recipe.trainer.items():
        if key not in fields:
            continue
        kinds = _kinds(hints.get(key, fields[key].type))
        if kinds == {str} and _documents_booleans(fields[key]):
            kinds = {str, bool}  # scale_rewards: annotated str, documented (and converted) as `True` / `False` too
        if msg := _type_problem(key, value, kinds):
            out.append(msg)
    if out:
        return out  # the config would be built from values that are already wrong
    configs = []
    for i, over in enumerate(_stage_overrides(recipe)):
        kwargs = device_defaults({"output_dir": recipe.output_dir, **recipe.trainer, **over})
        if recipe.method == "sft":
            kwargs.setdefault("max_length", None)
            kwargs.setdefault("remove_unused_columns", False)
        try:
            configs.append(cfg_cls(**kwargs))
        except Exception as e:  # noqa: BLE001 - whatever TRL/transformers refuse, said in one line
            where = f" (PTST stage {i + 1})" if recipe.method == "ptst" else ""
            out.append(f"trainer{where}: {cfg_cls.__name__} refuses it: {_first_line(e)}")
            return out
    cfg = configs[0]
    if recipe.method != "sft":
        allowed = loss_types(cfg_cls)
        if allowed and cfg.loss_type not in allowed:
            out.append(f"trainer.loss_type is {cfg.loss_type!r}; TRL supports {', '.join(sorted(allowed))}")
        for name in (*CHOICE_FIELDS, *(("vllm_mode",) if getattr(cfg, "use_vllm", False) else ())):
            value, allowed = getattr(cfg, name, None), documented_values(cfg_cls, name)
            if isinstance(value, str) and len(allowed) > 1 and value not in allowed:
                out.append(f"trainer.{name} is {value!r}; TRL supports {', '.join(sorted(allowed))}")
        eps, eps_high = getattr(cfg, "epsilon", None), getattr(cfg, "epsilon_high", None)
        if eps is not None and eps_high is not None and eps_high < eps:
            out.append(f"trainer.epsilon_high ({eps_high:g}) is below trainer.epsilon ({eps:g}); the clip range's upper "
                       "side must be at least its lower one (epsilon_high ≥ epsilon, or leave it unset)")
    optim = str(getattr(cfg.optim, "value", cfg.optim))
    for fragment, imp, pip in OPTIM_PACKAGES:
        if fragment in optim and importlib.util.find_spec(imp) is None:
            out.append(f"trainer.optim is {optim!r} but {pip} is not installed; pip install {pip}, or use adamw_torch")
            break
    if getattr(cfg, "use_liger_kernel", False) and importlib.util.find_spec("liger_kernel") is None:
        # transformers applies the kernels when training starts, after the policy loaded
        out.append("trainer.use_liger_kernel is true but liger-kernel is not installed; pip install liger-kernel, or "
                   "set it false")
    attn = getattr(recipe.model, "attn_implementation", None)
    if attn and "/" not in attn and attn not in attention_backends():  # "org/kernel": a hub kernel
        out.append(f"model.attn_implementation is {attn!r}; transformers knows {', '.join(sorted(attention_backends()))}")
    return out


__all__ = ["attention_backends", "config_problems", "documented_values", "loss_types"]
