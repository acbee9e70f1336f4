"""The per-method pipeline scripts (pipelines/*.sh) name only commands, flags and files that exist.

They are examples people copy onto GPU servers, so a renamed flag must break this test, not their run.
"""

from __future__ import annotations

import re
import shlex
import subprocess
from pathlib import Path

import pytest
from typer.main import get_command

from tests.support.paths import ROOT
from vlrl.cli import app

SCRIPTS = sorted((ROOT / "pipelines").glob("*.sh"))


def _commands(script: Path) -> list[list[str]]:
    """Each logical line (continuations joined) as words, env assignments and `accelerate launch` kept."""
    text = re.sub(r"\\\n\s*", " ", script.read_text())
    out = []
    for line in text.splitlines():
        line = line.split(" #", 1)[0].strip()
        if line and not line.startswith("#"):
            out.append(shlex.split(line, posix=True))
    return out


def _options(words: list[str]) -> tuple[list[str], set[str]]:
    """(command path, flags) of a `vlrl ...` invocation, checked against the real CLI."""
    group = get_command(app)
    path = []
    i = 0
    while i < len(words) and hasattr(group, "commands") and words[i] in group.commands:
        group = group.commands[words[i]]
        path.append(words[i])
        i += 1
    known = {opt for p in group.params for opt in (*p.opts, *p.secondary_opts)}
    return path, known


def test_there_is_one_pipeline_per_method():
    assert {p.stem for p in SCRIPTS} >= {"caprl", "rubicap", "vision_r1"}


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.stem)
def test_script_is_valid_bash(script):
    subprocess.run(["bash", "-n", str(script)], check=True)


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.stem)
def test_every_vlrl_command_and_flag_exists(script):
    seen = 0
    for words in _commands(script):
        while words and re.fullmatch(r"[A-Z_]+=\S*", words[0]):  # VAR=value prefixes
            words = words[1:]
        if words[:2] == ["accelerate", "launch"]:
            entry = next(w for w in words if w.endswith(".py"))
            assert (ROOT / entry).is_file(), entry
            words = ["train", Path(entry).stem, *words[words.index(entry) + 1:]]
        elif not words or words[0] != "vlrl":
            continue
        else:
            words = words[1:]
        path, known = _options(words)
        assert path, f"{script.name}: unknown command in {' '.join(words)}"
        flags = {w.split("=", 1)[0] for w in words if w.startswith("--")}
        assert flags <= known, f"{script.name}: `vlrl {' '.join(path)}` has no {sorted(flags - known)}"
        for w in words:
            if w.startswith("train/recipes/"):
                assert (ROOT / w).is_file(), w
        seen += 1
    assert seen >= 3
