"""CapRL QA curation: generate MCQs per image, parse them, keep those that need the image.

Stages per image (the unit of work, keyed by the image id):

1. **Load** through :func:`vlrl.core.images.load_image`; a failure goes to the quarantine with its reason.
2. **Generate**: the VLM writes ``per_image`` MCQs from ``caprl_qa_generate.jinja`` (temperature
   0.1 as in the paper, seeded per image so a rerun asks the same thing).
3. **Parse** with :func:`vlrl.methods.caprl.mcq_parse.parse_mcqs`; malformed questions are dropped with a
   reason code (and questions beyond ``per_image`` as ``over_limit``).
4. **Filter** (:mod:`vlrl.methods.caprl.filtering`): R balanced rounds with the image by the filter
   VLM (``filter_vlm``: a small VLM, as in the paper; the question-writing VLM when not given), R
   rounds without it by the text answerer; keep when visual acc > ``visual_min`` and text acc <
   ``text_max`` (or at most chance, with ``chance_floor``).

Failures never block the dataset for good. An image whose model call failed, or whose VLM reply
held no question at all, is not written and is tried again by the next run (a reply without a
question is regenerated with a new seed); each such attempt is logged in ``DIR/attempts/``. After
``max_attempts`` attempts the image is written as it stands: a question whose answering kept failing
is dropped with the reason (``answer_failed: ...``), an image that never got a question counts as
``images_no_question_found``. The settings and model specs are recorded in ``stats.json``
(``settings``) so a resume can be checked against them.

Exactly-once: a finished image is one line in ``records/shard-I-of-N.jsonl``. Images are cut into
batches with *fixed* boundaries over the shard's image list, and every model call goes through the
response cache (``DIR/cache``), so after ``kill -9`` a rerun replays paid calls, redoes at most the
batch in flight with the same composition, and ends with the same records as an uninterrupted run.
An image whose model call failed (endpoint down) is not written and is retried by the next run.

Outputs, rebuilt from the records at the end of every run once no image is pending in any shard:
``DIR/dataset`` (HF ``save_to_disk``: ``id``, ``image``, ``questions`` with options, answer letter and
both accuracies) and ``DIR/stats.json`` (counts of every stage and every drop reason).
"""

from __future__ import annotations

import json
import logging
import shutil
import tempfile
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from vlrl.core.backends import ChatRequest, SamplingParams, load_backend
from vlrl.core.jobs import DEFAULT_MAX_CONSECUTIVE_FAILURES, Job, backend_identity, preflight_all, resolve_source
from vlrl.core.jobs import retry_quarantined as _retry_quarantined
from vlrl.core.pipeline import JsonlStore, Quarantine, atomic_write_json, in_shard, read_jsonl
from vlrl.core.prompts import render
from vlrl.core.stage import Outcome, run_stage
from vlrl.core.video import media_part
from vlrl.judge import chat_structured
from vlrl.methods.caprl.filtering import text_only_filter, visual_filter
from vlrl.methods.caprl.mcq import seeded_rng
from vlrl.methods.caprl.mcq_parse import parse_mcqs

logger = logging.getLogger(__name__)


@dataclass
class CurateConfig:
    per_image: int = 5
    """Questions the VLM is asked to write per image (extra ones are dropped as ``over_limit``)."""
    rounds: int = 4
    """Shuffled answering rounds per question, for each half of the filter."""
    visual_min: float = 0.75
    text_max: float = 0.25
    chance_floor: bool = True
    """Also keep a question the text-only answerer gets right no more often than chance
    (:func:`vlrl.methods.caprl.filtering.text_keep`); ``False`` is the paper's strict rule."""
    temperature: float = 0.1
    max_tokens: int = 1024
    batch_size: int = 8
    """Images per batch (all their requests go to a backend together)."""
    seed: int = 0
    prompt: str = "caprl_qa_generate"
    max_pixels: int | None = None
    """Optional Qwen pixel budget applied when loading images."""
    max_image_pixels: int | None = 89_478_485
    """Decompression-bomb limit: images declaring more pixels are quarantined (None: no limit)."""
    max_attempts: int = 3
    """Runs an image may fail (or yield no question) before it is written as it stands."""
    vlm: str | None = None
    """Spec of the question-writing VLM (filled in by :func:`curate`; part of the recorded settings)."""
    filter_vlm: str | None = None
    """Spec of the VLM that answers with the image in the filter (default: ``vlm``)."""
    answerer: str | None = None
    """Spec of the text-only answerer of the filter (filled in by :func:`curate`)."""
    media: str = "image"
    """``video`` (``--videos``): the source's rows are videos; questions are about the video, and the
    filter's visual half watches it (CapRL++). The default prompt becomes ``caprl_qa_generate_video``."""


WRITER_BATCH_ROWS = 16
"""Rows buffered in memory while the dataset is written (images of a few MB each)."""


def _read_done(folder: Path, pattern: str) -> list[dict[str, Any]]:
    """Records of every shard file (another shard may be mid-write: a torn last line is skipped)."""
    return [rec for f in sorted(folder.glob(pattern)) for rec in read_jsonl(f, "skip", torn_tail=True)]


def curate(
    images: str | Path,
    vlm: str,
    answerer: str,
    out: str | Path,
    config: CurateConfig | None = None,
    shard: tuple[int, int] = (0, 1),
    progress: bool = True,
    *,
    force: bool = False,
    retry_quarantined: bool = False,
    max_consecutive_failures: int = DEFAULT_MAX_CONSECUTIVE_FAILURES,
    filter_vlm: Any = None,
) -> dict[str, Any]:
    """Run (or resume) QA curation of ``images`` into ``out``. Returns the stats dict.

    The stats carry ``failed_this_run`` (images whose model calls failed; a rerun retries them).
    One process writes a folder and shard at a time; a folder written with other settings is
    refused (``force`` starts over), see :mod:`vlrl.core.jobs`. ``filter_vlm`` (a spec or backend)
    answers the visual half of the filter; by default ``vlm``. The pinned settings include every
    curation setting and the three models.
    """
    from dataclasses import replace

    cfg = config or CurateConfig()
    if cfg.media == "video" and cfg.prompt == "caprl_qa_generate":
        cfg = replace(cfg, prompt="caprl_qa_generate_video")
    cfg = replace(cfg, vlm=_spec_name(vlm), answerer=_spec_name(answerer),
                  filter_vlm=_spec_name(filter_vlm if filter_vlm is not None else vlm))
    if cfg.max_attempts < 1:
        raise ValueError(f"max_attempts must be >= 1, got {cfg.max_attempts}")
    out = Path(out)
    tag = f"shard-{shard[0]}-of-{shard[1]}"
    models = ("vlm", "answerer", "filter_vlm")
    settings = {"images": resolve_source(str(images)), "vlm": backend_identity(vlm), "answerer": backend_identity(answerer),
                "filter_vlm": backend_identity(filter_vlm if filter_vlm is not None else vlm),
                **{k: v for k, v in asdict(cfg).items() if k != "batch_size" and k not in models
                   and not (k == "media" and v == "image")}}  # an image job's identity is what it was
    job = Job("data qa-curate", out, settings, shard=shard, force=force,
              outputs=[f"records/{tag}.jsonl", f"records/quarantine-{tag}.jsonl", "dataset", "stats.json"],
              has_work=lambda: any((out / "records" / f).is_file() and (out / "records" / f).stat().st_size > 0
                                   for f in (f"{tag}.jsonl", f"quarantine-{tag}.jsonl")),
              max_consecutive_failures=max_consecutive_failures)
    with job:
        if retry_quarantined:
            _retry_quarantined(out / "records" / f"quarantine-{tag}.jsonl")
        stats = _curate(images, vlm, answerer, out, cfg, shard, progress, job, filter_vlm)
    return stats


def _curate(images, vlm: str, answerer: str, out: Path, cfg: CurateConfig, shard: tuple[int, int], progress: bool, job: Job,
            filter_vlm: Any = None) -> dict[str, Any]:
    from vlrl.core.sources import load_any_dataset

    (out / "records").mkdir(parents=True, exist_ok=True)
    source = load_any_dataset(images, media=cfg.media)
    refs, dups = split_duplicates(source.image_refs())
    by_id = {r.id: r for r in refs}
    all_ids = [r.id for r in refs] + [key for key, _ in dups]
    tag = f"shard-{shard[0]}-of-{shard[1]}"
    store = JsonlStore(out / "records" / f"{tag}.jsonl")
    quarantine = Quarantine(out / "records" / f"quarantine-{tag}.jsonl")
    for key, reason in dups:  # an id reused for another image: that row is quarantined, never silently dropped
        if in_shard(key, shard) and key not in quarantine:
            job.started()
            quarantine.add(key, reason)
    done = {r["id"] for r in _read_done(out / "records", "*.jsonl")}
    (out / "attempts").mkdir(exist_ok=True)
    attempts = Counter(r["id"] for r in _read_done(out / "attempts", "*.jsonl"))
    attempt_log = JsonlStore(out / "attempts" / f"{tag}.jsonl")
    mine = [r.id for r in refs if in_shard(r.id, shard)]
    todo_total = sum(1 for i in mine if i not in done)
    logger.info("qa-curate %s: %d images in shard, %d already done", tag, len(mine), len(mine) - todo_total)
    if not todo_total:  # a finished shard is reported without loading a model
        store.close()
        quarantine.close()
        attempt_log.close()
        return {**finalize(out, all_ids, cfg, source_root=source.root, refs=by_id), "failed_this_run": 0}

    preflight_all([vlm, answerer] + ([filter_vlm] if filter_vlm is not None else []))
    cache = out / "cache"
    vlm_backend = load_backend(vlm, cache=cache)
    text_backend = vlm_backend if answerer == vlm else load_backend(answerer, cache=cache)
    if filter_vlm is None or filter_vlm == vlm:
        filter_backend = vlm_backend
    elif filter_vlm == answerer:
        filter_backend = text_backend
    else:
        filter_backend = load_backend(filter_vlm, cache=cache)
    def process(batch: list[str]) -> list[Outcome]:
        outcomes, loaded = [], {}
        for image_id in batch:
            try:
                loaded[image_id] = by_id[image_id].load(root=source.root, max_pixels=cfg.max_pixels,
                                                        max_pixels_limit=cfg.max_image_pixels)
            except Exception as e:  # noqa: BLE001 - ImageLoadError and anything a decoder throws
                outcomes.append(Outcome.fail(image_id, getattr(e, "reason", str(e))))
        records, failed = _process_batch(loaded, vlm_backend, text_backend, cfg, attempts=attempts,
                                         filter_vlm=filter_backend)
        outcomes += [Outcome.ok(rec["id"], rec) for rec in records]
        for image_id, reason in failed:  # retried by the next run, until cfg.max_attempts
            attempts[image_id] += 1
            attempt_log.append({"id": image_id, "reason": reason})
            outcomes.append(Outcome.retry(image_id, reason))
        return outcomes

    try:
        # fixed batch boundaries: a resumed run sends a half-done batch with the neighbours it had
        counts = run_stage(mine, key=str, process=process, store=store, quarantine=quarantine, done=[done],
                           batch_size=cfg.batch_size, stable_batches=True, desc="qa-curate", job=job,
                           progress=progress, progress_by="request", failure_log=None)  # _process_batch logs each failure
    finally:
        store.close()
        quarantine.close()
        attempt_log.close()
        for b in {id(x): x for x in (vlm_backend, text_backend, filter_backend)}.values():
            b.close()
    retry = counts.failed
    if retry:
        logger.warning("%d image(s) hit a backend error and were not written; rerun the same command to retry them", retry)
    return {**finalize(out, all_ids, cfg, source_root=source.root, refs=by_id), "failed_this_run": retry}


def split_duplicates(refs: list[Any]) -> tuple[list[Any], list[tuple[str, str]]]:
    """(first ref of each id, [(ID#dup-N, reason)] for later rows reusing an id for another image).

    A row repeating the same id *and* image is the same record and is skipped."""
    first: dict[str, Any] = {}
    unique, dups = [], []
    for r in refs:
        seen = first.get(r.id)
        if seen is None:
            first[r.id] = r
            unique.append(r)
        elif (seen.path, seen.data) != (r.path, r.data):
            n = sum(1 for k, _ in dups if k.startswith(f"{r.id}#dup-")) + 1
            dups.append((f"{r.id}#dup-{n}", f"duplicate id {r.id!r} names a different image ({r.path or '<bytes>'}); give it a unique id"))
    return unique, dups


def _process_batch(
    loaded: dict[str, Any], vlm, text_backend, cfg: CurateConfig, *, attempts: Counter | None = None,
    filter_vlm: Any = None,
) -> tuple[list[dict], list[tuple[str, str]]]:
    """Generate, parse and filter one batch of loaded images.

    Returns (records, failed ``(id, reason)``); a failed image is retried by the next run until it
    has failed ``cfg.max_attempts`` times, after which it is written as it stands.
    """
    if not loaded:
        return [], []
    attempts = attempts if attempts is not None else Counter()
    filter_vlm = filter_vlm if filter_vlm is not None else vlm
    ids = list(loaded)
    prompt = render(cfg.prompt, n=cfg.per_image)
    reqs = []
    for image_id in ids:
        # attempt 0 keeps the historical seed (its cached reply replays); a retry of an image whose
        # reply held no question needs a new draw, not the cached one
        salt = (attempts[image_id],) if attempts[image_id] else ()
        seed = seeded_rng("qa_generate", cfg.seed, image_id, *salt).getrandbits(31)
        sampling = SamplingParams(max_tokens=cfg.max_tokens, temperature=cfg.temperature, seed=seed if cfg.temperature > 0 else None)
        content = [media_part(loaded[image_id]), {"type": "text", "text": prompt}]
        reqs.append(ChatRequest([{"role": "user", "content": content}], sampling, id=image_id))
    # through the judge seam: parse_mcqs never raises, so no correction rounds; a backend that raises
    # or errors leaves the image for the next run
    gens = chat_structured(vlm, reqs, lambda text, i: parse_mcqs(text), max_retries=0, raw_text=True)
    failed: list[tuple[str, str]] = []
    parsed: dict[str, Any] = {}
    for image_id, res in zip(ids, gens, strict=True):
        last_try = attempts[image_id] + 1 >= cfg.max_attempts
        if not res.ok:
            logger.warning("%s: generation failed: %s", image_id, res.error)
            failed.append((image_id, f"generation failed: {res.error}"))
            continue
        raw, pr = res.raw[-1], res.value
        if not pr.found:
            logger.warning("%s: the VLM's answer holds no multiple-choice question (%r)%s", image_id, raw[:80],
                           "" if last_try else "; will retry on the next run")
            if not last_try:
                failed.append((image_id, "no question in the VLM's reply"))
                continue
        parsed[image_id] = (raw, pr)
    items, keys, owners = [], [], []
    for image_id, (_, pr) in parsed.items():
        for qi, mcq in enumerate(pr.questions[: cfg.per_image]):
            items.append((mcq, loaded[image_id]))
            keys.append(f"{image_id}#{qi}")
            owners.append(image_id)
    vis = visual_filter(items, filter_vlm, cfg.rounds, cfg.visual_min, keys=keys, seed=cfg.seed) if items else []
    txt = text_only_filter([m for m, _ in items], text_backend, cfg.rounds, cfg.text_max, keys=keys, seed=cfg.seed,
                           chance_floor=cfg.chance_floor) if items else []
    verdicts: dict[str, list] = {i: [] for i in parsed}
    for owner, (mcq, _), v, t in zip(owners, items, vis, txt, strict=False):
        verdicts[owner].append((mcq, v, t))
    records = []
    for image_id, (raw, pr) in parsed.items():
        err = next((v.error or t.error for _, v, t in verdicts[image_id] if v.error or t.error), None)
        if err and attempts[image_id] + 1 < cfg.max_attempts:
            logger.warning("%s: answering failed (%s); will retry on the next run", image_id, err)
            failed.append((image_id, f"answering failed: {err}"))
            continue
        dropped = Counter(d["reason"] for d in pr.dropped)
        if len(pr.questions) > cfg.per_image:
            dropped["over_limit"] += len(pr.questions) - cfg.per_image
        questions = []
        for mcq, v, t in verdicts[image_id]:
            if v.error or t.error:
                reason = f"answer_failed: {v.error or t.error}"
                logger.warning("%s: question dropped after %d failed attempts: %s", image_id, cfg.max_attempts,
                               v.error or t.error)
            else:
                reason = None if v.keep and t.keep else ("visual_acc_too_low" if not v.keep else "text_acc_too_high")
            questions.append({**mcq.as_question(), "visual_acc": v.accuracy, "text_acc": t.accuracy, "kept": reason is None, "reason": reason})
        records.append({
            "id": image_id,
            "generated": pr.found,
            "parsed": len(pr.questions),
            "parse_drops": dict(sorted(dropped.items())),
            "questions": questions,
            "raw": raw,
        })
    return records, failed


def _spec_name(spec: Any) -> str | None:
    """A backend spec as recorded in the settings (a ready backend by its identity)."""
    if spec is None or isinstance(spec, str):
        return spec
    identity = spec.identity() if hasattr(spec, "identity") else {}
    return f"{identity.get('kind', type(spec).__name__)}:{identity.get('model', '?')}"


def finalize(out: str | Path, all_ids: list[str], cfg: CurateConfig, *, source_root: Path, refs: dict[str, Any]) -> dict[str, Any]:
    """Write ``stats.json`` (always) and ``dataset`` (once nothing is pending in any shard)."""
    out = Path(out)
    records = {r["id"]: r for r in _read_done(out / "records", "shard-*.jsonl")}
    quarantined = {r["id"]: r for r in _read_done(out / "records", "quarantine-*.jsonl")}
    pending = [i for i in all_ids if i not in records and i not in quarantined]
    parse_drops: Counter = Counter()
    filter_drops: Counter = Counter()
    for r in records.values():
        parse_drops.update(r["parse_drops"])
        filter_drops.update(q["reason"].split(":")[0] for q in r["questions"] if q["reason"])
    kept = sum(q["kept"] for r in records.values() for q in r["questions"])
    stats = {
        "images": len(all_ids),
        "images_done": len(records),
        "images_quarantined": len(quarantined),
        "images_pending": len(pending),
        "quarantine_reasons": dict(sorted(Counter(r["reason"] for r in quarantined.values()).items())),
        "generated": sum(r["generated"] for r in records.values()),
        "parsed": sum(r["parsed"] for r in records.values()),
        "filtered": sum(len(r["questions"]) for r in records.values()),
        "kept": kept,
        "images_with_questions": sum(any(q["kept"] for q in r["questions"]) for r in records.values()),
        "images_no_question_found": sum(r["generated"] == 0 for r in records.values()),
        "drop_reasons": dict(sorted((parse_drops + filter_drops).items())),
        "settings": asdict(cfg),
    }
    atomic_write_json(out / "stats.json", stats)
    if pending:
        logger.info("%d image(s) still pending (other shards or failed calls): dataset not written yet", len(pending))
        return stats
    write_dataset(out / "dataset", [records[i] for i in all_ids if i in records], refs, source_root, media=cfg.media)
    return stats


def write_dataset(dest: Path, records: list[dict[str, Any]], refs: dict[str, Any], root: Path, media: str = "image") -> None:
    """The curated rows: ``id``, the media and the kept ``questions``. A video row's ``video`` is a
    ``{"bytes", "path"}`` struct holding the file (there is no HF feature that decodes videos the way
    vlrl must: under its own loader's refusals)."""
    import datasets

    from vlrl.core.images import resolve_under_root

    q = {k: datasets.Value("string") for k in ("question", "answer")}
    cell = ({"bytes": datasets.Value("binary"), "path": datasets.Value("string")} if media == "video"
            else datasets.Image())
    extra = {"video_path": datasets.Value("string")} if media == "video" else {}
    features = datasets.Features({
        "id": datasets.Value("string"),
        media: cell,
        **extra,
        "questions": datasets.List({**q, "options": datasets.List(datasets.Value("string")),
                                    "visual_acc": datasets.Value("float64"), "text_acc": datasets.Value("float64")}),
    })

    def rows():
        for r in records:
            kept = [{k: x[k] for k in ("question", "options", "answer", "visual_acc", "text_acc")} for x in r["questions"] if x["kept"]]
            if not kept:
                continue
            ref = refs[r["id"]]
            real = resolve_under_root(ref.path, root, ref.id) if not ref.data else None
            data = ref.data if ref.data else real.read_bytes()
            # a video's source file by absolute path: what a reward server reads (CapRL++'s video_path)
            where = {"video_path": str(real) if real else None} if media == "video" else {}
            yield {"id": r["id"], media: {"bytes": data, "path": ref.path or r["id"]}, "questions": kept, **where}

    # Streamed: rows go to Arrow shards a few at a time (WRITER_BATCH_ROWS), and nothing is read
    # back, so peak memory does not grow with the corpus (the paper keeps 75K images; a list of
    # every image's bytes did, and ``save_to_disk`` re-reads the data in ~100 MB batches).
    tmp = Path(tempfile.mkdtemp(dir=dest.parent, prefix=".dataset-"))
    try:
        (tmp / "ds").mkdir()
        n = _write_arrow_shards(tmp / "ds", rows(), features)
        if dest.exists():
            shutil.rmtree(dest)
        (tmp / "ds").rename(dest)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    logger.info("wrote %d images with questions to %s", n, dest)


def _write_arrow_shards(folder: Path, rows: Any, features: Any, shard_bytes: int = 512 * 2**20) -> int:
    """Write ``rows`` as a ``save_to_disk`` folder (``data-i-of-n.arrow`` + ``state.json`` +
    ``dataset_info.json``, loadable by ``datasets.load_from_disk``) without holding them all.

    Returns the number of rows. A new shard starts once a shard holds ``shard_bytes`` of images.
    """
    import datasets
    from datasets.arrow_writer import ArrowWriter

    paths: list[Path] = []
    writer = None
    size = n = 0
    try:
        for row in rows:
            if writer is None or size >= shard_bytes:
                if writer is not None:
                    writer.finalize()
                    writer.close()
                paths.append(folder / f".shard-{len(paths):05d}.arrow")
                writer = ArrowWriter(features=features, path=str(paths[-1]), writer_batch_size=WRITER_BATCH_ROWS)
                size = 0
            writer.write(features.encode_example(row))
            size += len(next(row[k] for k in ("image", "video") if k in row)["bytes"] or b"")
            n += 1
        if writer is None:  # no rows: one empty shard keeps the schema
            paths.append(folder / ".shard-00000.arrow")
            writer = ArrowWriter(features=features, path=str(paths[-1]))
        writer.finalize()
    finally:
        if writer is not None:
            writer.close()
    final = [folder / f"data-{i:05d}-of-{len(paths):05d}.arrow" for i in range(len(paths))]
    for src, dst in zip(paths, final, strict=True):
        src.rename(dst)
    # The two JSON files ``save_to_disk`` writes, from a dataset opened over the shards (memory-mapped:
    # only their metadata is read).
    parts = [datasets.Dataset.from_file(str(f)) for f in final]
    ds = parts[0] if len(parts) == 1 else datasets.concatenate_datasets(parts)
    state = {"_data_files": [{"filename": f.name} for f in final], "_fingerprint": ds._fingerprint,
             "_format_columns": None, "_format_kwargs": {}, "_format_type": None, "_output_all_columns": False,
             "_split": None}
    (folder / "state.json").write_text(json.dumps(state, indent=2, sort_keys=True), encoding="utf-8")
    info = asdict(ds.info)
    (folder / "dataset_info.json").write_text(json.dumps({k: info[k] for k in sorted(info)}, indent=2), encoding="utf-8")
    del ds, parts
    return n
