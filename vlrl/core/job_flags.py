"""The flags every long job shares (``--force``, ``--retry-quarantined``, ``--max-consecutive-failures``),
and how its command ends on a dead backend or a bad input (:func:`command_errors`, :func:`job_command`).

Declared once, as ``Annotated`` types, so each command spells them the same way with the same help,
and :func:`vlrl.core.jobs.run_command_job` reads them from the command's parameters. Kept free of
heavy imports: command modules import it at load time and ``vlrl --help`` must stay fast.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Annotated, Any

import typer

Force = Annotated[bool, typer.Option("--force", help="Start over: remove this job's earlier outputs in OUT first.")]
RetryQuarantined = Annotated[bool, typer.Option("--retry-quarantined", help="Process records quarantined by earlier runs again.")]
MaxConsecutiveFailures = Annotated[int, typer.Option("--max-consecutive-failures",
                                                     help="Stop after this many backend failures in a row (0: never).")]


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
