"""No module under ``vlrl/`` uses another module's underscore names.

An underscore name is a module's own business: it may change or vanish without notice. When two
modules need the same helper, the helper gets a public name in the module that owns it (or moves to
the layer both import). Two ways of reaching a private name are caught:

* ``from vlrl.x import _helper`` (and any import of a module whose own name starts with ``_``);
* ``from vlrl import x`` / ``import vlrl.x as x`` followed by ``x._helper``.

Aliasing a public name to a private one (``import retry_quarantined as _retry_quarantined``) is
fine: the source module's name is public. Dunders (``__version__``) are public by convention.
"""

from __future__ import annotations

import ast

from tests.support.paths import ROOT

# (file, name) pairs allowed to cross a module boundary, each with the reason. Empty today; add to
# it only with a reason a reviewer would accept.
ALLOWED: dict[tuple[str, str], str] = {}


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def private_uses(source: str) -> list[tuple[int, str]]:
    """(line, what) for every use of another vlrl module's underscore name in ``source``."""
    tree = ast.parse(source)
    found: list[tuple[int, str]] = []
    modules: set[str] = set()  # local names bound to vlrl modules (or names imported from them)
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").startswith("vlrl")):
            mod = node.module or ""
            if any(_private(part) for part in mod.split(".")):
                found.append((node.lineno, mod))
            for alias in node.names:
                if _private(alias.name):
                    found.append((node.lineno, f"{mod}.{alias.name}"))
                modules.add(alias.asname or alias.name)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("vlrl"):
                    if any(_private(part) for part in alias.name.split(".")):
                        found.append((node.lineno, alias.name))
                    modules.add(alias.asname or alias.name.split(".")[0])
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and _private(node.attr)
                and isinstance(node.value, ast.Name) and node.value.id in modules):
            found.append((node.lineno, f"{node.value.id}.{node.attr}"))
    return found


def test_the_check_sees_each_way_of_reaching_a_private_name():
    src = (
        "from vlrl.core.jobs import _helper\n"
        "from vlrl.core import _private_mod\n"
        "from vlrl.core import openai_wire\n"
        "import vlrl.core.stats as stats\n"
        "from .sibling import _x\n"
        "x = openai_wire._parse(1) + stats._draw\n"
        "from vlrl.core.jobs import retry as _retry, __version__\n"
        "class A:\n    def f(self):\n        return self._own\n"
    )
    whats = sorted(w for _, w in private_uses(src))
    assert whats == sorted(["vlrl.core.jobs._helper", "vlrl.core._private_mod", "sibling._x",
                            "openai_wire._parse", "stats._draw"])


def test_no_module_under_vlrl_uses_another_modules_underscore_names():
    offences = []
    for path in sorted((ROOT / "vlrl").rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        for line, what in private_uses(path.read_text(encoding="utf-8")):
            if (rel, what) not in ALLOWED:
                offences.append(f"{rel}:{line} uses {what}")
    assert not offences, "give these helpers a public name in the module that owns them:\n" + "\n".join(offences)


def test_every_allowed_exception_is_still_needed():
    """A stale entry would let the next private import through unnoticed."""
    live = {(path.relative_to(ROOT).as_posix(), what)
            for path in (ROOT / "vlrl").rglob("*.py")
            for _, what in private_uses(path.read_text(encoding="utf-8"))}
    assert set(ALLOWED) <= live, set(ALLOWED) - live
