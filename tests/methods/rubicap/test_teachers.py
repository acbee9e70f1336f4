"""Teacher committee: every teacher captions every image; bad teachers never stop the good ones.

Teachers are the scripted backend of tests/support/scripted.py (the one seam tests may replace).
The slow test runs the real CLI with two tiny ``hf:`` models and one unreachable teacher.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from tests.support.images import make_images
from tests.support.scripted import Scripted
from vlrl.captioning.captioner import check_caption, split_named, unique_names
from vlrl.core.backends import ChatResult
from vlrl.core.pipeline import read_jsonl
from vlrl.methods.rubicap.teachers import run_teacher_committee


def teacher(name: str, answer=None) -> Scripted:
    """A teacher that answers each request from ``answer`` (a caption naming it by default).

    A text answer becomes a bare ``ChatResult`` (no finish reason or token count), as a server
    that reports neither would send."""
    answer = answer or (lambda req: f"{name} sees a red square on a white background in {req.id}.")
    return Scripted(name, lambda r: a if isinstance(a := answer(r), ChatResult) else ChatResult(texts=[a]))


def test_committee_with_failing_teachers(tmp_path):
    src = make_images(tmp_path / "imgs", 3)
    (src / "broken.png").write_bytes(b"not a png")

    class Raises(Scripted):
        def _chat(self, requests):
            raise TimeoutError("read timed out")

    good = teacher("good")
    teachers = [
        good,
        teacher(
            "flaky",
            lambda r: ChatResult(error="HTTP 500") if r.id == "img1.png" else "A red square, centred, on white.",
        ),
        teacher("refuser", lambda r: "I'm sorry, but I can't help with that image."),
        Raises("dead", None),
        "hf:/nonexistent/model",
    ]
    stats = run_teacher_committee(src, teachers, tmp_path / "out", batch_size=2)
    rows = {r["image_id"]: r for r in read_jsonl(tmp_path / "out" / "teacher_captions.jsonl")}
    assert set(rows) == {"broken.png", "img0.png", "img1.png", "img2.png"}
    assert set(rows["img0.png"]["teacher_captions"]) == {"good", "flaky"}
    assert rows["img1.png"]["missing"]["flaky"].startswith("backend error: HTTP 500")
    assert rows["img0.png"]["missing"]["refuser"] == "refusal"
    assert "read timed out" in rows["img0.png"]["missing"]["dead"]
    assert rows["img0.png"]["missing"]["model"].startswith("teacher could not be loaded")
    assert rows["broken.png"]["teacher_captions"] == {} and "bad image" in rows["broken.png"]["missing"]["good"]
    per = stats["per_teacher"]
    assert per["good"]["captioned"] == 3 and per["good"]["missing"] == 1
    assert per["refuser"]["reasons"] == {"refusal": 3, "bad image": 1}
    assert stats["images_with_consensus_possible"] == 2  # img0, img2 have good + flaky
    fails = list(read_jsonl(tmp_path / "out" / "failures.jsonl"))
    assert len({f["key"] for f in fails}) == len(fails)
    assert json.loads((tmp_path / "out" / "stats.json").read_text()) == stats

    # rerun: captions already written are not asked again; failures are retried but not duplicated
    good2 = teacher("good")
    run_teacher_committee(src, [good2, *teachers[1:]], tmp_path / "out", batch_size=2)
    assert good2.requests == []  # only broken.png was pending, and it never reaches a backend
    fails2 = list(read_jsonl(tmp_path / "out" / "failures.jsonl"))
    assert len(fails2) == len(fails)


def test_names_and_caption_checks():
    assert split_named("gpt=openai:http://127.0.0.1:8000/v1@gpt-5") == ("gpt", "openai:http://127.0.0.1:8000/v1@gpt-5")
    assert split_named("openai:http://h/v1@m?timeout=3") == (None, "openai:http://h/v1@m?timeout=3")
    assert split_named("mine=out/caps.jsonl") == ("mine", "out/caps.jsonl") and split_named("caps.jsonl") == (None, "caps.jsonl")
    assert unique_names(["hf:/a/qwen", "hf:/b/qwen", "openai:http://h/v1@org/m"]) == ["qwen", "qwen-2", "org_m"]
    assert check_caption("   ") == "empty answer"
    assert check_caption("Sorry, I cannot describe people.") == "refusal"
    assert check_caption("a dog") == "too short (2 words < 3)"
    assert check_caption("A sign reads 'sorry, we are closed' above a door.") is None


_CHILD = textwrap.dedent(
    """
    import sys, time
    from vlrl.core.backends import Backend, ChatResult
    from vlrl.methods.rubicap.teachers import run_teacher_committee

    class Slow(Backend):
        kind = "scripted"
        def _chat(self, requests):
            time.sleep(0.3)
            return [ChatResult(texts=[f"{self.model} caption of {r.id} with details"]) for r in requests]
        def _score_choices(self, requests):
            raise NotImplementedError

    run_teacher_committee(sys.argv[1], [Slow("t1"), Slow("t2")], sys.argv[2], batch_size=1)
    """
)


def test_kill9_then_rerun_is_exactly_once(tmp_path):
    src = make_images(tmp_path / "imgs", 6)
    out = tmp_path / "out"
    script = tmp_path / "child.py"
    script.write_text(_CHILD)
    proc = subprocess.Popen(
        [sys.executable, str(script), str(src), str(out)], env={**os.environ, "OMP_NUM_THREADS": "1"}
    )
    captions = out / "captions.jsonl"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        if captions.exists() and len(captions.read_text().splitlines()) >= 3:
            break
        time.sleep(0.05)
    assert proc.poll() is None, "the job finished before it could be killed"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    # simulate a torn last line as well
    with open(captions, "a") as fh:
        fh.write('{"key": "img5.png::t2", "capt')
    subprocess.run(
        [sys.executable, str(script), str(src), str(out)], check=True, env={**os.environ, "OMP_NUM_THREADS": "1"}
    )
    keys = [r["key"] for r in read_jsonl(captions)]
    assert sorted(keys) == sorted(f"img{i}.png::t{t}" for i in range(6) for t in (1, 2))
    rows = list(read_jsonl(out / "teacher_captions.jsonl"))
    assert len(rows) == 6 and all(len(r["teacher_captions"]) == 2 for r in rows)


@pytest.mark.slow
def test_cli_with_tiny_hf_teachers(tmp_path, tiny_vlm):
    from typer.testing import CliRunner

    from vlrl.cli import app

    src = make_images(tmp_path / "imgs", 2)
    out = tmp_path / "out"
    args = [
        "data",
        "teacher-captions",
        "--images",
        str(src),
        "--out",
        str(out),
        "--max-tokens",
        "8",
        "--teacher",
        f"a=hf:{tiny_vlm}",
        "--teacher",
        f"b=hf:{tiny_vlm}",
        "--teacher",
        "gone=hf:/nonexistent",
    ]
    res = CliRunner().invoke(app, args)
    stats = json.loads((out / "stats.json").read_text())
    # random tiny teachers mostly answer junk: the exit code follows the missing captions (README)
    from vlrl.methods.rubicap.commands import backend_failure_kind

    captioned = sum(t["captioned"] for t in stats["per_teacher"].values())
    failed = sum(n for t in stats["per_teacher"].values() for k, n in t["reasons"].items() if backend_failure_kind(k))
    assert res.exit_code == (1 if not captioned else 3 if failed else 0), res.output
    assert stats["teachers"] == ["a", "b", "gone"] and stats["images"] == 2
    for name in ("a", "b"):  # junk captions are either kept or missing with a reason, never lost
        assert stats["per_teacher"][name]["captioned"] + stats["per_teacher"][name]["missing"] == 2
    assert stats["per_teacher"]["gone"]["missing"] == 2
    assert (out / "cache" / "responses.sqlite").exists()
    res2 = CliRunner().invoke(app, args)  # rerun: cached, same result
    assert res2.exit_code == res.exit_code and json.loads((out / "stats.json").read_text()) == stats


def test_each_missing_caption_is_one_log_line_naming_teacher_and_image(tmp_path, caplog):
    src = make_images(tmp_path / "imgs", 2)
    down = teacher("down", answer=lambda req: ChatResult(error="connection refused"))
    with caplog.at_level("WARNING", logger="vlrl.methods.rubicap.teachers"):
        run_teacher_committee(src, [teacher("good"), down], tmp_path / "out", batch_size=2)
    lines = [r.getMessage() for r in caplog.records]
    for img in ("img0.png", "img1.png"):
        assert sum(m.startswith(f"teacher down: {img}:") and "connection refused" in m for m in lines) == 1
    assert not any(m.startswith("teacher good:") for m in lines)


def test_empty_and_truncated_teacher_captions_are_counted_and_warned_once(tmp_path, caplog):
    """A teacher answering newlines and one running into the length limit: stats count both, per
    teacher and overall, and one warning names them."""
    src = make_images(tmp_path / "imgs", 4)
    blank = teacher("blank", lambda r: ChatResult(texts=["\n\n\n"], finish_reasons=["length"]))
    long = teacher("long", lambda r: ChatResult(texts=["a red square on white and " * 5], finish_reasons=["length"]))
    with caplog.at_level("WARNING"):
        stats = run_teacher_committee(src, [teacher("good"), blank, long], tmp_path / "out", batch_size=2)
    per = stats["per_teacher"]
    # whitespace is missing ("empty answer") or a failed request, never a caption; counted when it is missing
    assert per["blank"]["captioned"] == 0 and per["blank"]["empty"] in (0, 4)
    assert per["long"]["truncated"] == 4 and per["long"]["empty"] == 0
    assert per["good"]["truncated"] == per["good"]["empty"] == 0
    assert stats["truncated"] == 4 and stats["empty"] == per["blank"]["empty"]
    assert json.loads((tmp_path / "out" / "stats.json").read_text())["truncated"] == 4
    warned = [r.getMessage() for r in caplog.records if "teacher captions" in r.getMessage()]
    assert len(warned) == 1 and "4 of" in warned[0] and "stopped at the length limit" in warned[0]
