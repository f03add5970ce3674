"""Many objects through the node-local cache: what `fs.cat_objects` / `iter_cat_objects` do when `cache_dir` is set.

Objects named with their generation (a listing's info dicts) are served from complete entries (no
request); the rest are read by the usual batched read, one call for all of them, and each object read
is then written to the cache on the cache's threads, off the read's path: the call returns as soon as
the bytes are in, and a fill never delays it. A call's objects are filled as one batch (one directory
lock, one accounting update) without fsync: every read of an object from the cache checks its crc32c,
so an entry torn by a power loss is read from storage again, never returned. Fills waiting hold at most
`BACKLOG` bytes; an object beyond that is not cached this time (it is the next). A process that exits
finishes its pending fills first (they run on a non-daemon pool); one killed mid-batch leaves temporaries
that the next fill of those objects removes (their lock files say a fill was under way). Paths without a generation or size
are read from storage as without a cache: the generation is what keeps an overwritten object from
being served stale.
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import os
import threading
from typing import Any, Awaitable, Callable, Optional

import google_crc32c

from . import body, evict
from ..errors import ChecksumMismatch
from .entry import Meta, crc_value, entry_id, temp_name
from .lock import FileLock
from .store import NodeCache, _unlink

log = logging.getLogger("fluxfs.cache")

BACKLOG = 64 * 2**20    # bytes read and waiting to be written to the cache, per process
_pending = [0]
_guard = threading.Lock()
_filling: dict[tuple, concurrent.futures.Future] = {}  # this process's fills not done yet, by entry


def _after_fork() -> None:
    _pending[0] = 0
    _filling.clear()


os.register_at_fork(after_in_child=_after_fork)


def _cacheable(fs: Any, info: Any) -> Optional[tuple[str, str, str, int, Any]]:
    """(bucket, key, generation, size, crc32c) of an info dict that names a generation and a size, else None."""
    if not isinstance(info, dict) or not info.get("generation") or info.get("size") is None:
        return None
    bucket, key, _ = fs.split_path(fs.client.strip_protocol(info["name"]))
    return bucket, key, str(info["generation"]), int(info["size"]), info.get("crc32c")


def _hits(cache: NodeCache, wanted: list[tuple[int, tuple]]) -> dict[int, bytes]:
    """{position: bytes} of the wanted objects that have a complete entry (read on a cache thread)."""
    out = {}
    for i, (bucket, key, generation, size, _) in wanted:
        if not os.path.exists(cache._path(entry_id(bucket, key, generation), "data")):
            continue  # a miss, told without making its lock file (a file creation: ~1 ms on a busy disk)
        held = cache.lookup(bucket, key, generation, size, checked_by_caller=True)
        if held is not None:
            try:
                data = held.read()
                meta = Meta.read((held.path or "")[:-len("data")] + "meta")
            finally:
                held.release()
            if meta is not None and meta.crc32c is not None and google_crc32c.value(data) == meta.crc32c:
                out[i] = data  # (filled without fsync: every read is checked; a torn entry is read again)
    return out


def _fill(cache: NodeCache, items: list[tuple[tuple, bytes]]) -> None:
    """Write a batch of read objects to the cache: each entry nobody else is filling or holds, checked (size,
    crc32c), counted in and renamed into place under one directory lock for the whole batch (one accounting
    update and no fsync: a fill per object with its own lock and fsync managed ~250 objects/s)."""
    todo, locks = [], []
    try:
        for (bucket, key, generation, size, crc), data in items:
            eid = entry_id(bucket, key, generation)
            lock = FileLock(cache._path(eid, "lock"))
            try:
                if not lock.try_acquire(shared=False):
                    continue  # being read or filled: nothing to do
            except OSError:
                continue
            locks.append(lock)
            if cache._complete(eid, bucket, key, generation, size):
                continue
            if lock.was_filling():
                evict.remove_entry(cache.directory, eid, include_data=False)  # a killed filler's leftovers
            meta = Meta(bucket, key, str(generation), int(size), crc_value(crc), durable=False)  # no fsync
            try:
                body.check(data, meta)
            except ChecksumMismatch as exc:
                log.warning("fluxfs node-local cache: %s", exc)
                continue
            lock.mark_filling(True)  # a worker killed mid-batch (a DataLoader's SIGTERM): its next filler sweeps
            todo.append((eid, meta, data))
        if todo:
            _write_batch(cache, todo)
    except Exception as exc:  # noqa: BLE001 - the reads succeeded; only caching them failed
        log.warning("fluxfs node-local cache: %d objects not cached: %s", len(items), exc)
    finally:
        for lock in locks:
            lock.release()
        with _guard:
            _pending[0] -= sum(len(d) for _, d in items)
            for entry, _ in items:
                _filling.pop((cache.directory, entry), None)


def _write_batch(cache: NodeCache, todo: list[tuple[str, Meta, bytes]]) -> None:
    """Room for the batch counted in, its temporaries allocated and sidecars written (directory lock: the cache
    is never over its limit, even while they are written), the data written, then (the lock again) each renamed
    into place. A sidecar without its data is no entry (lookups need both), so it goes straight to its name."""
    files: list[tuple[str, int]] = []  # (temporary, descriptor) of each object's data
    done = 0
    try:
        need = sum(len(d) + len(m.to_bytes()) for _, m, d in todo)
        with cache._dir_locked():
            if not evict.make_room(cache.directory, need, cache.limit):
                return  # no room (entries in use fill it): these are read from storage next time too
            for eid, meta, data in todo:
                tmp = os.path.join(cache.directory, temp_name(eid))
                fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o644)
                files.append((tmp, fd))
                os.ftruncate(fd, len(data))  # counted as taken now, as the accounting says
                with open(cache._path(eid, "meta"), "wb") as m:
                    m.write(meta.to_bytes())
        for (_, _, data), (_, fd) in zip(todo, files):
            body.write_all(fd, data, 0)
        with cache._dir_locked():
            for (eid, _, _), (tmp, _) in zip(todo, files):
                os.replace(tmp, cache._path(eid, "data"))  # the entry appears complete only now
                done += 1
    finally:
        for n, (tmp, fd) in enumerate(files):
            os.close(fd)
            if n >= done:
                _unlink(tmp)


async def cat_objects(fs: Any, cache: NodeCache, infos: list, on_error: str,
                      uncached: Callable[..., Awaitable[dict]]) -> dict:
    """`uncached(fs, infos, on_error=...)`'s answer, the cached objects served from the cache."""
    entries = [(i, e) for i, e in ((i, _cacheable(fs, info)) for i, info in enumerate(infos)) if e is not None]
    if not entries:
        return await uncached(fs, infos, on_error=on_error)
    loop = asyncio.get_running_loop()
    with _guard:  # an object this process is still writing to the cache: wait for it rather than read it again
        mine = [f for f in (_filling.get((cache.directory, e)) for _, e in entries) if f is not None]
    if mine:
        await asyncio.gather(*map(asyncio.wrap_future, mine), return_exceptions=True)
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
        with _guard:
            if _pending[0] + len(data) > BACKLOG:
                continue  # the disk is behind: this one is read from storage again next time
            _pending[0] += len(data)
        batch.append((entry, bytes(data)))
    if batch:
        with _guard:
            job = cache._executor().submit(_fill, cache, batch)
            for entry, _ in batch:
                _filling[(cache.directory, entry)] = job
    out = {}
    for i, info in enumerate(infos):  # the order asked, as the uncached read answers
        name = fs.client.strip_protocol(info["name"] if isinstance(info, dict) else info)
        if i in hits:
            out[name] = hits[i]
        elif name in got:
            out[name] = got[name]
    return out
