"""``vlrl bench reward``: ``caprl_qa`` in ``sample`` mode vs ``exact`` mode on one backend.

Both modes pose the same Q×N (caption, question, option order) asks. ``sample`` generates up to
``max_tokens`` tokens per ask at temperature 0.6 (the public CapRL recipe); ``exact`` reads the
option-letter probabilities at the same temperature from one forward pass per ask. The bench scores
the same captions with both, repeats each a few times with the repeats interleaved (so load drifts
hit both alike), and reports throughput and the spread of each caption's reward across repeats.

*Both* modes get a new seed every repeat: the seed changes the question draws and option orders of
both, and the sampled answers of sample mode. A fixed seed would give exact mode zero spread by
construction. The spread therefore compares what a training run sees: sample mode's is draws plus
sampling noise, exact mode's is draws alone.

It runs at the shipped recipe's ``rounds: 1`` and at N=4 (``--rounds``), side by side. The
reward's share of a tiny GRPO step (``vlrl bench reward --grpo-steps``) is measured beside it, by
:mod:`vlrl.bench.grpo_share`.

No response cache is used: every repeat pays for its calls.
"""

from __future__ import annotations

import logging
import random
import statistics
import tempfile
import time
from typing import Any

from vlrl.core.backends import load_backend
from vlrl.methods.caprl.reward import CapRLQAReward

logger = logging.getLogger(__name__)

_FACTS = {
    "colour": ["red", "green", "blue", "yellow", "purple", "orange"],
    "shape": ["circle", "square", "triangle", "star", "hexagon", "heart"],
    "size": ["tiny", "small", "medium", "large", "huge"],
    "position": ["left", "right", "top", "bottom", "center"],
}


def synthetic_captions(n: int, seed: int = 0) -> tuple[list[str], list[list[dict[str, Any]]]]:
    """``n`` shapes-world captions and, per caption, one MCQ per fact (4 options each)."""
    rng = random.Random(seed)
    captions, questions = [], []
    for _ in range(n):
        fact = {k: rng.choice(v) for k, v in _FACTS.items()}
        captions.append(f"A {fact['size']} {fact['colour']} {fact['shape']} near the {fact['position']} of a plain white image.")
        qs = []
        for k, values in _FACTS.items():
            options = [fact[k], *rng.sample([v for v in values if v != fact[k]], 3)]
            rng.shuffle(options)
            qs.append({"question": f"What is the {k} of the object?", "options": options, "answer": "ABCD"[options.index(fact[k])]})
        questions.append(qs)
    return captions, questions


def bench_reward(
    answerer: str | None = None,
    *,
    n_captions: int = 16,
    repeats: int = 3,
    questions_per_caption: int = 8,
    rounds: int = 4,
    rounds_list: tuple[int, ...] | None = None,
    rows: list[dict[str, Any]] | None = None,
    settings: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Run the bench; with no ``answerer`` a tiny random Qwen2 is built and served in-process.

    ``rounds_list`` (default ``(1, rounds)``) are the N settings measured side by side; the top-level
    ``sample``/``exact``/``throughput_ratio`` keys are those of ``rounds``. ``rows`` (``{"caption",
    "questions"}``, the first ``n_captions`` of them) replace the synthetic captions, and
    ``settings`` (``caprl_qa`` settings such as ``prompt``) apply to both modes: a trained answerer
    is benched on the captions and prompt it reads (``vlrl demo --bench-inputs`` writes both for the
    CapRL demo's answerer). A random-weight answerer's letters do not depend on the prompt, so its
    spread ratio says nothing about a real run.
    """
    tmp = None
    if answerer is None:
        from vlrl.core.tiny import make_tiny

        tmp = tempfile.TemporaryDirectory(prefix="vlrl-bench-reward-")
        answerer = f"hf:{make_tiny('qwen2', tmp.name)}"
    backend = load_backend(answerer)
    if rows is not None:
        rows = rows[:n_captions]
        bad = [i for i, r in enumerate(rows) if not isinstance(r.get("caption"), str) or not r.get("questions")]
        if not rows or bad:
            raise ValueError(f"bench rows need a 'caption' and 'questions' each (rows without them: {bad[:5]})")
        captions, questions = [r["caption"] for r in rows], [r["questions"] for r in rows]
    else:
        captions, questions = synthetic_captions(n_captions)
    settings_list = sorted(set(rounds_list or (1, rounds)))
    by_rounds: dict[str, Any] = {}
    try:
        for n_rounds in settings_list:
            by_rounds[f"rounds_{n_rounds}"] = _bench_one(backend, answerer, captions, questions, repeats,
                                                         questions_per_caption, n_rounds, settings or {})
    finally:
        backend.close()
        if tmp is not None:
            tmp.cleanup()
    main = by_rounds[f"rounds_{rounds}"] if f"rounds_{rounds}" in by_rounds else by_rounds[f"rounds_{settings_list[-1]}"]
    out: dict[str, Any] = {**main, "by_rounds": by_rounds}
    out["settings"] = {"answerer": answerer if tmp is None else "tiny qwen2 (random weights, built in a temp folder)",
                       "captions": len(captions), "caption_source": "rows" if rows is not None else "synthetic",
                       "reward_settings": dict(settings or {}), "repeats": repeats, "questions_per_caption": questions_per_caption,
                       "rounds": rounds, "rounds_measured": settings_list, "sample_temperature": 0.6,
                       "sample_max_tokens": 10, "seeds": "repeat r uses seed r+1 in both modes"}
    return out


def _bench_one(backend: Any, answerer: str, captions: list[str], questions: list[Any], repeats: int,
               questions_per_caption: int, rounds: int, settings: dict[str, Any]) -> dict[str, Any]:
    common = {"min_letter_mass": 0.0, **settings, "questions_per_caption": questions_per_caption, "rounds": rounds}
    # warm-up outside the timings (first-call allocation, kernel selection)
    for mode in ("sample", "exact"):
        warm = CapRLQAReward(backend, mode=mode, **common).score(captions[:2], questions=questions[:2])
        if all(s.value is None for s in warm):  # timing failures would be meaningless
            reason = warm[0].details.get("reason", "unknown") if warm else "no captions"
            raise ValueError(f"answerer {answerer}: no caption could be scored in {mode} mode ({reason})")
    runs: dict[str, list[tuple[float, list[float | None], int]]] = {"sample": [], "exact": []}
    masses: list[list[float]] = [[] for _ in captions]  # exact mode's letter mass per caption
    for rep in range(repeats):
        for mode in ("sample", "exact"):
            reward = CapRLQAReward(backend, mode=mode, seed=rep + 1, **common)
            t0 = time.perf_counter()
            scores = reward.score(captions, questions=questions)
            dt = time.perf_counter() - t0
            calls = sum(s.details.get("answerer_calls", 0) for s in scores)
            runs[mode].append((dt, [s.value for s in scores], calls))
            for i, s in enumerate(scores):
                if mode == "exact" and isinstance(s.details.get("letter_mass"), (int, float)):
                    masses[i].append(float(s.details["letter_mass"]))
            logger.info("rounds %d repeat %d %s: %.2fs (%d answerer calls)", rounds, rep, mode, dt, calls)
    out: dict[str, Any] = {}
    n_captions = len(captions)
    for mode, rs in runs.items():
        total = sum(dt for dt, _, _ in rs)
        per_caption = list(zip(*(vals for _, vals, _ in rs), strict=False))
        spreads = [statistics.pstdev(v) for v in per_caption if all(x is not None for x in v)]
        values = [x for _, vals, _ in rs for x in vals if x is not None]
        out[mode] = {
            "captions_per_s": n_captions * len(rs) / total if total > 0 else float("inf"),
            "reward_std_across_repeats": statistics.fmean(spreads) if spreads else None,
            "mean_reward": statistics.fmean(values) if values else None,
            "seconds_per_repeat": [round(dt, 4) for dt, _, _ in rs],
            "answerer_calls_per_repeat": rs[0][2] if rs else 0,
            "none_rewards": sum(x is None for _, vals, _ in rs for x in vals),
        }
    out["throughput_ratio"] = out["exact"]["captions_per_s"] / out["sample"]["captions_per_s"]
    s_std, e_std = out["sample"]["reward_std_across_repeats"], out["exact"]["reward_std_across_repeats"]
    out["spread_ratio"] = (e_std / s_std) if s_std and e_std is not None else None
    out["exact_vs_sample"] = _gap_by_mass(runs, masses)
    return out


def _gap_by_mass(runs: dict[str, list[tuple[float, list[float | None], int]]], masses: list[list[float]]) -> dict[str, Any]:
    """Per caption, exact mode's mean reward minus sample mode's (over the repeats), beside exact
    mode's mean letter mass: where the letters hold little of the first token's probability the two
    modes measure different things (docs/caprl.md)."""
    rows = []
    for i, ms in enumerate(masses):
        e = [vals[i] for _, vals, _ in runs["exact"] if vals[i] is not None]
        s = [vals[i] for _, vals, _ in runs["sample"] if vals[i] is not None]
        if e and s and ms:
            rows.append({"letter_mass": round(statistics.fmean(ms), 4), "exact": round(statistics.fmean(e), 4),
                         "sample": round(statistics.fmean(s), 4), "gap": round(statistics.fmean(e) - statistics.fmean(s), 4)})
    gaps = [r["gap"] for r in rows]
    return {"mean_letter_mass": round(statistics.fmean(r["letter_mass"] for r in rows), 4) if rows else None,
            "mean_gap": round(statistics.fmean(gaps), 4) if gaps else None,
            "mean_abs_gap": round(statistics.fmean(abs(g) for g in gaps), 4) if gaps else None,
            "per_caption": sorted(rows, key=lambda r: r["letter_mass"])}
