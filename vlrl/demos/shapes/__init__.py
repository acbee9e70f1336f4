"""The shapes world behind ``vlrl demo``: synthetic scenes with known facts, tiny warm-started
models, and the CapRL loop run end to end on a CPU (see docs/demo.md)."""
