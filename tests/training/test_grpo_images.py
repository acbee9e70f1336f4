"""The image reaches GRPO's loss, not only generation.

TRL builds the policy's log-probabilities for the loss in a forward of its own. If that forward lost
the image (a version of TRL or transformers that drops ``pixel_values`` on the way), generation would
still read the picture, rewards would still vary, and training would run: the policy would learn
answers from the question's words alone, silently. The video rows have their own check
(``test_grpo_video.py``); this is the one for image rows, through the Vision-R1 recipe's trainer.
"""

from __future__ import annotations

import pytest

from tests.support.paths import ROOT

TINY = ROOT / "train" / "recipes" / "tiny" / "vision_r1_tiny_ptst.yaml"

pytestmark = pytest.mark.slow


def test_every_loss_forward_reads_the_rows_images(tmp_path):
    import torch

    from tests.support.training import two_image_source
    from vlrl.training.grpo import build_trainer
    from vlrl.training.recipe import load_recipe
    from vlrl.training.runstate import open_run

    src = two_image_source(tmp_path)
    run = open_run(load_recipe(TINY, [f"output_dir={tmp_path / 'run'}", f"data.source={src}", "data.max_pixels=3136",
                                      "stages=null", "max_steps=2", "num_generations=4", "max_completion_length=8"]))
    from trl import GRPOTrainer as trl  # whose loss forward this spies on

    trainer, _ = build_trainer(run.recipe)
    real = trl._get_per_token_logps_and_entropies
    seen: list[dict] = []

    def spy(self, model, input_ids, *a, **k):
        seen.append({"ids": input_ids, **k})
        return real(self, model, input_ids, *a, **k)

    trl._get_per_token_logps_and_entropies = spy
    try:
        trainer.train()
    finally:
        trl._get_per_token_logps_and_entropies = real
    assert trainer.state.global_step == 2
    assert seen, "no loss forward was seen"
    image_pad = trainer.processing_class.tokenizer.convert_tokens_to_ids("<|image_pad|>")
    merge = trainer.model.config.vision_config.spatial_merge_size ** 2
    for call in seen:
        grid = call.get("image_grid_thw")
        assert call.get("pixel_values") is not None and grid is not None
        # two images a row, and as many placeholder tokens in the prompts as the grids hold merged patches
        assert grid.shape[0] == 2 * call["ids"].shape[0]
        assert int((call["ids"] == image_pad).sum()) == int(grid.prod(dim=-1).sum()) // merge

    # and it reads them: other pixels, other log-probabilities of the same completions
    batch = [dict(trainer.train_dataset[0]) for _ in range(4)]  # one group of num_generations
    out = trainer._generate_and_score_completions(batch)
    ids = torch.cat([out["prompt_ids"], out["completion_ids"]], dim=1)
    mask = torch.cat([out["prompt_mask"], out["completion_mask"]], dim=1)
    n = out["completion_ids"].size(1)
    extra = {k: out[k] for k in ("pixel_values", "image_grid_thw", "num_images") if k in out}
    with torch.no_grad():
        a = trainer._get_per_token_logps_and_entropies(trainer.model, ids, mask, n, **extra)[0]
        blank = {**extra, "pixel_values": torch.zeros_like(extra["pixel_values"])}
        b = trainer._get_per_token_logps_and_entropies(trainer.model, ids, mask, n, **blank)[0]
    assert not torch.allclose(a, b)
