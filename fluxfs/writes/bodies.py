"""Request bodies for uploads: bytes sent in 1 MiB slices instead of handed to aiohttp whole."""
from __future__ import annotations

from ..gcs.progress import SEND_SLICE, SlicedBytes

__all__ = ["DEFAULT_CONTENT_TYPE", "SEND_SLICE", "SlicedBytes", "body"]

DEFAULT_CONTENT_TYPE = "application/octet-stream"


def body(data: bytes, content_type: str = DEFAULT_CONTENT_TYPE) -> SlicedBytes:
    """`data` as a request body that is never copied on its way to the socket, its progress watched."""
    return SlicedBytes(data, content_type=content_type)
