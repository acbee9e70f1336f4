"""Field names of TRL's config dataclasses, read from source without importing ``trl``.

``import trl`` pulls in torch, transformers and peft (15-20 s); ``vlrl train check`` only needs the
names of the trainer keys TRL accepts, which are the annotated class attributes of ``GRPOConfig`` /
``SFTConfig`` and their bases. Those are followed through ``from X import Y`` statements (relative
ones and re-exports in ``TYPE_CHECKING`` blocks included) with :mod:`ast`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


def _module_ast(name: str) -> tuple[Any, str]:
    """(parsed source, package for relative imports) of a module, without importing it or its package."""
    import ast
    import importlib.util

    top = importlib.util.find_spec(name.split(".")[0])  # a top-level find_spec imports nothing
    if top is None or not top.origin:
        raise LookupError(name)
    if "." not in name:
        path, package = Path(top.origin), name
    else:
        stem = Path(top.origin).parent.joinpath(*name.split(".")[1:])
        is_pkg = (stem / "__init__.py").is_file()
        path, package = (stem / "__init__.py", name) if is_pkg else (stem.with_suffix(".py"), name.rsplit(".", 1)[0])
    return ast.parse(path.read_text(encoding="utf-8")), package


def _imported_from(tree: Any, package: str, name: str) -> tuple[str, str] | None:
    import ast

    for node in ast.walk(tree):  # TYPE_CHECKING blocks included: lazy packages re-export there
        if isinstance(node, ast.ImportFrom):
            for alias in node.names:
                if (alias.asname or alias.name) == name:
                    if node.level:
                        parts = package.split(".")
                        base = ".".join(parts[: len(parts) - node.level + 1])
                        return (f"{base}.{node.module}" if node.module else base), alias.name
                    return node.module or "", alias.name
    return None


def source_fields(module: str, cls: str, depth: int = 0) -> set[str]:
    """Dataclass field names of ``module.cls`` and its bases, read from source."""
    import ast

    if depth > 10:
        raise LookupError(f"{module}.{cls}: base classes nest too deep")
    tree, package = _module_ast(module)
    node = next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == cls), None)
    if node is None:  # re-exported from another module
        src = _imported_from(tree, package, cls)
        if src is None:
            raise LookupError(f"{module}.{cls}")
        return source_fields(*src, depth=depth + 1)
    fields: set[str] = set()
    for base in node.bases:
        bname = ast.unparse(base)
        if bname == "object":
            continue
        if any(isinstance(n, ast.ClassDef) and n.name == bname for n in tree.body):
            src: tuple[str, str] | None = (module, bname)
        else:
            src = _imported_from(tree, package, bname)
        if src is None:
            raise LookupError(f"{module}.{cls}: base {bname}")
        fields |= source_fields(*src, depth=depth + 1)
    for st in node.body:
        if isinstance(st, ast.AnnAssign) and isinstance(st.target, ast.Name) and "ClassVar" not in ast.unparse(st.annotation):
            fields.add(st.target.id)
    return fields
