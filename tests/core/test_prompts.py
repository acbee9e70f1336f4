"""The one prompt renderer (vlrl.core.prompts): names, paths, strictness, and what ships."""

from __future__ import annotations

import pytest

from tests.support.paths import ROOT
from vlrl.core.prompts import PromptNotFoundError, bundled_templates, from_string, load_template, render, template_path


def test_stem_file_name_and_path_render_the_same(tmp_path):
    kw = {"caption": "a red cube", "question": "What colour?", "options": ["A. red", "B. blue"]}
    by_stem = render("caprl_answer", **kw)
    assert "a red cube" in by_stem and "B. blue" in by_stem
    assert render("caprl_answer.jinja", **kw) == by_stem
    assert render(template_path("caprl_answer"), **kw) == by_stem
    own = tmp_path / "mine.txt"  # a user's file may have any suffix
    own.write_text("Caption: {{ caption }}\n\n", encoding="utf-8")
    assert render(str(own), caption="x") == "Caption: x"  # stripped


def test_edited_user_file_is_reread(tmp_path):
    own = tmp_path / "p.jinja"
    own.write_text("one {{ x }}", encoding="utf-8")
    assert render(own, x=1) == "one 1"
    own.write_text("two {{ x }} (edited)", encoding="utf-8")
    assert render(own, x=1) == "two 1 (edited)"


def test_missing_template_and_missing_variable_fail_loudly():
    with pytest.raises(PromptNotFoundError, match="no_such_prompt"):
        load_template("no_such_prompt")
    with pytest.raises(ValueError):  # callers validating settings catch ValueError
        render("no_such_prompt")
    with pytest.raises(FileNotFoundError):
        render("no_such_prompt.jinja")
    with pytest.raises(Exception, match="caption"):  # StrictUndefined
        render("caprl_answer", question="q", options=[])


def test_inline_templates_follow_the_same_rules():
    text = "{% if q %}\nQ: {{ q }}\n  {% endif %}\nDone."
    assert from_string(text).render(q="why") == "Q: why\nDone."  # trim_blocks + lstrip_blocks
    with pytest.raises(Exception, match="q"):
        from_string("{{ q }}").render()


def test_every_bundled_template_parses():
    names = sorted(bundled_templates())
    assert "teacher_caption.jinja" in names and "caprl_answer.jinja" in names
    for name in names:
        load_template(name)


def test_templates_live_beside_their_owner():
    """Each method keeps its prompts in its own folder; nothing is left in a shared prompt dump."""
    owners = {name: path.parent.parent.name for name, path in bundled_templates().items()}
    assert owners["caprl_answer.jinja"] == "caprl"
    assert owners["rubric_judge.jinja"] == "rubicap"
    assert owners["cold_start_reason.jinja"] == "vision_r1"
    assert owners["caption_default.jinja"] == "captioning"


def test_caprl_training_prompt_has_exactly_one_copy():
    """Four copies of CapRL's captioning prompt once had to be kept equal by hand; now one template holds it."""

    text = render("caption_default")
    assert text and "{{" not in text
    repo = ROOT
    holders = [
        p.relative_to(repo).as_posix()
        for folder in ("vlrl", "train")
        for p in sorted((repo / folder).rglob("*"))
        if p.is_file() and p.suffix in (".py", ".jinja", ".yaml", ".yml", ".sh") and text in p.read_text(encoding="utf-8")
    ]
    assert holders == ["vlrl/captioning/prompts/caption_default.jinja"]
