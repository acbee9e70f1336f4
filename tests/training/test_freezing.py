"""What trains, per architecture (docs/training.md, "What trains"): the defaults, the two freeze flags
and LoRA, on the tiny Qwen2-VL, Qwen2.5-VL and Qwen3-VL models (#30 finding 9)."""

from __future__ import annotations

import pytest

from vlrl.training.policy import freeze_vision_tower, lora_config
from vlrl.training.recipe import LoraSpec

TOWER = {"qwen2_vl": ("visual.patch_embed", "visual.blocks"), "qwen2_5_vl": ("visual.patch_embed", "visual.blocks"),
         "qwen3_vl": ("visual.patch_embed", "visual.pos_embed", "visual.blocks")}
MERGERS = {"qwen2_vl": ("visual.merger",), "qwen2_5_vl": ("visual.merger",), "qwen3_vl": ("visual.merger", "visual.deepstack_merger_list")}


def _model(arch):
    from transformers import AutoModelForImageTextToText

    from vlrl.core.tiny import cached_tiny

    return AutoModelForImageTextToText.from_pretrained(str(cached_tiny(arch)))


def _trainable(model) -> dict[str, bool]:
    return {n: p.requires_grad for n, p in model.named_parameters()}


def _under(name: str, prefixes) -> bool:
    return any(f"{p}." in name or name.endswith(p) for p in prefixes)


@pytest.mark.parametrize("arch", ["qwen2_vl", "qwen2_5_vl", "qwen3_vl"])
def test_freeze_flags_per_architecture(arch):
    model = _model(arch)
    assert all(_trainable(model).values())  # the default: everything trains
    assert any(_under(n, MERGERS[arch][-1:]) for n in _trainable(model))  # the modules named exist
    freeze_vision_tower(model)
    for name, trains in _trainable(model).items():
        if _under(name, TOWER[arch]):
            assert not trains, name
        else:  # every merger (Qwen3-VL's DeepStack mergers too) and the language model
            assert trains, name
    model = _model(arch)
    freeze_vision_tower(model, keep_projector=False)
    for name, trains in _trainable(model).items():
        assert trains is not (".visual." in f".{name}"), name


@pytest.mark.parametrize("arch", ["qwen2_5_vl", "qwen3_vl"])
def test_with_lora_only_the_adapters_train(arch):
    from peft import get_peft_model

    for targets, vision_adapters in ((["q_proj", "k_proj", "v_proj", "o_proj"], False), ("all-linear", True)):
        model = _model(arch)
        freeze_vision_tower(model)  # the mergers would stay trainable without LoRA
        peft_model = get_peft_model(model, lora_config(LoraSpec(r=2, alpha=4, dropout=0.0, target_modules=targets)))
        trains = [n for n, t in _trainable(peft_model).items() if t]
        assert trains and all("lora_" in n for n in trains)  # base weights, mergers included, are frozen
        assert any(".visual." in n for n in trains) is vision_adapters, targets
