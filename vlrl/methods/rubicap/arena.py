"""Arena evaluation: a judge compares the candidate's caption with each baseline's, image in view.

CapArena-style pairwise evaluation, with the position bias of LLM judges cancelled by design: every
(image, baseline) pair is judged twice, once with the candidate shown first (A) and once second (B).

Scoring, per baseline, from the candidate's point of view (``+1`` win, ``0`` tie, ``-1`` loss per
judgment):

* **pair outcome** — the sign of the two judgments' sum: win, loss, or tie (a judge that always
  picks position A gives +1 and -1, a tie: pure position bias cannot move the result);
* ``win_rate`` = pair wins / judged pairs (ties count as not-won); ``win_rate_ties_half`` counts a
  tie as half a win;
* ``score`` = (judgment wins − judgment losses) / 2 — CapArena's +1/0/−1 per comparison, where our
  "comparison" is the pair judged in both orders, so each order counts one half. Its range is
  ``[-n, n]`` for ``n`` pairs; ``score_pct`` = 100 · score / n puts it on ``[-100, 100]`` so runs of
  different sizes compare;
* ``position_consistency`` — the share of pairs whose two orders agree, and ``first_position_rate``
  — the share of decisive judgments that picked whichever caption came first (0.5 is unbiased);
* average caption length in words for the candidate and the baseline, printed beside the score:
  judges that favour verbosity show up as a score that tracks length.

A pair whose caption is missing on either side (the captioner failed) is not judged and is counted in
``missing_captions``; a pair where either order's judgment failed after retries is counted in
``judge_failures`` and left out (using only one order would let position bias back in).

Everything is resumable: captions are keyed ``image_id::contestant`` and judgments
``image_id::baseline::order`` in JSONL stores; model calls go through the response cache.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from vlrl.captioning.captioner import read_captions, split_named, unique_names
from vlrl.core.backends import Backend, ChatRequest, SamplingParams, load_backend
from vlrl.core.pipeline import JsonlStore, atomic_write_json, batched
from vlrl.core.prompts import render
from vlrl.core.sources import ImageItem
from vlrl.judge import chat_structured, json_field
from vlrl.methods.rubicap.captioner import collect_captions
from vlrl.methods.rubicap.sources import load_images

logger = logging.getLogger(__name__)

JUDGE_PROMPT = "arena_judge.jinja"
ORDERS = ("cand_first", "base_first")
_LEAD = re.compile(r"^\W*(A|B|tie|draw)\b", re.IGNORECASE)


def parse_winner(text: str) -> str:
    """Judge answer → ``"A"``, ``"B"`` or ``"tie"``. Raises ``ValueError`` for anything else."""
    value = json_field(text, "winner", "better")
    if value is None:
        m = _LEAD.match(text or "")
        value = m.group(1) if m else None
    if isinstance(value, str):
        v = value.strip().strip("[]\"' .").lower()
        if v in ("a", "caption a"):
            return "A"
        if v in ("b", "caption b"):
            return "B"
        if v in ("tie", "draw", "equal", "both"):
            return "tie"
    raise ValueError('answer with {"reason": "...", "winner": "A" | "B" | "tie"}')


def candidate_view(winner: str, order: str) -> int:
    """+1 if the candidate won this judgment, -1 if it lost, 0 for a tie."""
    if winner == "tie":
        return 0
    cand_pos = "A" if order == "cand_first" else "B"
    return 1 if winner == cand_pos else -1


def word_count(text: str) -> int:
    return len(text.split())


def run_arena(
    candidate: str | Backend,
    baselines: Sequence[str | Backend],
    judge: str | Backend,
    images: str | Path | Sequence[ImageItem],
    out: str | Path,
    *,
    reference: str | Path | None = None,
    caption_prompt_file: str | Path | None = None,
    judge_prompt_file: str | Path | None = None,
    batch_size: int = 16,
    max_retries: int = 2,
    caption_max_tokens: int = 512,
    judge_max_tokens: int = 256,
) -> dict[str, Any]:
    """Caption, judge both orders, score; writes ``results.json`` and returns it."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    items = list(images) if not isinstance(images, (str, Path)) else load_images(images, out / "images")
    named = [split_named(s) if isinstance(s, str) else (None, s) for s in [candidate, *baselines]]
    names = unique_names([s for _, s in named], [n for n, _ in named])
    cand_name, base_names = names[0], names[1:]
    refs = read_captions(reference) if reference else {}

    caps = collect_captions(
        items,
        dict(zip(names, [s for _, s in named], strict=True)),
        out,
        caption_prompt_file,
        batch_size,
        caption_max_tokens,
    )
    judgments = JsonlStore(out / "judgments.jsonl", key_field="key")
    try:
        _judge_all(
            items,
            caps,
            cand_name,
            base_names,
            judge,
            refs,
            out,
            judge_prompt_file,
            batch_size,
            max_retries,
            judge_max_tokens,
            judgments,
        )
        results = score_arena(items, caps, cand_name, base_names, list(judgments))
    finally:
        judgments.close()
    results["judge"] = judge if isinstance(judge, str) else f"<{type(judge).__name__} {judge.model}>"
    results["reference"] = str(reference) if reference else None
    atomic_write_json(out / "results.json", results)
    return results


def _judge_all(
    items, caps, cand_name, base_names, judge, refs, out, prompt_file, batch_size, max_retries, max_tokens, judgments
) -> None:
    template = prompt_file or JUDGE_PROMPT
    units = []
    for it in items:
        for b in base_names:
            c, bc = caps[cand_name].get(it.image_id), caps[b].get(it.image_id)
            if c is None or bc is None:
                continue
            for order in ORDERS:
                key = f"{it.image_id}::{b}::{order}"
                if key not in judgments:
                    a_text, b_text = (c, bc) if order == "cand_first" else (bc, c)
                    units.append((key, it, b, order, a_text, b_text))
    if not units:
        return
    backend = load_backend(judge, cache=out / "cache")
    sampling = SamplingParams(max_tokens=max_tokens, temperature=0.0)
    try:
        for batch in tqdm(list(batched(units, batch_size)), desc="arena judge", unit="batch"):
            requests, live = [], []
            for key, it, b, order, a_text, b_text in batch:
                try:
                    image = it.open()
                except Exception as e:
                    logger.warning("arena: %s: %s", it.image_id, e)
                    continue
                text = render(template, caption_a=a_text, caption_b=b_text, reference=refs.get(it.image_id))
                content = [{"type": "image", "image": image}, {"type": "text", "text": text}]
                requests.append(ChatRequest([{"role": "user", "content": content}], sampling, id=key))
                live.append((key, it, b, order))
            results = chat_structured(
                backend, requests, lambda t, i: parse_winner(t), max_retries=max_retries, raw_text=True
            )
            for (key, it, b, order), res in zip(live, results, strict=True):
                if res.ok:
                    judgments.append(
                        {
                            "key": key,
                            "image_id": it.image_id,
                            "baseline": b,
                            "order": order,
                            "winner": res.value,
                            "candidate": candidate_view(res.value, order),
                            "attempts": res.attempts,
                            "raw": res.raw[-1],
                        }
                    )
                else:
                    logger.warning("arena: judgment %s failed: %s", key, res.error)
    finally:
        backend.close()


def score_arena(
    items: Sequence[ImageItem],
    caps: dict[str, dict[str, str]],
    cand_name: str,
    base_names: Sequence[str],
    judgments: list[dict],
) -> dict[str, Any]:
    """Aggregate judgments (see the module docstring for every number)."""
    by_key = {(j["image_id"], j["baseline"], j["order"]): j for j in judgments}
    per: dict[str, Any] = {}
    for b in base_names:
        wins = losses = ties = j_wins = j_losses = j_ties = agree = first = decisive = 0
        missing = failed = 0
        cand_words, base_words = [], []
        for it in items:
            c, bc = caps[cand_name].get(it.image_id), caps[b].get(it.image_id)
            if c is None or bc is None:
                missing += 1
                continue
            pair = [by_key.get((it.image_id, b, o)) for o in ORDERS]
            if any(p is None for p in pair):
                failed += 1
                continue
            views = [p["candidate"] for p in pair]
            s = sum(views)
            wins += s > 0
            losses += s < 0
            ties += s == 0
            j_wins += views.count(1)
            j_losses += views.count(-1)
            j_ties += views.count(0)
            agree += views[0] == views[1]
            for p in pair:
                if p["winner"] != "tie":
                    decisive += 1
                    first += p["winner"] == "A"
            cand_words.append(word_count(c))
            base_words.append(word_count(bc))
        n = wins + losses + ties
        score = (j_wins - j_losses) / 2
        per[b] = {
            "pairs": n,
            "wins": wins,
            "losses": losses,
            "ties": ties,
            "win_rate": wins / n if n else None,
            "win_rate_ties_half": (wins + ties / 2) / n if n else None,
            "score": score,
            "score_pct": 100 * score / n if n else None,
            "judgments": {"wins": j_wins, "losses": j_losses, "ties": j_ties},
            "position_consistency": agree / n if n else None,
            "first_position_rate": first / decisive if decisive else None,
            "missing_captions": missing,
            "judge_failures": failed,
            "candidate_words": sum(cand_words) / len(cand_words) if cand_words else None,
            "baseline_words": sum(base_words) / len(base_words) if base_words else None,
        }
    pcts = [v["score_pct"] for v in per.values() if v["score_pct"] is not None]
    cand_all = [word_count(c) for c in caps[cand_name].values()]
    return {
        "candidate": cand_name,
        "images": len(items),
        "baselines": per,
        "mean_score_pct": sum(pcts) / len(pcts) if pcts else None,
        "candidate_words": sum(cand_all) / len(cand_all) if cand_all else None,
        "normalization": "score = (judgment wins - judgment losses) / 2 over both orders of every pair; "
        "score_pct = 100 * score / pairs; win_rate = pair wins / pairs (pair outcome = sign of the two judgments' sum)",
    }


def results_table(results: dict[str, Any]):
    """A rich table of arena results (one row per baseline)."""
    from rich.table import Table

    def f(x, fmt="{:.3f}"):
        return "—" if x is None else fmt.format(x)

    t = Table(title=f"arena: {results['candidate']} vs baselines")
    for col in (
        "baseline",
        "pairs",
        "W/T/L",
        "win rate",
        "score",
        "score %",
        "consistency",
        "cand words",
        "base words",
        "failed",
    ):
        t.add_column(col, justify="right" if col != "baseline" else "left")
    for name, r in results["baselines"].items():
        t.add_row(
            name,
            str(r["pairs"]),
            f"{r['wins']}/{r['ties']}/{r['losses']}",
            f(r["win_rate"]),
            f(r["score"], "{:+.1f}"),
            f(r["score_pct"], "{:+.1f}"),
            f(r["position_consistency"]),
            f(r["candidate_words"], "{:.0f}"),
            f(r["baseline_words"], "{:.0f}"),
            str(r["missing_captions"] + r["judge_failures"]),
        )
    return t
