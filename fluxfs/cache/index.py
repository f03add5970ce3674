"""The index of packed object entries: one SQLite database (WAL) in the cache directory, shared by the node's processes.

A row is one object generation of one store (endpoint) in a pack: (store, bucket, key, generation) -> (pack,
offset, size, crc32c, complete). An index made before rows named their store is emptied (its packs swept).
A fill claims its objects (rows not complete) under the directory lock before it writes their pack, and marks
them complete once the pack holds their bytes: a process killed in between leaves rows that never look complete,
whose pack nobody holds locked (see packs.py), removed by the next fill that meets them or by eviction. WAL lets
readers look a batch up (one query) while another process writes; commits are not fsynced
(`synchronous=NORMAL`): a power loss may lose the last rows (their packs are then swept) or leave a pack's
bytes torn, which the crc32c every read checks catches. The index is bookkeeping, not counted in `cache_limit`.
"""
from __future__ import annotations

import contextlib
import errno
import os
import stat
import sqlite3
import threading
import urllib.parse
from typing import Iterable, Iterator

from ..gcs import fork
from .entry import open_fixed
from .lock import wait_while_moving

INDEX = ".fluxfs-cache.index"  # with SQLite's -wal and -shm beside it
BUSY_S = 60  # seconds a connection waits for another process's write transaction
SCHEMA = """CREATE TABLE IF NOT EXISTS objects (
    store TEXT NOT NULL, bucket TEXT NOT NULL, key TEXT NOT NULL, generation TEXT NOT NULL,
    pack TEXT NOT NULL, offset INTEGER NOT NULL, size INTEGER NOT NULL, crc32c INTEGER NOT NULL,
    complete INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (store, bucket, key, generation)) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS objects_by_pack ON objects (pack);"""
Row = tuple[str, int, int, int]  # pack, offset, size, crc32c

_inherited: list = []  # a parent's connections in a forked child: kept, never used nor closed (SQLite's rule)
_KEPT: list[int] = []  # descriptors `_own_files` opened: kept open (see there)
_WRITABLE: set[str] = set()  # indexes this process opened for writing


class _Connections:
    """Each thread's connections, by directory; a forked child opens its own (the one fork hook calls `_after_fork`)."""

    def __init__(self) -> None:
        self.local = threading.local()

    def _after_fork(self) -> None:
        _inherited.append(self.local)
        self.local = threading.local()


_CONNS = _Connections()
fork.reset_in_child(_CONNS)


def path_of(directory: str) -> str:
    return os.path.join(directory, INDEX)


def exists(directory: str) -> bool:
    """True once some fill made the index (a lookup before that makes no file)."""
    return os.path.exists(path_of(directory))


def connect(directory: str) -> sqlite3.Connection:
    """This thread's connection to the directory's index, made (and the schema with it) on first use."""
    conns = getattr(_CONNS.local, "conns", None)
    if conns is None:
        conns = _CONNS.local.conns = {}
    path = path_of(directory)
    db, ino = conns.get(directory, (None, None))
    if db is not None:
        try:
            same = os.stat(path).st_ino == ino
        except FileNotFoundError:
            same = False
        if not same:  # removed (a damaged one cleared) since: connect to the file there now
            db.close()
            db = None
    if db is None:
        read_only = _own_files(path)
        uri = f"file:{urllib.parse.quote(path)}" + ("?mode=ro&immutable=1" if read_only else "")
        db = sqlite3.connect(uri, timeout=BUSY_S, isolation_level=None, check_same_thread=False, uri=True)
        try:
            if read_only:  # a cache baked into a read-only image: its rows as they are, nothing written
                if not _current(db):
                    raise sqlite3.OperationalError(f"{INDEX} on a read-only disk has no objects table")
                conns[directory] = (db, os.stat(path).st_ino)
                return db
            db.execute(f"PRAGMA busy_timeout={BUSY_S * 1000}")
            if not wait_while_moving(lambda: _wal(db), lambda: None, BUSY_S):
                raise sqlite3.OperationalError(f"{path}: still locked after {BUSY_S} s")
            db.execute("PRAGMA synchronous=NORMAL")
            if not _current(db):
                with write(db):
                    if not _current(db):
                        for statement in SCHEMA.split(";"):
                            db.execute(statement)
        except BaseException:
            db.close()
            raise
        conns[directory] = (db, os.stat(path).st_ino)
    return db


def _own_files(path: str) -> bool:
    """The index and SQLite's -wal and -shm beside it made (or found) as regular files by their names, never
    through a symbolic link planted under one of them (SQLite itself follows links, and Python's sqlite3 cannot
    ask it not to): a link raises sqlite3.OperationalError naming it. True: the directory is read-only (the
    index is then opened immutable, if there is one)."""
    for suffix in ("", "-wal", "-shm"):
        try:  # already there: told without opening it (closing a descriptor of a file drops every POSIX lock
            # this process holds on it, SQLite's of another thread's connection included: another process then
            # takes itself for the first, truncates the -shm, and this one dies of SIGBUS on its mapping)
            if stat.S_ISREG(os.lstat(path + suffix).st_mode):
                if suffix or path in _WRITABLE:
                    continue
        except FileNotFoundError:
            pass
        try:
            fd = open_fixed(path + suffix, os.O_RDWR | os.O_CREAT)
        except OSError as exc:
            if exc.errno in (errno.EROFS, errno.EACCES, errno.EPERM) and suffix == "":
                try:
                    os.close(open_fixed(path))  # there, and not a link (immutable: SQLite takes no lock on it)
                except OSError as exc2:
                    raise sqlite3.OperationalError(f"{path}: {exc2.strerror}") from exc2
                return True
            raise sqlite3.OperationalError(f"{path + suffix}: {exc.strerror}") from exc
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise sqlite3.OperationalError(f"{path + suffix}: not a regular file")
        _KEPT.append(fd)  # never closed (see above)
        if not suffix:
            _WRITABLE.add(path)
    return False


def _current(db: sqlite3.Connection) -> bool:
    """The objects table exists (a lookup needs no write transaction then)."""
    return db.execute("SELECT 1 FROM sqlite_master WHERE name = 'objects'").fetchone() is not None


def _wal(db: sqlite3.Connection) -> bool:
    """Switch the index to WAL (persistent: once for the file); False while another process is connecting to the
    same new file: SQLite then answers "database is locked" at once, without waiting its busy timeout."""
    try:
        if db.execute("PRAGMA journal_mode").fetchone()[0].lower() != "wal":
            db.execute("PRAGMA journal_mode=WAL")
        return True
    except sqlite3.OperationalError as exc:
        if "locked" not in str(exc):
            raise
        return False


@contextlib.contextmanager
def write(db: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    """One write transaction (taken at once: BEGIN IMMEDIATE), committed on success, rolled back on error."""
    db.execute("BEGIN IMMEDIATE")
    try:
        yield db
    except BaseException:
        db.execute("ROLLBACK")
        raise
    db.execute("COMMIT")


def lookup(db: sqlite3.Connection, wanted: Iterable[tuple[str, str, str, str]], complete: bool = True
           ) -> dict[tuple[str, str, str, str], tuple[Row, bool]]:
    """{(store, bucket, key, generation): ((pack, offset, size, crc32c), complete)} of the wanted objects that
    have a row (only complete ones with `complete=True`): one query per store, bucket and 500 keys."""
    by_bucket: dict[tuple[str, str], set[str]] = {}
    for store, bucket, key, _ in wanted:
        by_bucket.setdefault((store, bucket), set()).add(key)
    out = {}
    cond = " AND complete = 1" if complete else ""
    for (store, bucket), keys in by_bucket.items():
        keys_ = list(keys)
        for at in range(0, len(keys_), 500):
            part = keys_[at:at + 500]
            q = (f"SELECT key, generation, pack, offset, size, crc32c, complete FROM objects WHERE store = ? AND "
                 f"bucket = ? AND key IN ({','.join('?' * len(part))}){cond}")
            for key, gen, pack, off, size, crc, done in db.execute(q, [store, bucket, *part]):
                out[(store, bucket, key, gen)] = ((pack, off, size, crc), bool(done))
    return out


def claim(db: sqlite3.Connection, pack: str, rows: list[tuple[str, str, str, str, int, int, int]]) -> None:
    """Rows (store, bucket, key, generation, offset, size, crc32c) of `pack`, not complete yet (in a write
    transaction)."""
    db.executemany("INSERT OR REPLACE INTO objects (store, bucket, key, generation, pack, offset, size, crc32c, "
                   "complete) VALUES (?, ?, ?, ?, ?, ?, ?, ?, 0)", [(*r[:4], pack, *r[4:]) for r in rows])


def complete(db: sqlite3.Connection, done: Iterable[tuple[str, str, str, str, str]],
             dropped: Iterable[tuple[str, str, str, str, str]] = (),
             crcs: Iterable[tuple[int, str, str, str, str, str]] = ()) -> None:
    """Packs hold the bytes of the `done` rows (store, bucket, key, generation, pack: the claims of a filler's
    batch; a lookup by key each, not a scan of a pack's rows): they are entries now; the `dropped` ones are removed
    (not written), with the crc32c of those claimed before it was known (crc32c, store, bucket, key, generation,
    pack). One transaction."""
    with write(db):
        db.executemany("DELETE FROM objects WHERE store = ? AND bucket = ? AND key = ? AND generation = ? "
                       "AND pack = ?", dropped)
        db.executemany("UPDATE objects SET crc32c = ? WHERE store = ? AND bucket = ? AND key = ? AND generation = ? "
                       "AND pack = ?", crcs)
        db.executemany("UPDATE objects SET complete = 1 WHERE store = ? AND bucket = ? AND key = ? AND "
                       "generation = ? AND pack = ?", done)


def drop_pending(db: sqlite3.Connection, pack: str) -> None:
    """Remove the pack's rows not complete (its filler is gone)."""
    with write(db):
        db.execute("DELETE FROM objects WHERE pack = ? AND complete = 0", (pack,))


def drop_pack(db: sqlite3.Connection, pack: str) -> int:
    """Remove the pack's rows; how many were complete."""
    with write(db):
        n = db.execute("SELECT count(*) FROM objects WHERE pack = ? AND complete = 1", (pack,)).fetchone()[0]
        db.execute("DELETE FROM objects WHERE pack = ?", (pack,))
    return n


def drop_rows(db: sqlite3.Connection, rows: list[tuple[str, str, str, str, str]]) -> None:
    """Remove rows (store, bucket, key, generation, pack) whose bytes failed their check (torn) or that are not the
    object the caller knows (another crc32c): read again next time."""
    with write(db):
        db.executemany("DELETE FROM objects WHERE store = ? AND bucket = ? AND key = ? AND generation = ? "
                       "AND pack = ?", rows)


def packs(db: sqlite3.Connection) -> dict[str, tuple[int, bool]]:
    """{pack: (complete rows, any row not complete)} of every pack the index names."""
    return {p: (n, bool(pending)) for p, n, pending in db.execute(
        "SELECT pack, sum(complete), sum(1 - complete) FROM objects GROUP BY pack")}


def entries(db: sqlite3.Connection) -> list[tuple[str, str, str, str, int, int, str]]:
    """(store, bucket, key, generation, size, crc32c, pack) of every complete row."""
    return list(db.execute("SELECT store, bucket, key, generation, size, crc32c, pack FROM objects WHERE complete = 1"))

