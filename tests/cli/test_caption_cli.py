"""`vlrl caption` ends like every long command on an unwritable ``--out`` (finding 11 of #24): one
line and exit 2, never a traceback and exit 1."""

from __future__ import annotations

import os

import pytest

from tests.support.fake_openai import FakeOpenAI
from tests.support.long_commands import caption, run


def test_out_that_is_a_file_is_one_line_exit_two(tmp_path):
    with FakeOpenAI() as srv:
        argv = caption(tmp_path, srv.spec())
        (tmp_path / "out").write_text("not a folder")
        res = run(argv)
    assert res.returncode == 2, res.stderr[-2000:]
    assert "Traceback" not in res.stderr and res.stderr.strip().splitlines()[-1].startswith("vlrl caption:")


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only folders")
def test_read_only_out_is_one_line_exit_two(tmp_path):
    with FakeOpenAI() as srv:
        argv = caption(tmp_path, srv.spec())
        (tmp_path / "out").mkdir()
        (tmp_path / "out").chmod(0o500)
        try:
            res = run(argv)
        finally:
            (tmp_path / "out").chmod(0o700)
    assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr[-2000:]
