"""Pack files: many small object entries in one file, written once by one fill and read with `pread`.

`<24 hex>.pack` holds the bytes of fill batches end to end; the index (index.py) says where each object lies
and its crc32c. Its filler holds it from its creation until it closes it: a shared `flock` (in use, as a
reader's while it reads: eviction takes it exclusively without waiting, so a pack being filled or read is
never removed; claims.py lets it go while none of its claims are pending) and, where the platform has
open-file-description locks (Linux), a write lock on one byte past any pack's end, which tells the processes
waiting on its rows that the filler is alive (`held`): one pack then takes a process's claims of many calls,
up to its size. Elsewhere the filler holds an exclusive `flock` instead, and a pack takes one call's claims.
A filler killed mid-fill (the kernel drops its locks) leaves rows that never became complete, removed by the
next claim that meets them (and a pack with nothing complete in it, which sweeps remove).
Packs are not fsynced: every read checks each object's crc32c and a torn one is read from storage again.
A pack's recency for LRU eviction is its mtime, which every read touches.
"""
from __future__ import annotations

import errno
import fcntl
import os
import re
import sqlite3
import struct
from typing import Optional


from ..gcs import checksums
from . import body, direct, index
from .entry import open_fixed
from .lock import flock_within, lock_free

PACK = re.compile(r"^(?P<id>[0-9a-f]{24})\.pack$")
Wanted = tuple[str, str, str, str, int, Optional[int]]  # store, bucket, key, generation, size, crc32c (None: unknown)


def path_of(directory: str, pack: str) -> str:
    return os.path.join(directory, f"{pack}.pack")


def parse_pack(name: str) -> Optional[str]:
    """The pack id of a pack file's name, else None."""
    m = PACK.match(name)
    return m.group("id") if m else None


FILLING = 2**62  # the byte a filler's open-file-description lock covers (past any pack's end): "being filled"
SHAREABLE = hasattr(fcntl, "F_OFD_SETLK")  # a pack can take claims of many calls (see the module docstring)
_FLOCK = "hhqqi4x"  # struct flock: type, whence, start, len, pid


def _filling_lock(fd: int, cmd: int, kind: int) -> int:
    """The open-file-description lock `cmd` of `kind` on the FILLING byte of `fd`; the lock type it answers."""
    got = fcntl.fcntl(fd, cmd, struct.pack(_FLOCK, kind, os.SEEK_SET, FILLING, 1, 0))
    return struct.unpack(_FLOCK, got)[0]


class NewPack:
    """A pack being filled: created (never an existing name) and held (see the module docstring) until `close`.
    `end`: the bytes claimed in it so far."""

    def __init__(self, directory: str):
        self.directory, self.done, self.direct, self.end = directory, False, None, 0
        while True:
            self.name = os.urandom(12).hex()
            self.path = path_of(directory, self.name)
            self.fd = open_fixed(self.path, os.O_RDWR | os.O_CREAT | os.O_EXCL)
            try:
                fcntl.flock(self.fd, (fcntl.LOCK_SH if SHAREABLE else fcntl.LOCK_EX) | fcntl.LOCK_NB)
                if os.fstat(self.fd).st_nlink:
                    if SHAREABLE:
                        _filling_lock(self.fd, fcntl.F_OFD_SETLK, fcntl.F_WRLCK)
                    self.direct = direct.open_direct(self.path)  # O_DIRECT where allowed: `direct.py`
                    return
            except BlockingIOError:  # a sweep saw it before we locked it: it removes it, we take another name
                pass
            except BaseException:
                self.close()
                raise
            os.close(self.fd)

    def allocate(self, at: int, n: int) -> None:
        """Take bytes `at` to `at + n` of disk now, as the accounting counted them (ENOSPC raised here, not
        mid-write)."""
        try:
            os.posix_fallocate(self.fd, at, n)
        except OSError as exc:
            if exc.errno not in (errno.EOPNOTSUPP, errno.EINVAL):
                raise
            if os.fstat(self.fd).st_size < at + n:
                os.ftruncate(self.fd, at + n)

    def write(self, parts: list[bytes], at: int = 0) -> None:
        """The objects' bytes end to end from offset `at`: the whole blocks with O_DIRECT (`direct.py`), the
        partial blocks at either end (shared with the claims before and after in the pack) through the page
        cache, as is everything where the filesystem refuses the direct write."""
        if self.direct is not None:
            end = at + sum(map(len, parts))
            lo, hi = -(-at // direct.BLOCK) * direct.BLOCK, end // direct.BLOCK * direct.BLOCK
            if lo < hi:
                head, middle, tail = _cut(parts, lo - at, hi - at)
                try:
                    direct.write(self.direct, middle, lo)
                except OSError as exc:
                    if exc.errno not in direct.REFUSED:
                        raise  # through the page cache only where the filesystem refuses the direct write
                    os.close(self.direct)
                    self.direct = None  # and for the pack's next claims
                else:
                    _pwritev(self.fd, head, at)
                    _pwritev(self.fd, tail, hi)
                    return
        _pwritev(self.fd, parts, at)

    def close(self) -> None:
        """Let go; a pack with no complete row (`done` unset) is removed first."""
        if self.fd < 0:
            return
        try:
            if not self.done:
                try:
                    os.unlink(self.path)
                except FileNotFoundError:
                    pass
        finally:
            self.forget()

    def forget(self) -> None:
        """Close the pack's files as they are (a forked child's copies: its parent still holds the pack)."""
        fd, self.fd = self.fd, -1
        if fd >= 0:
            os.close(fd)
        if self.direct is not None:
            os.close(self.direct)
            self.direct = None


def _cut(parts: list, a: int, b: int) -> tuple[list, list, list]:
    """`parts` (end to end) cut at byte positions a <= b: views of bytes [0, a), [a, b) and [b, end)."""
    out: tuple[list, list, list] = ([], [], [])
    at = 0
    for part in parts:
        view = memoryview(part).cast("B")
        n = len(view)
        for k, (lo, hi) in enumerate(((0, a), (a, b), (b, at + n))):
            x, y = max(lo, at), min(hi, at + n)
            if x < y:
                out[k].append(view[x - at:y - at])
        at += n
    return out


def _pwritev(fd: int, parts: list, at: int) -> None:
    """`parts` end to end at `at` through the page cache, without joining them first."""
    for first in range(0, len(parts), 512):  # below any IOV_MAX
        group = parts[first:first + 512]
        size = sum(map(len, group))
        done = os.pwritev(fd, group, at) if group else 0
        if done < size:  # a short write: the rest one by one
            body.write_all(fd, b"".join(group)[done:], at + done)
        at += size


def held(directory: str, pack: str) -> bool:
    """True while the pack's filler holds it (see the module docstring), False once nobody does (the filler closed
    it, gave up or died)."""
    try:
        fd = open_fixed(path_of(directory, pack))
    except FileNotFoundError:
        return False
    try:
        if SHAREABLE:
            return _filling_lock(fd, fcntl.F_OFD_GETLK, fcntl.F_RDLCK) != fcntl.F_UNLCK
        return not lock_free(fd)
    finally:
        os.close(fd)


def read(directory: str, pack: str, items: list[tuple[int, int, int, int]], stall: float = 60.0
         ) -> tuple[dict[int, bytes], list[int]]:
    """({i: bytes} of the items (i, offset, size, crc32c) whose bytes in `pack` pass their crc32c, [i failing]),
    under a shared lock. A pack gone (evicted or removed by hand) fails every item; one held without progress
    for `stall` seconds (its filler or an evictor stopped) is neither: its items are read from storage."""
    try:
        fd = open_fixed(path_of(directory, pack))
    except FileNotFoundError:
        return {}, [i for i, *_ in items]
    got, bad = {}, []
    try:
        if not flock_within(fd, fcntl.LOCK_SH, stall):  # waits for an evictor's or filler's brief hold, bounded
            return {}, []
        if os.fstat(fd).st_nlink == 0:
            return {}, [i for i, *_ in items]  # evicted between the lookup and the lock
        for i, offset, size, crc in items:
            data = os.pread(fd, size, offset)
            if len(data) == size and checksums.crc32c(data) == crc:
                got[i] = data
            else:
                bad.append(i)  # torn (never fsynced) or changed: read from storage again
        try:
            os.utime(fd)  # recency for LRU eviction
        except OSError:
            pass
    finally:
        os.close(fd)
    return got, bad


def read_batch(directory: str, wanted: list[tuple[int, Wanted]], stall: float = 60.0) -> dict[int, bytes]:
    """{i: bytes} of the wanted objects that have a complete packed entry: one index query, then each pack
    read once; entries that fail their check, or whose crc32c is not the one the caller knows (another
    object's bytes), are dropped from the index (filled again)."""
    if not wanted or not index.exists(directory):
        return {}
    db = index.connect(directory)
    rows = index.lookup(db, [w[:4] for _, w in wanted])
    groups: dict[str, list[tuple[int, int, int, int]]] = {}
    names: dict[int, tuple[str, str, str, str, str]] = {}
    bad: list[int] = []
    for i, (store, bucket, key, generation, size, known) in wanted:
        found = rows.get((store, bucket, key, generation))
        if found is not None and found[0][2] == size:
            pack, offset, n, crc = found[0]
            names[i] = (store, bucket, key, generation, pack)
            if known is not None and crc != known:
                bad.append(i)  # the caller's crc32c wins: a miss
                continue
            groups.setdefault(pack, []).append((i, offset, n, crc))
    out: dict[int, bytes] = {}
    for pack, items in groups.items():
        got, failed = read(directory, pack, items, stall)
        out.update(got)
        bad += failed
    if bad:
        index.drop_rows(db, [names[i] for i in bad])
    return out


def remove(directory: str, db: Optional[sqlite3.Connection], pack: str, only_if_dead: bool = False
           ) -> Optional[tuple[int, int]]:
    """Remove a pack nobody holds, its rows first: (bytes freed, complete entries removed), or None when it is
    in use. `only_if_dead`: only a pack with no complete row (a killed fill's leftovers). A pack file already
    gone has its rows removed. Call with the directory lock held."""
    try:
        fd = open_fixed(path_of(directory, pack))
    except FileNotFoundError:
        fd = -1
    try:
        if fd >= 0:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return None  # being filled or read: never removed
        if only_if_dead and db is not None and db.execute(
                "SELECT 1 FROM objects WHERE pack = ? AND complete = 1 LIMIT 1", (pack,)).fetchone():
            return None
        entries = index.drop_pack(db, pack) if db is not None else 0
        if fd < 0:
            return 0, entries
        size = os.fstat(fd).st_size
        os.unlink(path_of(directory, pack))
        return size, entries
    finally:
        if fd >= 0:
            os.close(fd)
