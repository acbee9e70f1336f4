"""docs/quickstart.md, run as a reader would: its ``photo_models.py`` block written to a file, then
every ```bash block in order, in one shell, in an empty folder.

Each ```text block right after a ```bash block is that command's output as the page shows it. Every
line shown must appear in the real output, in order (lines the page leaves out, such as progress
bars, may come between). A ``…`` in a shown line stands for text that differs between runs (a
rate, a path under the reader's folder); a leading ``HH:MM:SS`` log time matches any time. A
command exits 0 unless its block says ``# exits N``. ```sh blocks (real-model settings) are not run.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.paths import ROOT

DOC = ROOT / "docs" / "quickstart.md"
MARK = "@@vlrl-quickstart-block"

pytestmark = pytest.mark.slow  # two notebook kernels start; the commands themselves take seconds


def blocks(text: str) -> list[tuple[str, str]]:
    """(language, body) of every fenced block of the page, in order."""
    return re.findall(r"^```(\w*)\n(.*?)^```", text, flags=re.S | re.M)


def steps(text: str) -> tuple[str, list[tuple[str, str | None]]]:
    """The page's model module, and each ```bash block with the ```text block after it (or None)."""
    found = blocks(text)
    module = [body for lang, body in found if lang == "python" and body.startswith("# photo_models.py\n")]
    assert len(module) == 1, "docs/quickstart.md: expected one ```python block starting '# photo_models.py'"
    out = []
    for i, (lang, body) in enumerate(found):
        if lang == "bash":
            shown = found[i + 1][1] if i + 1 < len(found) and found[i + 1][0] == "text" else None
            out.append((body, shown))
    return module[0], out


def pattern(line: str) -> re.Pattern[str]:
    """A shown line as a pattern: ``…`` is any text, a leading log time any time, the rest literal."""
    line = line.rstrip()
    lead = r"\d\d:\d\d:\d\d " if re.match(r"\d\d:\d\d:\d\d ", line) else ""
    line = line[9:] if lead else line
    return re.compile(lead + ".*".join(re.escape(part) for part in line.split("…")))


def unshown(shown: str, real: str) -> str | None:
    """The first shown line not found in the real output (in order), else None."""
    lines = [ln.rstrip() for chunk in real.splitlines() for ln in chunk.split("\r")]
    at = 0
    for want in (ln for ln in shown.splitlines() if ln.strip()):
        pat = pattern(want)
        while at < len(lines) and not pat.search(lines[at]):
            at += 1
        if at == len(lines):
            return want
        at += 1
    return None


def test_the_quickstart_runs_as_shown(tmp_path):
    module, runs = steps(DOC.read_text(encoding="utf-8"))
    assert len(runs) >= 8, "the first hour: check, caption (twice), qa-curate, reward score, caption-qa, prism, notebooks"
    (tmp_path / "photo_models.py").write_text(module)
    (tmp_path / "notebooks").symlink_to(ROOT / "notebooks")  # the page runs from a clone's root
    script = []
    for n, (body, _) in enumerate(runs):
        # a progress bar may leave its line open: each marker starts a line of its own
        script += [f"printf '\\n{MARK} {n}\\n'", body, f"printf '\\n{MARK} {n} rc=%s\\n' $?"]
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]), "COLUMNS": "100",
           "NO_COLOR": "1", "TERM": "dumb"}
    done = subprocess.run(["bash", "-c", "\n".join(script)], cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, stdin=subprocess.DEVNULL, timeout=900)
    merged = done.stdout  # stdout and stderr in one stream, in the order a terminal shows them
    parts = re.split(rf"^{MARK} (\d+)(?: rc=(\d+))?$", merged, flags=re.M)
    by_block: dict[int, str] = {}
    codes: dict[int, int] = {}
    for i in range(1, len(parts) - 2, 3):
        n, rc, text = int(parts[i]), parts[i + 1], parts[i + 2]
        if rc is None:
            by_block[n] = text
        else:
            codes[n] = int(rc)
    assert sorted(codes) == list(range(len(runs))), merged[-3000:]
    for n, (body, shown) in enumerate(runs):
        expect = int(m.group(1)) if (m := re.search(r"# exits (\d+)", body)) else 0
        assert codes[n] == expect, f"block {n} ({body.strip()[:80]}) exited {codes[n]}:\n{by_block.get(n, '')[-3000:]}"
        if shown is not None:
            missing = unshown(shown, by_block.get(n, ""))
            assert missing is None, f"block {n} ({body.strip()[:80]}) did not print {missing!r}; it printed:\n{by_block.get(n, '')[-4000:]}"
