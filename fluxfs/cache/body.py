"""What a fetch hands the cache: the object's bytes or its chunks, joined, written and checked
(size and crc32c against the object's) so that nothing else is ever cached or returned."""
from __future__ import annotations

import asyncio
import os
from typing import Any, Iterable, Iterator, Union


from ..gcs import checksums
from ..errors import ChecksumMismatch
from .entry import Meta

# What a fetch returns: the object's bytes, or its chunks in order (a list or an iterator: written as they come).
Body = Union[bytes, bytearray, memoryview, Iterable[bytes]]


def chunks_from(agen: Any, loop: asyncio.AbstractEventLoop) -> Iterator[bytes]:
    """An async iterator's chunks, taken one by one on `loop` from a cache thread."""
    while True:
        try:
            yield asyncio.run_coroutine_threadsafe(agen.__anext__(), loop).result()
        except StopAsyncIteration:
            return


def joined(body: Body) -> bytes:
    """The whole object as one bytes object (a fill that cannot be cached is returned this way)."""
    if isinstance(body, bytes):
        return body
    if isinstance(body, (bytearray, memoryview)):
        return bytes(body)
    return b"".join(map(bytes, body))


def write_all(fd: int, chunk: bytes, offset: int) -> None:
    """All of `chunk` at `offset` (os.pwrite may write less than asked)."""
    view = memoryview(chunk)
    while view:
        done = os.pwrite(fd, view, offset)
        view, offset = view[done:], offset + done


def check(data: bytes, meta: Meta) -> None:
    """The fetched bytes are the object's: its size and crc32c, else ChecksumMismatch and nothing cached."""
    check_sums(len(data), checksums.crc32c(data), meta)


def check_sums(n: int, crc: int, meta: Meta) -> None:
    what = f"{meta.bucket}/{meta.key}#{meta.generation}"
    if n != meta.size:
        raise ChecksumMismatch(f"node-local cache: read {n} bytes of {what}, which has {meta.size}: not cached")
    if meta.crc32c is not None and crc != meta.crc32c:
        raise ChecksumMismatch(f"node-local cache: crc32c mismatch filling {what}: not cached")
