"""Reward-hacking guards: cheap text checks that veto or penalise a caption before it is rewarded.

Guards are data plus a small engine. The data: one table of families (``data/families.yaml``, read by
:mod:`.table`), the per-language phrase table (``data/languages.yaml``, :mod:`.lang`) and the
judge-hack vocabularies (``data/judge_hacks.yaml``, :mod:`.judge`), each validated by a pydantic
schema. The engine: one normaliser and one splitter (:mod:`.text`), the caption's views prepared
once (:mod:`.doc`, typo repair in :mod:`.typos`), the families run by :class:`.table.CompiledFamily`
(:mod:`.semantic` for ``self_praise`` and ``grader_address``), the few detectors that count or parse
(:mod:`.detectors`), the guards written in code (:mod:`.judge`, ``repetition``, ``length`` and
``llm_defense`` in :mod:`.core`), and the guard set and reward wrappers (:mod:`.core`).

This module is the public surface: import from ``vlrl.rewards.guards``.
"""

from vlrl.rewards.guards.base import GUARDS, Guard, register_guard
from vlrl.rewards.guards.core import (
    SUMMARY_KEYS,
    GuardedReward,
    GuardReport,
    GuardReward,
    GuardSet,
    LengthGuard,
    LLMDefenseGuard,
    RepetitionGuard,
    with_guards,
)
from vlrl.rewards.guards.doc import (
    Doc,
    english_function_words,
    english_share,
    normalize,
    reads_as_english,
    strip_quoted,
)
from vlrl.rewards.guards.judge import (
    JUDGE_GUARDS,
    VOCAB,
    HedgingGuard,
    JudgeVocab,
    KeywordStuffingGuard,
    PaddingGuard,
    RewordingGuard,
    load_vocab,
    sentences,
)
from vlrl.rewards.guards.lang import FAMILY_GUARD, Language, LanguageTable, language_hit, load_table
from vlrl.rewards.guards.semantic import GraderAddressGuard, PatternGuard, SelfPraiseGuard, TableGuard
from vlrl.rewards.guards.table import Family, FamilyTable, families_of
from vlrl.rewards.guards.table import load_table as load_family_table
from vlrl.rewards.guards.typos import fuzzy_fix, unreversed

__all__ = [
    "Family", "FamilyTable", "GraderAddressGuard", "SelfPraiseGuard", "TableGuard", "families_of", "load_family_table",
    "FAMILY_GUARD", "GUARDS", "JUDGE_GUARDS", "VOCAB", "Doc", "Guard", "GuardReport", "GuardReward", "GuardSet",
    "GuardedReward", "HedgingGuard", "JudgeVocab", "KeywordStuffingGuard", "LLMDefenseGuard", "Language",
    "LanguageTable", "LengthGuard", "PaddingGuard", "PatternGuard", "RepetitionGuard", "RewordingGuard", "SUMMARY_KEYS",
    "english_function_words", "english_share", "fuzzy_fix", "language_hit", "load_table", "load_vocab", "normalize",
    "reads_as_english", "register_guard", "sentences", "strip_quoted", "unreversed", "with_guards",
]
