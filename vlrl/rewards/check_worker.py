"""One answer-checking worker process: JSON lines in on stdin, one verdict line out per request.

:mod:`vlrl.rewards.answer_check` starts these with ``python -m vlrl.rewards.check_worker`` (a plain
subprocess, not ``multiprocessing``, so a daemonic parent such as a verl or Ray worker may start it
too, and nothing re-imports the parent's ``__main__``). A worker serves one check at a time; the
parent kills a worker whose check overran its limit and starts another, so a pathological answer
never takes anyone else's check with it.

Protocol: the worker writes ``{"ready": true}`` once ``math_verify`` is imported (start-up never
counts against a check's limit), then for each request ``{"op": "equal" | "number", "args": [...]}``
one line ``{"value": ...}``.
"""

from __future__ import annotations

import json
import sys


def _die_with_parent() -> None:
    """Exit when the parent is gone, even mid-check: a parent killed with -9 runs no cleanup, and a
    pathological answer could otherwise compute for hours. A watchdog thread (sympy's loops are
    Python, so it gets its turn; numbers too big for that are refused before any arithmetic). Not
    the kernel's PR_SET_PDEATHSIG: that fires when the *thread* that started the worker ends, and
    checks come from short-lived threads."""
    import os
    import threading
    import time

    parent = os.getppid()

    def watch() -> None:
        while True:
            time.sleep(1.0)
            if os.getppid() != parent:
                os._exit(0)

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()


def main() -> None:
    _die_with_parent()
    from vlrl.rewards import answer_check

    ops = {"equal": answer_check.math_equal_here, "number": answer_check.math_number_here}
    ops["equal"]("1", "1", None)  # the first check's lazy imports (the LaTeX grammar) belong to start-up
    out = sys.stdout
    sys.stdout = sys.stderr  # nothing a library prints may corrupt the protocol
    out.write('{"ready": true}\n')
    out.flush()
    for line in sys.stdin:
        req = json.loads(line)
        value = ops[req["op"]](*req["args"], None)  # no signal timer here: the parent enforces the limit
        out.write(json.dumps({"value": value}) + "\n")
        out.flush()


if __name__ == "__main__":
    main()
