"""Many objects through the node-local cache: what `fs.cat_objects` / `iter_cat_objects` do when `cache_dir` is set.

Objects named with their generation (a listing's info dicts) are served from complete entries: packed ones
(packs.py: one index query per call, each pack read once) or whole-object ones (store.py), looked up on
the event loop's thread for a call of at most `INLINE` bytes (a loader's batch: a hop to a thread and
back cost more, in GIL waits on a busy worker, than the lookup and preads themselves); the rest are
read by the usual batched read, one call for all of them. What was read is then written to the cache off
the read's path, by one filler thread per process that writes whatever is queued (up to `PACK_MAX`) as one
pack: one file written once, one directory lock and two index transactions per pack, no fsync (every read
of an entry checks its crc32c, so an entry torn by a power loss is read from storage again). Fills waiting
hold at most `BACKLOG` bytes; an object beyond that is not cached this time (it is the next). A process that
exits finishes its pending fills first (the filler is a non-daemon thread); one killed mid-fill leaves a
pack whose rows never became complete, removed by the next fill or eviction that meets it. Two processes
filling the same objects: the first to claim them (rows in the index, under the directory lock) writes
them, the other skips them. Paths without a generation or size are read from storage as without a cache.
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import os
import sqlite3
import threading
from typing import Any, Awaitable, Callable, Optional


from ..gcs import checksums
from . import body, evict, index, packs
from ..errors import ChecksumMismatch
from ..gcs import fork
from .entry import Meta, crc_value, entry_id
from .reader import store_of
from .store import UNWRITABLE, NodeCache

log = logging.getLogger("fluxfs.cache")

BACKLOG = 64 * 2**20    # bytes read and waiting to be written to the cache, per process
PACK_MAX = 64 * 2**20   # one pack holds at most this much of what is queued (more goes to the next)
INLINE = 8 * 2**20      # a call asking for at most this much looks its hits up on the event loop's thread
Entry = tuple[str, str, str, str, int, Any]  # store, bucket, key, generation, size, crc32c


class _Queued:
    """This process's fills not written yet: their bytes (`pending`), each by entry (`filling`) and by cache directory
    (`queue`), the filler thread's executor, and the lock over them; a forked worker starts with none."""

    def __init__(self) -> None:
        self._after_fork()

    def _after_fork(self) -> None:  # the one fork hook calls this in a forked child
        self.guard = threading.Lock()  # a thread of the parent may have held it at the fork
        self.pending = 0
        self.filling: dict[tuple, concurrent.futures.Future] = {}
        self.queue: dict[str, list[tuple[NodeCache, list[tuple[Entry, bytes]], concurrent.futures.Future]]] = {}
        self.filler: Optional[concurrent.futures.ThreadPoolExecutor] = None


_QUEUED = _Queued()
fork.reset_in_child(_QUEUED)


def _cacheable(fs: Any, info: Any) -> Optional[Entry]:
    """(store, bucket, key, generation, size, crc32c) of an info dict that names a generation and a size, else None."""
    if not isinstance(info, dict) or not info.get("generation") or info.get("size") is None:
        return None
    bucket, key, _ = fs.split_path(fs.client.strip_protocol(info["name"]))
    try:
        crc = crc_value(info.get("crc32c"))
    except ValueError:
        return None  # the uncached read names the mistake
    return store_of(fs), bucket, key, str(info["generation"]), int(info["size"]), crc


def _hits(cache: NodeCache, wanted: list[tuple[int, Entry]]) -> dict[int, bytes]:
    """{position: bytes} of the wanted objects that have a complete entry (read on a cache thread)."""
    try:
        out = packs.read_batch(cache.directory, [(i, e) for i, e in wanted], cache.stall)
    except sqlite3.Error as exc:
        cache.warns.index(exc)
        out = {}
    for i, (store, bucket, key, generation, size, crc) in wanted:
        if i in out or not os.path.exists(cache._path(entry_id(bucket, key, generation, store), "data")):
            continue  # a miss, told without making a file (a file creation: ~1 ms on a busy disk)
        held = cache.lookup(bucket, key, generation, size, True, store, crc)  # a whole-object entry
        if held is not None:
            try:
                data = held.read()
            finally:
                held.release()
            if held.crc32c is not None and checksums.crc32c(data) == held.crc32c:
                out[i] = data
            elif held.path is not None:
                cache._failed_check(held.path)
    return out


def _checked(items: list[tuple[Entry, bytes]]) -> list[tuple[str, str, str, str, int, int, bytes]]:
    """The batch's objects whose size is theirs, once each, with the crc32c their reads will be checked against:
    the listing's (the batched read already checked the bytes against it; a wrong byte written would fail
    every read of the entry, never be served), else computed here."""
    out, seen = [], set()
    for (store, bucket, key, generation, size, crc), data in items:
        if (store, bucket, key, generation) in seen:
            continue
        seen.add((store, bucket, key, generation))
        meta = Meta(bucket, key, generation, int(size), crc_value(crc), False, store)
        value = checksums.crc32c(data) if meta.crc32c is None else meta.crc32c
        try:
            body.check_sums(len(data), value, meta)
        except ChecksumMismatch as exc:
            log.warning("fluxfs node-local cache: %s", exc)
            continue
        out.append((store, bucket, key, generation, int(size), value, data))
    return out


def fill(cache: NodeCache, items: list[tuple[Entry, bytes]]) -> None:
    """Write read objects to the cache as one pack: the objects nobody has (or is filling) claimed in the
    index and their room counted in under the directory lock (never over the limit, even while written),
    the pack written once, then its rows marked complete."""
    todo = _checked(items)
    if not todo:
        return
    try:
        pack = packs.NewPack(cache.directory)
    except OSError as exc:
        if exc.errno not in UNWRITABLE:
            raise
        cache.warns.full(exc)
        return
    try:
        with cache._dir_locked():
            db = index.connect(cache.directory)
            have = index.lookup(db, [t[:4] for t in todo], complete=False)
            for dead in {row[0] for row, done in have.values() if not done}:  # claimed by a fill: alive?
                if packs.remove(cache.directory, db, dead, only_if_dead=True) is not None:
                    have = {k: v for k, v in have.items() if v[0][0] != dead}
            todo = [t for t in todo if t[:4] not in have  # nor one with a whole-object entry (store.py)
                    and not os.path.exists(cache._path(entry_id(*t[1:4], t[0]), "data"))]
            need = sum(t[4] for t in todo)
            if not todo or not evict.make_room(cache.directory, need, cache.limit):
                return  # all there already, or no room (entries in use fill it): read from storage next time
            pack.allocate(need)
            rows, at = [], 0
            for store, bucket, key, generation, size, crc, _ in todo:
                rows.append((store, bucket, key, generation, at, size, crc))
                at += size
            with index.write(db):
                index.claim(db, pack.name, rows)
        try:
            pack.write([t[6] for t in todo])
            index.complete(db, pack.name)
            pack.done = True
        finally:
            if not pack.done:
                with cache._dir_locked():
                    index.drop_pack(db, pack.name)
    except OSError as exc:
        if exc.errno not in UNWRITABLE:
            raise
        cache.warns.full(exc)
    except sqlite3.Error as exc:
        cache.warns.index(exc)
    finally:
        pack.close()


def _packs(items: list[tuple[Entry, bytes]], most: int) -> list[list[tuple[Entry, bytes]]]:
    """The items cut into packs of at most `most` bytes (an object larger than that alone)."""
    out: list[list[tuple[Entry, bytes]]] = [[]]
    size = 0
    for item in items:
        if out[-1] and size + len(item[1]) > most:
            out.append([])
            size = 0
        out[-1].append(item)
        size += len(item[1])
    return out


def _drain(cache: NodeCache) -> None:
    """The filler thread: whatever is queued for this cache, a pack at a time (at most PACK_MAX, and a tenth
    of the limit: eviction frees whole packs, so a pack must be small beside the limit)."""
    most = PACK_MAX if cache.limit is None else max(1, min(PACK_MAX, cache.limit // 10))
    while True:
        taken, size = [], 0
        with _QUEUED.guard:
            queue = _QUEUED.queue.get(cache.directory, [])
            while queue and (not taken or size + sum(len(d) for _, d in queue[0][1]) <= most):
                taken.append(queue.pop(0))
                size += sum(len(d) for _, d in taken[-1][1])
        if not taken:
            return
        items = [item for _, batch, _ in taken for item in batch]
        try:
            for part in _packs(items, most):
                fill(cache, part)
        except Exception as exc:  # the reads succeeded; only caching them failed
            log.warning("fluxfs node-local cache: %d objects not cached: %s", len(items), exc)
        finally:
            with _QUEUED.guard:
                _QUEUED.pending -= size
                for entry, _ in items:
                    _QUEUED.filling.pop((cache.directory, entry), None)
            for _, _, done in taken:
                done.set_result(None)


def _enqueue(cache: NodeCache, batch: list[tuple[Entry, bytes]]) -> None:
    done: concurrent.futures.Future = concurrent.futures.Future()
    with _QUEUED.guard:
        _QUEUED.queue.setdefault(cache.directory, []).append((cache, batch, done))
        for entry, _ in batch:
            _QUEUED.filling[(cache.directory, entry)] = done
        if _QUEUED.filler is None:
            _QUEUED.filler = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="fluxfs-cache-fill")
        _QUEUED.filler.submit(_drain, cache)


def flush() -> None:
    """Wait until this process's queued fills are written (tests, benchmarks)."""
    with _QUEUED.guard:
        waiting = list(_QUEUED.filling.values())
    concurrent.futures.wait(waiting)


async def cat_objects(fs: Any, cache: NodeCache, infos: list, on_error: str,
                      uncached: Callable[..., Awaitable[dict]]) -> dict:
    """`uncached(fs, infos, on_error=...)`'s answer, the cached objects served from the cache."""
    entries = [(i, e) for i, e in ((i, _cacheable(fs, info)) for i, info in enumerate(infos)) if e is not None]
    if not entries:
        return await uncached(fs, infos, on_error=on_error)
    loop = asyncio.get_running_loop()
    with _QUEUED.guard:  # an object this process is still writing to the cache: wait for it rather than read it again
        mine = [f for f in (_QUEUED.filling.get((cache.directory, e)) for _, e in entries) if f is not None]
    if mine:
        await asyncio.gather(*map(asyncio.wrap_future, set(mine)), return_exceptions=True)
    if sum(e[4] for _, e in entries) <= INLINE:  # a loader's batch: no hop to a thread and back (GIL waits)
        hits = _hits(cache, entries)
    else:
        hits = await loop.run_in_executor(cache._executor(), _hits, cache, entries)
    if len(hits) == len(infos):
        return {fs.client.strip_protocol(infos[i]["name"]): hits[i] for i in range(len(infos))}
    misses = [info for i, info in enumerate(infos) if i not in hits]
    got = await uncached(fs, misses, on_error=on_error)
    batch = []
    for i, entry in entries:
        if i in hits:
            continue
        data = got.get(fs.client.strip_protocol(infos[i]["name"]))
        if not isinstance(data, (bytes, bytearray)):
            continue
        with _QUEUED.guard:
            if _QUEUED.pending + len(data) > BACKLOG:
                continue  # the disk is behind: this one is read from storage again next time
            _QUEUED.pending += len(data)
        batch.append((entry, bytes(data)))
    if batch:
        _enqueue(cache, batch)
    out = {}
    for i, info in enumerate(infos):  # the order asked, as the uncached read answers
        name = fs.client.strip_protocol(info["name"] if isinstance(info, dict) else info)
        if i in hits:
            out[name] = hits[i]
        elif name in got:
            out[name] = got[name]
    return out
