"""Cache fills written with O_DIRECT: the bytes go to disk without taking new page-cache pages.

Putting fresh pages into the page cache costs the kernel about a second of system CPU per GB on a small
node, CPU the reads and the trainer share; a fill's bytes are read only in a later epoch (from disk then).
Writes go through one reusable page-aligned buffer per thread (an anonymous mmap), in whole `BLOCK`-byte
blocks at `BLOCK`-aligned offsets; the tail block is padded with zeros and the caller truncates the file to
its size. Where the filesystem refuses O_DIRECT (tmpfs: EINVAL) the caller writes through the page cache.
"""
from __future__ import annotations

import errno
import mmap
import os
import threading
from typing import Iterable, Optional

BLOCK = 4096           # the alignment of offsets, lengths and the buffer (a page; any device's logical block)
BUFFER = 4 * 2**20     # bytes per write call, per filler thread
REFUSED = (errno.EINVAL, errno.EOPNOTSUPP)
_local = threading.local()


def open_direct(path: str) -> Optional[int]:
    """`path` opened for writing with O_DIRECT, or None where the platform or the filesystem refuses it."""
    flag = getattr(os, "O_DIRECT", 0)
    if not flag:
        return None
    try:
        return os.open(path, os.O_WRONLY | flag | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        if exc.errno in REFUSED:
            return None
        raise


def _buffer() -> memoryview:
    buf = getattr(_local, "buf", None)
    if buf is None:
        buf = _local.buf = memoryview(mmap.mmap(-1, BUFFER))  # page-aligned, reused by every write of the thread
    return buf


def write(fd: int, pieces: Iterable[bytes], offset: int) -> int:
    """`pieces` end to end at `offset` (a multiple of `BLOCK`) of the O_DIRECT `fd`, the tail block padded with
    zeros (the file may end up to `BLOCK - 1` bytes longer: truncate it): the bytes of `pieces` written.
    Raises OSError(EINVAL) where the filesystem refuses the direct write itself (nothing is then written
    past `offset` that a buffered rewrite would not overwrite)."""
    if offset % BLOCK:
        raise ValueError(f"an O_DIRECT write must start at a multiple of {BLOCK}, not {offset}")
    buf, used, at, total = _buffer(), 0, offset, 0
    for piece in pieces:
        view = memoryview(piece).cast("B")
        total += len(view)
        while len(view):
            n = min(len(view), BUFFER - used)
            buf[used:used + n] = view[:n]
            used, view = used + n, view[n:]
            if used == BUFFER:
                _flush(fd, buf, used, at)
                at, used = at + used, 0
    if used:
        padded = -(-used // BLOCK) * BLOCK
        buf[used:padded] = bytes(padded - used)
        _flush(fd, buf, padded, at)
    return total


def _flush(fd: int, buf: memoryview, n: int, at: int) -> None:
    view = buf[:n]
    while len(view):
        done = os.pwrite(fd, view, at)
        if done <= 0 or done % BLOCK:  # a short direct write ends on a block boundary; anything else: stop
            raise OSError(errno.EIO, f"an O_DIRECT write wrote {done} bytes, not a multiple of {BLOCK}")
        view, at = view[done:], at + done
