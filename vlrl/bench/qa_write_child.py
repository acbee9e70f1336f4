"""The child of ``vlrl bench qa-write``: one dataset write in a fresh process, its peak RSS before and after.

Run as ``python -m vlrl.bench.qa_write_child '{"images": FOLDER, "dest": FOLDER}'``; prints one JSON
line. A process of its own, because ``ru_maxrss`` only ever grows: the peak of a write can only be
read in a process that did nothing bigger before it.
"""

import json
import resource
import sys
from pathlib import Path

from vlrl.core.sources import load_any_dataset
from vlrl.methods.caprl.curate import write_dataset


def main(arg: str) -> None:
    args = json.loads(arg)
    source = load_any_dataset(args["images"])
    refs = {r.id: r for r in source.image_refs()}
    records = [{"id": i, "questions": [{"question": "Which colour?", "options": ["red", "blue", "green"], "answer": "A",
                "visual_acc": 1.0, "text_acc": 0.0, "kept": True, "reason": None}]} for i in sorted(refs)]
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    write_dataset(Path(args["dest"]), records, refs, source.root)
    after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    sys.stdout.write(json.dumps({"rss_before_kb": before, "rss_peak_kb": after}) + "\n")


if __name__ == "__main__":
    main(sys.argv[1])
