"""What the training entry points share: their arguments, quieter logs, and how they end.

``train/grpo.py``, ``train/ptst.py`` and ``train/sft.py`` (files, for ``accelerate launch``) and
``vlrl train grpo|ptst|sft`` take the same arguments and end the same way: the metrics as JSON on
standard output, or one line on standard error and a non-zero exit (2: the recipe or the folder is
wrong; 1: training ran but produced nothing useful, e.g. no reward signal).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import sys
import warnings
from collections.abc import Iterator
from typing import Any


def parse_args(argv: list[str] | None, *, method: str, resume: bool = True) -> argparse.Namespace:
    """``--recipe FILE [--no-resume] [--force] [key=value ...]``, as ``vlrl train <method>`` takes them."""
    parser = argparse.ArgumentParser(prog=f"train/{method}.py", description=f"{method.upper()} from a vlrl recipe.")
    parser.add_argument("--recipe", "-r", required=True, help="YAML recipe (train/recipes/...).")
    parser.add_argument("overrides", nargs="*", help="key=value overrides: output_dir=DIR trainer.learning_rate=1e-5")
    if resume:
        parser.add_argument("--resume", action=argparse.BooleanOptionalAction, default=True,
                            help="Continue from the newest checkpoint in output_dir.")
    parser.add_argument("--force", action="store_true",
                        help="Continue in an output_dir whose recipe.resolved.json differs from this recipe.")
    return parser.parse_args(argv)


def warnings_once() -> None:
    """Log progress at INFO (a no-op where logging is already set up, as under ``vlrl``), and show each
    warning once: deprecation notices from transformers/TRL repeat for every trainer (every PTST
    stage) and every step, and one of each is enough to act on."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s", datefmt="%H:%M:%S")
    for category in (FutureWarning, DeprecationWarning, UserWarning):
        warnings.filterwarnings("once", category=category)


def as_method(recipe: Any, method: str) -> Any:
    """The recipe, to run as ``method``: a GRPO recipe may run staged (PTST) and a PTST recipe as one
    GRPO stage; anything else is refused with the command to use."""
    from vlrl.training.recipe import RecipeError

    if recipe.method != method:
        if {recipe.method, method} <= {"grpo", "ptst"}:
            recipe.method = method
        else:
            raise RecipeError(f"{recipe.source or 'recipe'}: this is a '{recipe.method}' recipe; run it with "
                              f"`vlrl train {recipe.method}` (train/{recipe.method}.py)")
    return recipe


def run(recipe: Any, *, resume: bool = True, force: bool = False) -> dict[str, Any]:
    """Train ``recipe`` by its method (``grpo``, ``ptst`` or ``sft``) and return the metrics: the one
    dispatch behind ``vlrl train grpo|ptst|sft`` and the demos' stages (the ``train/*.py`` files
    spell the same steps out, one method each). ``resume`` applies to the RL methods (an SFT run
    always starts from its recipe's model)."""
    from vlrl.training.recipe import METHODS, RecipeError

    if recipe.method not in METHODS:  # never fall through to SFT on a typo
        raise RecipeError(f"method {recipe.method!r} is unknown; use one of {METHODS}")
    if recipe.method == "grpo":
        from vlrl.training.grpo import run_grpo

        return run_grpo(recipe, resume=resume, force=force)
    if recipe.method == "ptst":
        from vlrl.training.ptst import run_ptst

        return run_ptst(recipe, resume=resume, force=force)
    from vlrl.training.sft import run_sft

    return run_sft(recipe, force=force)


def report(metrics: dict[str, Any]) -> None:
    """The entry point's result: the metrics as JSON on standard output."""
    sys.stdout.write(json.dumps(metrics, indent=2, default=str) + "\n")


@contextlib.contextmanager
def one_line_errors() -> Iterator[None]:
    """A bad recipe or folder, or a run that stopped for lack of signal, ends as one line and an exit code."""
    from vlrl.training.recipe import RecipeError
    from vlrl.training.runstate import RunFailed

    try:
        yield
    except RecipeError as e:
        sys.stderr.write(f"error: {e}\n")
        raise SystemExit(2) from None
    except RunFailed as e:
        sys.stderr.write(f"error: training stopped: {e}\n")
        raise SystemExit(1) from None
