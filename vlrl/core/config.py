"""Settings files people write by hand: bounded YAML, numbers as numbers, dotted ``a.b=value`` paths.

Recipes (``vlrl train``) and reward settings files (``vlrl reward score --settings-file``) are YAML
written by people and sometimes by other tools, so they are read with one loader that refuses alias
bombs and oversized documents, reads ``1e-6`` as the float it means, and sets dotted override paths.
"""

from __future__ import annotations

import re
from typing import Any

import yaml

MAX_YAML_ALIASES = 64
MAX_YAML_NODES = 200_000
"""Nodes a document may have once every alias is expanded (a large recipe has a few thousand)."""
MAX_RECIPE_BYTES = 1_000_000


class BoundedLoader(yaml.SafeLoader):
    """SafeLoader that refuses documents with many aliases, or whose aliases expand to too many
    nodes: PyYAML shares aliased nodes, but every walk over the loaded object (overrides,
    ``yaml_numbers``, deepcopy, ``to_dict``) expands them, so a "billion laughs" recipe of a few
    hundred bytes would otherwise exhaust memory. Counting aliases alone is not enough: 60 aliases,
    each naming a list of three of the previous one, expand to 3^21 nodes. So the composed node
    graph's expanded size is counted (each shared node once, memoised, so counting costs as much
    as the document's text) before anything is constructed, and a recursive alias is refused."""

    def compose_node(self, parent, index):  # noqa: ANN001 - PyYAML's signature
        if self.check_event(yaml.AliasEvent):
            self._vlrl_aliases = getattr(self, "_vlrl_aliases", 0) + 1
            if self._vlrl_aliases > MAX_YAML_ALIASES:
                raise yaml.YAMLError(f"more than {MAX_YAML_ALIASES} YAML aliases (*name); write the values out")
        return super().compose_node(parent, index)

    def compose_document(self):  # noqa: ANN201 - PyYAML's signature
        node = super().compose_document()
        n = expanded_nodes(node, MAX_YAML_NODES)
        if n > MAX_YAML_NODES:
            raise yaml.YAMLError(f"the YAML aliases (*name) expand to more than {MAX_YAML_NODES:,} nodes; "
                                 "write the values out")
        return node


def expanded_nodes(root: yaml.Node, limit: int) -> int:
    """How many nodes ``root`` stands for with every alias expanded, stopping once past ``limit``
    (returns ``limit + 1`` then, and for a recursive alias, which expands forever)."""
    sizes: dict[int, int] = {}
    on_path: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, done = stack.pop()
        key = id(node)
        if done:
            kids = _children(node)
            total = 1 + sum(sizes[id(k)] for k in kids)
            sizes[key] = min(total, limit + 1)
            on_path.discard(key)
            continue
        if key in sizes:
            continue
        if key in on_path:
            return limit + 1  # an alias inside its own anchor
        on_path.add(key)
        stack.append((node, True))
        stack.extend((k, False) for k in _children(node) if id(k) not in sizes)
    return sizes[id(root)]


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [x for kv in node.value for x in kv]
    return []


def safe_yaml(text: str):
    """``yaml.safe_load`` with bounded aliases and size (recipes and override values)."""
    if len(text) > MAX_RECIPE_BYTES:
        raise yaml.YAMLError(f"document is {len(text)} bytes; recipes are limited to {MAX_RECIPE_BYTES}")
    return yaml.load(text, Loader=BoundedLoader)  # noqa: S506 - a SafeLoader subclass


_NUM_RE = re.compile(r"^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)$")


def yaml_numbers(obj: Any) -> Any:
    """PyYAML reads ``1e-6`` (no dot) as a string; recipes and overrides mean a float."""
    if isinstance(obj, str) and _NUM_RE.match(obj.strip()):
        return float(obj)
    if isinstance(obj, list):
        return [yaml_numbers(x) for x in obj]
    if isinstance(obj, dict):
        return {k: yaml_numbers(v) for k, v in obj.items()}
    return obj


def set_dotted(doc: dict[str, Any], parts: list[str], value: Any) -> None:
    """Set ``doc[a][b]... = value`` for ``parts = [a, b, ...]`` (list items by index), creating mappings."""
    node = doc
    for p in parts[:-1]:
        if isinstance(node, list):
            node = node[int(p)]
            continue
        if not isinstance(node.get(p), (dict, list)):
            node[p] = {}
        node = node[p]
    if isinstance(node, list):
        node[int(parts[-1])] = value
    else:
        node[parts[-1]] = value
