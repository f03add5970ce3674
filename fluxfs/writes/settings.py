"""What a write settles before its first byte: the destination, the strategy class for the
``multipart`` option ("xml", "compose", "off"), the part size and how many parts go up at once."""
from __future__ import annotations

from typing import TYPE_CHECKING, Callable

from ..gcs.limits import RESUMABLE_CHUNK_MULTIPLE, XML_MIN_PART_SIZE
from .compose import ComposeUploader
from .resumable import ResumableUploader
from .xml import XmlUploader

if TYPE_CHECKING:  # pragma: no cover
    from ..core import FluxFileSystem
    from .parts import PartWriter, Uploader

# Part size and concurrency defaults, and how they were measured: fluxfs/options.py.

STRATEGIES: dict[str, Callable[["PartWriter"], "Uploader"]] = {
    "xml": XmlUploader, "compose": ComposeUploader, "off": ResumableUploader,
}


def upload_settings(fs: "FluxFileSystem", part_size: int | None = None) -> tuple[int, int, Callable]:
    """(part size, concurrency, uploader class) from the filesystem options, validated."""
    strategy = fs.options.multipart
    part = int(part_size or fs.options.part_size)
    conc = fs.options.write_concurrency
    if part < 1:
        raise ValueError(f"part_size must be positive, not {part}")
    if strategy == "xml" and part < XML_MIN_PART_SIZE:
        raise ValueError(f"part_size {part} is below the 5 MiB ({XML_MIN_PART_SIZE}) minimum of XML multipart "
                         "uploads; use a larger part_size or multipart='compose'")
    if strategy == "off":
        if part % RESUMABLE_CHUNK_MULTIPLE:
            raise ValueError(f"part_size {part} must be a multiple of 256 KiB for resumable uploads (multipart='off')")
        conc = 1  # one resumable session takes its chunks in order
    return part, conc, STRATEGIES[strategy]


def object_path(fs: "FluxFileSystem", path: str) -> tuple[str, str]:
    """(bucket, key) of a write's destination; refuses a generation or a bare bucket."""
    bucket, key, generation = fs.split_path(path)
    if generation:
        raise ValueError(f"cannot write to a specific generation: {path}")
    if not key:
        raise ValueError(f"not an object path (no key after the bucket): {path}")
    return bucket, key
