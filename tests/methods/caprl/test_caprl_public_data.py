"""CapRL's public QA rows, read as published (parquet with image bytes, or JSONL) and written back."""

from __future__ import annotations

import io
import json

import pytest
from PIL import Image

from tests.support.scripted import Scripted
from vlrl.core.backends import ChoiceResult
from vlrl.rewards import build_reward

TRUTH = [
    {"question": "Which city is mentioned in the company's address?",
     "choices": ["A) 北京市", "B) 上海市", "C) 惠州市", "D) 广州市"], "answer": "C"},
    {"question": "What colour is the logo?", "choices": ["A) Red", "B) Blue", "C) Green"], "answer": "A"},
]


def _png(color: str) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (32, 32), color).save(buf, format="PNG")
    return buf.getvalue()


def public_rows(n: int = 3) -> list[dict]:
    return [{"id": f"d976b8c5-{i}", "image": {"bytes": _png(["red", "blue", "green"][i % 3]), "path": None},
             "prompt": [{"role": "user", "content": "<image> Please describe this image in detail."}],
             "data_source": "image_caption_rl", "reward_model": {"ground_truth": TRUTH}} for i in range(n)]


def write_parquet(rows: list[dict], path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.Table.from_pylist(rows), str(path))


def read_choice(r) -> ChoiceResult:
    """Picks the option whose text the caption states (else the abstain option), all its mass on it."""
    import re

    text = r.messages[-1]["content"]
    caption = re.search(r"<description>\n(.*?)\n</description>", text, re.S).group(1)
    opts = re.findall(r"^([A-Z])\. (.*)$", text, re.M)
    pick = next((L for L, o in opts if o in caption), opts[-1][0])
    return ChoiceResult(probs={c: float(c.strip() == pick) for c in r.choices}, method="logits", mass=1.0)


@pytest.mark.parametrize("fmt", ["parquet", "jsonl"])
def test_reward_score_reads_public_rows(tmp_path, fmt):
    from vlrl.rewards.scoring import score_rows_file

    rows = [dict(r, completion="The address says 惠州市 and the logo is Red.") for r in public_rows(2)]
    rows[1]["completion"] = "A photo."
    path = tmp_path / f"rows.{fmt}"
    if fmt == "parquet":
        write_parquet(rows, path)
    else:
        for r in rows:
            r["image"] = {"bytes": None, "path": "img.png"}
        path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    reward = build_reward("caprl_qa", answerer=Scripted("reader", choose=read_choice), mode="exact", questions="all", rounds=2)
    summary = score_rows_file(reward, path, tmp_path / "out.jsonl", progress=False)
    out = [json.loads(x) for x in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert [o["id"] for o in out] == ["d976b8c5-0", "d976b8c5-1"]
    assert out[0]["reward"] == 1.0 and out[1]["reward"] == 0.0
    assert out[0]["details"]["n_questions"] == 2 and summary["errors"] == 0


def test_training_data_reads_public_parquet(tmp_path):
    from vlrl.training.data import dataset_columns, to_trl_dataset
    from vlrl.training.recipe import DataSpec

    path = tmp_path / "qa75k.parquet"
    write_parquet(public_rows(3), path)
    data = DataSpec(source=str(path))
    assert {"image", "prompt", "questions"} <= dataset_columns(data)
    ds = to_trl_dataset(data, cache_dir=tmp_path / "cache")
    row = ds[0]
    assert row["prompt"] == [{"role": "user", "content": "Please describe this image in detail."}]
    assert row["questions"] == TRUTH and row["image"].size == (32, 32)
    reward = build_reward("caprl_qa", answerer=Scripted("reader", choose=read_choice), mode="exact", questions="all", rounds=1)
    (s,) = reward.score(["惠州市, Red"], questions=[row["questions"]])
    assert s.value == 1.0


def test_export_writes_the_public_shape_and_reads_back(tmp_path):
    import pyarrow.parquet as pq

    from vlrl.methods.caprl.export import export_caprl
    from vlrl.rewards.scoring import iter_rows

    (tmp_path / "imgs").mkdir()
    recs = []
    for i, color in enumerate(["red", "blue"]):
        Image.new("RGB", (16, 16), color).save(tmp_path / "imgs" / f"{i}.png")
        recs.append({"id": f"img-{i}", "image": f"imgs/{i}.png",
                     "questions": [{"question": "Colour?", "options": ["red", "blue", "green"], "answer": "AB"[i]}]})
    recs.append({"id": "bad", "image": "imgs/0.png", "questions": [{"question": "?", "options": ["x"], "answer": "A"}]})
    src = tmp_path / "qa.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in recs))
    res = export_caprl(str(src), tmp_path / "public.parquet")
    assert res == {"rows": 2, "skipped": 1, "out": str(tmp_path / "public.parquet")}
    rows = pq.read_table(tmp_path / "public.parquet").to_pylist()
    assert set(rows[0]) == {"id", "image", "prompt", "data_source", "reward_model"}
    assert rows[1]["reward_model"]["ground_truth"] == [
        {"question": "Colour?", "choices": ["A) red", "B) blue", "C) green"], "answer": "B"}]
    assert rows[0]["image"]["path"] is None and rows[0]["image"]["bytes"] == (tmp_path / "imgs" / "0.png").read_bytes()
    assert rows[0]["prompt"] == [{"role": "user", "content": "<image> Please describe this image in detail."}]
    assert rows[0]["data_source"] == "image_caption_rl"
    back = [r for _, r, err in iter_rows(tmp_path / "public.parquet", "id") if err is None]
    assert back[1]["questions"] == rows[1]["reward_model"]["ground_truth"]


def test_export_cli(tmp_path):
    from typer.testing import CliRunner

    from vlrl.cli import app

    Image.new("RGB", (16, 16), "red").save(tmp_path / "a.png")
    (tmp_path / "qa.jsonl").write_text(json.dumps({"id": "a", "image": "a.png", "questions": [
        {"question": "Colour?", "options": ["red", "blue", "green"], "answer": "A"}]}) + "\n")
    r = CliRunner().invoke(app, ["data", "export", "--format", "caprl", "--input", str(tmp_path / "qa.jsonl"),
                                 "--out", str(tmp_path / "o.jsonl")])
    assert r.exit_code == 0, r.output
    row = json.loads((tmp_path / "o.jsonl").read_text())
    assert row["image"] == {"bytes": None, "path": str((tmp_path / "a.png").resolve())}
    bad = CliRunner().invoke(app, ["data", "export", "--format", "llava", "--input", "x", "--out", "y.parquet"])
    assert bad.exit_code == 2


@pytest.mark.slow
def test_smoke_reads_public_parquet(tmp_path, tiny_vlm, tiny_lm):
    from vlrl.methods.caprl.smoke import smoke_check

    path = tmp_path / "qa.parquet"
    write_parquet(public_rows(3), path)
    summary = smoke_check(str(path), f"hf:{tiny_vlm}?device=cpu", f"hf:{tiny_lm}?device=cpu", limit=3,
                          questions_per_caption=2, rounds=1, max_tokens=8)
    assert summary["images"] + summary["skipped"] == 3 and "variants" in summary
