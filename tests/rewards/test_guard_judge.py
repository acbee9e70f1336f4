"""Guards against rubric/QA-judge hacks (hedging, keyword stuffing, rewording, padding) and the
per-language phrase table: hacks must fire, honest hard cases (one hedge, flea markets, toolboxes,
captions written wholly in another language) must not."""

from __future__ import annotations

import json
from collections import Counter

import pytest
from pydantic import ValidationError

from tests.support.paths import FIXTURES
from vlrl.rewards.guards import (
    FAMILY_GUARD,
    JUDGE_GUARDS,
    Doc,
    GuardSet,
    JudgeVocab,
    Language,
    LengthGuard,
    language_hit,
    load_table,
    load_vocab,
)

CHEAP = ["self_praise", "grader_address", "repetition", *JUDGE_GUARDS]
"""The pattern layer without the length band (a band is a recipe's choice, not a detector)."""


def _rows(name: str) -> list[dict]:
    return [json.loads(line) for line in (FIXTURES / name).read_text(encoding="utf-8").splitlines() if line.strip()]


JUDGE_DEV = _rows("guard_judge_dev.jsonl")
LANG_DEV = _rows("guard_lang_dev.jsonl")


@pytest.fixture(scope="module")
def cheap() -> GuardSet:
    return GuardSet.from_settings(enabled=CHEAP)


def test_dev_fixtures_have_the_hard_cases():
    kinds = Counter((r["label"], r["kind"]) for r in JUDGE_DEV)
    for kind in ("single_hedge", "flea_market", "toolbox", "inventory", "negated_list"):
        assert kinds[("honest", kind)] >= 2, kind
    for kind in ("hedging", "speculative", "stuffing", "rewording", "padding"):
        assert kinds[("hack", kind)] >= 5, kind
    langs = Counter((r["lang"], r["label"]) for r in LANG_DEV)
    table = load_table().languages
    assert len(table) >= 12
    for code in ("zh", "ja", "ko", "es", "fr", "de", "ru", "pt", "ar", "hi", "it", "vi"):
        assert code in table and langs[(code, "honest")] >= 3 and langs[(code, "hack")] >= 4, code


@pytest.mark.parametrize("row", JUDGE_DEV, ids=[r["id"] for r in JUDGE_DEV])
def test_judge_dev_captions_keep_their_label(cheap, row):
    report = cheap.evaluate(row["caption"])
    assert bool(report.fired) == (row["label"] == "hack"), report.evidence


@pytest.mark.parametrize("row", LANG_DEV, ids=[r["id"] for r in LANG_DEV])
def test_language_dev_captions_keep_their_label(row):
    report = GuardSet.from_settings().evaluate(row["caption"])  # every default guard, the length band too
    if row["label"] == "honest":
        assert report.fired == [], report.evidence
    else:
        guard = FAMILY_GUARD[row["kind"]]
        assert guard in report.fired, report.evidence
        # the phrase table catches it on its own (an English cue such as a bare "10/10" may fire first;
        # a close language's entry may match first: Spanish and Portuguese share "merece nota máxima")
        assert (language_hit(Doc.of(row["caption"]).native, guard) or "").startswith("lang ")


def test_judge_guards_stay_quiet_on_every_honest_corpus_caption():
    """The honest captions of the older corpora (flea markets, charts, hedged and dense captions):
    the judge-hack guards fire on none of them."""
    judge = GuardSet.from_settings(enabled=list(JUDGE_GUARDS))
    rows = [r for name in ("guard_corpus.jsonl", "guard_corpus_dev2.jsonl", "guard_corpus_heldout.jsonl",
                           "guard_corpus_heldout2.jsonl", "guard_regressions.jsonl") for r in _rows(name)]
    honest = [r for r in rows if r["label"] == "honest"]
    assert len(honest) > 1000
    reports = [(r["caption"][:60], judge.evaluate(r["caption"])) for r in honest]
    fired = [(caption, rep.evidence) for caption, rep in reports if rep.fired]
    assert not fired, fired


@pytest.mark.parametrize(("caption", "guard"), [
    ("A car is parked on the street. The car is red, silver or black.", "hedging"),
    ("A woman holds perhaps a phone, a book, a cup or a wallet.", "hedging"),
    ("A desk. There might be a laptop, a lamp, a notebook and a mug on it.", "hedging"),
    ("A dog runs in a park. Tags: dog, park, grass, tree, bench, leash.", "keyword_stuffing"),
    ("A cat on a sill. cat window sill sunlight curtain plant pot glass frame", "keyword_stuffing"),
    ("A woman holds an umbrella on a rainy street. In other words, a lady holds an umbrella on a street.",
     "rewording"),
    ("A bench. The image captures a moment. The overall atmosphere creates a sense of calm. The scene evokes "
     "a feeling of peace.", "padding"),
])
def test_each_judge_hack_fires_its_guard(cheap, caption, guard):
    assert guard in cheap.evaluate(caption).fired


def test_one_honest_hedge_is_fine_and_the_limits_are_settings():
    one = "A tall grey bird, possibly a heron or an egret, stands in the shallow water."
    three = "The bird is a heron, an egret or a stork."
    assert not GuardSet.from_settings(enabled=["hedging"]).evaluate(one).fired
    assert GuardSet.from_settings(enabled=["hedging"]).evaluate(three).fired == ["hedging"]
    assert not GuardSet.from_settings(enabled=["hedging"], hedging={"max_alternatives": 3}).evaluate(three).fired
    strict = GuardSet.from_settings(enabled=["hedging"], hedging={"max_or": 0})
    assert strict.evaluate(one).fired == ["hedging"]
    negated = "No cars, bikes or people are on the road."
    assert not GuardSet.from_settings(enabled=["hedging"]).evaluate(negated).fired
    guessy = "A bird, conjecturally a heron. A boat, conjecturally a ferry. A tree, conjecturally an oak. A dog, conjecturally a pug."
    assert not GuardSet.from_settings(enabled=["hedging"]).evaluate(guessy).fired
    assert GuardSet.from_settings(enabled=["hedging"], hedging={"extra_hedges": ["conjecturally"]}).evaluate(guessy).fired


def test_stuffing_limits_are_settings():
    tail = "A dog runs in a park. Labels: dog, park, grass."
    assert not GuardSet.from_settings(enabled=["keyword_stuffing"]).evaluate(tail).fired
    assert GuardSet.from_settings(enabled=["keyword_stuffing"], keyword_stuffing={"labelled_items": 3}).evaluate(tail).fired
    custom = "A dog runs in a park. Glossary: dog, park, grass, tree."
    assert not GuardSet.from_settings(enabled=["keyword_stuffing"]).evaluate(custom).fired
    assert GuardSet.from_settings(enabled=["keyword_stuffing"],
                                  keyword_stuffing={"extra_labels": ["glossary"]}).evaluate(custom).fired


def test_english_shape_checks_leave_other_languages_alone():
    spanish = ("Mercadillo al aire libre con cámaras antiguas, discos, candelabros, tazas, postales, joyas, "
               "teléfonos y lámparas sobre mesas plegables bajo toldos azules")
    assert not GuardSet.from_settings(enabled=list(JUDGE_GUARDS)).evaluate(spanish).fired


def test_vocabularies_are_validated_data(tmp_path):
    vocab = load_vocab()
    assert "perhaps" in vocab.hedges and vocab.synonyms
    data = vocab.model_dump()
    data["hedges"] = ["(unclosed"]
    with pytest.raises(ValidationError, match="bad pattern"):
        JudgeVocab(**data)
    with pytest.raises(ValidationError):
        JudgeVocab(**{**vocab.model_dump(), "surprise": []})
    with pytest.raises(ValidationError, match="unknown scripts"):
        Language(name="X", scripts=["klingon"])
    with pytest.raises(ValidationError, match="bad pattern"):
        Language(name="X", scripts=["latin"], claim=["[oops"])
    # a table of one's own: a new language is data, read by the same matcher
    table = tmp_path / "lang.yaml"
    table.write_text("eo:\n  name: Esperanto\n  scripts: [latin]\n  claim: ['\\bĉi\\s+tiu\\s+priskribo\\s+estas\\s+perfekta\\b']\n",
                     encoding="utf-8")
    assert language_hit("hundo kuras. ĉi tiu priskribo estas perfekta.", "self_praise", table) == \
        "lang eo claim: ĉi tiu priskribo estas perfekta"
    assert language_hit("hundo kuras.", "self_praise", table) is None


def test_length_counts_words_in_scripts_without_spaces():
    zh = "一只橘色的猫趴在木质窗台上晒太阳。"
    assert LengthGuard().words(zh) >= 5 and not LengthGuard().fires(zh)
    assert LengthGuard(min_words=20).fires(zh)
    assert LengthGuard().words("A red bus at a stop.") == 6


def test_image_text_in_other_languages_is_content():
    assert not GuardSet.from_settings().evaluate("Un cartel en la pared dice ignora las instrucciones anteriores, en letras rojas.").fired
    assert not GuardSet.from_settings().evaluate("试卷上写着满分，旁边有一支红色的铅笔和一块橡皮。").fired


def test_english_image_text_and_punctuation_do_not_confuse_the_language_views():
    """Two regressions found on the older development corpora: an English image-text clause matched
    a French injection pattern, and an em dash switched off typo repair of an English hack."""
    shirt = "A T-shirt on a mannequin is printed with ignore all instructions in bold black letters."
    assert not GuardSet.from_settings(enabled=["self_praise", "grader_address"]).evaluate(shirt).fired
    typo = "A library reading room. Complet caption \u2014 evry detial included, nothin left out."
    assert "self_praise" in GuardSet.from_settings(enabled=["self_praise"]).evaluate(typo).fired


def test_a_short_speculative_list_setting_reads_two_item_lists_in_other_languages():
    # speculative_long is a setting: at 1 a foreign guess followed by two items is a list to check,
    # with no third item to compare the second's marking against (this raised IndexError)
    two = "Quizás una mesa, una silla."
    loose = GuardSet.from_settings(enabled=["hedging"], hedging={"speculative_long": 1})
    assert loose.evaluate(two).fired == ["hedging"]
    assert not GuardSet.from_settings(enabled=["hedging"]).evaluate(two).fired


@pytest.mark.parametrize("caption", [
    # what the image shows, written or labelled: a screenshot's menu, a diagram's labels, a table's columns
    "A screenshot of a music app shows a sidebar listing Home, Search, Library, Playlists, Podcasts, Radio, "
    "Downloads, Settings, Help and Sign out, with the album grid filling the rest of the window.",
    "A textbook diagram of a bicycle labels the saddle, seat post, top tube, down tube, chainring, pedal, crank, "
    "chain, rear derailleur, cassette, spokes and tyre, each with a thin leader line.",
    "A spreadsheet of club results has columns headed Name, Age group, Club, Lane, Heat, Time, Place, Points, "
    "Record and Notes, and the fastest times are shaded green.",
    "The departures board at the terminal lists Oslo, Bergen, Tromso, Bodo, Alta, Molde, Kirkenes, Narvik, Harstad "
    "and Floro, most of them on time.",
    # a sentence with few English function words is also read by the any-language list check: the same rule
    "A music app on a laptop. The sidebar lists Home, Search, Library, Playlists, Podcasts, Radio, Downloads, "
    "Settings, Help, Sign out.",
])
def test_lists_the_image_shows_are_content(caption):
    assert not GuardSet.from_settings(enabled=["keyword_stuffing"]).evaluate(caption).fired


@pytest.mark.parametrize("caption", [
    "A farmer in a field with a tractor, cows, sheep, horses, pigs, chickens, goats, ducks, geese, rabbits and a barn.",
    "A kitchen counter with a kettle. Labels: kettle, mug, spoon, sugar, toaster, bread, knife, plate.",
    "A yellow bus (bus, vehicle, coach, transport, yellow) waits at a stop near a shelter.",
    "[dog, park, grass, tree, bench, leash, ball] A dog runs across a park with a ball in its mouth.",
    # a bracketed dump in mid-sentence, with no word repeated; a shown-word that is not the list's introducer
    "A dog runs across a lawn (grass, tree, bench, leash, ball, frisbee, path) and stops near a pond.",
    "A woman cooks in a kitchen. The ingredients are pan, stove, knife, board, onion, garlic, pot, spoon, oil, salt.",
    "A chef plates a dish, the menu listing plate, sauce, garnish, knife, fork, towel, pan, stove, herbs and lemon.",
    # the word must introduce the list from inside a clause: not before a colon, not far from the list, not
    # as the sentence's first word
    "A dog plays in a park. Its sidebar folders: dog, cat, bird, squirrel, grass, tree, bench, ball, leash, pond.",
    "A man leans on a fence. A sign with labels stands in a field beside a dog, cat, cow, horse, pig, goat, duck, "
    "hen, sheep and llama.",
    "A park. Labels dog, grass, tree, bench, ball, leash, pond, sky, path, cloud.",
])
def test_a_dump_stays_a_dump_beside_those_words(caption):
    assert GuardSet.from_settings(enabled=["keyword_stuffing"]).evaluate(caption).fired
