"""Where images come from: one place that turns ``SRC`` into images, whatever its layout.

``SRC`` may be a folder of image files, an HF imagefolder, a JSONL/JSON/parquet manifest (or a
folder of them), a ``save_to_disk`` dataset, or (streamed only) WebDataset tar shards. Two access
modes, because the jobs that read images have two shapes:

* :func:`load_any_dataset` → :class:`DatasetSource` (:mod:`vlrl.core.sources.dataset`): random access
  over an Arrow table that keeps every column, with a containment root for relative paths. For jobs
  that need the whole row set up front (QA curation, Prism, RubiCap, ``vlrl data check``,
  :func:`vlrl.core.sources.records_io.load_records`).
* :func:`open_source` → :class:`ImageSource` (:mod:`vlrl.core.sources.stream`): a lazy stream of
  :class:`ImageItem` ``(image_id, locator, data, meta)`` that never holds the corpus in memory and
  whose locators let another process (a Ray worker) read the image again. For corpus-scale jobs
  (``vlrl caption``), and the only reader of tar shards.

Both leave pixels to :func:`vlrl.core.images.load_image`.
"""

from vlrl.core.sources.dataset import DatasetSource, load_any_dataset, load_disk_dataset, plain_image_folder, undecoded
from vlrl.core.sources.stream import (
    ID_COLUMNS,
    IMAGE_COLUMNS,
    KINDS,
    FolderSource,
    HFDiskSource,
    ImageItem,
    ImageSource,
    ManifestSource,
    TarShardSource,
    detect_kind,
    open_source,
    read_locator,
)

__all__ = [
    "ID_COLUMNS",
    "IMAGE_COLUMNS",
    "KINDS",
    "DatasetSource",
    "FolderSource",
    "HFDiskSource",
    "ImageItem",
    "ImageSource",
    "ManifestSource",
    "TarShardSource",
    "detect_kind",
    "load_any_dataset",
    "load_disk_dataset",
    "plain_image_folder",
    "open_source",
    "read_locator",
    "undecoded",
]
