"""Byte spans of an object read from a local file (a complete entry, or a fill's temporary file)."""
from __future__ import annotations

import os
from typing import Optional, Sequence


def read_fd(fd: int, spans: Sequence[tuple[int, int]], size: int, buffers: Optional[list]) -> list:
    """The spans' bytes from a local file (short past `size`, as a GET would be), or read into `buffers`."""
    out: list = []
    for i, (s, e) in enumerate(spans):
        e = min(e, size)
        if buffers is None:
            out.append(os.pread(fd, e - s, s) if e > s else b"")
            continue
        mv, at = memoryview(buffers[i]).cast("B"), s
        while len(mv):
            n = os.preadv(fd, [mv], at)
            if n <= 0:
                raise EOFError(f"node-local cache: an entry ended at byte {at} of {size}")
            mv, at = mv[n:], at + n
    return out
