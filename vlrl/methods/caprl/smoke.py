"""Reward smoke check: does ``caprl_qa`` prefer real captions to captions that carry no information?

Before spending GPU hours on GRPO, score four caption sets on the same QA data with the same
answerer: the captioner's real captions, a generic caption ("An image."), an empty caption, and the
real captions *shuffled across images* (fluent and detailed, but about another image). A working
reward ranks real captions above all three. If it does not, the QA data leaks its answers (the
answerer guesses right without a caption), the answerer ignores the caption, or the parsing is
broken — and RL would optimise noise. The check says which comparison failed.
"""

from __future__ import annotations

import logging
import statistics
from collections import Counter
from typing import Any

from vlrl.captioning.captioner import caption_images
from vlrl.core.backends import BackendError, SamplingParams, load_backend
from vlrl.core.prompts import render
from vlrl.rewards import build_reward
from vlrl.rewards.base import BACKEND_FAILED

logger = logging.getLogger(__name__)

CAPTION_PROMPT = "caption_default"
"""The captioner's prompt: CapRL's training prompt (a bundled template)."""
GENERIC = "An image."
VARIANTS = ("real", "generic", "empty", "shuffled")


def smoke_check(
    qa: str,
    captioner: str,
    answerer: str,
    *,
    mode: str = "exact",
    limit: int | None = None,
    questions_per_caption: int = 8,
    rounds: int = 4,
    max_tokens: int = 512,
    seed: int = 0,
    cache: str | None = None,
    margin: float = 0.05,
    chance_margin: float = 0.05,
    bootstrap: int = 2000,
) -> dict[str, Any]:
    """Score real / generic / empty / shuffled captions on the QA dataset ``qa``; return a summary.

    PASS needs, per baseline, a paired mean difference above ``margin`` whose bootstrap CI excludes
    0, and real accuracy above chance by ``chance_margin`` (:mod:`vlrl.methods.caprl.smoke_stats`).
    """
    from vlrl.core.sources import load_any_dataset
    from vlrl.core.sources.rows import adapt_row
    from vlrl.methods.caprl.smoke_stats import chance_level, verdict

    source = load_any_dataset(qa)
    cols = source.dataset.column_names
    if "questions" not in cols and "reward_model" not in cols:
        raise ValueError(f"{qa}: no 'questions' column (expected the output of `vlrl data qa-curate`) and no "
                         "'reward_model' column (the public CapRL QA layout)")
    column = "questions" if "questions" in cols else "reward_model"
    n = len(source) if limit is None else min(limit, len(source))
    images, questions, skipped = [], [], 0
    for i in range(n):
        try:
            images.append(source.load_image(i))
            questions.append(adapt_row({column: source.dataset[i][column]}).get("questions"))
        except Exception as e:  # noqa: BLE001 - a bad image is skipped, not fatal
            logger.warning("smoke: skipping row %d: %s", i, e)
            skipped += 1
    cap_backend = load_backend(captioner, cache=cache)
    outcomes = caption_images(cap_backend, images, render(CAPTION_PROMPT), SamplingParams(max_tokens=max_tokens, temperature=0.0),
                              min_words=None)
    for i, oc in enumerate(outcomes):
        if oc.caption is None:
            logger.warning("smoke: image %d: captioning failed: %s", i, oc.reason)
    real = [oc.caption for oc in outcomes]
    keep = [i for i, c in enumerate(real) if c is not None]
    caption_failed = sum(oc.caption is None and str(oc.reason).startswith("backend") for oc in outcomes)
    skipped += len(images) - len(keep)
    real = [real[i] for i in keep]
    questions = [questions[i] for i in keep]
    if len(real) < 2 and caption_failed:
        first = next(oc.reason for oc in outcomes if oc.caption is None and str(oc.reason).startswith("backend"))
        raise BackendError(f"the captioner failed on {caption_failed} of {len(images)} images ({first}); "
                           f"{len(real)} captioned, the smoke check needs at least 2")
    if len(real) < 2:
        raise ValueError(f"{qa}: need at least 2 captioned images for the smoke check, got {len(real)}")
    sets = {
        "real": real,
        "generic": [GENERIC] * len(real),
        "empty": [""] * len(real),
        "shuffled": real[1:] + real[:1],  # every image gets another image's caption
    }
    reward = build_reward("caprl_qa", answerer=load_backend(answerer, cache=cache), mode=mode,
                          questions_per_caption=questions_per_caption, rounds=rounds, seed=seed)
    flat = [c for v in VARIANTS for c in sets[v]]
    scores = reward.score(flat, questions=questions * len(VARIANTS))
    # Backend failures (an image the captioner failed on, a caption the answerer failed on) are
    # counted apart from input problems: they make the command's exit code 3 or 1, not a verdict.
    summary: dict[str, Any] = {"mode": mode, "images": len(real), "skipped": skipped, "variants": {},
                               "scored": sum(s.value is not None for s in scores),
                               "backend_failed": caption_failed + sum(bool(s.details.get(BACKEND_FAILED)) for s in scores)}
    for k, v in enumerate(VARIANTS):
        mine = scores[k * len(real) : (k + 1) * len(real)]
        vals = [s.value for s in mine if s.value is not None]
        summary["variants"][v] = {
            "mean": statistics.fmean(vals) if vals else None,
            "none": len(mine) - len(vals),
            "cannot_answer_rate": statistics.fmean([s.details.get("cannot_answer_rate", 0.0) for s in mine if s.value is not None]) if vals else None,
        }
    real_mean = summary["variants"]["real"]["mean"]
    n_real = len(real)
    values = {v: [s.value for s in scores[k * n_real : (k + 1) * n_real]] for k, v in enumerate(VARIANTS)}
    chance = chance_level(questions)
    comparisons, failures = verdict(values["real"], {v: values[v] for v in VARIANTS[1:]}, chance, margin=margin,
                                    chance_margin=chance_margin, resamples=bootstrap, seed=seed)
    summary["comparisons"] = comparisons
    summary["chance"] = chance
    summary["criteria"] = {"margin": margin, "chance_margin": chance_margin, "ci_level": 0.95, "bootstrap": bootstrap}
    real_scored = [s for s in scores[:n_real] if s.value is not None]
    masses = [s.details["letter_mass"] for s in real_scored if "letter_mass" in s.details]
    summary["letter_mass"] = statistics.fmean(masses) if masses else None
    summary["parse_failure_rate"] = (statistics.fmean(s.details.get("parse_failure_rate", 0.0) for s in real_scored)
                                     if real_scored else None)
    unscored = Counter(str(s.details.get("reason", "unknown")) for s in scores if s.value is None)
    if unscored and real_mean is None:  # nothing scored: say why instead of blaming the data
        reason, count = unscored.most_common(1)[0]
        failures.append(f"{sum(unscored.values())} of {len(scores)} captions could not be scored "
                        f"(most common reason, {count}x: {reason})")
    summary["unscored_reasons"] = dict(unscored)
    summary["passed"] = not failures
    summary["failures"] = failures
    summary["examples"] = [{"real": real[i][:300], "questions": len(questions[i])} for i in range(min(3, len(real)))]
    return summary


def _fmt(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.3f}"
