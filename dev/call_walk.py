"""The longest trip in the code, measured: a captioner's config from the CapRL demo into training.

    python dev/call_walk.py RUNNER_MODULE ROOT OUT

RUNNER_MODULE is the demo runner (``vlrl.demos.shapes.caprl.runner``; trees before the demos were
split by method: ``vlrl.demos.shapes.demo``), ROOT the checkout to measure (its ``vlrl/`` is imported
first), OUT a fresh scratch folder.

The walk starts at the runner's ``write_recipe(...)`` and ends where TRL's ``GRPOTrainer.train`` is
entered (it is replaced by a stop, so nothing trains). Untrained tiny models stand in for the demo's
warm-started ones, and the training rows are the demo's scenes with their raw questions (curation
needs the answerer and is not on the walk).

How it counts. The first call of each vlrl function (module and class bodies and comprehensions
left out) is recorded in call order with its file. Consecutive calls in one file are one *stay*;
*returns* = stays − distinct files (each stay in a file already left is a return); a *climb* is a
call into a higher layer than its nearest vlrl caller's, with the layers of ``.importlinter``.
"""

from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path

LAYERS = ("vlrl.core", "vlrl.captioning vlrl.judge", "vlrl.rewards", "vlrl.methods",
          "vlrl.training vlrl.evaluation", "vlrl.demos vlrl.bench", "vlrl.cli")


class Stop(Exception):
    """Raised where training would begin."""


def layer(root: Path, file: str) -> int:
    mod = "vlrl." + str(Path(file).relative_to(root / "vlrl")).replace("/", ".").removesuffix(".py")
    for i, names in enumerate(LAYERS):
        if any(mod == n or mod.startswith(n + ".") for n in names.split()):
            return i
    return -1


def walk(runner: str, root: Path, out: Path) -> list[tuple[str, str, bool]]:
    """``(file, function, climbed)`` for the first call of each vlrl function on the walk."""
    sys.path.insert(0, str(root))
    import trl

    def stop(self, *args, **kwargs):
        raise Stop()

    trl.GRPOTrainer.train = stop
    demo = importlib.import_module(runner)
    from vlrl.core.tiny import make_tiny

    captioner, answerer = out / "captioner", out / "answerer"
    make_tiny("qwen2_5_vl", captioner)
    make_tiny("qwen2", answerer)
    cfg = demo.DemoConfig.make(seed=0, quick=True)
    demo.make_data(out, cfg)
    rows = [json.loads(line) for line in (out / "data" / "train_raw.jsonl").read_text().splitlines()]
    for r in rows:
        r["questions"] = [demo._mcq(q) for q in r["questions"]]
    (out / "data" / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))

    vroot, seen, calls = str(root / "vlrl"), set(), []

    def profile(frame, event, arg):
        code = frame.f_code
        if event != "call" or not code.co_filename.startswith(vroot):
            return
        if not code.co_flags & 1 or code.co_name.startswith("<"):  # not CO_OPTIMIZED: a module or class body
            return
        key = (code.co_filename, code.co_firstlineno, code.co_name)
        if key in seen:
            return
        seen.add(key)
        caller = frame.f_back
        while caller is not None and not caller.f_code.co_filename.startswith(vroot):
            caller = caller.f_back  # the nearest vlrl frame below (through TRL, transformers, ...)
        climbed = caller is not None and layer(root, code.co_filename) > layer(root, caller.f_code.co_filename)
        calls.append((str(Path(code.co_filename).relative_to(root)), code.co_name, climbed))

    sys.setprofile(profile)
    try:
        demo.run_recipe(demo.write_recipe(out, cfg, captioner, answerer))
    except Stop:
        pass
    finally:
        sys.setprofile(None)
    return calls


def main() -> None:
    runner, root, out = sys.argv[1], Path(sys.argv[2]).resolve(), Path(sys.argv[3])
    out.mkdir(parents=True, exist_ok=False)
    calls = walk(runner, root, out)
    stays: list[tuple[str, list[str]]] = []
    for file, fn, climbed in calls:
        if not stays or stays[-1][0] != file:
            stays.append((file, []))
        stays[-1][1].append(fn + ("^" if climbed else ""))
    files = {s[0] for s in stays}
    print(json.dumps({"functions": len(calls), "stays": len(stays), "files": len(files),
                      "returns": len(stays) - len(files), "climbs": sum(c for *_, c in calls)}))
    for file, fns in stays:
        print(f"{layer(root, str(root / file))} {file}: {', '.join(fns)}")


if __name__ == "__main__":
    main()
