"""Typed records: validation, and round trips through JSONL, parquet, save_to_disk and imagefolder."""

from __future__ import annotations

import io
from pathlib import Path

import datasets
import numpy as np
import pytest
from PIL import Image

from vlrl.core.images import ImageLoadError
from vlrl.core.records import MCQ, Caption, ImageRef, RecordError, RubricItem
from vlrl.core.sources import load_any_dataset
from vlrl.core.sources.records_io import (
    dataset_to_records,
    load_records,
    records_to_dataset,
    save_imagefolder,
    save_records,
)


def _png(w: int, h: int, seed: int) -> bytes:
    rng = np.random.default_rng(seed)
    buf = io.BytesIO()
    Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8)).save(buf, "PNG")
    return buf.getvalue()


@pytest.fixture
def image_root(tmp_path: Path) -> tuple[Path, list[ImageRef]]:
    root = tmp_path / "images"
    refs = []
    for i, rel in enumerate(["cats/a.png", "cats/b.png", "dogs/c.png"]):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(_png(12 + i, 8, i))
        refs.append(ImageRef(id=f"img-{i}", path=rel, meta={"source": "test", "n": i}))
    return root, refs


MCQS = [
    MCQ(
        question="What colour is the ball?",
        options=["red", "blue", "green", "yellow"],
        answer="b",
        provenance={"model": "tiny", "temperature": 0.1, "kept": True},
        id="img-0/q0",
        image_id="img-0",
    ),
    MCQ(question="How many dogs?", options=["one", "two"], answer="(A)", id="img-1/q0", image_id="img-1"),
]
RUBRIC = [
    RubricItem(criterion="Mentions the red ball", pass_rule="caption names a red ball", severity="critical"),
    RubricItem(criterion="Counts dogs", pass_rule="says two dogs", severity="minor", weight=0.5, id="r2"),
]
CAPTIONS = [
    Caption(
        text="A red ball.",
        model="tiny-vlm",
        prompt="Describe.",
        sampling={"temperature": 0.7, "seed": 3},
        image_id="img-0",
    ),
    Caption(text="", model="tiny-vlm", prompt="Describe.", id="c1", image_id="img-1"),
]


# ---------------------------------------------------------------- validation


def test_mcq_normalises_and_exposes_answer() -> None:
    q = MCQS[0]
    assert q.answer == "B" and q.answer_index == 1 and q.answer_text == "blue"
    assert q.letters == ["A", "B", "C", "D"]
    assert q.format_options().splitlines() == ["A. red", "B. blue", "C. green", "D. yellow"]
    assert MCQS[1].answer == "A"


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        ({"options": ["only one"], "answer": "A"}, "2 to 26 options"),
        ({"options": ["red", "blue", "green", "yellow"], "answer": "E"}, "not one of the option letters"),
        ({"options": ["red", "blue"], "answer": "1"}, "not one of the option letters"),
        ({"options": ["Red", "blue", " red "], "answer": "A"}, "duplicate options a and c"),
        ({"options": ["red", ""], "answer": "A"}, "option 2 is empty"),
        ({"options": "red, blue", "answer": "A"}, "must be a list"),
        ({"question": "   ", "options": ["a", "b"], "answer": "A"}, "question is empty"),
        ({"options": ["a", "b"], "answer": "A", "provenance": "{not json"}, "provenance is not valid json"),
    ],
)
def test_mcq_refusals_are_one_line_and_name_the_record(kwargs: dict, words: str) -> None:
    kwargs = {"question": "Which?", "id": "img-7/q2", **kwargs}
    with pytest.raises(RecordError) as exc:
        MCQ(**kwargs)
    msg = str(exc.value)
    assert isinstance(exc.value, ValueError)
    assert msg.startswith("mcq img-7/q2: ") and "\n" not in msg
    assert words in msg.lower()


def test_rubric_item_weights_and_severity() -> None:
    assert [RubricItem("c", "p", s).weight for s in ("critical", "important", "minor")] == [3.0, 2.0, 1.0]
    assert RubricItem("c", "p").severity == "important"
    assert RubricItem("c", "p", "Critical").severity == "critical"
    assert RUBRIC[1].weight == 0.5
    with pytest.raises(RecordError, match="severity 'fatal' is not one of critical, important, minor"):
        RubricItem("c", "p", "fatal", id="r9")
    with pytest.raises(RecordError, match="positive"):
        RubricItem("c", "p", weight=0)
    assert RubricItem("c", "p", "critical", weight=-3).pitfall and not RubricItem("c", "p").pitfall
    with pytest.raises(RecordError, match="pass_rule is empty"):
        RubricItem("c", " ")


def test_caption_and_image_ref_validation() -> None:
    assert CAPTIONS[1].text == ""  # an empty caption is a real model output, not an error
    with pytest.raises(RecordError, match="model is empty"):
        Caption(text="x", model="", prompt="p")
    with pytest.raises(RecordError, match="needs a path or image bytes"):
        ImageRef(id="x")
    for bad in ("/etc/passwd", "../x.png", "a/../../x.png"):
        with pytest.raises(RecordError, match="must be relative"):
            ImageRef(id="x", path=bad)
    assert ImageRef(id="x", path="a\\b.png").path == "a/b.png"


# ---------------------------------------------------------------- round trips without images


@pytest.mark.parametrize("records", [MCQS, RUBRIC, CAPTIONS], ids=["mcq", "rubric", "caption"])
@pytest.mark.parametrize("dest", ["out.jsonl", "out.parquet", "disk_dir"])
def test_round_trip_plain_records(tmp_path: Path, records: list, dest: str) -> None:
    out = save_records(records, tmp_path / dest)
    assert load_records(out) == records  # kind inferred from the columns
    assert load_records(out, type(records[0])) == records
    assert dataset_to_records(records_to_dataset(records)) == records


def test_written_files_are_plain_hf_datasets(tmp_path: Path) -> None:
    save_records(MCQS, tmp_path / "q.parquet")
    save_records(MCQS, tmp_path / "q.jsonl")
    save_records(MCQS, tmp_path / "q_disk")
    for ds in (
        datasets.Dataset.from_parquet(str(tmp_path / "q.parquet"), cache_dir=str(tmp_path / "cache")),
        datasets.Dataset.from_json(str(tmp_path / "q.jsonl"), cache_dir=str(tmp_path / "cache")),
        datasets.load_from_disk(str(tmp_path / "q_disk")),
    ):
        assert ds[0]["options"] == ["red", "blue", "green", "yellow"]
        assert ds[0]["answer"] == "B"
        assert dataset_to_records(ds) == MCQS


def test_mixed_or_invalid_rows_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="one kind"):
        records_to_dataset([MCQS[0], RUBRIC[0]])
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "q1", "question": "Q?", "options": ["a", "a"], "answer": "A"}\n')
    with pytest.raises(RecordError, match="mcq q1: duplicate options"):
        load_records(bad, MCQ)
    broken = tmp_path / "broken.jsonl"
    broken.write_text('{"question": "Q?"\n')
    with pytest.raises(ValueError, match=r"broken.jsonl:1: not valid JSON"):
        load_records(broken, MCQ)


# ---------------------------------------------------------------- images as paths or as the Image feature


@pytest.mark.parametrize("name", ["refs.jsonl", "refs.parquet", "refs_disk"])
def test_image_refs_as_relative_paths(image_root: tuple[Path, list[ImageRef]], name: str) -> None:
    root, refs = image_root
    out = save_records(refs, root / name, image_mode="path")  # data next to the images: default root
    back = load_records(out)
    assert back == refs
    source = load_any_dataset(out)
    assert source.root == root
    assert [source.load_image(i).size for i in range(len(source))] == [(12, 8), (13, 8), (14, 8)]
    assert [label for label, _ in source.iter_images()] == ["cats/a.png", "cats/b.png", "dogs/c.png"]


def test_data_file_away_from_its_images(image_root: tuple[Path, list[ImageRef]], tmp_path: Path) -> None:
    root, refs = image_root
    out = save_records(refs, tmp_path / "meta" / "refs.jsonl")
    with pytest.raises(ImageLoadError, match="not found"):
        load_any_dataset(out).load_image(0)  # default root: the folder holding the file
    source = load_any_dataset(out, root=root)
    assert source.root == root and source.load_image(2).size == (14, 8)


@pytest.mark.parametrize("name", ["refs.parquet", "refs_disk"])
def test_image_refs_as_hf_image_feature_are_self_contained(
    image_root: tuple[Path, list[ImageRef]], tmp_path: Path, name: str
) -> None:
    root, refs = image_root
    out = save_records(refs, tmp_path / "elsewhere" / name, image_mode="feature", root=root)
    originals = [(root / r.path).read_bytes() for r in refs]
    for r in refs:
        (root / r.path).unlink()  # the dataset must not need the files any more
    source = load_any_dataset(out)
    assert isinstance(source.dataset.features["image"], datasets.Image)
    back = source.image_refs()
    assert [r.id for r in back] == [r.id for r in refs]
    assert [r.path for r in back] == [r.path for r in refs]
    assert [r.meta for r in back] == [r.meta for r in refs]
    assert [r.data for r in back] == originals
    assert [r.load().size for r in back] == [(12, 8), (13, 8), (14, 8)]
    # HF's own reader sees a normal Image column and decodes it.
    ds = (
        datasets.load_from_disk(str(out))
        if name == "refs_disk"
        else datasets.Dataset.from_parquet(str(out), cache_dir=str(tmp_path / "cache"))
    )
    assert ds[2]["image"].size == (14, 8)


def test_bytes_only_refs_and_jsonl_limits(tmp_path: Path) -> None:
    ref = ImageRef(id="mem-1", data=_png(5, 4, 9))
    with pytest.raises(ValueError, match="JSONL cannot embed image bytes"):
        save_records([ref], tmp_path / "x.jsonl", image_mode="feature")
    with pytest.raises(RecordError, match="has only bytes"):
        save_records([ref], tmp_path / "x.jsonl")
    out = save_records([ref], tmp_path / "x.parquet", image_mode="feature")
    assert load_records(out)[0].data == ref.data
    with pytest.raises(ImageLoadError, match="escapes the dataset root"):
        save_imagefolder([ImageRef(id="../../evil", data=ref.data)], tmp_path / "ifolder")


def test_imagefolder_round_trip_and_hf_compatibility(image_root: tuple[Path, list[ImageRef]], tmp_path: Path) -> None:
    root, refs = image_root
    mem = ImageRef(id="mem-1", data=_png(5, 4, 9), meta={"from": "bytes"})
    dest = save_imagefolder([*refs, mem], tmp_path / "folder", root=root, columns={"caption": ["a", "b", "c", "d"]})
    assert (dest / "metadata.jsonl").is_file() and (dest / "mem-1.png").is_file()

    hf = datasets.load_dataset("imagefolder", data_dir=str(dest), split="train", cache_dir=str(tmp_path / "cache"))
    assert sorted(hf["id"]) == ["img-0", "img-1", "img-2", "mem-1"]
    row = hf[hf["id"].index("img-2")]
    assert row["image"].size == (14, 8) and row["caption"] == "c"

    source = load_any_dataset(dest)
    assert source.kind == "imagefolder" and source.root == dest
    back = source.image_refs()
    assert [r.id for r in back] == ["img-0", "img-1", "img-2", "mem-1"]
    assert [r.path for r in back] == ["cats/a.png", "cats/b.png", "dogs/c.png", "mem-1.png"]
    assert back[0].meta == {"source": "test", "n": 0, "caption": "a"}
    assert [source.load_image(i).size for i in range(4)] == [(12, 8), (13, 8), (14, 8), (5, 4)]


# ---------------------------------------------------------------- load_any_dataset layouts


def test_load_any_dataset_detects_layouts(image_root: tuple[Path, list[ImageRef]], tmp_path: Path) -> None:
    root, refs = image_root
    (root / "notes.txt").write_text("not an image")
    folder = load_any_dataset(root)
    assert folder.kind == "folder" and folder.root == root
    assert folder.dataset["id"] == ["cats/a.png", "cats/b.png", "dogs/c.png"]
    assert [r.path for r in folder.image_refs()] == ["cats/a.png", "cats/b.png", "dogs/c.png"]

    single = load_any_dataset(root / "dogs" / "c.png")
    assert single.kind == "folder" and single.load_image(0).size == (14, 8)

    # A DatasetDict saved to disk: the train split is used.
    ds = records_to_dataset(refs, image_mode="feature", root=root)
    datasets.DatasetDict({"train": ds, "test": ds.select([0])}).save_to_disk(str(tmp_path / "dd"))
    dd = load_any_dataset(tmp_path / "dd")
    assert dd.kind == "disk" and len(dd) == 3

    # A folder of parquet shards.
    shards = tmp_path / "shards"
    shards.mkdir()
    ds.select([0, 1]).to_parquet(str(shards / "part-0.parquet"))
    ds.select([2]).to_parquet(str(shards / "part-1.parquet"))
    sh = load_any_dataset(shards)
    assert sh.kind == "parquet" and [r.id for r in sh.image_refs()] == ["img-0", "img-1", "img-2"]

    with pytest.raises(FileNotFoundError):
        load_any_dataset(tmp_path / "missing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="no images"):
        load_any_dataset(tmp_path / "empty")


def test_foreign_dataset_with_broken_image_bytes_is_not_decoded_by_datasets(tmp_path: Path) -> None:
    feats = datasets.Features({"image": datasets.Image(), "label": datasets.Value("int64")})
    ds = datasets.Dataset.from_list(
        [
            {"image": {"bytes": _png(6, 6, 1), "path": None}, "label": 0},
            {"image": {"bytes": b"\x89PNG\r\n\x1a\n broken", "path": None}, "label": 1},
        ],
        features=feats,
    )
    ds.to_parquet(str(tmp_path / "foreign.parquet"))
    source = load_any_dataset(tmp_path / "foreign.parquet")
    items = list(source.iter_images())  # iterating must not decode (and so not crash)
    assert [label for label, _ in items] == ["0", "1"]  # no id column, no path: row index
    assert source.load_image(0).size == (6, 6)
    with pytest.raises(ImageLoadError) as exc:
        source.load_image(1)
    assert exc.value.record == "1"


def test_imagefolder_refuses_non_image_records_and_stringifies_odd_meta(tmp_path: Path) -> None:
    """format='imagefolder' with MCQs used to die with AttributeError ('MCQ' has no 'data'); a meta
    value JSON cannot encode (a Path) crashed save_imagefolder though every other format stores it."""
    with pytest.raises(ValueError, match="cannot write MCQ records"):
        save_records(MCQS, tmp_path / "qa", format="imagefolder")
    ref = ImageRef(id="mem-1", data=_png(5, 4, 9), meta={"origin": Path("/data/x.png"), "nested": {"k": [1, None]}})
    dest = save_records([ref], tmp_path / "if", format="imagefolder")
    (back,) = load_records(dest)
    assert back.meta == {"origin": "/data/x.png", "nested": {"k": [1, None]}}
    assert (dest / back.path).read_bytes() == ref.data
