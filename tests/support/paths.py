"""Where things are, for tests at any depth under ``tests/``: one place instead of ``parents[n]``."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures"
