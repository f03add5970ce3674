"""The one whole-object crc32c check every reader makes (HTTP, gRPC, pipes' weights): bytes that do not
match the object's crc32c are refused with a ChecksumMismatch, never returned."""
from __future__ import annotations

from typing import Iterable, Optional, Sequence


from . import checksums
from ..errors import ChecksumMismatch
from .checksums import combine_all


def check_whole(chunks: Iterable[bytes], expected: Optional[int], what: str, generation: Optional[str],
                how: str = "", crcs: Optional[Sequence[int]] = None) -> int:
    """The crc32c of `chunks` (a whole object's bytes, in order); ChecksumMismatch naming `what`, its
    `generation` and `how` it was read unless it is `expected` (None: not checked). `crcs`, the crc32c of each
    chunk when the reader already computed them (checking each against the server's), are combined instead of
    hashing every byte a second time."""
    value = 0
    if crcs is not None:
        value = combine_all(chunks, crcs)
    else:
        for c in chunks:
            value = checksums.extend(value, c)
    if expected is not None and value != expected:
        raise ChecksumMismatch(f"crc32c mismatch reading {what} (generation {generation}){how}")
    return value
