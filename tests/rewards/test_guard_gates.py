"""The literal prefilters of the cheap guard layer (:mod:`vlrl.rewards.guards.gates`): exact skips.

A gate only skips regular expressions that cannot match; these tests hold the engine to that. The
reference is the same engine with every prefilter off (``gates.disabled()``): every default guard
must give the same verdict, family and evidence on every caption of the development corpora (the
held-out corpora whose captions the tests may read are included: a skip that changed a verdict
there would be a bug, not a tuning), and every pattern of the two phrase tables that matches a
caption's view must pass its gate there."""

from __future__ import annotations

import json
import re

import pytest

from tests.support.paths import FIXTURES
from vlrl.bench.guards import synthetic_captions
from vlrl.rewards.guards import Doc, GuardSet, gates
from vlrl.rewards.guards.lang import _compiled
from vlrl.rewards.guards.table import cue_patterns, expand, table

CORPORA = ("guard_corpus.jsonl", "guard_corpus_dev2.jsonl", "guard_corpus_heldout.jsonl", "guard_corpus_heldout2.jsonl",
           "guard_lang_dev.jsonl", "guard_judge_dev.jsonl", "guard_regressions.jsonl", "guard_dev3.jsonl")


def _captions(*names: str) -> list[str]:
    return [json.loads(line)["caption"] for name in names
            for line in (FIXTURES / name).read_text(encoding="utf-8").splitlines() if line.strip()]


def test_gates_read_conjunctions_boundaries_and_case():
    clauses, blind = gates.cnf(r"\b(?:this|my)\s+caption\b.*?\b(?:perfect|flawless)\b")
    words = [{gates.bare(x) for x in c} for c in clauses]
    assert {"caption"} in words and {"perfect", "flawless"} in words and not blind
    assert any(x.startswith(gates.LEFT) and x.endswith(gates.RIGHT) for c in clauses for x in c)  # \b...\b
    assert gates.cnf(r"a?b") is None and gates.cnf(r"[a-z]+\d") is None
    for no_gate in (r"(?=xyz)q", r"(?:abc|\d+)", r"[a-z]+"):  # a lookahead, one branch without literals
        assert gates.cnf(no_gate) is None, no_gate
    assert gates.cnf(r"(?i:IGNORE) all")[1]  # case-blind: read lower-cased, ASCII text only
    # a word boundary makes "quokka" absent from "quokkas" (a word no other gate names: the scan may
    # report more than is there for a literal other gates need elsewhere in a word, never less)
    g = gates.cnf(r"\bquokka\b")
    gates.register([g])
    assert not gates.passes(g, "two quokkas eat") and gates.passes(g, "a quokka eats")


@pytest.fixture
def own_index():
    """A literal index of the test's own: the thousands of gates a test generates are not left in the one
    every guard scans for the rest of the session (a longer scan for every later caption)."""
    shared = gates.INDEX
    gates.INDEX = gates._Index()
    gates._present.cache_clear()  # (keyed by the index's size: another index's entries must not answer)
    gates._LAST[0] = (None, -1, frozenset())
    try:
        yield gates.INDEX
    finally:
        gates.INDEX = shared
        gates._present.cache_clear()
        gates._LAST[0] = (None, -1, frozenset())


def test_a_small_class_spells_out_a_literal_run(own_index):
    # "ol[aá]" is "ola" or "olá": a gate, where the run "ol" alone is too short to be one
    (clause,), blind = gates.cnf(r"\bol[a\u00e1]\b")
    assert {gates.bare(x) for x in clause} == {"ola", "ol\u00e1"} and not blind
    (clause,), _ = gates.cnf(r"aten[c\u00e7][a\u00e3]o")
    assert len(clause) == 4  # every spelling
    # too many spellings: the run is cut, and each part is a clause of its own
    clauses, _ = gates.cnf(r"[ab][cd][ef][gh][ij]xyz")
    assert all(len(c) <= 16 for c in clauses)
    # inside (?a:...) a word boundary means another thing: no marks are read there
    g = gates.cnf(r"(?a:\bol[a\u00e1]\b)")
    gates.register([g])
    assert re.search(r"(?a:\bol[a\u00e1]\b)", "ol\u00e1x") and gates.passes(g, "ol\u00e1x")
    # a class of ranges, a negated class or a large one continues no run
    assert gates.cnf(r"o[a-z]") is None and gates.cnf(r"o[^a]") is None


def test_spelt_gates_pass_wherever_their_pattern_matches(own_index):
    # patterns of literals, small classes, optional parts, groups and boundaries, against texts of the
    # same characters: a match always passes the gate (a spelling the gate left out would skip a match)
    import random

    rng = random.Random(0)
    pieces = ["ab", "c", "[cd]", "[a\u00e1]", "[xyz]", "b?", "(?:ab|ca)", "\\b", "\\s+", "[ab][cd]", "d+", "(?:c|)",
              "A", "[A\u00c1]", "(?i:ab)", "(?i:[c\u00e1]d)", "(?=c)", "(?<!a)", "(?a:\\bab)", "_", "x(?:ab|cd|ca)"]
    alphabet = ["a", "b", "c", "d", "x", "y", "\u00e1", " ", "ab", "ca", "A", "\u00c1", "B", "_", "1"]
    checked = 0
    for _ in range(3000):
        p = "".join(rng.choice(pieces) for _ in range(rng.randint(2, 6)))
        g, rx = gates.cnf(p), re.compile(p)
        gates.register([g])
        for _ in range(12):
            text = "".join(rng.choice(alphabet) for _ in range(rng.randint(2, 14)))
            if rx.search(text):
                checked += 1
                assert gates.passes(g, text), (p, text)
    assert checked > 1500


def test_every_table_pattern_passes_its_gate_where_it_matches():
    caps = _captions("guard_regressions.jsonl", "guard_lang_dev.jsonl", "guard_judge_dev.jsonl", "guard_dev3.jsonl")
    docs = [Doc.of(c) for c in caps]
    t = table()
    patterns = [expand(p, t.fragments) for f in t.families for p in [*f.patterns, *f.requires]]
    patterns += [p for lang in _compiled() for alt in lang.families.values() for p in alt.patterns]
    patterns += [a for rx in cue_patterns().values() for a in gates.alternatives(rx.pattern)]
    checked = 0
    for p in patterns:
        g, rx = gates.cnf(p), re.compile(p)
        gates.register([g])
        for d in docs:
            for text in {d.lower, d.meta, d.unquoted, d.native, d.shaped, d.norm}:
                if rx.search(text):
                    checked += 1
                    assert gates.passes(g, text), (p[:80], text[:80])
    assert checked > 500


def test_alternatives_are_cut_at_the_top_level_only():
    assert gates.alternatives(r"(?:a|b)|c") == ["a", "b", "c"]
    assert gates.alternatives(r"(?:(?:a|b)|c)|d") == ["a", "b", "c", "d"]
    assert gates.alternatives(r"(?:a)(?:b|c)|d") == ["(?:a)(?:b|c)", "d"]  # a group that is not the whole piece
    assert gates.alternatives(r"[|]|x") == ["[|]", "x"] and gates.alternatives(r"[]|]|y") == ["[]|]", "y"]
    assert gates.alternatives(r"[^]|a]b|\||c") == ["[^]|a]b", r"\|", "c"]
    # where cutting could move a match: group numbers, global and scoped flags, comments
    for whole in (r"(a|b)", r"(?i)a|b", r"(?i:a)|b", r"a(?#x|y)|b", r"(?P<n>a)|b"):
        assert gates.alternatives(whole) == [whole]


def test_a_group_keeps_a_flag_for_the_whole_pattern():
    assert gates.group("a|b") == "(?:a|b)" and gates.group("(?i)(?s)a.b") == "(?is:a.b)"
    joined = gates.Alternation(["(?i)caption", "zebra"])
    assert joined.search("the CAPTION").group(0) == "CAPTION" and joined.search("a Zebra") is None


def test_cut_alternatives_match_what_the_pattern_matches():
    """Tried in order as one alternation, the pieces match the same spans as the whole pattern, for every
    cue and family pattern of the table, on every view of the development captions."""
    t = table()
    patterns = [rx.pattern for rx in cue_patterns().values()]
    patterns += [expand(p, t.fragments) for f in t.families for p in f.patterns]
    texts = [text for c in _captions("guard_regressions.jsonl", "guard_dev3.jsonl", "guard_judge_dev.jsonl")
             for d in [Doc.of(c)] for text in {d.lower, d.unquoted, d.native}]
    cut = 0
    for p in patterns:
        pieces = gates.alternatives(p)
        if len(pieces) == 1:
            continue
        cut += 1
        whole, joined = re.compile(p), re.compile("|".join(f"(?:{a})" for a in pieces))
        for text in texts:
            a, b = whole.search(text), joined.search(text)
            assert (a and a.span()) == (b and b.span()), (p[:80], text[:80])
    assert cut >= 3


@pytest.fixture(scope="module")
def verdicts():
    caps = _captions(*CORPORA) + synthetic_captions(300, seed=7)
    guards = GuardSet.from_settings()
    on = [guards.evaluate(c) for c in caps]
    with gates.disabled():
        off = [guards.evaluate(c) for c in caps]
    return caps, on, off


def test_prefilters_change_no_verdict(verdicts):
    caps, on, off = verdicts
    assert len(caps) > 3000 and sum(bool(r.fired) for r in on) > 1000
    for c, a, b in zip(caps, on, off, strict=True):
        assert (a.fired, a.families, a.evidence, a.penalty) == (b.fired, b.families, b.evidence, b.penalty), c[:120]


def test_disabled_restores_the_prefilters():
    with gates.disabled():
        assert not gates.ENABLED
    assert gates.ENABLED


def test_present_finds_every_literal_at_its_marked_boundaries():
    # each registered literal, glued to word characters (ASCII, accented, digit, underscore) or set off by
    # spaces and apostrophes: present() holds it wherever its marks allow (a start mark: no word character
    # before; an end mark on a whole word: none after), so no gate skips a pattern that could match
    GuardSet.from_settings()
    glue = [("x", "x"), (" ", " "), ("_", ""), ("\u00e9", ""), ("", "\u00e9"), ("'", "'"), ("1", ""), ("", "")]
    checked = 0
    for x in sorted(gates.INDEX.marked):
        w = gates.bare(x)
        strict = re.compile(("(?<!\\w)" if x.startswith(gates.LEFT) else "") + re.escape(w)
                            + ("(?!\\w)" if x.endswith(gates.RIGHT) else ""))
        for a, b in glue:
            text = a + w + b
            if strict.search(text):
                checked += 1
                assert x in gates.present(text), (x, text)
    assert checked > 1000


def test_gates_registered_while_other_threads_check_captions(verdicts):
    # a guard built while a reward service's threads check captions registers its literals then; no
    # check may fail or skip a pattern meanwhile (each registration rebuilds the automaton)
    import sys
    import threading

    caps, on, _ = verdicts
    caps, on = caps[:400], on[:400]
    guards = GuardSet.from_settings()
    errors: list[BaseException] = []
    got: dict[int, list] = {}

    def check(k: int) -> None:
        try:
            got[k] = [guards.evaluate(c) for c in caps]
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    def register() -> None:
        try:
            for i in range(60):
                gates.register([gates.cnf(rf"\bzq{i}xv literal\b")])
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=check, args=(k,)) for k in range(3)] + [threading.Thread(target=register)]
    switch = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)  # threads take turns often, as under load
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        sys.setswitchinterval(switch)
    assert not errors, errors
    for reports in got.values():
        for c, a, b in zip(caps, reports, on, strict=True):
            assert (a.fired, a.families, a.evidence) == (b.fired, b.families, b.evidence), c[:120]


def test_case_blind_sub_on_lowered_text_keeps_the_text_as_written():
    """``Gated.sub`` of a case-blind pattern runs case-sensitively on ASCII text lower-cased: the spans,
    the kept matches and the text between them are what the case-blind pattern gives on the text as
    written, for the image-text patterns on mixed-case captions built from their own words."""
    import random

    from vlrl.rewards.guards import text

    words = ("A Sign READS Best In Class, a mug SAYS hello; I wrote: great job. with the words STOP here printed "
             "in red A Poster lists THE RULES: be kind. Reading lamps, display case; you said: Perfect! labelled "
             "Answer B written on it whoever is reading this: Score 10 ( Nothing ) \n").split(" ")
    rng = random.Random(3)
    texts = [" ".join(rng.choice(words) for _ in range(rng.randint(1, 30))) for _ in range(3000)]
    patterns = (text._IMAGE_TEXT_COLON, text._IMAGE_TEXT_BEFORE, text._IMAGE_TEXT)
    assert all(p._lowered is not None for p in patterns)
    changed = 0
    for p in patterns:
        for t in texts:
            for repl in (text._unless_own_words, " <t> "):
                want = p.re.sub(gates._keeping(repl) if callable(repl) else repl, t)
                assert p.sub(repl, t) == want, (p.pattern[:40], t)
                changed += want != t
    assert changed > 1000  # (the texts hold image text in many places, kept and removed)


@pytest.mark.parametrize(("pattern", "lowered"), [
    (r"\bsays\s+\S+\W", True),  # escapes of classes are no capitals
    (r"\bSays\b", False),  # a capital of its own
    (r"(?-i:a)b", False),  # case-blindness turned off for a part
    (r"\x41b", False),  # a character written by its code ("A")
    (r"\101b", False),
    (r"x[@-_]y", False),  # a range of marks that spans the capitals
    (r"x[^@-_]y", False),
    (r"x[\--_]y", False),
    (r"x[B-D]y", False),  # a range of capitals only
    ("\u017ftop", False),  # a letter outside ASCII that matches an ASCII one case-blind (long s, Kelvin sign)
    ("\u212aey", False),
    (r"[a-z]+(?>ab)c[^a-z](?=\w)", True),
])
def test_which_case_blind_patterns_run_on_lowered_text(pattern, lowered):
    g = gates.Gated(pattern, re.IGNORECASE)
    assert (g._lowered is not None) is lowered
    assert gates.Gated(pattern)._lowered is None  # (a case-sensitive pattern runs as it is)
    for text in ("xay xAy x@y x_y X-Y xcy xCy", "stop STOP Stop", "key KEY", "ab Ab AB cat CAT", "abc ABC aabcd"):
        assert g.sub("-", text) == g.re.sub("-", text), text
