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
entry's lock exclusively without waiting and skips it when that fails.
"""
from __future__ import annotations

import dataclasses
import os
from typing import Iterator, Optional

from .entry import USAGE, parse_name
from .lock import FileLock


@dataclasses.dataclass
class Scan:
    """What the directory holds: bytes used by files fluxfs made, and complete entries by id -> (mtime, bytes)."""

    used: int
    complete: dict[str, tuple[float, int]]
    ids: set[str]


def _files(directory: str) -> Iterator[tuple[str, str, str]]:
    with os.scandir(directory) as it:
        for e in it:
            parsed = parse_name(e.name)
            if parsed is not None:
                yield e.name, parsed[0], parsed[1]


def scan(directory: str) -> Scan:
    """Sizes of every file the cache made (data, sidecars, fills in progress); other files are not ours."""
    used, sizes, mtimes, ids = 0, {}, {}, set()
    for name, eid, kind in _files(directory):
        try:
            st = os.stat(os.path.join(directory, name))
        except FileNotFoundError:
            continue
        used += st.st_size
        ids.add(eid)
        sizes[eid] = sizes.get(eid, 0) + (st.st_size if kind in ("data", "meta") else 0)
        if kind == "data":
            mtimes[eid] = st.st_mtime
    return Scan(used, {eid: (mtimes[eid], sizes[eid]) for eid in mtimes}, ids)


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
        with open(os.path.join(directory, USAGE), "rb") as f:
            return int(f.read(32))
    except (OSError, ValueError):
        return None


def _count(directory: str, used: int) -> None:
    tmp = os.path.join(directory, f"{USAGE}.{os.getpid()}.{os.urandom(4).hex()}")
    with os.fdopen(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644), "w") as f:
        f.write(str(used))
    os.replace(tmp, os.path.join(directory, USAGE))


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
    sweep_stale(directory, scan(directory).ids, skip)
    now = scan(directory)
    used, target = now.used, min(limit - need, limit - limit // 10)
    for eid, (_mtime, _nbytes) in sorted(now.complete.items(), key=lambda kv: kv[1][0]):
        if used <= target:
            break
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
