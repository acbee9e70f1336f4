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

Its own loop, not :func:`vlrl.core.stage.run_stage`: captions go to rolling JSONL/Parquet parts of a
:class:`CaptionStore` (run_stage writes one ``JsonlStore``), and images are decoded on loader threads ahead of the model.

``engine="ray"`` hands the same job to :mod:`vlrl.captioning.ray_engine` (see :func:`vlrl.captioning.run_caption`); the output is identical.
"""

from __future__ import annotations

import logging
import os
import queue
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from vlrl.captioning.captioner import caption_images, load_one
from vlrl.captioning.sink import Sink
from vlrl.captioning.store import part_prefix
from vlrl.core.backends import Backend, SamplingParams, load_backend, parse_spec
from vlrl.core.images import DEFAULT_MAX_PIXELS_LIMIT
from vlrl.core.jobs import DEFAULT_MAX_CONSECUTIVE_FAILURES, preflight
from vlrl.core.pipeline import batched, in_shard, parse_shard
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
    media: str = "image"
    """``video``: ``images`` is a source of videos (``vlrl caption --videos``)."""
    video: dict[str, Any] = field(default_factory=dict)
    """Videos: frame sampling in qwen-vl-utils' keys (``fps``, ``nframes``, ``min_pixels``,
    ``max_pixels``, ``total_pixels``...; :class:`vlrl.core.video.VideoSpec`); empty: its defaults."""
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
        default = template_path("caption_video") if self.media == "video" else DEFAULT_PROMPT_FILE
        path = Path(self.prompt_file) if self.prompt_file else default
        if not path.exists():
            raise FileNotFoundError(f"--prompt-file {path}: not found")
        return path.read_text(encoding="utf-8")

    def open_source(self) -> ImageSource:
        return open_source(self.images, self.source_type, split=self.split, image_column=self.image_column, id_column=self.id_column,
                           media=self.media, video=self.video)

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
        # a video's record: which frames the model saw, when, at what rate (a Clip, vlrl.core.video)
        video = ({"video_id": item.image_id, "video": img.meta.get("path"), "frames": len(img.frames),
                  "fps": img.sample_fps, "frame_times": img.times, "duration": img.duration}
                 if hasattr(img, "frames") else {})
        size = img.frames[0].size if video else (img.width, img.height)
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
                    **video,
                    "width": size[0],
                    "height": size[1],
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
    """The job's backend; afterwards everything alive (torch, transformers, the weights) is frozen out
    of the garbage collector, whose full passes over those objects otherwise cost a small model's
    generate about a quarter of its time. A caption job keeps its model to the end, so nothing is lost."""
    import gc

    cache = job.out / "cache" / cache_name if job.cache else None
    backend = load_backend(spec, cache=cache)
    _set_batch_size(backend, spec, job.batch_size)
    gc.freeze()
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
                t_load = time.perf_counter()
                backend = open_backend(job, job.models[0])  # lazily: a corpus of broken files loads no model
                sink.model_load_seconds += time.perf_counter() - t_load  # not throughput (issue #33)
            if good:
                with sink.captions_in_flight(len(good)):  # the bar moves per caption, not per batch
                    outcomes = caption_batch(backend, good, sampling)
                for (item, _, _), (record, error) in zip(good, outcomes, strict=False):
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
