"""The two image-size flags every command that opens images shares, with one meaning each.

``--max-image-pixels`` is the decompression-bomb limit (refuse a file whose header declares more
pixels); ``--resize-max-pixels`` is the Qwen resize budget (shrink decoded images to at most this
many pixels). They used to share the name ``--max-pixels`` with different meanings on different
commands, so a huge legitimate scan could not be let through on purpose. Commands declare them
with the two ``Annotated`` types below and apply them with :func:`image_limits_of`, which reaches
every :func:`vlrl.core.images.load_image` call the command makes, wherever it happens.

Kept free of heavy imports: command modules import it at load time and ``vlrl --help`` must stay fast.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Annotated, Any

import typer

MAX_IMAGE_PIXELS_HELP = ("Decompression-bomb limit: refuse images declaring more pixels (default 89478485, PIL's; "
                         "raise it for huge scans; 0: no limit).")
RESIZE_MAX_PIXELS_HELP = "Qwen resize budget: images are resized to at most this many pixels while loading."

MaxImagePixels = Annotated[int | None, typer.Option("--max-image-pixels", min=0, help=MAX_IMAGE_PIXELS_HELP)]
ResizeMaxPixels = Annotated[int | None, typer.Option("--resize-max-pixels", min=1, help=RESIZE_MAX_PIXELS_HELP)]


def image_limits_of(params: dict[str, Any]) -> AbstractContextManager[None]:
    """The :func:`vlrl.core.images.image_limits` a command's parameters ask for (unset flags keep the defaults)."""
    from vlrl.core.images import FROM_SETTINGS, image_limits

    limit = params.get("max_image_pixels")
    return image_limits(FROM_SETTINGS if limit is None else limit, params.get("resize_max_pixels"))
