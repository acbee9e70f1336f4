"""``vlrl caption --engine ray``: the same job spread over a Ray cluster with Ray Data.

Layout, and why:

1. **The driver streams the source** exactly as the local engine does (same shard filter, same
   skip-what-is-done), but instead of pixels it writes *locators* — a path, a tar offset, an Arrow
   row — to ``OUT/.ray/pending-*.jsonl``. That list is small (bytes per image, not megabytes) and
   lets Ray Data read the work lazily with ``ray.data.read_json``: no corpus in driver memory.
2. **Workers are an actor pool** (``map_batches`` with the callable class :class:`CaptionWorker`).
   Each actor builds *its own* backend once — an in-process ``hf:`` model on its GPU, or an
   ``openai:`` client for the ``vllm serve`` next to it — taking the next ``--model`` spec from a
   small dispenser actor, so ``--model`` repeated once per GPU server gives each worker its own
   server. Workers read images from the locators (the corpus must be on storage every node can
   see), decode them with :func:`vlrl.core.images.load_image`, and return caption records.
3. **The driver is the single writer.** It consumes the result stream and appends through the
   same :class:`~vlrl.captioning.sink.Sink` (caption parts, quarantine, manifest) as the local
   engine, so the output format and the exactly-once guarantee are the same: kill the driver at
   any moment, rerun, and the pending list is rebuilt from what is already written.
"""

from __future__ import annotations

import json
import logging
import math
import os
import shutil
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from vlrl.captioning.job import (
    CaptionJob,
    PromptRenderer,
    caption_batch,
    count_in_shard,
    job_from_dict,
    job_to_dict,
    load_one,
    open_backend,
    pending_items,
)
from vlrl.captioning.sink import Sink
from vlrl.core.backends.base import BackendError
from vlrl.core.jobs import preflight_all
from vlrl.core.sources import ImageItem

logger = logging.getLogger(__name__)

PENDING_PER_FILE = 10_000


class SpecDispenser:
    """Hands out backend specs round-robin, one per worker as it starts (a Ray actor)."""

    def __init__(self, specs: list[str]) -> None:
        self.specs = list(specs)
        self.i = 0

    def next(self) -> tuple[int, str]:
        i = self.i
        self.i += 1
        return i, self.specs[i % len(self.specs)]


class CaptionWorker:
    """One Ray actor: one backend, captions whole batches of locators."""

    def __init__(self, dispenser: Any, job: dict[str, Any]) -> None:
        import ray

        self.job = job_from_dict(job)
        self.index, spec = ray.get(dispenser.next.remote())
        self.backend = open_backend(self.job, spec)
        self.sampling = self.job.sampling()
        self.pool = ThreadPoolExecutor(max_workers=max(1, self.job.loaders))
        logging.getLogger(__name__).info("caption worker %d uses %s", self.index, spec)

    def __call__(self, batch: dict[str, Any]) -> dict[str, list]:
        items = [ImageItem(str(i), json.loads(loc)) for i, loc in zip(batch["image_id"], batch["locator"], strict=False)]
        prompts = [str(p) for p in batch["prompt"]]
        loaded = list(self.pool.map(lambda it: load_one(it, self.job.max_pixels, self.job.max_image_pixels), items))
        out: dict[str, list] = {"image_id": [], "status": [], "record": [], "reason": []}
        good = []
        for (item, img, err), prompt in zip(loaded, prompts, strict=False):
            if err is not None:
                out["image_id"].append(item.image_id)
                out["status"].append("quarantine")
                out["record"].append(json.dumps(item.locator))
                out["reason"].append(err)
            else:
                good.append((item, img, prompt))
        if good:
            for (item, img, _), (record, error) in zip(good, caption_batch(self.backend, good, self.sampling), strict=False):
                out["image_id"].append(item.image_id)
                out["status"].append("ok" if record is not None else "failed")
                out["record"].append(json.dumps(record, ensure_ascii=False) if record is not None else "")
                out["reason"].append(error or "")
                img.close()
        return out


def _write_pending(job: CaptionJob, sink: Sink, render: PromptRenderer) -> list[str]:
    """Stream the not-yet-captioned items of this shard to JSONL files of locators."""
    work = job.out / ".ray"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    files: list[str] = []
    fh = None
    n = 0
    try:
        for item in pending_items(sink.source, sink, job.shard_tuple, with_data=False):
            try:
                prompt = render(item)
            except Exception as e:  # noqa: BLE001
                sink.add_quarantined(item.image_id, f"prompt template failed: {e}", item.locator)
                continue
            if n % PENDING_PER_FILE == 0:
                if fh is not None:
                    fh.close()
                files.append(str(work / f"pending-{len(files):05d}.jsonl"))
                fh = open(files[-1], "w", encoding="utf-8")  # noqa: SIM115
            fh.write(json.dumps({"image_id": item.image_id, "locator": json.dumps(item.locator), "prompt": prompt}) + "\n")
            n += 1
    finally:
        if fh is not None:
            fh.close()
    logger.info("%d images to caption on Ray", n)
    return files


def _init_ray(job: CaptionJob, workers: int) -> bool:
    """Connect to a cluster (``--ray-address`` / ``RAY_ADDRESS``) or start a local one."""
    import ray

    if ray.is_initialized():
        return False
    address = job.ray_address or os.environ.get("RAY_ADDRESS")
    env = {"env_vars": {k: os.environ[k] for k in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "OMP_NUM_THREADS") if k in os.environ}}
    if address:
        ray.init(address=address, runtime_env=env, log_to_driver=False)
    else:
        cpus = max(os.cpu_count() or 1, math.ceil(workers * job.cpus_per_worker) + 1)
        ray.init(num_cpus=cpus, include_dashboard=False, runtime_env=env, log_to_driver=False)
    return True


def worker_start_error(e: BaseException) -> BackendError:
    """One line for a worker that died building its backend (a missing model folder, a bad server).

    Ray keeps only the worker's traceback text (no exception object), so the reason is read from it.
    """
    import re

    reasons = re.findall(r"BackendError: (.+)", str(e))
    reason = reasons[-1].strip() if reasons else (str(e).strip().splitlines() or [type(e).__name__])[0]
    return BackendError(f"a Ray caption worker could not start its backend: {reason}")


def run_caption_ray(job: CaptionJob) -> dict[str, Any]:
    import ray
    import ray.data

    source = job.open_source()
    render = PromptRenderer(job.prompt_text())  # a bad template fails before anything is written
    sink = Sink(job, source)
    interrupted = True
    started = False
    try:
        sink.start_progress(count_in_shard(source, job.shard_tuple))
        files = _write_pending(job, sink, render)
        if files:
            preflight_all(job.models)  # every worker's server or folder, checked in seconds before Ray starts
            workers = job.num_workers or len(job.models)
            started = _init_ray(job, workers)
            ctx = ray.data.DataContext.get_current()
            ctx.enable_progress_bars = False
            dispenser = ray.remote(SpecDispenser).remote(job.models)
            ds = ray.data.read_json(files, lines=True).map_batches(
                CaptionWorker,
                fn_constructor_kwargs={"dispenser": dispenser, "job": job_to_dict(job)},
                batch_size=job.batch_size,
                batch_format="numpy",
                compute=ray.data.ActorPoolStrategy(size=workers),
                num_cpus=job.cpus_per_worker,
                num_gpus=job.gpus_per_worker or None,
            )
            for batch in ds.iter_batches(batch_size=None, batch_format="numpy"):
                for image_id, status, record, reason in zip(batch["image_id"], batch["status"], batch["record"], batch["reason"], strict=False):
                    if status == "ok":
                        sink.add_caption(json.loads(record))
                    elif status == "quarantine":
                        sink.add_quarantined(str(image_id), str(reason), json.loads(record))
                    else:
                        sink.add_failure(str(image_id), str(reason))
                sink.store.sync()
                if job.limit is not None and sink.new >= job.limit:
                    break
        interrupted = False
    except ray.exceptions.ActorDiedError as e:
        raise worker_start_error(e) from None
    finally:
        manifest = sink.close(interrupted=interrupted)
        if started:
            ray.shutdown()
    if not interrupted:
        shutil.rmtree(job.out / ".ray", ignore_errors=True)
    return manifest
