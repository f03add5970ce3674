"""Which whole entries this process has checked against their crc32c, and which failed.

An entry's bytes are checked on its first use in a process (another process, or a run before a restart, may
have written it, and a disk may rot or tear it) and never trusted more than storage: `verify` reads the
file once and remembers the verdict by the file's inode (a refill renames a new file into place, checked
anew). A ranged read of an entry whose sidecar lists its parts' crc32c checks just the parts it reads (each
once per process: `part_checked`), with no pass over the whole file. Entries this process wrote count as
checked (their bytes were checked as they were written); entries renamed into place without an fsync are
checked on every use. crc32c costs ~0.1 s of CPU per GB.
"""
from __future__ import annotations

import os
from typing import Optional


from ..gcs import checksums
from .entry import Meta, open_fixed


class Checks:
    """Entry id -> inode of the whole entries this process checked (or wrote), and of those that failed."""

    def __init__(self) -> None:
        self._good: dict[str, int] = {}
        self._bad: dict[str, int] = {}
        self._parts: dict[tuple[str, int], set[int]] = {}  # (entry id, inode) -> parts checked
        self._parted: set[str] = set()  # entries whose sidecar listed their parts' crc32c

    def part_checked(self, eid: str, ino: int, p: int) -> bool:
        return self._good.get(eid) == ino or p in self._parts.get((eid, ino), ())

    def part_good(self, eid: str, ino: int, p: int) -> None:
        self._parts.setdefault((eid, ino), set()).add(p)
        self._parted.add(eid)

    def verify(self, eid: str, path: str, meta: Meta, by_caller: bool = False) -> Optional[bool]:
        """True: serve it; False: its bytes fail its crc32c; None: a miss (another size, or it failed before).
        `by_caller`: the caller checks what it reads. FileNotFoundError: gone meanwhile."""
        st = os.stat(path)
        if st.st_size != meta.size:
            return None
        if self._bad.get(eid) == st.st_ino:
            return None  # failed before: a miss (dropped then, unless in use)
        if by_caller or meta.crc32c is None or (meta.durable and self._good.get(eid) == st.st_ino):
            return True
        if file_crc(path) != meta.crc32c:
            return False
        self._good[eid] = st.st_ino
        return True

    def checked(self, eid: str) -> bool:
        """True when a lookup reads no more than the sidecar and the file's size (else the whole file, once): checked
        whole, or its sidecar lists its parts' crc32c (`part_good` was called)."""
        return eid in self._good or eid in self._parted

    def good(self, eid: str, ino: int) -> None:
        self._good[eid] = ino
        self._bad.pop(eid, None)

    def failed(self, path: str) -> Optional[str]:
        """Remember the entry at `path` as failing its check; its id (None: gone already)."""
        eid = os.path.basename(path)[:-len(".data")]
        try:
            self._bad[eid] = os.stat(path).st_ino
        except FileNotFoundError:
            return None
        self._good.pop(eid, None)
        self._parted.discard(eid)
        return eid

    def is_bad(self, eid: str) -> bool:
        return eid in self._bad


def file_crc(path: str) -> int:
    """crc32c of an entry's whole file."""
    crc = 0
    with os.fdopen(open_fixed(path), "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            crc = checksums.extend(crc, block)
    return crc
