"""A body received in chunks, read by byte range without joining it first."""
from __future__ import annotations

import bisect
import itertools


class Chunked:
    """Bytes kept as the chunks they arrived in, addressed as one sequence, never joined whole.

    The server stores XML multipart bodies this way (completing a 2 GB upload costs no 2 GB copy;
    a read copies only the range it serves), and compose reads slice composites out of it.
    """

    __slots__ = ("chunks", "ends")

    def __init__(self, chunks: list):
        self.chunks = [c for c in chunks if len(c)]
        self.ends = list(itertools.accumulate(len(c) for c in self.chunks))

    def __len__(self) -> int:
        return self.ends[-1] if self.ends else 0

    def __bytes__(self) -> bytes:
        return b"".join(self.chunks)

    def views(self, start: int, end: int) -> list[memoryview]:
        """Bytes [start, end) as views of the chunks they lie in (no copy)."""
        i = bisect.bisect_right(self.ends, start)
        out = []
        while start < end:
            lo = start - (self.ends[i] - len(self.chunks[i]))
            take = min(end - start, len(self.chunks[i]) - lo)
            out.append(memoryview(self.chunks[i])[lo:lo + take])
            start += take
            i += 1
        return out

    def slice(self, start: int, end: int):
        """Bytes [start, end): a memoryview when inside one chunk, else a copy of just that range."""
        views = self.views(start, end)
        return views[0] if len(views) == 1 else b"".join(views)
