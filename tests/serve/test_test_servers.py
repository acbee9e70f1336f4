"""The servers the tests start end with the test session, even a session killed with -9
(:func:`tests.support.servers.server_process`).

A vLLM server's engine runs in processes of its own; a session killed with -9 runs no cleanup, and those
processes used to live on (up to the 90-minute bound, about 2 GB each) and slow the next run. Here a
stand-in session starts a server that, like vLLM and Ray, starts a worker of its own and stops it on
SIGTERM, and the session is then killed with -9.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.paths import ROOT
from tests.support.servers import bounded

SERVER = """
import signal, subprocess, sys, time
worker = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
signal.signal(signal.SIGTERM, lambda *_: (worker.terminate(), worker.wait(), sys.exit(0)))
open(sys.argv[1] + ".part", "w").write(str(worker.pid))
__import__("os").replace(sys.argv[1] + ".part", sys.argv[1])
time.sleep(600)
"""

SESSION = """
import sys, time
from pathlib import Path
from tests.support.servers import server_process
pid_file = Path(sys.argv[1])
cmd = [sys.executable, "-c", sys.argv[2], str(pid_file)]
with server_process(cmd, {}, pid_file.with_suffix(".log"), pid_file.exists, "stand-in", 60):
    print("ready", flush=True)
    time.sleep(600)
"""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie (ended, not yet reaped by its new parent) is not alive
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


@pytest.mark.skipif(bounded(["true"]) == ["true"], reason="no setpriv with --pdeathsig (util-linux 2.33+, Linux)")
def test_a_server_and_its_workers_end_when_the_session_is_killed(tmp_path):
    pid_file = tmp_path / "worker.pid"
    session = subprocess.Popen([sys.executable, "-c", SESSION, str(pid_file), SERVER], cwd=ROOT,
                               stdout=subprocess.PIPE, text=True, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    try:
        assert session.stdout.readline().strip() == "ready"
        worker = int(pid_file.read_text())
        assert _alive(worker)
        session.send_signal(signal.SIGKILL)
        session.wait(timeout=10)
        deadline = time.monotonic() + 30
        while _alive(worker) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not _alive(worker), "the server's worker outlived the killed session"
    finally:
        session.kill()
        if pid_file.exists() and _alive(int(pid_file.read_text())):
            os.kill(int(pid_file.read_text()), signal.SIGKILL)
