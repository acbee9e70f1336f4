"""The ``py:`` captioner that docs/captioning.md shows, run as the doc says: the doc's own code
block, written to a module, through ``vlrl caption``. If the message layout a reply function
receives changes, the documented example stops working and this test says so."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

from tests.support.images import make_images
from tests.support.paths import ROOT


def _doc_module() -> str:
    doc = (ROOT / "docs" / "captioning.md").read_text()
    blocks = re.findall(r"```python\n(# my_captioner\.py\n.*?)```", doc, flags=re.S)
    assert len(blocks) == 1, "docs/captioning.md: expected one ```python block starting '# my_captioner.py'"
    return blocks[0]


def test_the_documented_py_captioner_runs_through_vlrl_caption(tmp_path):
    (tmp_path / "my_captioner.py").write_text(_doc_module())
    images = make_images(tmp_path / "photos", 3)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)])}
    cmd = [str(Path(sys.executable).parent / "vlrl"), "caption", "--images", str(images),
           "--model", "py:my_captioner:factory?adjective=small", "--out", str(tmp_path / "caps"), "--no-progress"]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    rows = [json.loads(line) for f in sorted((tmp_path / "caps" / "captions").glob("*.jsonl")) for line in f.read_text().splitlines()]
    assert len(rows) == 3
    for r in rows:
        assert re.match(r"A small \d+x\d+ picture, mean colour \(\d+, \d+, \d+\); asked: \S", r["caption"]), r["caption"]
