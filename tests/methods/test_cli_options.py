"""The shared long-job options (:func:`vlrl.methods.options.long_job`) and the shape of the commands.

``long_job`` builds the wrapper typer reads the options from, so these tests go through typer itself
(a toy app and the real ``vlrl`` app), not only through ``inspect``.
"""

from __future__ import annotations

import inspect

import pytest
import typer
from typer.testing import CliRunner

from vlrl.methods.options import IMAGE_FLAGS, JOB_FLAGS, SHARED, JobFlags, long_job

runner = CliRunner()


SEEN: list[JobFlags] = []  # module-level, so it is not among the toy command's locals()


def _toy(**decorator) -> tuple[typer.Typer, list[JobFlags]]:
    SEEN.clear()

    @long_job(**decorator) if decorator else long_job
    def toy(out: str = typer.Option(..., "--out", help="Where."),
            quiet: bool = typer.Option(False, "--quiet", help="Hush."),
            job: JobFlags = JobFlags()) -> None:
        SEEN.append(job)
        typer.echo(sorted(job.params(locals())))

    app = typer.Typer()
    app.command("toy")(toy)
    app.command("other")(lambda: None)  # a group, so "toy" is a sub-command as in vlrl
    return app, SEEN


def test_the_wrapper_signature_is_the_own_options_then_the_shared_ones():
    app, _ = _toy()
    names = list(inspect.signature(app.registered_commands[0].callback).parameters)
    assert names == ["out", "quiet", *JOB_FLAGS, *IMAGE_FLAGS]


def test_typer_parses_the_shared_options_and_the_command_gets_them_as_job():
    app, seen = _toy()
    res = runner.invoke(app, ["toy", "--out", "o", "--force", "--max-consecutive-failures", "3",
                              "--max-image-pixels", "0", "--resize-max-pixels", "50176"])
    assert res.exit_code == 0, res.output
    assert seen == [JobFlags(force=True, max_consecutive_failures=3, max_image_pixels=0, resize_max_pixels=50176)]
    # the command's parameters hold the shared ones by name and not the JobFlags object itself
    assert res.output.strip() == str(sorted(["out", "quiet", *JOB_FLAGS, *IMAGE_FLAGS]))


def test_defaults_and_help_are_the_shared_ones():
    app, seen = _toy()
    assert runner.invoke(app, ["toy", "--out", "o"]).exit_code == 0
    assert seen == [JobFlags()]
    assert seen[0].max_consecutive_failures == 32
    page = runner.invoke(app, ["toy", "--help"], env={"COLUMNS": "250"}).output
    for option in SHARED.values():
        assert option.flag in page and option.help[:40] in page
    assert runner.invoke(app, ["toy", "--out", "o", "--max-image-pixels", "-1"]).exit_code == 2  # min=0 kept


def test_image_flags_off_help_overridden_and_placed_before_an_own_option():
    app, seen = _toy(image_flags=False, before="quiet", force="Start over: remove this shard only.")
    names = list(inspect.signature(app.registered_commands[0].callback).parameters)
    assert names == ["out", *JOB_FLAGS, "quiet"]
    page = runner.invoke(app, ["toy", "--help"], env={"COLUMNS": "250"}).output
    assert "Start over: remove this shard only." in page and SHARED["force"].help not in page
    assert "--max-image-pixels" not in page
    res = runner.invoke(app, ["toy", "--out", "o", "--retry-quarantined"])
    assert res.exit_code == 0, res.output
    assert seen[0].retry_quarantined and seen[0].params({"out": "o"}) == {
        "out": "o", "force": False, "retry_quarantined": True, "max_consecutive_failures": 32}


def test_misuse_fails_when_the_command_is_defined():
    with pytest.raises(TypeError, match="job: JobFlags"):
        long_job(lambda out="": None)
    with pytest.raises(TypeError, match="itself"):
        @long_job
        def twice(force: bool = False, job: JobFlags = JobFlags()) -> None: ...
    with pytest.raises(TypeError, match="no shared option"):
        long_job(image_flags=False, max_image_pixels="x")


def _commands():
    from vlrl.cli import app

    root = typer.main.get_command(app)

    def walk(cmd, path):
        subs = getattr(cmd, "commands", None)
        if subs is None:
            yield path, cmd
            return
        for name, sub in subs.items():
            yield from walk(sub, [*path, name])

    return list(walk(root, []))


def test_commands_are_module_level_functions():
    """Commands are plain functions a reader can find and import, not closures inside ``register``
    (the ``bench`` group is excepted while its commands move to their own package)."""
    for path, cmd in _commands():
        if path[0] in ("bench", "train"):  # bench: moving to its own package; train: built from the option table
            continue
        fn = inspect.unwrap(cmd.callback)
        assert "<locals>" not in fn.__qualname__, (path, fn.__qualname__)


def test_every_long_job_command_spells_the_shared_options_alike():
    """A long job (a command that keeps a quarantine) has all three job flags, and
    ``--max-consecutive-failures`` has one help text and default everywhere; ``--force``'s and
    ``--retry-quarantined``'s help may say what exactly the command removes or retries."""
    long = [(p, c) for p, c in _commands() if any("--retry-quarantined" in o.opts for o in c.params)]
    assert len(long) >= 7
    for path, cmd in long:
        options = {o.opts[0]: o for o in cmd.params}
        assert {"--force", "--retry-quarantined", "--max-consecutive-failures"} <= set(options), path
        mcf = options["--max-consecutive-failures"]
        assert (mcf.help, mcf.default) == (SHARED["max_consecutive_failures"].help, 32), path
