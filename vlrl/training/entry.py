"""What the training entry points share: one table of options, one dispatch, and how they end.

``vlrl train grpo|ptst|sft|check`` (typer, in :mod:`vlrl.cli.train`) and ``train/grpo.py``,
``train/ptst.py``, ``train/sft.py`` (argparse, files for ``accelerate launch``) are built from the
same :data:`OPTIONS` and :data:`COMMANDS`, so a flag cannot exist in one and not the other. Both run
:func:`train_command`: load the recipe, :func:`run` it by its method, and end the same way: the
metrics as JSON on standard output, or one line on standard error and a non-zero exit (2: the
recipe or the folder is wrong; 1: training ran but produced nothing useful, e.g. no reward signal).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import sys
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

TRAIN_METHODS = ("grpo", "ptst", "sft")


@dataclass(frozen=True)
class Option:
    """One argument of the training commands, declared once for typer and argparse."""

    name: str
    """The parameter name the command receives."""
    flags: tuple[str, ...]
    """``("--recipe", "-r")``; empty for the positional ``key=value`` overrides."""
    help: str
    kind: str = "value"
    """``value`` (a required string), ``switch`` (``--x/--no-x``), ``flag`` (``--x``), ``rest`` (positionals)."""
    default: Any = None
    commands: tuple[str, ...] = (*TRAIN_METHODS, "check")
    """The commands that take it."""


OPTIONS = (
    Option("recipe", ("--recipe", "-r"), "YAML recipe (train/recipes/...)."),
    Option("overrides", (), "key=value overrides, YAML-parsed: output_dir=DIR trainer.learning_rate=1e-5 model.lora=null",
           kind="rest"),
    Option("resume", ("--resume",), "Continue from the newest checkpoint in output_dir.", kind="switch", default=True,
           commands=("grpo", "ptst")),
    Option("force", ("--force",), "Continue in an output_dir whose recipe.resolved.json differs from this recipe.",
           kind="flag", default=False, commands=TRAIN_METHODS),
    Option("probe", ("--probe",), "Probe reward backends and required packages (--no-probe: only what the recipe says, "
           "e.g. on a machine without the servers).", kind="switch", default=True, commands=("check",)),
)

COMMANDS = {
    "grpo": "GRPO on a VLM from a recipe (also `accelerate launch train/grpo.py --recipe ...`).",
    "ptst": "PTST: GRPO stages with growing length caps and shrinking groups (Vision-R1).",
    "sft": "Supervised fine-tuning of a VLM (e.g. on `vlrl data cold-start` output).",
    "check": "Validate a recipe (geometry, values, rewards, dataset columns, stages) and probe what it needs (reward "
             "backends answer, packages installed) without loading the policy.",
}


def options_for(command: str) -> list[Option]:
    """The options ``command`` takes, in the table's order."""
    return [o for o in OPTIONS if command in o.commands]


def parse_args(argv: list[str] | None, *, method: str) -> argparse.Namespace:
    """``train/<method>.py``'s arguments, built from :data:`OPTIONS` exactly as ``vlrl train <method>``'s."""
    parser = argparse.ArgumentParser(prog=f"train/{method}.py", description=COMMANDS[method])
    for o in options_for(method):
        if o.kind == "rest":
            parser.add_argument(o.name, nargs="*", help=o.help)
        elif o.kind == "switch":
            parser.add_argument(*o.flags, dest=o.name, action=argparse.BooleanOptionalAction, default=o.default,
                                help=o.help)
        elif o.kind == "flag":
            parser.add_argument(*o.flags, dest=o.name, action="store_true", help=o.help)
        else:
            parser.add_argument(*o.flags, dest=o.name, required=True, help=o.help)
    return parser.parse_args(argv)


def train_command(method: str, recipe: str, overrides: list[str] | None = None, resume: bool = True,
                  force: bool = False) -> None:
    """The body of ``vlrl train <method>`` and ``train/<method>.py``: load the recipe with its
    overrides, :func:`run` it as ``method`` and :func:`report` the metrics (errors: one line, exit 2/1)."""
    from vlrl.training.recipe import load_recipe

    warnings_once()
    with one_line_errors():
        metrics = run(as_method(load_recipe(recipe, overrides or []), method), resume=resume, force=force)
    report(metrics)


def main(method: str, argv: list[str] | None = None) -> None:
    """A ``train/<method>.py`` script: its arguments from :data:`OPTIONS`, then :func:`train_command`."""
    train_command(method, **vars(parse_args(argv, method=method)))


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
    dispatch behind ``vlrl train grpo|ptst|sft``, the ``train/*.py`` files and the demos' stages.
    ``resume`` applies to the RL methods (an SFT run always continues a killed run from its newest
    checkpoint)."""
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
    from vlrl.rewards.remote import RemoteRewardFailed
    from vlrl.training.recipe import RecipeError
    from vlrl.training.runstate import RunFailed

    try:
        yield
    except RecipeError as e:
        sys.stderr.write(f"error: {e}\n")
        raise SystemExit(2) from None
    except (RunFailed, RemoteRewardFailed) as e:
        sys.stderr.write(f"error: training stopped: {e}\n")
        raise SystemExit(1) from None
