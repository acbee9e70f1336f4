"""Arena statistics (CapArena tie rule, intervals, sign test) and contestants loaded from files."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from tests.support.arena import BASE, CAND, arena_images, biased_judge, captioner
from tests.support.scripted import Scripted
from vlrl.core.stats import bootstrap_mean, sign_test, wilson
from vlrl.methods.rubicap.arena import ORDERS, run_arena, score_arena
from vlrl.methods.rubicap.sources import ImageItem


def _judgments(pairs):
    """pairs: per image the candidate's view in each order (+1 / 0 / -1)."""
    out = []
    for i, views in enumerate(pairs):
        for order, v in zip(ORDERS, views, strict=True):
            cand_pos = "A" if order == "cand_first" else "B"
            winner = "tie" if v == 0 else (cand_pos if v > 0 else ("B" if cand_pos == "A" else "A"))
            out.append({"image_id": str(i), "baseline": "b", "order": order, "winner": winner, "candidate": v})
    return out


def test_one_win_and_one_tie_is_not_a_full_win():
    pairs = [(1, 1), (1, 0), (0, 1), (1, -1), (0, 0), (-1, 0), (-1, -1)]
    items = [ImageItem(str(i), f"{i}.png") for i in range(len(pairs))]
    caps = {"c": {str(i): "x" for i in range(len(pairs))}, "b": {str(i): "y" for i in range(len(pairs))}}
    r = score_arena(items, caps, "c", ["b"], _judgments(pairs))["baselines"]["b"]
    assert (r["wins"], r["ties"], r["losses"]) == (1, 5, 1)
    assert r["partial_wins"] == 2 and r["partial_losses"] == 1
    assert r["win_rate"] == pytest.approx(1 / 7)
    # judgment-level half credit: judgment-level half credit
    assert r["win_rate_ties_half"] == pytest.approx((5 + 5 / 2) / 14)  # judgment wins 5, ties 5 of 14
    lo, hi = r["win_rate_ci95"]
    assert lo < 1 / 7 < hi
    # 3 pairs lean to the candidate, 2 to the baseline: no evidence either way
    assert r["sign_test_p"] == pytest.approx(sign_test(3, 2)) and r["sign_test_p"] == 1.0


def test_stats_helpers_behave():
    assert wilson(0, 0) is None and wilson(0, 10)[0] == 0.0 and wilson(10, 10)[1] == 1.0
    lo, hi = wilson(50, 100)
    assert lo < 0.5 < hi and hi - lo < 0.25
    assert sign_test(10, 0) == pytest.approx(2 / 2**10) and sign_test(0, 0) is None
    assert sign_test(20, 2) < 0.001 < sign_test(6, 4)
    assert bootstrap_mean([1.0, 1.0, 1.0]) == (1.0, 1.0)
    lo, hi = bootstrap_mean([0, 1] * 50)
    assert lo < 0.5 < hi and bootstrap_mean([0, 1] * 50) == (lo, hi)  # seeded


def test_candidate_from_a_named_captions_file(tmp_path):
    caps = tmp_path / "cand.jsonl"
    caps.write_text("".join(json.dumps({"image_id": k, "caption": v}) + "\n" for k, v in CAND.items()))
    res = run_arena(f"mine={caps}", [captioner("base", BASE)], Scripted("judge", biased_judge),
                    arena_images(tmp_path, 4), tmp_path / "out")
    assert res["candidate"] == "mine"
    b = res["baselines"]["base"]
    assert b["pairs"] == 4 and (b["wins"], b["ties"], b["losses"]) == (2, 1, 1)


def test_a_candidate_that_cannot_load_stops_the_run(tmp_path):
    imgs = arena_images(tmp_path, 2)
    with pytest.raises(ValueError, match="not found"):
        run_arena(f"mine={tmp_path / 'nope.jsonl'}", [captioner("base", BASE)], Scripted("j", biased_judge), imgs,
                  tmp_path / "o1")
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"caption": 3}\n')
    with pytest.raises(ValueError, match="cannot be read"):
        run_arena(str(bad), [captioner("base", BASE)], Scripted("j", biased_judge), imgs, tmp_path / "o2")
    dead = Scripted("dead", lambda r: ChatResultError())
    with pytest.raises(ValueError, match="no caption for any"):
        run_arena(dead, [captioner("base", BASE)], Scripted("j", biased_judge), imgs, tmp_path / "o3")


def ChatResultError():  # noqa: N802 - a failed caption, as the scripted backend reports one
    from vlrl.core.backends import ChatResult

    return ChatResult(error="connection refused")


def test_cli_exits_non_zero_when_the_candidate_cannot_load(tmp_path):
    from vlrl.cli import app

    imgs = arena_images(tmp_path, 2)
    base = tmp_path / "base.jsonl"
    base.write_text("".join(json.dumps({"image_id": k, "caption": v}) + "\n" for k, v in BASE.items()))
    res = CliRunner().invoke(app, ["eval", "arena", "--candidate", f"mine={tmp_path / 'missing.jsonl'}",
                                   "--baseline", f"base={base}", "--judge", "openai:http://127.0.0.1:9/v1@x",
                                   "--images", str(imgs), "--out", str(tmp_path / "out")])
    assert res.exit_code != 0 and "missing.jsonl" in res.output


def test_teacher_from_a_captions_file(tmp_path):
    from tests.support.images import make_images
    from vlrl.methods.rubicap.teachers import run_teacher_committee

    imgs = make_images(tmp_path / "imgs", 3)
    caps = tmp_path / "gpt.jsonl"
    caps.write_text("".join(json.dumps({"image_id": f"img{i}.png", "caption": f"a red square number {i}"}) + "\n"
                            for i in range(2)))
    stats = run_teacher_committee(imgs, [f"gpt={caps}"], tmp_path / "out")
    assert stats["teachers"] == ["gpt"]
    assert stats["per_teacher"]["gpt"]["captioned"] == 2 and stats["per_teacher"]["gpt"]["missing"] == 1
    with pytest.raises(ValueError, match="not found"):
        run_teacher_committee(imgs, [f"gpt={tmp_path / 'none.jsonl'}"], tmp_path / "out2")
