"""The column names that hold an image or an image's id, in every source vlrl reads: one list each.

Earlier each reader kept its own list, so a manifest that the caption job accepted could be refused by
QA curation. Lists are in order of preference: when a row has several, the first one wins.
"""

IMAGE_COLUMNS = ("image", "image_path", "path", "file_name", "file", "img")
"""A column holding one image: a path, an HF image struct ``{"bytes", "path"}``, or encoded bytes."""
ID_COLUMNS = ("image_id", "id", "key", "__key__")
"""A column holding a stable id for the row's image (``key``/``__key__``: WebDataset samples)."""
IMAGE_LIST_COLUMNS = ("images",)
"""A column holding a list of images (chat-style training rows); the first is the row's image."""
RECORD_IMAGE_COLUMNS = (*IMAGE_COLUMNS[:2], *IMAGE_LIST_COLUMNS)
"""Training, cold-start and evaluation rows: only the explicit image names count, since such rows
often carry unrelated ``path``/``file`` text columns."""
VIDEO_COLUMNS = ("videos", "video", "video_path")
"""A column holding a row's video: a path, encoded bytes, a ``{"bytes", "path"}`` struct, or a list of
those (``videos``, the public RL layout's column: the first is the row's video)."""
