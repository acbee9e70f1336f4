"""The policy a trainer starts from: loaded from a model or checkpoint folder, with LoRA and a frozen
vision tower as the recipe's ``model`` block asks.

* **One loader for every method.** GRPO, PTST stages and SFT load the policy here, so a checkpoint
  folder, a base model and a LoRA adapter on top of a base load the same way everywhere (the
  transformers #43701 resume workaround loads a checkpoint's weights through :func:`load_policy`).
* **LoRA.** ``model.lora`` becomes a peft ``LoraConfig`` (:func:`lora_config`) that TRL wraps the
  model with; a LoRA checkpoint is loaded back as a trainable adapter on top of the base.
* **A frozen vision tower.** ``model.freeze_vision_tower`` (default false: everything trains)
  freezes the ViT by module name (:data:`VISION_MODULE_NAMES`): the patch embedding, position
  embedding and blocks. Every merger/projector (Qwen2.5-VL's ``visual.merger``; Qwen3-VL's
  ``visual.merger`` and its DeepStack ``visual.deepstack_merger_list``) stays trainable unless
  ``freeze_projector``. With LoRA only the adapter trains: peft freezes every base weight, the tower
  and mergers included, whatever these flags say. docs/training.md has the table per architecture.
* **dtype and device.** ``auto`` means bfloat16 on a GPU and float32 on the CPU; on the CPU the
  trainer arguments get ``use_cpu=True, bf16=False`` (:func:`device_defaults`).
"""

from __future__ import annotations

import logging
from typing import Any

logger = logging.getLogger(__name__)

VISION_MODULE_NAMES = ("visual", "vision_tower", "vision_model")
PROJECTOR_HINTS = ("merger", "multi_modal_projector", "mm_projector")


def cuda_available() -> bool:
    import torch

    return torch.cuda.is_available()


def device_defaults(kwargs: dict[str, Any]) -> dict[str, Any]:
    """CPU runs need ``use_cpu=True, bf16=False``; GPU runs default to bf16. Explicit values win."""
    out = dict(kwargs)
    if not cuda_available():
        out["use_cpu"] = True
        out["bf16"] = False
        out["fp16"] = False
    else:
        out.setdefault("bf16", True)
    out.setdefault("report_to", "none")
    return out


def torch_dtype(name: str):
    import torch

    if name == "auto":
        return torch.bfloat16 if cuda_available() else torch.float32
    return getattr(torch, name)


def is_vlm(path: str) -> bool:
    from transformers import AutoConfig

    cfg = AutoConfig.from_pretrained(path)
    return getattr(cfg, "vision_config", None) is not None


def load_policy(path: str, model_spec, *, trainable_adapter_from: str | None = None):
    """Load the policy from ``path`` (a base model or a full checkpoint folder).

    With LoRA and ``trainable_adapter_from`` (a LoRA checkpoint), the adapter is loaded on top of
    the base and left trainable.
    """
    from transformers import AutoModelForCausalLM, AutoModelForImageTextToText

    kwargs: dict[str, Any] = {"dtype": torch_dtype(model_spec.dtype)}
    if model_spec.attn_implementation:
        kwargs["attn_implementation"] = model_spec.attn_implementation
    cls = AutoModelForImageTextToText if is_vlm(path) else AutoModelForCausalLM
    model = cls.from_pretrained(path, **kwargs)
    if trainable_adapter_from:
        from peft import PeftModel

        model = PeftModel.from_pretrained(model, trainable_adapter_from, is_trainable=True)
    if model_spec.freeze_vision_tower:
        freeze_vision_tower(model, keep_projector=not model_spec.freeze_projector)
    return model


def load_start_policy(recipe, start: str, resume: str | None):
    """``(policy, peft_config)`` for a trainer: from ``start`` (the model a run or stage starts from),
    or, when ``resume`` names a checkpoint, from its weights (full weights, or its LoRA adapter on top
    of ``start``). ``peft_config`` is set only for a fresh LoRA run, where TRL wraps the model."""
    lora = recipe.model.lora
    if resume and lora:
        return load_policy(start, recipe.model, trainable_adapter_from=resume), None
    if resume:
        return load_policy(resume, recipe.model), None
    return load_policy(start, recipe.model), (lora_config(lora) if lora else None)


def freeze_vision_tower(model, keep_projector: bool = True) -> int:
    """Freeze the vision encoder's parameters; returns how many tensors were frozen."""
    frozen = 0
    for name, p in model.named_parameters():
        parts = name.split(".")
        if not any(v in parts for v in VISION_MODULE_NAMES):
            continue
        # by substring: Qwen3-VL's DeepStack mergers (visual.deepstack_merger_list.N) are mergers too
        if keep_projector and any(h in part for part in parts for h in PROJECTOR_HINTS):
            continue
        p.requires_grad_(False)
        frozen += 1
    if frozen == 0:
        logger.warning("freeze_vision_tower: no parameter under %s found; nothing frozen", VISION_MODULE_NAMES)
    else:
        logger.info("froze %d vision-tower tensors", frozen)
    return frozen


def lora_config(spec):
    from peft import LoraConfig

    return LoraConfig(
        r=spec.r, lora_alpha=spec.alpha, lora_dropout=spec.dropout, target_modules=spec.target_modules, task_type="CAUSAL_LM"
    )


def eos_ids(path: str) -> set[int]:
    """Token ids that end a generation: the generation config's (often several for chat models) and
    the tokenizer's."""
    from transformers import AutoTokenizer, GenerationConfig

    ids: set[int] = set()
    try:
        eos = GenerationConfig.from_pretrained(path).eos_token_id
        ids |= set(eos if isinstance(eos, list) else [eos] if eos is not None else [])
    except (OSError, ValueError):
        pass
    try:
        tok = AutoTokenizer.from_pretrained(path)
        if tok.eos_token_id is not None:
            ids.add(tok.eos_token_id)
    except (OSError, ValueError):
        pass
    return ids
