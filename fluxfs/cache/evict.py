"""Keeping the cache directory under its limit: space accounting, stale leftovers, least-recently-used eviction.

Policy: LRU by the data file's mtime, which every hit touches (`os.utime`). The recency lives in the
filesystem, so every process and rank on the node shares it with no index to keep consistent or repair
after a crash, and atime is not relied on (noatime/relatime mounts). For shuffled shards each entry is
read once per epoch in a random order: LRU evicts what was read longest ago, which is no likelier to be
needed next than anything else, so with a limit below the working set the hit rate is about
limit / working set, as for any policy without knowledge of the next epoch's order, and it never
degenerates to LRU's worst case (0 hits) which needs the same sequential order every epoch.
When it must evict, it evicts down to 90% of the limit (a counter file holds the bytes in use between
scans, see `make_room`): one directory scan per tenth of the limit filled, not one per fill.
Entries in use (a reader's shared lock) and entries being filled are never evicted: eviction takes each
entry's lock exclusively without waiting and skips it when that fails. Small objects live in packs
(packs.py), evicted whole by the same rule: a pack's recency is its mtime, which every read of it touches,
and a pack being filled or read (its flock) is never removed.
"""
from __future__ import annotations

import dataclasses
import os
import sqlite3
from typing import Iterator, Optional

from . import body, index, packs
from .entry import USAGE, open_fixed, parse_name
from .lock import FileLock


@dataclasses.dataclass
class Scan:
    """What the directory holds: bytes used by files fluxfs made, complete entries by id -> (mtime, bytes),
    and packs by id -> (mtime, bytes)."""

    used: int
    complete: dict[str, tuple[float, int]]
    ids: set[str]
    packs: dict[str, tuple[float, int]] = dataclasses.field(default_factory=dict)


def _files(directory: str) -> Iterator[tuple[str, str, str]]:
    with os.scandir(directory) as it:
        for e in it:
            parsed = parse_name(e.name)
            if parsed is not None:
                yield e.name, parsed[0], parsed[1]


def scan(directory: str) -> Scan:
    """Sizes of every file the cache made (data, sidecars, packs, fills in progress); other files are not ours,
    and the index (bookkeeping, about 100 bytes per packed object) is not counted."""
    used, sizes, mtimes, ids, packed = 0, {}, {}, set(), {}
    with os.scandir(directory) as it:
        for e in it:
            parsed, pack = parse_name(e.name), packs.parse_pack(e.name)
            if parsed is None and pack is None:
                continue
            try:
                st = e.stat()
            except FileNotFoundError:
                continue
            used += st.st_size
            if pack is not None:
                packed[pack] = (st.st_mtime, st.st_size)
                continue
            eid, kind = parsed
            ids.add(eid)
            sizes[eid] = sizes.get(eid, 0) + (st.st_size if kind in ("data", "meta") else 0)
            if kind == "data":
                mtimes[eid] = st.st_mtime
    return Scan(used, {eid: (mtimes[eid], sizes[eid]) for eid in mtimes}, ids, packed)


def index_db(directory: str) -> Optional[sqlite3.Connection]:
    """The directory's index, None when no fill made one or it cannot be read (its packs are then unusable)."""
    if not index.exists(directory):
        return None
    try:
        return index.connect(directory)
    except sqlite3.Error:
        return None


def sweep_packs(directory: str, on_disk: dict[str, tuple[float, int]], db: Optional[sqlite3.Connection]) -> None:
    """Packs of killed fills (no complete row, nobody holding them), pack files the index does not name, and
    rows of packs gone from the disk."""
    if db is None and index.exists(directory):
        return  # the index cannot be read now: which packs are complete is unknown (LRU may still evict them)
    known = index.packs(db) if db is not None else {}
    for pack in set(on_disk) | set(known):
        complete = known.get(pack, (0, False))[0]
        if not complete or pack not in on_disk:
            packs.remove(directory, db, pack, only_if_dead=pack in on_disk)


def remove_entry(directory: str, eid: str, include_data: bool = True) -> int:
    """Remove an entry's files (data first: it stops looking complete at once); the caller holds its lock
    exclusively. Returns the bytes freed."""
    freed = 0
    kinds = ("data", "meta") if include_data else ()
    for name in [f"{eid}.{k}" for k in kinds] + [n for n, i, k in _files(directory) if i == eid and k == "part"]:
        path = os.path.join(directory, name)
        try:
            freed += os.stat(path).st_size
            os.unlink(path)
        except FileNotFoundError:
            pass
    return freed


def sweep_stale(directory: str, ids: set[str], skip: Optional[str] = None) -> None:
    """Leftovers of killed or failed fills: parts, sidecars without data, lock files of entries that never
    completed, wherever nobody holds the entry's lock."""
    for eid in ids - {skip}:
        data = os.path.join(directory, f"{eid}.data")
        parts = [n for n, i, k in _files(directory) if i == eid and k == "part"]
        if os.path.exists(data) and not parts:
            continue  # complete, nothing left over
        lock = FileLock(os.path.join(directory, f"{eid}.lock"))
        if lock.try_acquire(shared=False):
            with lock:
                incomplete = not os.path.exists(data)
                remove_entry(directory, eid, include_data=incomplete)
                if incomplete:
                    lock.remove()  # nor the lock file of an entry never completed (a refused or streamed fill)


def _counted(directory: str) -> Optional[int]:
    try:
        with os.fdopen(open_fixed(os.path.join(directory, USAGE)), "rb") as f:
            return int(f.read(32))
    except (OSError, ValueError):
        return None


def _count(directory: str, used: int) -> None:
    """The counter, rewritten in place under the directory lock: a fixed-width number (no file created and
    renamed per fill: that cost ~1 ms on a busy disk), read whole or not at all (`_counted` then scans)."""
    fd = open_fixed(os.path.join(directory, USAGE), os.O_WRONLY | os.O_CREAT)
    try:
        body.write_all(fd, b"%020d" % used, 0)
    finally:
        os.close(fd)


def make_room(directory: str, need: int, limit: Optional[int], skip: Optional[str] = None) -> bool:
    """Count `need` more bytes in, first evicting least-recently-used complete entries not in use if they
    would not fit under `limit`. Call with the directory lock held.

    The bytes in use are kept in a counter file between scans: raised here before the fill's files exist and
    lowered only by a scan, so it is never below the truth. When room must be made the directory is scanned,
    the counter set to what it finds, and entries evicted down to 90% of the limit, so a full cache is scanned
    once per tenth of its limit filled, not on every fill. False when `need` cannot fit (entries in use fill
    the rest): the caller streams that object through without caching rather than wait or evict what is read.
    """
    if limit is not None and need > limit:
        return False
    used = _counted(directory)
    if used is None:
        used = scan(directory).used
    if limit is not None and used + need > limit:
        used = _evict(directory, need, limit, skip)
        if used + need > limit:
            _count(directory, used)
            return False
    _count(directory, used + need)
    return True


def _evict(directory: str, need: int, limit: int, skip: Optional[str]) -> int:
    """Scan, remove stale leftovers, evict LRU entries not in use down to 90% of `limit`; the bytes in use."""
    first = scan(directory)
    sweep_stale(directory, first.ids, skip)
    db = index_db(directory)
    sweep_packs(directory, first.packs, db)
    now = scan(directory)
    used, target = now.used, min(limit - need, limit - limit // 10)
    lru = sorted([(m, False, eid) for eid, (m, _) in now.complete.items()] +
                 [(m, True, pack) for pack, (m, _) in now.packs.items()])
    for _mtime, is_pack, eid in lru:
        if used <= target:
            break
        if is_pack:
            gone = packs.remove(directory, db, eid)
            used -= gone[0] if gone else 0  # None: being read or filled, never evicted
            continue
        if eid == skip:
            continue
        lock = FileLock(os.path.join(directory, f"{eid}.lock"))
        if not lock.try_acquire(shared=False):
            continue  # being read or refilled: never evicted
        with lock:
            used -= remove_entry(directory, eid)
            lock.remove()
    return used


def clear(directory: str) -> tuple[int, int, int]:
    """Remove every entry not in use and every stale leftover: (entries removed, bytes freed, entries kept)."""
    removed = freed = kept = 0
    now = scan(directory)
    try:
        db, unreadable = (index.connect(directory) if index.exists(directory) else None), False
    except sqlite3.OperationalError:
        raise
    except sqlite3.DatabaseError:  # not a database (damaged): its packs cannot be read either
        db, unreadable = None, True
    known = index.packs(db) if db is not None else {}
    for pack in sorted(set(now.packs) | set(known)):
        gone = packs.remove(directory, db, pack)
        if gone is None:
            kept += known.get(pack, (0, False))[0]
        else:
            freed, removed = freed + gone[0], removed + gone[1]
    if unreadable:  # removed: the next fill makes a new one
        for suffix in ("", "-wal", "-shm"):
            try:
                os.unlink(index.path_of(directory) + suffix)
            except FileNotFoundError:
                pass
    for eid in sorted(now.ids):
        lock = FileLock(os.path.join(directory, f"{eid}.lock"))
        if not lock.try_acquire(shared=False):
            kept += eid in now.complete
            continue
        with lock:
            freed += remove_entry(directory, eid)
            removed += eid in now.complete
            lock.remove()
    _count(directory, scan(directory).used)
    return removed, freed, kept
