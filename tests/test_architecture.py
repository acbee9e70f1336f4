"""The layer rule (core -> captioning | judge -> rewards -> methods -> training | evaluation -> demos -> cli),
no cycles, and methods that never import each other: checked by import-linter against ``.importlinter``.

Lazy imports inside functions count: grimp reads every import statement in a module.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _lint_imports(root: Path = ROOT) -> subprocess.CompletedProcess:
    """Run import-linter on the ``vlrl`` package under ``root`` (that copy first on the path)."""
    exe = Path(sys.executable).with_name("lint-imports")
    cmd = [str(exe)] if exe.exists() else [shutil.which("lint-imports") or "lint-imports"]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep))
    return subprocess.run([*cmd, "--config", str(root / ".importlinter"), "--no-cache"], cwd=root, env=env,
                          capture_output=True, text=True)


def test_imports_run_one_way():
    run = _lint_imports()
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    assert "0 broken" in run.stdout


def test_the_check_catches_an_upward_import(tmp_path):
    """The contract is live: a core module importing a method breaks it.

    The probe module goes into a copy of the package, never into the source tree: a test run that
    is killed half way must not leave a module behind in ``vlrl/core``, and tests running in
    parallel must not see it."""
    shutil.copytree(ROOT / "vlrl", tmp_path / "vlrl", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / ".importlinter", tmp_path / ".importlinter")
    (tmp_path / "vlrl" / "core" / "_layer_probe.py").write_text(
        "def f():\n    from vlrl.methods.caprl import reward  # noqa: F401\n")
    run = _lint_imports(tmp_path)
    assert run.returncode != 0
    assert "vlrl.core is not allowed to import vlrl.methods" in run.stdout
    assert not (ROOT / "vlrl" / "core" / "_layer_probe.py").exists()


def test_rewards_are_found_without_a_list():
    from vlrl.rewards import describe_rewards

    rows = {r["name"]: r for r in describe_rewards()}
    assert {"caprl_qa", "rubicap_rubric", "hfrrf", "guards"} <= set(rows)
    assert rows["caprl_qa"]["module"] == "vlrl.methods.caprl.reward"
    assert rows["caprl_qa"]["required_columns"] == ["questions"]
    assert rows["rubicap_rubric"]["required_columns"] == ["rubrics"]


def _docs() -> list[Path]:
    """The README and every page of docs/."""
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def test_docs_name_only_files_that_exist():
    """Every repository path the README and docs name in backticks exists (files move with the layout;
    a doc pointing at an old place sends a reader nowhere), and no doc links outside the repository."""
    import re

    tops = sorted(p.name for p in ROOT.iterdir() if not p.name.startswith(".") and p.name not in ("runs", ".venv"))
    named = re.compile(r"`((?:" + "|".join(map(re.escape, tops)) + r")(?:/[A-Za-z0-9_.\-/]*)?)`")
    docs = _docs()
    missing = [f"{doc.name}: {m.group(1)}" for doc in docs for m in named.finditer(doc.read_text(encoding="utf-8"))
               if not (ROOT / m.group(1).rstrip("/")).exists()]
    outside = [f"{doc.name}: {m.group(0)}" for doc in docs
               for m in re.finditer(r"\]\((?:\.\./|/)[^)]*\)", doc.read_text(encoding="utf-8"))]
    assert not missing, missing
    assert not outside, outside


def test_code_and_docs_cite_nothing_outside_the_repository():
    """Docstrings and docs may point a reader at repository files only: a note kept outside the
    checkout is not there for anyone who clones it."""
    import re

    files = [ROOT / "README.md", *(ROOT / "docs").glob("*.md"), *(ROOT / "vlrl").rglob("*.py"),
             *(ROOT / "vlrl").rglob("*.jinja")]
    pattern = re.compile(r"(?:\.\./shared|\bshared/(?:notes|reference|STYLE)|/work/)")
    hits = [f"{f.relative_to(ROOT)}: {m.group(0)}" for f in files for m in pattern.finditer(f.read_text(encoding="utf-8"))]
    assert not hits, hits


def _anchors(markdown: str) -> set[str]:
    """The anchors GitHub gives a page's ATX headings (``## ...``; the docs use no other kind): the text
    of links only, closing ``#`` dropped, lower case, every character but letters, marks, digits, ``_``,
    ``-`` and spaces dropped, spaces to hyphens, and a repeated anchor numbered (``-1``, ``-2``, until it
    is new). Fenced code (```` ``` ```` or ``~~~``) holds no headings."""
    import re
    import unicodedata

    def keep(ch: str) -> bool:
        return ch in "-_ " or unicodedata.category(ch)[0] in "LM" or unicodedata.category(ch) == "Nd"

    out: set[str] = set()
    fence = None
    for line in markdown.splitlines():
        if (m := re.match(r" {0,3}(```|~~~)", line)) and (fence is None or m.group(1) == fence):
            fence = m.group(1) if fence is None else None
            continue
        if fence or not (m := re.match(r" {0,3}#{1,6} +(.+?)(?: +#+)? *$", line)):
            continue
        text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", m.group(1))  # a link's text only
        slug = "".join(ch for ch in text.lower() if keep(ch)).replace(" ", "-")
        anchor, n = slug, 0
        while anchor in out:
            n += 1
            anchor = f"{slug}-{n}"
        out.add(anchor)
    return out


def test_links_between_docs_reach_a_file_and_a_heading():
    """Every relative link of the README and docs names a file that exists and, after ``#``, a heading
    of that file: a section moved or renamed leaves no link that lands at the top of a long page."""
    import re

    broken = []
    headings: dict[Path, set[str]] = {}  # each page's anchors, read once
    for doc in _docs():
        for target in re.findall(r"\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)", doc.read_text(encoding="utf-8")):
            if re.match(r"[a-z]+:", target):
                continue  # http:, https:, mailto:
            path, _, anchor = target.partition("#")
            dest = (doc.parent / path).resolve() if path else doc
            if not dest.exists():
                broken.append(f"{doc.name}: {target} (no such file)")
                continue
            if anchor and dest.suffix == ".md":
                if dest not in headings:
                    headings[dest] = _anchors(dest.read_text(encoding="utf-8"))
                if anchor not in headings[dest]:
                    broken.append(f"{doc.name}: {target} (no such heading)")
    assert not broken, broken


def test_the_anchor_rule_gives_githubs_anchors():
    """The anchors GitHub writes for these headings (github-slugger's rule), so the link test above
    neither passes nor fails for the wrong reason."""
    page = "\n".join(["## Where the guards stand: `vlrl reward guard-eval`", "## Foo ##", "# हिंदी शीर्षक", "## x², y",
                      "```", "## in a fence", "```", "~~~", "# also fenced", "~~~", "## Same", "## Same", "## Same-1",
                      "### A [linked](x.md) heading"])
    assert _anchors(page) == {"where-the-guards-stand-vlrl-reward-guard-eval", "foo", "हिंदी-शीर्षक", "x-y",
                              "same", "same-1", "same-1-1", "a-linked-heading"}
