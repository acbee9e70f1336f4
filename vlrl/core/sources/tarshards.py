"""WebDataset-style tar shards as a streamed image source (``kind="wds"`` of :func:`vlrl.core.sources.open_source`).

A ``.tar`` file, a folder of them, a glob or a brace range ``shards-{000..009}.tar``, read as a
stream; the id is ``<shard name>/<sample __key__>``. Split from :mod:`vlrl.core.sources.stream`,
whose module docstring describes every layout.
"""

from __future__ import annotations

import glob
import logging
import os
import re
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from vlrl.core.images import IMAGE_EXTENSIONS
from vlrl.core.sources.items import ImageItem, ImageSource

logger = logging.getLogger(__name__)


def _expand_braces(pattern: str) -> list[str]:
    m = re.search(r"\{(\d+)\.\.(\d+)\}", pattern)
    if not m:
        return [pattern]
    lo, hi = m.group(1), m.group(2)
    width = len(lo)
    out = []
    for k in range(int(lo), int(hi) + 1):
        out.extend(_expand_braces(pattern[: m.start()] + str(k).zfill(width) + pattern[m.end() :]))
    return out


def _split_key(name: str) -> tuple[str, str]:
    """WebDataset rule: the key is everything before the first dot of the basename."""
    d, base = os.path.split(name)
    stem, dot, ext = base.partition(".")
    return (f"{d}/{stem}" if d else stem), ext.lower()


def _shard_name(path: str) -> str:
    """``/data/shards-003.tar.gz`` → ``shards-003``: ids are ``<shard>/<key>``, unique even when two
    shards reuse a key (WebDataset only asks writers to avoid that; a reader must not lose images)."""
    name = os.path.basename(path)
    for ext in (".tar.gz", ".tgz", ".tar"):
        if name.endswith(ext):
            return name[: -len(ext)]
    return name


class TarShardSource(ImageSource):
    kind = "wds"

    def __init__(self, root: str | Path) -> None:
        super().__init__(root)
        r = str(root)
        if os.path.isdir(r):
            self.shards = sorted(str(p) for p in Path(r).rglob("*") if p.name.endswith((".tar", ".tar.gz", ".tgz")))
        else:
            self.shards = []
            for pat in _expand_braces(r):
                self.shards.extend(sorted(glob.glob(pat)) if any(c in pat for c in "*?[") else [pat])
        if not self.shards:
            raise ValueError(f"{root}: no tar shards found")

    def iter_items(self, with_data: bool = True) -> Iterator[ImageItem]:
        for shard in self.shards:
            shard = os.path.abspath(shard)
            seekable = shard.endswith(".tar")
            prefix = _shard_name(shard)
            try:
                # a plain .tar listed without data is opened seekable: headers are read, data seeked over
                mode = "r:" if seekable and not with_data else "r|*"
                tf = tarfile.open(shard, mode)  # noqa: SIM115 - closed by the with below
            except (OSError, tarfile.TarError) as e:
                logger.warning("%s: cannot open tar shard (%s); skipping it", shard, e)
                continue
            seen: str | None = None
            with tf:
                try:
                    for member in tf:
                        if not member.isfile():
                            continue
                        key, ext = _split_key(member.name)
                        if "." + ext.rsplit(".", 1)[-1] not in IMAGE_EXTENSIONS or key == seen:
                            continue
                        seen = key
                        data = None
                        if with_data:
                            fh = tf.extractfile(member)
                            data = fh.read() if fh is not None else b""
                        loc = (
                            {"kind": "tar", "path": shard, "offset": member.offset_data, "size": member.size}
                            if seekable
                            else {"kind": "tar", "path": shard, "member": member.name}
                        )
                        yield ImageItem(f"{prefix}/{key}", loc, data=data)
                        tf.members.clear()  # TarFile keeps every header it read; a stream needs none
                except (OSError, tarfile.TarError, EOFError) as e:
                    logger.warning("%s: tar shard is damaged after key %s (%s); skipping the rest of it", shard, seen, e)

    def count(self) -> int | None:
        """Samples in uncompressed shards, from their headers (compressed shards: unknown)."""
        if not all(s.endswith(".tar") for s in self.shards):
            return None
        return sum(1 for _ in self.iter_items(with_data=False))

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "shards": len(self.shards)}
