"""CapRL++'s caption terms: the length term R_L and the timestamp-format term, held against an
independent re-implementation written from CapRL++'s published reward code, on captions that
exercise every rule (invalid seconds, reversed intervals, out-of-order stamps, no stamps)."""

from __future__ import annotations

import re

import pytest

from vlrl.rewards import build_reward


def reference_format(text: str, min_brackets: int = 3, max_minute: int = 599) -> float:
    """CapRL++'s timestamp format reward, re-implemented from its published source."""
    if not text or not text.strip():
        return 0.0
    matches = list(re.finditer(r"\[(\d{1,3}):(\d{2})(?:\s*-\s*(\d{1,3}):(\d{2}))?\]", text))
    if not matches:
        return 0.0
    starts = []
    for m in matches:
        mm, ss = int(m.group(1)), int(m.group(2))
        if not 0 <= ss <= 59 or mm > max_minute:
            continue
        if m.group(3) is not None:
            emm, ess = int(m.group(3)), int(m.group(4))
            if not 0 <= ess <= 59 or emm > max_minute or emm * 60 + ess < mm * 60 + ss:
                continue
        starts.append(mm * 60 + ss)
    if not starts:
        return 0.0
    validity = len(starts) / len(matches)
    coverage = min(1.0, len(starts) / max(min_brackets, 1))
    order = 1.0 if all(starts[i] <= starts[i + 1] for i in range(len(starts) - 1)) else 0.0
    return max(0.0, min(1.0, 0.45 * coverage * validity + 0.25 * validity + 0.30 * order * validity))


CAPTIONS = [
    "[00:00 - 00:04] A red ball rolls left. [00:05] It stops. [00:07 - 00:09] A blue square appears.",
    "[00:00] A ball. [00:03] It rolls.",  # two stamps: coverage 2/3
    "[00:05] Later first. [00:01] Earlier second. [00:09] Last.",  # out of order
    "[00:75] bad seconds [00:10] ok [00:12] ok",  # one invalid of three
    "[01:10 - 01:05] reversed interval [01:20] fine",
    "[700:00] beyond the minute limit",
    "No timestamps at all, just a description of the clip.",
    "",
    "[0:05] short minutes [12:30 - 12:45] interval [123:00] three-digit minutes",
    "[00:01][00:02][00:03][00:04][00:05] dense",
]


@pytest.mark.parametrize("caption", CAPTIONS)
def test_timestamp_format_matches_the_published_rule(caption):
    r = build_reward("timestamp_format")
    (s,) = r.score([caption])
    assert s.value == pytest.approx(reference_format(caption))


def test_timestamp_format_settings_change_the_score():
    caption = CAPTIONS[1]
    assert build_reward("timestamp_format", min_stamps=2).score([caption])[0].value == pytest.approx(1.0)
    assert build_reward("timestamp_format").score([caption])[0].value < 1.0
    assert build_reward("timestamp_format", max_minute=800).score([CAPTIONS[5]])[0].value > 0.0


def test_length_term_thresholds_and_the_policy_token_counts():
    r = build_reward("caption_length")
    ids = [[0] * n for n in (10, 2048, 2560, 3072, 5000)]
    assert r(completions=["x"] * 5, completion_ids=ids) == pytest.approx([1.0, 1.0, 0.5, 0.0, 0.0])
    short = build_reward("caption_length", full_until=4, zero_at=8)
    assert short(completions=["x"] * 3, completion_ids=[[0] * 4, [0] * 6, [0] * 9]) == pytest.approx([1.0, 0.5, 0.0])
    with pytest.raises(ValueError, match="full_until"):
        build_reward("caption_length", full_until=10, zero_at=10)


def test_length_term_offline_needs_a_tokenizer_and_says_so(tiny_lm):
    (s,) = build_reward("caption_length").score(["a caption"])
    assert s.value is None and "tokenizer" in s.details["reason"]
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_lm)
    text = "word " * 30
    n = len(tok(text, add_special_tokens=False)["input_ids"])
    (s,) = build_reward("caption_length", tokenizer=str(tiny_lm), full_until=n - 1, zero_at=n + 1).score([text])
    assert s.value == pytest.approx(0.5) and s.details["tokens"] == n
