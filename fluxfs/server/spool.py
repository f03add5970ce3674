"""Bodies written to a file under ``--root`` as they arrive or are assembled, hashed on the way.

With a root, an upload is never held whole in memory (nor twice: a body, then its copy); its file is renamed
into place when the object is stored (persist.py). A file system error answers 507 (diskerr.py), and the
temporary file is removed on every failure.
"""
from __future__ import annotations

import contextlib
import hashlib
import os
import tempfile
from typing import Any, Iterable, Iterator, Optional

from ..gcs.checksums import extend_view
from .diskerr import INSUFFICIENT_STORAGE, disk_error, is_disk_error
from .errors import ServerError

_STEP = 1024 * 1024


def unlink_quietly(path: str) -> None:
    """Remove `path`; one already gone is fine."""
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


class Spooled:
    """A body in a file of its own (``path``): its size, crc32c (int) and md5 (hash object or None)."""

    __slots__ = ("path", "size", "crc", "md5")

    def __init__(self, path: str, size: int = 0, crc: int = 0, md5: Any = None):
        self.path, self.size, self.crc, self.md5 = path, size, crc, md5

    def add(self, chunk) -> None:
        """Account for `chunk`, just written to the file."""
        self.size += len(chunk)
        self.crc = extend_view(self.crc, chunk)
        if self.md5 is not None:
            self.md5.update(chunk)

    def discard(self) -> None:
        unlink_quietly(self.path)


def new_file(directory: str, what: str, md5: bool = True):
    """(open file, Spooled) for a fresh temporary file in `directory`."""
    try:
        fd, tmp = tempfile.mkstemp(dir=directory, prefix=".tmp-")
    except OSError as e:
        raise disk_error(e, what) from e
    return os.fdopen(fd, "wb"), Spooled(tmp, md5=hashlib.md5() if md5 else None)


@contextlib.contextmanager
def _filling(directory: str, what: str, md5: bool) -> Iterator[tuple[Any, Spooled]]:
    """(open file, Spooled) of a new file in `directory`, fsynced when the block ends; on any failure the
    file is removed, and a refused write becomes the 507 that names `what` (diskerr.py)."""
    f, sp = new_file(directory, what, md5)
    try:
        with f:
            yield f, sp
            f.flush()
            os.fsync(f.fileno())
    except BaseException as e:
        sp.discard()
        if is_disk_error(e):
            raise disk_error(e, what) from e
        raise


async def receive(srv, request, directory: str, what: str, md5: bool = True) -> Spooled:
    """The request body, written to a new file in `directory` as it arrives, fsynced."""
    try:
        with _filling(directory, what, md5) as (f, sp):
            async for chunk in srv.body_iter(request):
                f.write(chunk)
                sp.add(chunk)
    except ServerError as e:
        if e.code == INSUFFICIENT_STORAGE:
            await srv.drain(request)  # the client then reads the answer, not a broken pipe
        raise
    return sp


def read_pieces(obj, start: int = 0, end: Optional[int] = None) -> Iterable[bytes]:
    """An object's body [start, end) in pieces of at most 1 MiB (its file is opened once: a concurrent
    replace that unlinks it cannot cut the read short)."""
    end = obj.size if end is None else end
    if obj.path is not None and obj.data is None:
        with open(obj.path, "rb") as f:
            f.seek(start)
            while start < end:
                piece = f.read(min(_STEP, end - start))
                if not piece:
                    raise OSError(f"{obj.path} is shorter than its object ({obj.size} bytes)")
                start += len(piece)
                yield piece
        return
    while start < end:
        piece = obj.read(start, min(end, start + _STEP))
        start += len(piece)
        yield piece


def assemble(directory: str, sources: Iterable[Iterable[bytes]], what: str, md5: bool = True) -> Spooled:
    """A new file in `directory` holding the pieces of `sources` one after another, fsynced."""
    with _filling(directory, what, md5) as (f, sp):
        for pieces in sources:
            for piece in pieces:
                f.write(piece)
                sp.add(piece)
    return sp


def file_pieces(path: str, start: int = 0, end: Optional[int] = None) -> Iterable[bytes]:
    """Bytes [start, end) of a file in pieces of at most 1 MiB."""
    with open(path, "rb") as f:
        f.seek(start)
        while end is None or start < end:
            piece = f.read(_STEP if end is None else min(_STEP, end - start))
            if not piece:
                return
            start += len(piece)
            yield piece
