"""How the demo tests run the real console script: its path and an offline environment."""

from __future__ import annotations

import os
import sys
from pathlib import Path

ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "OMP_NUM_THREADS": "1",
       "TOKENIZERS_PARALLELISM": "false"}


VLRL = str(Path(sys.executable).with_name("vlrl"))

FRESH_SEED = 3
"""The seed CI's quick demos run on: not seed 0, the seed the demos' choices (drop rate, learning
rate, per-step question draws, guards) were tuned on, so CI checks that those choices carry over."""
