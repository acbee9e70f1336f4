"""Arena evaluation: a judge compares the candidate's caption with each baseline's, image in view.

CapArena-style pairwise evaluation, with the position bias of LLM judges cancelled by design: every
(image, baseline) pair is judged twice, once with the candidate shown first (A) and once second (B).

Scoring, per baseline, from the candidate's point of view (``+1`` win, ``0`` tie, ``-1`` loss per
judgment):

* **pair outcome** — the sum of the two judgments, as CapArena counts ties: a pair is a *win* only
  when the candidate wins in both orders and a *loss* only when it loses in both; everything else is
  a *tie*, split out as ``partial_wins`` (one win and one tie), ``partial_losses`` (one loss and one
  tie) and split or double ties. A judge that always picks position A gives +1 and -1, a tie: pure
  position bias cannot move the result, and one win plus one tie is not a full win;
* ``win_rate`` = pair wins / judged pairs, with its 95% Wilson interval ``win_rate_ci95``;
  ``win_rate_ties_half`` gives each judgment win 1 and each judgment tie ½ (so a win + tie pair
  counts ¾), with a bootstrap interval over pairs;
* ``sign_test_p`` — the exact two-sided sign test of pairs leaning to the candidate (sum > 0)
  against pairs leaning to the baseline (sum < 0); ties carry no sign;
* ``score`` = (judgment wins − judgment losses) / 2 — CapArena's +1/0/−1 per comparison, where our
  "comparison" is the pair judged in both orders, so each order counts one half. Its range is
  ``[-n, n]`` for ``n`` pairs; ``score_pct`` = 100 · score / n puts it on ``[-100, 100]`` so runs of
  different sizes compare (``score_pct_ci95``: bootstrap over pairs);
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

from vlrl.captioning.captioner import read_captions, unique_names
from vlrl.core.backends import Backend, ChatRequest, SamplingParams, load_backend
from vlrl.core.pipeline import JsonlStore, atomic_write_json
from vlrl.core.prompts import render
from vlrl.core.sources import ImageItem
from vlrl.core.stage import Outcome, run_stage
from vlrl.core.stats import bootstrap_mean, sign_test, wilson
from vlrl.judge import chat_structured, extract_final_json
from vlrl.judge.fence import fence_caption
from vlrl.judge.structured import InvalidOutput
from vlrl.methods.rubicap.captioner import caption_counts, collect_captions
from vlrl.methods.rubicap.contestants import check_caption_file, is_caption_file_spec, split_contestant
from vlrl.methods.rubicap.sources import load_images

logger = logging.getLogger(__name__)

JUDGE_PROMPT = "arena_judge.jinja"
ORDERS = ("cand_first", "base_first")
_LEAD = re.compile(r"^\W*(A|B|tie|draw)\b", re.IGNORECASE)
JUDGE_SCHEMA = {
    "title": "arena_verdict", "type": "object", "additionalProperties": False, "required": ["reason", "winner"],
    "properties": {"reason": {"type": "string", "maxLength": 200}, "winner": {"type": "string", "enum": ["A", "B", "tie"]}},
}  # fmt: skip
"""The built-in judge prompt's answer (its last line), sent as structured output; a custom prompt
may ask for another layout, so it goes without. ``reason`` (one sentence) is bounded so that the
answer closes within the default 256 tokens even at one character per token: a verdict is never
cut off behind its reason."""


def _winner(value: Any) -> str:
    if isinstance(value, dict):
        value = value.get("winner", value.get("better"))
    if isinstance(value, str):
        v = value.strip().strip("[]\"' .").lower()
        if v in ("a", "caption a"):
            return "A"
        if v in ("b", "caption b"):
            return "B"
        if v in ("tie", "draw", "equal", "both"):
            return "tie"
    raise ValueError('answer with {"reason": "...", "winner": "A" | "B" | "tie"}')


def parse_winner(text: str) -> str:
    """Judge answer → ``"A"``, ``"B"`` or ``"tie"``. Raises ``ValueError`` for anything else.

    The judge's *final* object with a winner counts (a verdict quoted from a caption earlier in the
    answer does not); an answer with no JSON may lead with the winner ("B. Caption B ...").
    """
    try:
        return extract_final_json(text, _winner)
    except InvalidOutput:
        m = _LEAD.match(text or "")
        return _winner(m.group(1) if m else None)


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
    named = [split_contestant(s) if isinstance(s, str) else (None, s) for s in [candidate, *baselines]]
    names = unique_names([s for _, s in named], [n for n, _ in named])
    cand_name, base_names = names[0], names[1:]
    for name, (_, spec) in zip(names, named, strict=True):
        if is_caption_file_spec(spec):
            check_caption_file(name, spec)  # a missing or malformed file stops the run here
    refs = read_captions(reference) if reference else {}

    caps = collect_captions(
        items,
        dict(zip(names, [s for _, s in named], strict=True)),
        out,
        caption_prompt_file,
        batch_size,
        caption_max_tokens,
    )
    if items and not caps[cand_name]:
        raise ValueError(
            f"candidate {cand_name} has no caption for any of the {len(items)} images "
            f"(see {out / 'caption_failures.jsonl'}); nothing to compare"
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
    results["caption_counts"] = caption_counts(out, [cand_name, *base_names])  # empty / truncated captions
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

    def process(batch: list[tuple]) -> list[Outcome]:
        requests, live, done = [], [], []
        for key, it, b, order, a_text, b_text in batch:
            try:
                image = it.open()
            except Exception as e:
                done.append(Outcome.fail(key, f"bad image {it.image_id}: {e}"))
                continue
            ref = refs.get(it.image_id)
            text = render(
                template, caption_a=a_text, caption_b=b_text, reference=ref,
                a=fence_caption(a_text), b=fence_caption(b_text), ref=fence_caption(ref or ""),
            )
            content = [{"type": "image", "image": image}, {"type": "text", "text": text}]
            requests.append(ChatRequest([{"role": "user", "content": content}], sampling, id=key))
            live.append((key, it, b, order))
        results = chat_structured(
            backend, requests, lambda t, i: parse_winner(t), max_retries=max_retries, raw_text=True,
            reject_truncated=True, json_schema=None if prompt_file else JUDGE_SCHEMA,
        )
        for (key, it, b, order), res in zip(live, results, strict=True):
            if not res.ok:
                done.append(Outcome.fail(key, res.error))
                continue
            done.append(Outcome.ok(key, {
                "key": key,
                "image_id": it.image_id,
                "baseline": b,
                "order": order,
                "winner": res.value,
                "candidate": candidate_view(res.value, order),
                "attempts": res.attempts,
                "raw": res.raw[-1],
            }))
        return done

    try:
        # a failed judgment is not stored: the next run asks again (its paid calls replay from the cache)
        run_stage(units, key=lambda u: u[0], process=process, store=judgments, batch_size=batch_size,
                  desc="arena judge", failure_log="arena: judgment {key} failed: {reason}", progress_by="request")
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
        partial_wins = partial_losses = leaning_cand = leaning_base = 0
        pair_sums: list[int] = []
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
            pair_sums.append(s)
            wins += s == 2
            losses += s == -2
            ties += abs(s) < 2
            partial_wins += s == 1
            partial_losses += s == -1
            leaning_cand += s > 0
            leaning_base += s < 0
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
            "partial_wins": partial_wins,
            "partial_losses": partial_losses,
            "win_rate": wins / n if n else None,
            "win_rate_ci95": wilson(wins, n),
            "win_rate_ties_half": sum((x + 2) / 4 for x in pair_sums) / n if n else None,
            "win_rate_ties_half_ci95": bootstrap_mean([(x + 2) / 4 for x in pair_sums]),
            "sign_test_p": sign_test(leaning_cand, leaning_base),
            "score": score,
            "score_pct": 100 * score / n if n else None,
            "score_pct_ci95": bootstrap_mean([50 * x for x in pair_sums]),
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
        "score_pct = 100 * score / pairs; win_rate = pair wins / pairs, a pair won only when won in both orders "
        "(one win + one tie is a tie, counted in partial_wins); intervals are 95% (Wilson for win_rate, "
        "bootstrap over pairs otherwise); sign_test_p compares pairs leaning to the candidate with pairs leaning "
        "to the baseline",
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
        "95% CI",
        "sign p",
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
            "—" if not r["win_rate_ci95"] else "{:.2f}–{:.2f}".format(*r["win_rate_ci95"]),
            f(r["sign_test_p"], "{:.3g}"),
            f(r["score"], "{:+.1f}"),
            f(r["score_pct"], "{:+.1f}"),
            f(r["position_consistency"]),
            f(r["candidate_words"], "{:.0f}"),
            f(r["baseline_words"], "{:.0f}"),
            str(r["missing_captions"] + r["judge_failures"]),
        )
    return t
