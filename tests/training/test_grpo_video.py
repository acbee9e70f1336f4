"""GRPO on video rows through TRL 1.16, with vlrl's one adapter (:mod:`vlrl.training.video`).

The tiny CPU twin recipe trains a random-weight Qwen3-VL on generated clips of a moving square
(``builtin:tiny_videos``) with ``caprl_qa`` and ``caption_length``. Checked beyond "it ran": the
video reaches generation (prompt lengths hold the video tokens) and the loss forward (the policy's
log-probabilities change when the video's pixels change, which TRL alone would not see), and
``use_vllm`` with video rows stops with the reason.
"""

from __future__ import annotations

import json

import pytest

from tests.support.paths import ROOT
from vlrl.training.recipe import load_recipe

TINY = ROOT / "train" / "recipes" / "tiny" / "caprl_video_tiny.yaml"

pytestmark = pytest.mark.slow


def test_caprl_video_tiny_trains_with_the_video_in_every_forward(tmp_path):
    import torch

    from vlrl.training.grpo import build_trainer
    from vlrl.training.runstate import open_run

    run = open_run(load_recipe(TINY, [f"output_dir={tmp_path / 'run'}", "data.source=builtin:tiny_videos:2"]))
    trainer, _ = build_trainer(run.recipe)
    seen = []
    real = type(trainer).__mro__[2]._get_per_token_logps_and_entropies  # TRL's own

    def spy(self, model, input_ids, *a, **k):
        calls = []
        hook = model.register_forward_pre_hook(lambda m, args, kw: calls.append(sorted(kw)), with_kwargs=True)
        try:
            return real(self, model, input_ids, *a, **k)
        finally:
            hook.remove()
            seen.extend(calls)

    type(trainer).__mro__[2]._get_per_token_logps_and_entropies = spy
    try:
        trainer.train()
    finally:
        type(trainer).__mro__[2]._get_per_token_logps_and_entropies = real
    assert trainer.state.global_step == 2
    assert seen and all("pixel_values_videos" in kw and "video_grid_thw" in kw and "mm_token_type_ids" in kw for kw in seen)
    history = trainer.state.log_history
    assert any("rewards/caprl_qa/mean" in h for h in history) and any("rewards/caption_length/mean" in h for h in history)

    # the loss forward sees the video: other pixels, other log-probabilities
    trainer._vlrl_clips = None
    batch = [dict(trainer.train_dataset[0]) for _ in range(2)]
    out = trainer._generate_and_score_completions(batch)
    assert len(out["vlrl_video"]) == 2 and "pixel_values_videos" in out["vlrl_video"][0]
    ids = torch.cat([out["prompt_ids"], out["completion_ids"]], dim=1)
    mask = torch.cat([out["prompt_mask"], out["completion_mask"]], dim=1)
    n = out["completion_ids"].size(1)
    trainer._vlrl_videos = out["vlrl_video"]
    with torch.no_grad():
        a, _, _ = trainer._get_per_token_logps_and_entropies(trainer.model, ids, mask, n)
        trainer._vlrl_videos = [{**v, "pixel_values_videos": torch.zeros_like(v["pixel_values_videos"])} for v in out["vlrl_video"]]
        b, _, _ = trainer._get_per_token_logps_and_entropies(trainer.model, ids, mask, n)
    trainer._vlrl_videos = None
    assert not torch.allclose(a, b)


def test_caprl_video_tiny_through_the_cli_and_vllm_refused(tmp_path):
    from typer.testing import CliRunner

    from vlrl.cli import app

    out = tmp_path / "cli"
    res = CliRunner().invoke(app, ["train", "grpo", "--recipe", str(TINY), f"output_dir={out}", "trainer.max_steps=1"])
    assert res.exit_code == 0, res.output
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["global_step"] == 1 and "rewards/caprl_qa/mean" in metrics
    from vlrl.training.grpo import build_trainer
    from vlrl.training.runstate import open_run

    run = open_run(load_recipe(TINY, [f"output_dir={tmp_path / 'v'}", "data.source=builtin:tiny_videos:2"]))
    trainer, _ = build_trainer(run.recipe)
    trainer.use_vllm = True
    with pytest.raises(ValueError, match="use_vllm: false"):
        trainer._generate_and_score_completions([dict(trainer.train_dataset[0])])
