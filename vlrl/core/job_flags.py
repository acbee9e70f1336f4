"""The flags every long job shares (``--force``, ``--retry-quarantined``, ``--max-consecutive-failures``).

Declared once, as ``Annotated`` types, so each command spells them the same way with the same help,
and :func:`vlrl.core.jobs.run_command_job` reads them from the command's parameters. Kept free of
heavy imports: command modules import it at load time and ``vlrl --help`` must stay fast.
"""

from __future__ import annotations

from typing import Annotated

import typer

Force = Annotated[bool, typer.Option("--force", help="Start over: remove this job's earlier outputs in OUT first.")]
RetryQuarantined = Annotated[bool, typer.Option("--retry-quarantined", help="Process records quarantined by earlier runs again.")]
MaxConsecutiveFailures = Annotated[int, typer.Option("--max-consecutive-failures",
                                                     help="Stop after this many backend failures in a row (0: never).")]
