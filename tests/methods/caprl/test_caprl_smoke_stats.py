"""The smoke check's statistics: paired bootstrap intervals, a margin, and the chance floor."""

from __future__ import annotations

import json
import random

import pytest
from PIL import Image

from vlrl.methods.caprl.smoke_stats import chance_level, paired_bootstrap, verdict


def test_paired_bootstrap_interval_brackets_the_mean_and_shrinks_with_n():
    rng = random.Random(0)
    small = paired_bootstrap([rng.random() for _ in range(10)], [rng.random() for _ in range(10)])
    big = paired_bootstrap([rng.random() for _ in range(400)], [rng.random() for _ in range(400)])
    for c in (small, big):
        assert c["ci_low"] <= c["diff"] <= c["ci_high"]
    assert big["ci_high"] - big["ci_low"] < small["ci_high"] - small["ci_low"]
    assert paired_bootstrap([None, 1.0], [0.0, None])["pairs"] == 0


def test_noise_that_beat_the_old_mean_rule_fails_and_a_real_gap_passes():
    rng = random.Random(3)
    noise_fails = 0
    for seed in range(20):
        real = [rng.random() for _ in range(16)]
        base = {b: [rng.random() for _ in range(16)] for b in ("generic", "empty", "shuffled")}
        _, failures = verdict(real, base, chance=0.2, seed=seed)
        noise_fails += bool(failures)
    assert noise_fails >= 18  # a 95% interval with a margin: false passes are rare, not impossible
    real = [0.9, 0.8, 1.0, 0.7, 0.9, 0.85, 0.95, 0.8]
    base = {b: [0.1, 0.2, 0.0, 0.3, 0.1, 0.15, 0.05, 0.2] for b in ("generic", "empty", "shuffled")}
    comparisons, failures = verdict(real, base, chance=0.2)
    assert not failures and all(c["passed"] for c in comparisons.values())
    _, at_chance = verdict([0.22] * 8, {"generic": [0.0] * 8}, chance=0.2)
    assert any("chance" in f for f in at_chance)


def test_chance_counts_the_abstain_option():
    qs = [[{"question": "q", "options": ["a", "b", "c", "d"], "answer": "A"}],
          [{"question": "q", "options": ["a", "b"], "answer": "A"}]]
    assert chance_level(qs) == pytest.approx((1 / 5 + 1 / 3) / 2)


@pytest.mark.slow
def test_random_captioner_and_random_answerer_fail_on_most_seeds(tmp_path, tiny_vlm, tiny_lm):
    from vlrl.core.backends import load_backend
    from vlrl.methods.caprl.smoke import smoke_check

    rng = random.Random(0)
    rows = []
    for i in range(8):
        Image.new("RGB", (56, 56), tuple(rng.randrange(256) for _ in range(3))).save(tmp_path / f"{i}.png")
        opts = ["red", "green", "blue", "yellow"]
        rows.append({"id": str(i), "image": f"{i}.png", "questions": [
            {"question": "What colour is it?", "options": opts, "answer": "ABCD"[i % 4]},
            {"question": "What shape is it?", "options": ["circle", "square", "star"], "answer": "ABC"[i % 3]}]})
    (tmp_path / "qa.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    captioner = load_backend(f"hf:{tiny_vlm}?device=cpu")
    answerer = load_backend(f"hf:{tiny_lm}?device=cpu")
    verdicts = []
    for seed in range(6):
        s = smoke_check(str(tmp_path / "qa.jsonl"), captioner, answerer, mode="sample", questions_per_caption=2,
                        rounds=1, max_tokens=8, seed=seed, cache=str(tmp_path / "cache"))
        verdicts.append(s["passed"])
        assert set(s["comparisons"]) == {"generic", "empty", "shuffled"} and s["parse_failure_rate"] is not None
    assert verdicts.count(False) >= 5, verdicts
