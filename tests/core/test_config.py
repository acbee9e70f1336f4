"""Hand-written settings files: the YAML limit counts what the aliases expand to, not only how
many there are (finding 9 of #24: 60 aliases nested 3^21 deep passed a 64-alias limit and hung
`vlrl train check` at 816 MB and growing)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.support.jobs import child_env
from vlrl.core.config import MAX_YAML_NODES, expanded_nodes, safe_yaml


def _bomb(levels: int = 20, width: int = 3) -> str:
    """``levels * width`` aliases at most, each level a list of ``width`` of the previous one."""
    lines = [f"a0: &a0 [{', '.join(['x'] * width)}]"]
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * width)}]" for i in range(1, levels)]
    lines.append(f"trainer: {{foo: [{', '.join([f'*a{levels - 1}'] * width)}]}}")
    return "\n".join(lines) + "\n"


def test_expansion_is_counted_before_anything_is_built():
    text = _bomb()
    assert text.count("*") == 60  # under the alias limit: only the expansion gives it away
    with pytest.raises(yaml.YAMLError, match="expand to more than"):
        safe_yaml(text)
    node = yaml.compose(text, Loader=yaml.SafeLoader)  # the shared graph is small; its expansion is 3^21
    assert expanded_nodes(node, MAX_YAML_NODES) == MAX_YAML_NODES + 1
    with pytest.raises(yaml.YAMLError, match="expand to more than"):
        safe_yaml("a: &a [1, *a]")  # a recursive alias expands forever


def test_ordinary_aliases_still_load():
    doc = safe_yaml("base: &b {lr: 1.0e-5, steps: 3}\nstage1: *b\nstage2: [*b, *b]\n")
    assert doc["stage1"] == doc["base"] == {"lr": 1.0e-5, "steps": 3} and len(doc["stage2"]) == 2
    assert expanded_nodes(yaml.compose("a: &a [1, 2]\nb: [*a, *a]", Loader=yaml.SafeLoader), 10**6) == 13


def test_train_check_refuses_the_bomb_in_one_line(tmp_path):
    recipe = tmp_path / "bomb.yaml"
    recipe.write_text(_bomb())
    vlrl = str(Path(sys.executable).parent / "vlrl")
    # a generous timeout: before the fix this never finished (and grew past 800 MB)
    res = subprocess.run([vlrl, "train", "check", "--recipe", str(recipe), "--no-probe"], capture_output=True,
                         text=True, env=child_env(), timeout=120)
    assert res.returncode == 2, res.stderr[-2000:]
    assert "expand to more than" in res.stderr and "Traceback" not in res.stderr
