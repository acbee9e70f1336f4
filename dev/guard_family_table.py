"""Write the family table of ``vlrl/rewards/guards/data/families.yaml`` into ``docs/guards.md`` (the block
that starts with ``| guard | family |``, and the count before it). ``tests/rewards/test_guard_table.py``
fails while the docs hold another table.

    .venv/bin/python dev/guard_family_table.py
"""

from __future__ import annotations

import re
from pathlib import Path

from vlrl.rewards.guards.table import markdown, table

DOC = Path(__file__).resolve().parents[1] / "docs" / "guards.md"
BLOCK = re.compile(r"The table, \d+ families:\n\n\| guard \| family \|.*?\n\n", re.S)


def main() -> None:
    text = DOC.read_text(encoding="utf-8")
    new = f"The table, {len(table().families)} families:\n\n{markdown()}\n"
    if not BLOCK.search(text):
        raise SystemExit(f"{DOC}: no family table found")
    DOC.write_text(BLOCK.sub(lambda _: new, text, count=1), encoding="utf-8")


if __name__ == "__main__":
    main()
