"""The batch captioning job behind ``vlrl caption``: stream a corpus, caption it, never twice.

CapRL and RubiCap both end by re-captioning millions of images with the trained captioner. That job
runs for days, on preemptible machines, over corpora with broken files in them. So:

* **Streaming.** The source is a lazy iterator; a loader thread decodes the next batches while the
  model works on the current one, through a bounded queue, so memory holds a few batches whatever
  the corpus size. Output is appended line by line.
* **Exactly once.** Captions are committed one flushed line at a time (fsynced once per batch) in
  a :class:`CaptionStore` keyed by ``image_id``; a rerun of the same command reads the ids back and
  skips them. Model calls go through the response cache (``OUT/cache``), so the batch that was in flight when the job was
  killed is replayed, not paid for twice. A rerun with a *different* model, prompt, sampling or
  source into the same folder is refused: mixing two jobs' captions would be silent corruption.
* **Bad images never stop the job.** Anything :func:`vlrl.core.images.load_image` refuses goes to
  ``quarantine.jsonl`` with its reason (and is not retried). A request the *backend* fails (server
  down, timeout) is not quarantined: it is counted, left uncaptioned, and retried by the next run.
* **Any backend.** The job builds :class:`ChatRequest` batches; the in-process ``hf:`` backend runs
  each batch as one left-padded ``generate``, the ``openai:`` backend keeps the batch's requests in
  flight concurrently (raise ``--batch-size`` and the spec's ``concurrency`` together for vLLM).

``engine="ray"`` hands the same job to :mod:`vlrl.captioning.ray_engine` (see :func:`vlrl.captioning.run_caption`); the output is identical.
"""

from __future__ import annotations

import logging
import os
import queue
import resource
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from vlrl.captioning.captioner import caption_images, load_one
from vlrl.captioning.store import CaptionStore, part_prefix, write_dataset_card
from vlrl.core.backends import Backend, SamplingParams, load_backend, parse_spec
from vlrl.core.identity import read_identity, resolve_source
from vlrl.core.images import DEFAULT_MAX_PIXELS_LIMIT
from vlrl.core.jobs import DEFAULT_MAX_CONSECUTIVE_FAILURES, Job, preflight
from vlrl.core.jobs import retry_quarantined as _retry_quarantined
from vlrl.core.pipeline import Quarantine, atomic_write_json, batched, in_shard, parse_shard
from vlrl.core.prompts import from_string, template_path
from vlrl.core.sources import ImageItem, ImageSource, TarShardSource, open_source
from vlrl.core.sources.stream import bad_locator

logger = logging.getLogger(__name__)

DEFAULT_PROMPT_FILE = template_path("caption_default")


@dataclass
class CaptionJob:
    images: str
    """Source: folder, .jsonl/.parquet manifest, save_to_disk dataset, or tar shards."""
    models: list[str]
    """Backend specs. The local engine uses one; the Ray engine gives one to each worker in turn."""
    out: Path
    prompt: str | None = None
    """Prompt text (a jinja template: ``{{ image_id }}``, ``{{ meta.title }}``); default: CapRL's."""
    prompt_file: str | None = None
    shard: str | None = None
    batch_size: int = 16
    max_tokens: int = 256
    temperature: float = 0.0
    top_p: float = 1.0
    seed: int | None = None
    output_format: str = "jsonl"
    part_size: int = 10_000
    """Captions per output part before a new one starts."""
    source_type: str | None = None
    split: str | None = None
    image_column: str | None = None
    id_column: str | None = None
    cache: bool = True
    max_pixels: int | None = None
    """Resize images to this Qwen pixel budget while loading (None: leave it to the backend)."""
    max_image_pixels: int | None = DEFAULT_MAX_PIXELS_LIMIT
    """Decompression-bomb limit: refuse images declaring more pixels (raise it for huge scans)."""
    force: bool = False
    """Start over: remove this shard's captions, quarantine and manifest first."""
    retry_quarantined: bool = False
    """Process the images quarantined by earlier runs again (their old reasons are kept aside)."""
    max_consecutive_failures: int = DEFAULT_MAX_CONSECUTIVE_FAILURES
    """Stop the job after this many backend failures in a row (0: never)."""
    loaders: int = 4
    """Threads decoding images ahead of the model."""
    prefetch: int = 2
    """Batches decoded ahead (bounds memory)."""
    limit: int | None = None
    """Stop after this many new captions (smoke runs)."""
    progress: bool = True
    engine: str = "local"
    ray_address: str | None = None
    num_workers: int | None = None
    """Ray: number of caption workers (default: one per model spec)."""
    gpus_per_worker: float = 0.0
    cpus_per_worker: float = 1.0
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.out = Path(self.out)
        if isinstance(self.models, str):
            self.models = [self.models]
        if not self.models:
            raise ValueError("no --model given")
        if self.prompt is not None and self.prompt_file is not None:
            raise ValueError("give --prompt or --prompt-file, not both")
        if self.batch_size < 1:
            raise ValueError("--batch-size must be >= 1")

    @property
    def shard_tuple(self) -> tuple[int, int]:
        return parse_shard(self.shard)

    def sampling(self) -> SamplingParams:
        return SamplingParams(max_tokens=self.max_tokens, temperature=self.temperature, top_p=self.top_p, seed=self.seed)

    def prompt_text(self) -> str:
        if self.prompt is not None:
            return self.prompt
        path = Path(self.prompt_file) if self.prompt_file else DEFAULT_PROMPT_FILE
        if not path.exists():
            raise FileNotFoundError(f"--prompt-file {path}: not found")
        return path.read_text(encoding="utf-8")

    def open_source(self) -> ImageSource:
        return open_source(self.images, self.source_type, split=self.split, image_column=self.image_column, id_column=self.id_column)

    def names(self) -> dict[str, str]:
        """File names in ``out``: shard jobs sharing a folder each get their own."""
        i, n = self.shard_tuple
        tag = "" if n == 1 else f"-shard{i:03d}of{n:03d}"
        return {"manifest": f"manifest{tag}.json", "quarantine": f"quarantine{tag}.jsonl", "prefix": part_prefix((i, n))}


PROMPT_VARIABLES = ("image_id", "meta")


class PromptRenderer:
    def __init__(self, text: str) -> None:
        import jinja2
        import jinja2.meta

        try:
            unknown = sorted(jinja2.meta.find_undeclared_variables(jinja2.Environment().parse(text)) - set(PROMPT_VARIABLES))
        except jinja2.TemplateSyntaxError as e:
            raise ValueError(f"prompt template: {e}") from None
        if unknown:  # would fail on every image: a job error, not a per-image quarantine
            raise ValueError(f"prompt template uses undefined variable(s) {unknown}; use {{{{ image_id }}}} or {{{{ meta.COLUMN }}}}")
        self.template = from_string(text)

    def __call__(self, item: ImageItem) -> str:
        return self.template.render(image_id=item.image_id, meta=item.meta).strip()


def model_name(spec: str) -> str:
    """What a spec names, without where it is served (so one vLLM per GPU counts as one model)."""
    kind, target, _ = parse_spec(spec)
    return target.rsplit("@", 1)[-1] if kind == "openai" else str(Path(target).resolve()) if Path(target).exists() else target


def fingerprint(job: CaptionJob, source: ImageSource) -> dict[str, Any]:
    """What must not change between a job and its rerun into the same folder: the job's identity
    (:mod:`vlrl.core.identity`), kept in the manifest's ``job`` block."""
    desc = dict(source.describe())
    if "path" in desc:
        desc["path"] = resolve_source(desc["path"])
    return {
        "source": desc,
        "model": sorted({model_name(s) for s in job.models}),
        "prompt": job.prompt_text(),
        "sampling": job.sampling().to_dict(),
        "format": job.output_format,
        "shard": list(job.shard_tuple),
        "max_pixels": job.max_pixels,
    }


def stored_identity(path: Path) -> dict[str, Any] | None:
    """The ``job`` block of an existing manifest (None when there is none or it is unreadable)."""
    return read_identity(path, "job")


def caption_batch(
    backend: Backend, loaded: list[tuple[ImageItem, Any, str]], sampling: SamplingParams
) -> list[tuple[dict[str, Any] | None, str | None]]:
    """Caption decoded images in one backend call: per item (record, None) or (None, error).

    Any text the backend returned is recorded (the corpus keeps what the model said); a backend
    that raises stops the job, since every later batch would fail the same way.
    """
    t0 = time.perf_counter()
    outcomes = caption_images(
        backend, [img for _, img, _ in loaded], [p for _, _, p in loaded], sampling,
        min_words=None, ids=[it.image_id for it, _, _ in loaded], raise_backend_errors=True,
    )
    dt = time.perf_counter() - t0
    now = datetime.now(timezone.utc).isoformat(timespec="seconds")
    out: list[tuple[dict[str, Any] | None, str | None]] = []
    for (item, img, prompt), oc in zip(loaded, outcomes, strict=True):
        if oc.caption is None:
            out.append((None, oc.reason or "backend error"))
            continue
        out.append(
            (
                {
                    "image_id": item.image_id,
                    "caption": oc.caption,
                    # the image reference the next step joins on (reward score/guard carry it, notebooks show it)
                    **({"image": os.path.join(item.locator.get("root") or "", item.locator["path"])} if item.locator.get("kind") == "file" else {}),
                    "model": backend.model,
                    "prompt": prompt,
                    "sampling": sampling.to_dict(),
                    "finish_reason": oc.finish_reason,
                    "prompt_tokens": oc.prompt_tokens,
                    "completion_tokens": oc.completion_tokens,
                    "width": img.width,
                    "height": img.height,
                    "seconds": dt / len(loaded),
                    "batch_seconds": dt,
                    "batch_size": len(loaded),
                    "cached": oc.cached,
                    "created_at": now,
                },
                None,
            )
        )
    return out


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


class Sink:
    """Everything the job writes: caption parts, quarantine, manifest, progress bar. One writer."""

    def __init__(self, job: CaptionJob, source: ImageSource) -> None:
        self.job = job
        names = job.names()
        job.out.mkdir(parents=True, exist_ok=True)
        self.manifest_path = job.out / names["manifest"]
        self.fp = fingerprint(job, source)
        # one writer per folder and shard; the identity lives in the manifest's "job" block
        self.guard = Job(
            "caption", job.out, self.fp, shard=job.shard_tuple, force=job.force,
            outputs=[names["manifest"], names["quarantine"], f"captions/{names['prefix']}-*", f"captions/.{names['prefix']}-*"],
            has_work=lambda: self._has_work(names), stored=stored_identity(self.manifest_path),
            max_consecutive_failures=job.max_consecutive_failures,
        ).__enter__()
        try:
            if job.retry_quarantined:
                _retry_quarantined(job.out / names["quarantine"])
            self.store = CaptionStore(job.out / "captions", prefix=names["prefix"], fmt=job.output_format, max_records=job.part_size)
            self.quarantine = Quarantine(job.out / names["quarantine"], key_field="image_id")
        except BaseException:
            self.guard.__exit__(None, None, None)
            raise
        self.source = source
        self.started = datetime.now(timezone.utc).isoformat(timespec="seconds")
        self.t0 = time.perf_counter()
        self.loop_t0: float | None = None
        self.new = self.new_quarantined = self.failed = 0
        self.models: set[str] = set()
        self._last_manifest = 0.0
        self.bar = None
        self._closed: dict[str, Any] | None = None
        self.started_work = self.manifest_path.exists() and (len(self.store) + len(self.quarantine)) > 0
        if self.started_work:
            self.write_manifest("running")

    def _has_work(self, names: dict[str, str]) -> bool:
        folder = self.job.out / "captions"
        if any(p.stat().st_size > 0 for p in folder.glob(f"{names['prefix']}-*")) if folder.is_dir() else False:
            return True
        q = self.job.out / names["quarantine"]
        return q.is_file() and q.stat().st_size > 0

    def _start_work(self) -> None:
        """The first committed record: only now is the job's identity written (a failed first run leaves none)."""
        if not self.started_work:
            self.started_work = True
            write_dataset_card(self.job.out, self.job.output_format)
            self.guard.started()
            self.write_manifest("running")

    def is_done(self, image_id: str) -> bool:
        return image_id in self.store or image_id in self.quarantine

    def start_progress(self, total: int | None) -> None:
        from tqdm.auto import tqdm

        done = len(self.store) + len(self.quarantine)
        self.bar = tqdm(
            total=total, initial=min(done, total) if total else done, unit="img", desc="captioning",
            disable=not self.job.progress, dynamic_ncols=True, smoothing=0.1,
        )
        self.loop_t0 = time.perf_counter()

    def add_quarantined(self, item_id: str, reason: str, locator: dict | None = None) -> None:
        if item_id not in self.quarantine:
            self._start_work()
            self.quarantine.add(item_id, reason, locator=locator or {})
            self.new_quarantined += 1
            self.guard.quarantined += 1
        self._tick(1)

    def add_caption(self, record: dict[str, Any]) -> None:
        self._start_work()
        if self.store.append(record):
            self.new += 1
            self.guard.done += 1
            self.models.add(record["model"])
        self.guard.breaker.success()
        self._tick(1)

    def add_failure(self, item_id: str, error: str) -> None:
        self.failed += 1
        self.guard.failed += 1
        logger.warning("backend failed on %s: %s (will retry on the next run)", item_id, error)
        self._tick(1)
        self.guard.breaker.failure(f"{item_id}: {error}")

    def _tick(self, n: int) -> None:
        if self.bar is not None:
            self.bar.update(n)
            if self.new_quarantined or self.failed:
                self.bar.set_postfix(quarantined=self.new_quarantined, failed=self.failed, refresh=False)
        if self.started_work and time.perf_counter() - self._last_manifest > 30:
            self.write_manifest("running")

    def write_manifest(self, status: str) -> dict[str, Any]:
        self._last_manifest = time.perf_counter()
        m = self.manifest(status)
        atomic_write_json(self.manifest_path, m)
        return m

    def manifest(self, status: str) -> dict[str, Any]:
        elapsed = time.perf_counter() - (self.loop_t0 or self.t0)
        ext = "jsonl" if self.job.output_format == "jsonl" else "parquet"
        m = {
            "status": status,
            "job": self.fp,
            "engine": self.job.engine,
            "backends": sorted(self.models),
            "output": {
                "format": self.job.output_format,
                "data_files": f"captions/{self.job.names()['prefix']}-*.{ext}",
                "parts": self.store.files(),
                "quarantine": self.job.names()["quarantine"],
                "load_with": "datasets.load_dataset(OUT, split='train')",
            },
            "counts": {"captioned": len(self.store), "quarantined": len(self.quarantine)},
            "this_run": {
                "started_at": self.started,
                "updated_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                "captioned": self.new,
                "quarantined": self.new_quarantined,
                "failed": self.failed,
                "seconds": round(elapsed, 3),
                "images_per_s": round(self.new / elapsed, 4) if elapsed > 0 else None,
                "peak_rss_mb": round(peak_rss_mb(), 1),
            },
        }
        return m

    def close(self, interrupted: bool = False) -> dict[str, Any]:
        """Finish the run; the manifest is written only when the folder holds work of this job."""
        if self._closed is not None:
            return self._closed
        try:
            if self.bar is not None:
                self.bar.close()
            self.store.close(finalize=not interrupted)
            self.quarantine.close()
            stopped_early = self.job.limit is not None and self.new >= self.job.limit
            status = "interrupted" if interrupted else ("incomplete" if self.failed or stopped_early else "complete")
            self._closed = self.write_manifest(status) if self.started_work else self.manifest(status)  # nothing committed: no identity on disk
            return self._closed
        finally:
            self.guard.__exit__(None, None, None)




def count_in_shard(source: ImageSource, shard: tuple[int, int]) -> int | None:
    """Images this shard will see, when that is cheap to know (for the progress bar's ETA)."""
    if shard[1] == 1:
        return source.count()
    if isinstance(source, TarShardSource) and not all(s.endswith(".tar") for s in source.shards):
        return None  # compressed shards: counting would mean decompressing everything
    return sum(1 for it in source.iter_items(with_data=False) if in_shard(it.image_id, shard))


def pending_items(source: ImageSource, sink: Sink, shard: tuple[int, int], with_data: bool = True) -> Iterator[ImageItem]:
    """Items of this shard not yet captioned or quarantined.

    An id seen again with a *different* locator (another file under the same name) is not dropped:
    it becomes its own record, ``ID#dup-HASH``, quarantined with the reason, so the user sees the
    clash. An exact repeat (same id, same locator) is the same image and is skipped.
    """
    import hashlib

    seen: dict[str, bytes] = {}
    for item in source.iter_items(with_data=with_data):
        if not in_shard(item.image_id, shard):
            continue
        where = hashlib.sha1(repr(sorted(item.locator.items())).encode()).digest()[:8] if item.locator else None
        first = seen.setdefault(item.image_id, where) if where is not None else None
        if first is not None and first != where:
            dup = f"{item.image_id}#dup-{where.hex()}"
            if not sink.is_done(dup):
                yield ImageItem(dup, bad_locator(f"duplicate image_id {item.image_id!r} names a different image "
                                                 f"({item.locator.get('path', item.locator)}); give it a unique id"))
            continue
        if not sink.is_done(item.image_id):
            yield item


def _prefetch(items: Iterator[ImageItem], job: CaptionJob, render: PromptRenderer) -> Iterator[list[tuple[ImageItem, Any, str | None, str]]]:
    """Decode batches on background threads, at most ``job.prefetch`` batches ahead."""
    q: queue.Queue = queue.Queue(maxsize=max(1, job.prefetch))
    stop = threading.Event()
    done = object()

    def work() -> None:
        try:
            with ThreadPoolExecutor(max_workers=max(1, job.loaders)) as pool:
                for batch in batched(items, job.batch_size):
                    loaded = list(pool.map(lambda it: load_one(it, job.max_pixels, job.max_image_pixels), batch))
                    out = []
                    for item, img, err in loaded:
                        prompt = None
                        if err is None:
                            try:
                                prompt = render(item)
                            except Exception as e:  # noqa: BLE001 - a template error names the record
                                img, err = None, f"prompt template failed: {e}"
                        out.append((item, img, err, prompt))
                    while not stop.is_set():
                        try:
                            q.put(out, timeout=0.5)
                            break
                        except queue.Full:
                            continue
                    if stop.is_set():
                        return
        except BaseException as e:  # noqa: BLE001 - re-raised in the consumer
            q.put(e)
            return
        q.put(done)

    t = threading.Thread(target=work, name="caption-loader", daemon=True)
    t.start()
    try:
        while True:
            got = q.get()
            if got is done:
                return
            if isinstance(got, BaseException):
                raise got
            yield got
    finally:
        stop.set()


def _set_batch_size(backend: Backend, spec: str, batch_size: int) -> None:
    """The job's batch is the generate batch unless the spec pins the backend's own."""
    inner = getattr(backend, "inner", backend)
    if hasattr(inner, "batch_size") and "batch_size" not in (parse_spec(spec)[2] if isinstance(spec, str) else {}):
        inner.batch_size = batch_size


def open_backend(job: CaptionJob, spec: str, cache_name: str = "responses.sqlite") -> Backend:
    cache = job.out / "cache" / cache_name if job.cache else None
    backend = load_backend(spec, cache=cache)
    _set_batch_size(backend, spec, job.batch_size)
    return backend


def run_caption_local(job: CaptionJob, backend: Backend | None = None) -> dict[str, Any]:
    """Run the job in this process to the end of its source (or ``job.limit``); returns the final manifest."""
    if backend is None and len(job.models) > 1:
        raise ValueError("several --model specs need --engine ray (one backend per worker)")
    source = job.open_source()
    shard = job.shard_tuple
    render = PromptRenderer(job.prompt_text())  # a bad template fails before anything is written
    sink = Sink(job, source)
    own_backend = backend is None
    interrupted = True
    try:
        if backend is None and next(pending_items(source, sink, shard, with_data=False), None) is None:
            logger.info("%s: nothing left to caption in this shard; no model loaded", job.out)
            interrupted = False
            return sink.close()  # the finished job is reported as it stands
        if backend is None:
            preflight(job.models[0])  # a dead server or a wrong folder fails here, in seconds
        sampling = job.sampling()
        sink.start_progress(count_in_shard(source, shard))
        logger.info("captioning %s with %s into %s", job.images, job.models[0] if own_backend else backend.model, job.out)
        for batch in _prefetch(pending_items(source, sink, shard), job, render):
            good = []
            for item, img, err, prompt in batch:
                if err is not None:
                    sink.add_quarantined(item.image_id, err, item.locator)
                else:
                    good.append((item, img, prompt))
            if good and backend is None:
                backend = open_backend(job, job.models[0])  # lazily: a corpus of broken files loads no model
            if good:
                for (item, _, _), (record, error) in zip(good, caption_batch(backend, good, sampling), strict=False):
                    if record is not None:
                        sink.add_caption(record)
                    else:
                        sink.add_failure(item.image_id, error or "backend error")
            sink.store.sync()
            for _, img, _ in good:
                img.close()
            if job.limit is not None and sink.new >= job.limit:
                break
        interrupted = False
        manifest = sink.close()
    except KeyboardInterrupt:
        sink.guard.note_interrupt()
        raise
    finally:
        if interrupted:
            sink.close(interrupted=True)
        if own_backend and backend is not None:
            backend.close()
    return manifest


def job_from_dict(d: dict[str, Any]) -> CaptionJob:
    return CaptionJob(**d)


def job_to_dict(job: CaptionJob) -> dict[str, Any]:
    d = asdict(job)
    d["out"] = str(job.out)
    return d


__all__ = ["CaptionJob", "caption_batch", "load_one", "open_backend", "run_caption_local"]
