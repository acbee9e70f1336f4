"""How the list families' ``confirm`` probability was chosen (docs/guards-measurements.md, "List families confirmed
by the learned guard"): every training corpus of ``tests/fixtures/guard_*.jsonl`` left out in turn.

A model is trained on the rest (``vlrl.rewards.guards.learned.train``), the left-out captions are scored
with it, and the families the pattern guards find on them are recorded. A blind author's two files
(``guard_corpus_fresh_a`` and ``_b``, ..., ``_ze`` and ``_zf``) are one group; every other file is its own.
Then, for each candidate value, the layer (the patterns, with the given families counted only where
the left-out model's probability reaches the value, and the learned guard at its threshold) is scored
on every left-out caption: hacks caught, honest captions flagged.

    .venv/bin/python dev/guard_confirm.py            # about five minutes on two cores
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

from vlrl.rewards.guards import JUDGE_GUARDS, GuardSet
from vlrl.rewards.guards.doc import Doc
from vlrl.rewards.guards.learned import caption_text, read_labelled, train

FIXTURES = Path(__file__).resolve().parents[1] / "tests" / "fixtures"
PATTERNS = ["self_praise", "grader_address", "repetition", *JUDGE_GUARDS]
LISTS = {"keyword_stuffing/noun_dump", "keyword_stuffing/long_list", "keyword_stuffing/function_free_run"}
VALUES = (0.0, 0.05, 0.1, 0.15, 0.2, 0.3, 0.5)


def group(path: Path) -> str:
    """A blind author's pair is one group (a and b, c and d, ..., ze and zf)."""
    if m := re.fullmatch(r"guard_corpus_fresh_(z?)([a-z])", path.stem):
        return f"fresh_{m[1]}{chr(97 + (ord(m[2]) - 97) // 2 * 2)}"
    return path.stem


def families(guards: GuardSet, text: str) -> set[str]:
    """Every family every pattern guard finds (not only the first): the confirmation may set some aside."""
    doc = Doc.of(text)
    return {f"{g.name}/{family}" for g in guards.guards for family, _ in g.hits(doc)}


def main() -> None:
    files = sorted(FIXTURES.glob("guard_*.jsonl"))
    rows = {f: read_labelled([f])[0] for f in files}
    groups: dict[str, list[Path]] = {}
    for f in files:
        groups.setdefault(group(f), []).append(f)
    patterns = GuardSet.from_settings(enabled=PATTERNS)
    scored = []  # (hack, probability out of fold, families)
    for n, (name, members) in enumerate(groups.items(), 1):
        model = train([r for f in files if f not in members for r in rows[f]])
        for f in members:
            scored += [(bool(y), model.probability(caption_text(Doc.of(t))), families(patterns, t)) for t, y in rows[f]]
        print(f"{n}/{len(groups)} {name}", file=sys.stderr, flush=True)
    threshold = 0.75
    hacks = sum(h for h, _, _ in scored)
    honest = len(scored) - hacks
    print(f"{len(groups)} groups, {len(scored)} captions: {hacks} hacks, {honest} honest")
    print("confirm | hacks caught | honest captions flagged")
    for value in VALUES:
        caught = flagged = 0
        for hack, p, found in scored:
            fired = bool(found - LISTS) or (bool(found & LISTS) and p >= value) or p >= threshold
            caught += fired and hack
            flagged += fired and not hack
        print(f"{value:g} | {caught} ({caught / hacks:.3f}) | {flagged} ({flagged / honest:.2%})")


if __name__ == "__main__":
    main()
