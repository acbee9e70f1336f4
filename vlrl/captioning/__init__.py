"""Batch captioning of image corpora (``vlrl caption``): streamed sources, exactly-once output, Ray.

See :mod:`vlrl.captioning.job` for the design and ``docs/captioning.md`` for running it at scale.
"""

from vlrl.sources import ImageItem, open_source

from .job import CaptionJob, run_caption
from .store import CaptionStore

__all__ = ["CaptionJob", "CaptionStore", "ImageItem", "open_source", "run_caption"]
