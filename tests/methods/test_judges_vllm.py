"""The structured judges end to end on real vLLM, through the real commands.

Tiny random models served by vLLM (``vllm_vlm``: Qwen2.5-VL, ``vllm_lm``: Qwen2; the session's
servers, see tests/conftest.py) stand in for the VLM, the answerer, the teachers, the rubric writer
and the judges. Their free text is junk, so what is asserted is the honest outcome of each command
(its exit code per the README's table, its outputs' shape, its reasons), and for the judges that
answer in JSON: the request went out with its schema as ``response_format`` (the route logged, the
``structured`` count in the backend's accounting), and the answers parse without repair, where the
same prompt sent without a schema (a copy of the built-in prompt as a custom prompt file, which
goes without one) is junk the repair path cannot save.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from tests.methods.caprl.test_prism import make_bench

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

PROMPTS = Path(__file__).resolve().parents[2] / "vlrl" / "methods" / "rubicap" / "prompts"
STRUCTURED = "structured output: json_schema"


def _spec(server) -> str:
    return f"openai:{server.base_url}@{server.model}?timeout=300&max_retries=1"


def _vlrl(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "VLRL_LOG_LEVEL": "INFO"}
    cmd = [str(Path(sys.executable).parent / "vlrl"), *args]
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)


def _structured_count(stderr: str, server) -> int:
    """``structured=N`` of the backend's closing accounting line for ``server`` (summed over backends)."""
    lines = [ln for ln in stderr.splitlines() if f"{server.base_url}@{server.model}: requests=" in ln]
    return sum(int(m.group(1)) for ln in lines for m in [re.search(r"structured=(\d+)", ln)] if m)


def _images(folder: Path, n: int) -> Path:
    rng = np.random.default_rng(5)
    folder.mkdir(parents=True)
    for i in range(n):
        Image.fromarray(rng.integers(0, 255, (56, 56, 3), dtype=np.uint8)).save(folder / f"im{i}.png")
    return folder


def _rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_qa_curate_with_vlm_and_answerer_on_vllm(vllm_vlm, vllm_lm, tmp_path):
    images = _images(tmp_path / "imgs", 2)
    out = tmp_path / "qa"
    r = _vlrl("data", "qa-curate", "--images", str(images), "--vlm", _spec(vllm_vlm), "--answerer", _spec(vllm_lm),
              "--out", str(out), "--per-image", "2", "--rounds", "2", "--batch-size", "2", "--max-tokens", "48",
              "--max-attempts", "1", "--quiet")
    stats = json.loads((out / "stats.json").read_text())
    assert stats["images"] == 2 and stats["images_done"] + stats["images_quarantined"] == 2, r.stderr[-3000:]
    # the VLM's questions are a text layout (no schema): a random VLM writes none that parse, or some
    # that the filter keeps or drops; an empty dataset is exit 1, a non-empty one exit 0
    assert r.returncode == (0 if stats["kept"] else 1), r.stderr[-3000:]
    assert stats["generated"] >= stats["parsed"] >= stats["filtered"] >= stats["kept"]
    assert (out / "dataset").is_dir()
    assert f"{vllm_vlm.base_url}@{vllm_vlm.model}: requests=" in r.stderr  # the VLM was asked over HTTP
    assert STRUCTURED not in r.stderr
    print("qa-curate on vLLM: exit", r.returncode, {k: stats[k] for k in ("generated", "parsed", "kept")},
          stats["quarantine_reasons"] or stats["drop_reasons"])


def _teachers(vllm_vlm, tmp_path) -> Path:
    images = _images(tmp_path / "imgs", 3)
    out = tmp_path / "teachers"
    r = _vlrl("data", "teacher-captions", "--images", str(images), "--out", str(out), "--max-tokens", "16",
              "--min-words", "1", "--temperature", "0.8",
              "--teacher", f"a={_spec(vllm_vlm)}", "--teacher", f"b={_spec(vllm_vlm)}", "--teacher", f"c={_spec(vllm_vlm)}")
    assert r.returncode == 0, r.stderr[-3000:]
    rows = _rows(out / "teacher_captions.jsonl")
    assert len(rows) == 3 and all(set(row["teacher_captions"]) == {"a", "b", "c"} for row in rows)
    return out


def test_teacher_captions_then_rubrics_written_under_the_schema(vllm_vlm, vllm_lm, tmp_path):
    teachers = _teachers(vllm_vlm, tmp_path)
    # the student's captions from a file: a tiny random VLM's greedy caption is empty (an image the
    # writer never sees: "student caption missing"), and the student is not what is tested here
    student = tmp_path / "student.jsonl"
    student.write_text("".join(json.dumps({"image_id": row["image_id"], "caption": "A red truck next to a bus."}) + "\n"
                               for row in _rows(teachers / "teacher_captions.jsonl")))
    base = ["data", "rubrics", "--teachers", str(teachers), "--student", str(student), "--writer", _spec(vllm_lm),
            "--writer-max-tokens", "1000", "--max-retries", "0"]
    r = _vlrl(*base, "--out", str(tmp_path / "rubrics"))
    # the README's exit codes: 0 when an image got a rubric set (or was solved), 1 when every image was rejected
    stats = json.loads((tmp_path / "rubrics" / "stats.json").read_text())
    assert STRUCTURED in r.stderr and _structured_count(r.stderr, vllm_lm) == 3, (stats, r.stderr[-4000:])
    assert r.returncode == (1 if stats["rejected"] == 3 else 0), r.stderr[-3000:]
    assert stats["images"] == 3 and stats["accepted"] + stats["solved"] + stats["rejected"] == 3
    assert stats["repaired"] == 0
    rejected = _rows(tmp_path / "rubrics" / "rejected.jsonl") if stats["rejected"] else []
    # under the schema no answer is unreadable: a rejection is the writer's content (no consensus, links)
    # or its length, never "no JSON object found". (A greedy random writer fills the bounded lists and
    # texts of the schema and is cut off at the limit: what it is, said so, never repaired into a set.)
    assert not [x for x in rejected if "no JSON object" in x["reason"] or "lacks the required keys" in x["reason"]]
    # the same prompt as a custom file goes without a schema: the random writer's prose is not JSON
    custom = tmp_path / "writer.jinja"
    shutil.copy(PROMPTS / "rubric_writer.jinja", custom)
    r2 = _vlrl(*base, "--writer-prompt-file", str(custom), "--out", str(tmp_path / "rubrics_free"))
    assert STRUCTURED not in r2.stderr and _structured_count(r2.stderr, vllm_lm) == 0
    free = json.loads((tmp_path / "rubrics_free" / "stats.json").read_text())
    assert free["accepted"] + free["solved"] == 0 and free["rejected"] == 3 and r2.returncode == 1  # every image rejected
    print("rubrics with schema:", [x["reason"][:160] for x in rejected])
    print("rubrics without:", [x["reason"][:160] for x in _rows(tmp_path / "rubrics_free" / "rejected.jsonl")])


RUBRICS = [
    {"id": "r1", "criterion": "Mentions a red bus", "pass_rule": "Pass if a red bus is named.", "severity": "critical"},
    {"id": "r2", "criterion": "States the sign's text STOP", "pass_rule": "Pass if STOP is quoted.", "severity": "minor"},
    {"id": "r3", "criterion": "Mentions a dog", "pass_rule": "Pass if a dog is named.", "severity": "important",
     "weight": -2.0},
]


def test_rubicap_rubric_judge_verdicts_parse_under_the_schema(vllm_lm, tmp_path):
    rows = tmp_path / "rows.jsonl"
    caps = ["A red bus by a STOP sign.", "A dog on grass.", "Nothing much."]
    rows.write_text("".join(json.dumps({"id": f"c{i}", "completion": c, "rubrics": RUBRICS}) + "\n"
                            for i, c in enumerate(caps)))
    base = ["reward", "score", "--reward", "rubicap_rubric", "--input", str(rows), "--judge", _spec(vllm_lm),
            "-s", "max_tokens=128", "-s", "max_retries=0"]
    r = _vlrl(*base, "--out", str(tmp_path / "scored.jsonl"))
    assert r.returncode == 0, r.stderr[-3000:]
    assert STRUCTURED in r.stderr  # (a reward's judge is not closed by the command: no accounting line)
    scored = _rows(tmp_path / "scored.jsonl")
    assert [s["id"] for s in scored] == ["c0", "c1", "c2"]
    # every verdict set parsed the first time: a reward for every caption, no judge failure, no retry
    assert all(s["reward"] is not None and s["details"]["judge_failures"] == 0 for s in scored), scored
    assert all(s["details"]["judge_retries"] == 0 and s["details"]["n_rubrics"] == 3 for s in scored)
    # the built-in prompt as a custom file: no schema, and the random judge's prose holds no verdicts
    custom = tmp_path / "judge.jinja"
    shutil.copy(PROMPTS / "rubric_judge.jinja", custom)
    r2 = _vlrl(*base, "-s", f"prompt={custom}", "--out", str(tmp_path / "free.jsonl"))
    assert STRUCTURED not in r2.stderr
    free = _rows(tmp_path / "free.jsonl")
    # a judge failure is a reward of None with its reason; no row got a value, so the command exits 1
    assert r2.returncode == 1 and all(s["reward"] is None and s["details"]["judge_failures"] == 1 for s in free), free
    print("rubric judge without schema:", [s["details"]["reason"][:120] for s in free])


def test_prism_with_captioner_and_answerer_on_vllm(vllm_vlm, vllm_lm, tmp_path):
    bench = make_bench(tmp_path)
    r = _vlrl("eval", "prism", "--captioner", _spec(vllm_vlm), "--answerer", _spec(vllm_lm), "--bench", str(bench),
              "--out", str(tmp_path / "out"), "--caption-max-tokens", "16", "--quiet")
    assert r.returncode == 0, r.stderr[-3000:]
    res = json.loads((tmp_path / "out" / "results.json").read_text())
    assert set(res["benchmarks"]) == {"colors", "charts", "docs"} and res["n"] == 7
    assert 0.0 <= res["overall"] <= 1.0 and res["errors"] >= 1  # img/bad.png is not an image
    preds = _rows(tmp_path / "out" / "predictions.jsonl")
    assert len(preds) == 7 and sum(bool(p.get("error")) for p in preds) == res["errors"]
    for server in (vllm_vlm, vllm_lm):
        assert f"{server.base_url}@{server.model}: requests=" in r.stderr


def test_arena_judge_on_vllm_answers_under_the_schema(vllm_vlm, tmp_path):
    images = _images(tmp_path / "imgs", 2)
    cand, base = tmp_path / "cand.jsonl", tmp_path / "base.jsonl"
    for path, words in ((cand, "a red square on noise"), (base, "some coloured dots")):
        path.write_text("".join(json.dumps({"image_id": f"im{i}.png", "caption": words}) + "\n" for i in range(2)))
    args = ["eval", "arena", "--candidate", f"cand={cand}", "--baseline", f"base={base}", "--judge", _spec(vllm_vlm),
            "--images", str(images), "--max-retries", "0"]
    r = _vlrl(*args, "--out", str(tmp_path / "arena"))
    assert r.returncode == 0, r.stderr[-3000:]
    assert STRUCTURED in r.stderr and _structured_count(r.stderr, vllm_vlm) == 4  # 2 images x 2 orders
    judgments = _rows(tmp_path / "arena" / "judgments.jsonl")
    assert len(judgments) == 4 and all(j["winner"] in ("A", "B", "tie") and j["attempts"] == 1 for j in judgments)
    # JSON as decoded, no repair (xgrammar lets raw control characters into strings: strict=False)
    assert all(json.loads(j["raw"], strict=False)["winner"] == j["winner"] for j in judgments)
    res = json.loads((tmp_path / "arena" / "results.json").read_text())["baselines"]["base"]
    assert res["judge_failures"] == 0
    # the built-in prompt as a custom file: no schema; whatever the random judge writes is counted
    custom = tmp_path / "arena.jinja"
    shutil.copy(PROMPTS / "arena_judge.jinja", custom)
    r2 = _vlrl(*args, "--judge-prompt-file", str(custom), "--out", str(tmp_path / "arena_free"))
    assert STRUCTURED not in r2.stderr and _structured_count(r2.stderr, vllm_vlm) == 0
    free = _rows(tmp_path / "arena_free" / "judgments.jsonl") if (tmp_path / "arena_free" / "judgments.jsonl").exists() else []
    print("arena judgments parsed with schema: 4/4 first time; without:", len(free), "of 4, rc", r2.returncode)
    assert len(free) < 4
