"""The command-line options every long job shares, the :func:`long_job` decorator that adds them to
a command, and how such a command ends on a dead backend or a bad input.

Why here and not in :mod:`vlrl.cli`: each method registers its own commands
(``vlrl/methods/<name>/commands.py``), and methods sit below the CLI in the layers
(``.importlinter``), so the options they share must live at the methods layer or lower; the core is
kept free of typer. ``vlrl/cli`` imports them from here too (``vlrl caption``). This module
imports only the core (a contract in ``.importlinter`` says so), and nothing heavy at load time:
every command module imports it and ``vlrl --help`` must stay fast.

The five shared options:

* ``--force``, ``--retry-quarantined``, ``--max-consecutive-failures`` (the job flags, read by
  :func:`vlrl.core.jobs.run_command_job`);
* ``--max-image-pixels`` (the decompression-bomb limit: refuse a file whose header declares more
  pixels) and ``--resize-max-pixels`` (the Qwen resize budget: shrink decoded images to at most this
  many pixels). These two once shared the name ``--max-pixels`` with different meanings on
  different commands, so a huge legitimate scan could not be let through on purpose; they are
  applied with :func:`vlrl.core.images.image_limits_of`, which reaches every image the command opens.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Annotated, Any, TypeVar

import typer

from vlrl.core.jobs import DEFAULT_MAX_CONSECUTIVE_FAILURES

MAX_IMAGE_PIXELS_HELP = ("Decompression-bomb limit: refuse images declaring more pixels (default 89478485, PIL's; "
                         "raise it for huge scans; 0: no limit).")
RESIZE_MAX_PIXELS_HELP = "Qwen resize budget: images are resized to at most this many pixels while loading."


@dataclass(frozen=True)
class SharedOption:
    """One shared option: its parameter's type and default, and how typer spells it."""

    type: Any
    default: Any
    flag: str
    help: str
    settings: dict[str, Any] = field(default_factory=dict)  # further typer.Option settings (min=...)

    def annotated(self, help: str | None = None) -> Any:
        return Annotated[self.type, typer.Option(self.flag, help=self.help if help is None else help, **self.settings)]


SHARED: dict[str, SharedOption] = {
    "force": SharedOption(bool, False, "--force", "Start over: remove this job's earlier outputs in OUT first."),
    "retry_quarantined": SharedOption(bool, False, "--retry-quarantined", "Process records quarantined by earlier runs again."),
    "max_consecutive_failures": SharedOption(int, DEFAULT_MAX_CONSECUTIVE_FAILURES, "--max-consecutive-failures",
                                             "Stop after this many backend failures in a row (0: never)."),
    "max_image_pixels": SharedOption(int | None, None, "--max-image-pixels", MAX_IMAGE_PIXELS_HELP, {"min": 0}),
    "resize_max_pixels": SharedOption(int | None, None, "--resize-max-pixels", RESIZE_MAX_PIXELS_HELP, {"min": 1}),
}
"""The shared options by parameter name, in the order :func:`long_job` adds them."""

JOB_FLAGS = ("force", "retry_quarantined", "max_consecutive_failures")
IMAGE_FLAGS = ("max_image_pixels", "resize_max_pixels")

# For commands that take only the image flags (not long jobs), or that declare one of them themselves.
MaxImagePixels = SHARED["max_image_pixels"].annotated()
ResizeMaxPixels = SHARED["resize_max_pixels"].annotated()


@dataclass(frozen=True)
class JobFlags:
    """The shared options one run of a command was given (its ``job`` parameter, filled by :func:`long_job`)."""

    force: bool = False
    retry_quarantined: bool = False
    max_consecutive_failures: int = DEFAULT_MAX_CONSECUTIVE_FAILURES
    max_image_pixels: int | None = None
    resize_max_pixels: int | None = None
    declared: tuple[str, ...] = JOB_FLAGS + IMAGE_FLAGS  # the options the command has (its --help lists them)

    def params(self, command_locals: dict[str, Any]) -> dict[str, Any]:
        """The command's parameters (``locals()`` at its top) with the shared options among them,
        as :func:`job_command` reads them: the same keys a command declaring them itself would have,
        so a job's identity does not depend on how its options were declared."""
        own = {k: v for k, v in command_locals.items() if v is not self}
        return {**own, **{name: getattr(self, name) for name in self.declared}}


F = TypeVar("F", bound=Callable[..., Any])


def long_job(fn: F | None = None, *, image_flags: bool = True, before: str | None = None, **help: str) -> Any:
    """Give a command the shared long-job options; use as ``@long_job`` or ``@long_job(...)``.

    The command declares its own options and one parameter ``job: JobFlags``; typer sees the own
    options followed by the shared ones (the wrapper's ``__signature__``), and the wrapper hands the
    shared values to the command as ``job``. Options:

    * ``image_flags=False``: only the three job flags (for a command that spells its image flags
      its own way);
    * ``before="name"``: put the shared options in front of the command's own ``name`` option
      rather than last, so an existing command's ``--help`` keeps its order;
    * ``force="..."`` (any shared option's name): that option's help text for this command.
    """
    names = JOB_FLAGS + (IMAGE_FLAGS if image_flags else ())
    unknown = sorted(set(help) - set(names))
    if unknown:
        raise TypeError(f"long_job: no shared option {', '.join(unknown)} to give help for")

    def decorate(fn: F) -> F:
        sig = inspect.signature(fn, eval_str=True)  # typer needs the annotations as objects
        if "job" not in sig.parameters:
            raise TypeError(f"long_job: {fn.__name__} must take a `job: JobFlags` parameter")
        own = [p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in sig.parameters.values() if p.name != "job"]
        clash = sorted({p.name for p in own} & set(names))
        if clash:
            raise TypeError(f"long_job: {fn.__name__} declares the shared option(s) {', '.join(clash)} itself")
        shared = [inspect.Parameter(n, inspect.Parameter.KEYWORD_ONLY, default=SHARED[n].default,
                                    annotation=SHARED[n].annotated(help.get(n))) for n in names]
        at = len(own) if before is None else [p.name for p in own].index(before)
        params = [*own[:at], *shared, *own[at:]]

        @functools.wraps(fn)
        def command(**kwargs: Any) -> Any:
            flags = JobFlags(declared=names, **{n: kwargs.pop(n) for n in names})
            return fn(**kwargs, job=flags)

        command.__signature__ = sig.replace(parameters=params)  # type: ignore[attr-defined]
        command.__annotations__ = {p.name: p.annotation for p in params}
        return command  # type: ignore[return-value]

    return decorate if fn is None else decorate(fn)


@contextmanager
def command_errors(name: str) -> Iterator[None]:
    """How a long job's command ends on the two failures every job shares, in one line each: a
    backend that is down or keeps failing (:class:`~vlrl.core.jobs.BackendDown`) exits
    ``EXIT_FAILED``; a bad path, setting or input (``OSError``/``ValueError``, credentials redacted)
    exits ``EXIT_USAGE``."""
    from vlrl.core.jobs import EXIT_FAILED, EXIT_USAGE, BackendDown
    from vlrl.core.redact import redact

    try:
        yield
    except BackendDown as e:
        typer.echo(f"vlrl {name}: {e}", err=True)
        raise typer.Exit(EXIT_FAILED) from None
    except (OSError, ValueError) as e:
        typer.echo(f"vlrl {name}: {redact(e)}", err=True)
        raise typer.Exit(EXIT_USAGE) from None


def job_command(name: str, out: Any, params: dict[str, Any], fn: Callable[[], Any], **job: Any) -> Any:
    """:func:`vlrl.core.jobs.run_command_job` for the command ``vlrl NAME``, ending as
    :func:`command_errors` says."""
    from vlrl.core.jobs import run_command_job

    with command_errors(name):
        return run_command_job(name, out, params, fn, **job)
