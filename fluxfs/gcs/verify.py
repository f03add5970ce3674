"""The one whole-object crc32c check every reader makes (HTTP, gRPC, pipes' weights): bytes that do not
match the object's crc32c are refused with a ChecksumMismatch, never returned."""
from __future__ import annotations

from typing import Iterable, Optional


from . import checksums
from ..errors import ChecksumMismatch


def check_whole(chunks: Iterable[bytes], expected: Optional[int], what: str, generation: Optional[str],
                how: str = "") -> int:
    """The crc32c of `chunks` (a whole object's bytes, in order); ChecksumMismatch naming `what`, its
    `generation` and `how` it was read unless it is `expected` (None: not checked)."""
    value = 0
    for c in chunks:
        value = checksums.extend(value, c)
    if expected is not None and value != expected:
        raise ChecksumMismatch(f"crc32c mismatch reading {what} (generation {generation}){how}")
    return value
