"""Every third-party module that vlrl/ imports comes from a distribution setup.cfg declares.

A module that is imported but undeclared works on the machine where it happens to be installed (as
a dependency of a dependency) and fails on a clean install, or after that dependency drops it. The
check reads every ``import`` with ``ast`` (imports inside functions included: lazy imports are still
imports), maps each top-level module to the distributions that provide it
(``importlib.metadata.packages_distributions``), and requires one of them in ``install_requires`` or
an extra.
"""

from __future__ import annotations

import ast
import configparser
import importlib.metadata
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

ALLOWED_UNDECLARED = {
    # Brought by the integration that calls vlrl, never installed for it: verl passes OmegaConf
    # configs to vlrl.training.verl, which converts them when omegaconf is importable.
    "omegaconf": "verl's own dependency; imported only when verl hands vlrl its configs",
    # Only imported when a trainer already runs vLLM (trainer.use_vllm, which `vlrl train check`
    # requires to be installed); GPU servers bring their own vLLM build matched to their torch.
    "vllm": "the serving stack's own build; imported only when trainer.use_vllm is on",
}


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def declared_distributions() -> set[str]:
    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "setup.cfg")
    blocks = [cfg.get("options", "install_requires")] + [v for _, v in cfg.items("options.extras_require")]
    names = set()
    for block in blocks:
        for line in block.splitlines():
            line = line.split("#", 1)[0].strip()
            if line:
                names.add(_norm(re.match(r"[A-Za-z0-9][A-Za-z0-9._-]*", line).group(0)))
    return names


def imported_modules() -> dict[str, str]:
    """Top-level module → the first file that imports it."""
    found: dict[str, str] = {}
    for path in sorted((ROOT / "vlrl").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                found.setdefault(name.split(".")[0], str(path.relative_to(ROOT)))
    return found


def test_every_third_party_import_is_declared():
    declared = declared_distributions()
    providers = importlib.metadata.packages_distributions()
    missing = []
    for module, where in sorted(imported_modules().items()):
        if module == "vlrl" or module in sys.stdlib_module_names or module in ALLOWED_UNDECLARED:
            continue
        dists = {_norm(d) for d in providers.get(module, [])}
        if not dists & declared:
            missing.append(f"{module} (imported in {where}; provided by {sorted(dists) or 'nothing installed'})")
    assert not missing, "imported but not declared in setup.cfg:\n  " + "\n  ".join(missing)


def test_the_allow_list_holds_only_what_is_still_imported():
    stale = set(ALLOWED_UNDECLARED) - set(imported_modules())
    assert not stale, f"no longer imported, remove from ALLOWED_UNDECLARED: {sorted(stale)}"
