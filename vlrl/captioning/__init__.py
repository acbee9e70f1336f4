"""Batch captioning of image corpora (``vlrl caption``): streamed sources, exactly-once output, Ray.

See :mod:`vlrl.captioning.job` for the design and ``docs/captioning.md`` for running it at scale.
"""

from typing import Any

from vlrl.captioning.job import CaptionJob, run_caption_local
from vlrl.captioning.store import CaptionStore
from vlrl.core.sources import ImageItem, open_source


def run_caption(job: CaptionJob, backend: Any = None) -> dict[str, Any]:
    """Run the job on its engine (``local``: this process; ``ray``: a Ray Data pipeline); returns the manifest."""
    if job.engine == "ray":
        from vlrl.captioning.ray_engine import run_caption_ray

        return run_caption_ray(job)
    if job.engine != "local":
        raise ValueError(f"--engine {job.engine!r}: expected 'local' or 'ray'")
    return run_caption_local(job, backend)


__all__ = ["CaptionJob", "CaptionStore", "ImageItem", "open_source", "run_caption"]
