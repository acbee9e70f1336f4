"""The ``vlrl`` console script: thin sub-commands over the library.

Each command group lives in its own module and only parses flags, builds library objects and
prints results; the logic lives in ``vlrl.*``. Heavy imports (torch, transformers, trl) happen
inside commands so ``vlrl --help`` is instant.

The verb groups (``data``, ``reward``, ``eval``, ``bench``, ...) are made here; each method adds its
own commands to them from ``vlrl/methods/<name>/commands.py`` (plain functions, added by its
``register(groups)``), found by walking ``vlrl.methods``, so a new method needs no edit in this
package. The options long jobs share come from :mod:`vlrl.methods.options` (``@long_job``).
"""

from __future__ import annotations

import importlib
import importlib.util
import logging
import os
import pkgutil

import typer

import vlrl.methods
from vlrl.bench import commands as bench
from vlrl.cli import caption, data, demo, eval, models, reward, serve, train

app = typer.Typer(
    name="vlrl",
    help="RL post-training for vision-language captioners: CapRL, RubiCap, Vision-R1.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
app.add_typer(models.app, name="models", help="Build offline tiny models for tests and demos.")
app.add_typer(data.app, name="data", help="Dataset builders: image checks, QA curation, rubrics, cold start.")
app.add_typer(reward.app, name="reward", help="Score, smoke-test and guard caption rewards.")
app.add_typer(train.app, name="train", help="GRPO / PTST / SFT training from YAML recipes.")
app.add_typer(eval.app, name="eval", help="Evaluations: Prism-style QA, arena, caption-QA, reasoning.")
app.add_typer(bench.app, name="bench", help="Benchmarks that print side-by-side ratios.")
app.add_typer(serve.app, name="serve", help="Serve a reward over HTTP for a fleet of trainers.")
caption.register(app)
demo.register(app)


def _register_methods() -> None:
    groups = {"data": data.app, "reward": reward.app, "eval": eval.app, "bench": bench.app, "train": train.app}
    for info in pkgutil.iter_modules(vlrl.methods.__path__):
        name = f"{vlrl.methods.__name__}.{info.name}.commands"
        if info.ispkg and importlib.util.find_spec(name) is not None:
            importlib.import_module(name).register(groups)


_register_methods()


@app.callback()
def _root(verbose: bool = typer.Option(False, "--verbose", "-v", help="Debug logging.")) -> None:
    level = logging.DEBUG if verbose else getattr(logging, os.environ.get("VLRL_LOG_LEVEL", "INFO"))
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s", datefmt="%H:%M:%S")
    from vlrl.core.redact import install_log_redaction

    install_log_redaction()
    show_warnings_once()  # a server error that echoes the API key never reaches the terminal or a log file
    for noisy in ("httpx", "httpx2", "httpcore", "httpcore2", "openai", "urllib3", "filelock"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


def show_warnings_once() -> None:
    """Each distinct warning (category and message) is printed once per process.

    Libraries under a training loop warn from inside ``warnings.catch_warnings`` blocks, and leaving
    such a block resets every registry Python uses to remember what it showed (the ``once`` action's
    included), so the same FutureWarning would print every step. The display function is what those
    blocks keep, so the dedup lives there.
    """
    import warnings

    show = warnings.showwarning
    if getattr(show, "_vlrl_once", False):
        return
    seen: set[tuple[type, str]] = set()

    def once(message, category, filename, lineno, file=None, line=None):  # noqa: ANN001 - warnings' signature
        key = (category, str(message))
        if key not in seen:
            seen.add(key)
            show(message, category, filename, lineno, file, line)

    once._vlrl_once = True  # type: ignore[attr-defined]
    warnings.showwarning = once


def _invoke(**kwargs) -> None:
    """Run the app; a backend that cannot be built at all (a missing model folder, a bad server
    address) is a one-line error with exit code 2, like every other bad input, not a traceback.
    Ctrl-C during a long job prints where it stopped and exits 130."""
    from vlrl.core.backends.base import BackendError
    from vlrl.core.jobs import EXIT_INTERRUPTED, EXIT_USAGE, INTERRUPTED
    from vlrl.core.redact import redact

    try:
        app(**kwargs)
    except BackendError as e:
        typer.echo(f"error: {redact(e)}", err=True)
        raise SystemExit(EXIT_USAGE) from None
    except SystemExit:
        if INTERRUPTED:  # Ctrl-C inside a long job: say where it stopped and how to resume
            typer.echo(INTERRUPTED[0], err=True)
            raise SystemExit(EXIT_INTERRUPTED) from None
        raise


def main() -> None:
    _invoke()


def run(*command: str, argv: list[str] | None = None) -> None:
    """Run ``vlrl <command...> <argv>`` in this process, ending as the console script does (the same
    one-line errors and exit codes), for Python callers that want a command rather than its library
    call. The ``train/*.py`` files (for ``accelerate launch``) do not come through here: they parse
    the same option table as ``vlrl train`` (:data:`vlrl.training.entry.OPTIONS`) and call the same
    dispatch without loading the CLI.
    """
    import sys

    args = list(sys.argv[1:] if argv is None else argv)
    _invoke(args=[*command, *args], prog_name="vlrl")
