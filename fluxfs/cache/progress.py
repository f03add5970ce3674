"""A range fill's progress, published in its entry's lock file so other processes read from the fill.

The process filling an entry (`fill.py`) holds the entry's lock exclusively; once the object's size is known
and room reserved it writes into the lock file one header line (`fluxfs-fill <temporary file> <part bytes>
<parts> <size> <crc32c>`) and then one byte per part, set to 1 once that part's bytes are in the temporary
file. Another process asking for ranges of the entry meanwhile does not download them again: it waits for the
parts it needs to be marked and reads them from the temporary file (the same pages), so two processes
starting together cost one download, not two. The wait is bounded: once the lock file has not changed for
`stall` seconds (each part marked changes it) the reader reads from storage; once the lock is free (the fill
completed, or was abandoned) it looks for the entry anew. Trust: the temporary file's name is taken only if
it is one of this entry's fill names, and opened without following links.
"""
from __future__ import annotations

import asyncio
import os
import re
from typing import Any, Optional, Sequence

from .entry import open_fixed
from .lock import Stall, lock_free, stamp
from .spans import read_fd

MAGIC = b"fluxfs-fill "
POLL = 0.01          # seconds between two looks at the lock file, at first
POLL_MAX = 0.05      # ... and at most
_HEADER = re.compile(rb"^fluxfs-fill (?P<tmp>[0-9a-f]{40}\.\d+\.[0-9a-f]+\.part) (?P<part>\d+) (?P<count>\d+) "
                     rb"(?P<size>\d+) (?P<crc>-?\d+)\n")

ENDED = object()  # the fill ended (completed or abandoned): look for the entry anew


def header(tmp_name: str, part: int, count: int, size: int, crc: Optional[int]) -> bytes:
    """What the filler writes at the start of the lock file once its temporary file is reserved."""
    return MAGIC + b"%s %d %d %d %d\n" % (tmp_name.encode(), part, count, size, -1 if crc is None else crc)


async def read(directory: str, eid: str, spans: Sequence[tuple[int, int]], into: Optional[list],
               stall: float) -> Any:
    """(the spans' bytes, or [] with `into` filled, size, crc32c) read from another process's fill of `eid`;
    ENDED: the fill ended (look again); None: read from storage (no fill, one making no progress, a span past
    the end)."""
    try:
        fd = open_fixed(os.path.join(directory, f"{eid}.lock"))
    except OSError:
        return None
    try:
        return await _wait_and_read(fd, directory, eid, spans, into, stall)
    finally:
        os.close(fd)


async def _wait_and_read(fd: int, directory: str, eid: str, spans: Sequence[tuple[int, int]],
                         into: Optional[list], stall: float) -> Any:
    bound = Stall(stall, first=POLL, most=POLL_MAX)  # the same bound as every wait on another process (lock.py)
    while True:
        if lock_free(fd):  # the filler let go (done, abandoned, dead)
            return ENDED
        if bound.stalled(stamp(fd)):
            return None  # the filler stopped making progress: storage
        head = _header(fd)
        if head is not None:
            tmp, part, count, size, crc = head
            if tmp[:40] != eid:
                return None
            if any(s > size for s, _ in spans):
                return None  # the uncached read names the mistake
            want = sorted({p for s, e in spans if min(e, size) > s
                           for p in range(s // part, (min(e, size) - 1) // part + 1)})
            if not want or _marked(fd, len(_raw_header(head)), want):
                got = _read_tmp(directory, tmp, spans, size, into)
                if got is None:
                    return ENDED  # renamed into place (or removed) meanwhile
                return got, size, crc
        await asyncio.sleep(bound.pause())


def _raw_header(head: tuple) -> bytes:
    tmp, part, count, size, crc = head
    return header(tmp, part, count, size, crc)


def _header(fd: int) -> Optional[tuple[str, int, int, int, Optional[int]]]:
    m = _HEADER.match(os.pread(fd, 200, 0))
    if m is None:
        return None
    crc = int(m.group("crc"))
    return (m.group("tmp").decode(), int(m.group("part")), int(m.group("count")), int(m.group("size")),
            None if crc < 0 else crc)


def _marked(fd: int, at: int, parts: list[int]) -> bool:
    lo, hi = parts[0], parts[-1]
    flags = os.pread(fd, hi - lo + 1, at + lo)
    return len(flags) == hi - lo + 1 and all(flags[p - lo] == 1 for p in parts)


def _read_tmp(directory: str, tmp: str, spans: Sequence[tuple[int, int]], size: int,
              into: Optional[list]) -> Optional[list]:
    try:
        fd = open_fixed(os.path.join(directory, tmp))
    except FileNotFoundError:
        return None
    try:
        return read_fd(fd, spans, size, into)
    finally:
        os.close(fd)

