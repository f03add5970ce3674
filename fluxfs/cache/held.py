"""What a read of an entry holds: the complete local file under its entry's shared lock, or the object's bytes
streamed through without caching; and such a file opened for reading (closing it lets go of the lock)."""
from __future__ import annotations

import dataclasses
import io
import os
from typing import Optional

from .entry import open_fixed
from .lock import FileLock


@dataclasses.dataclass
class Held:
    """An entry being read: `path` (a complete local file) stays in place while `lock` is held; or the
    object's bytes (`data`) when it was streamed through without caching."""

    path: Optional[str]
    data: Optional[bytes]
    lock: Optional[FileLock]
    crc32c: Optional[int] = None  # the entry's, from its sidecar: what a reader of its whole file checks
    parts: Optional[tuple[int, tuple[int, ...]]] = None  # the sidecar's part crc32c: what a ranged read checks

    def read(self) -> bytes:
        if self.data is not None:
            return self.data
        with os.fdopen(open_fixed(self.path), "rb") as f:  # type: ignore[arg-type]
            return f.read()

    def release(self) -> None:
        if self.lock is not None:
            self.lock.release()


class LockedFile(io.BufferedReader):
    """A cached entry opened for reading; closing it releases the entry's shared lock (eviction waits)."""

    def __init__(self, held: Held):
        super().__init__(io.FileIO(open_fixed(held.path), "rb"))  # type: ignore[arg-type]
        self._held = held

    def close(self) -> None:
        try:
            super().close()
        finally:
            self._held.release()
