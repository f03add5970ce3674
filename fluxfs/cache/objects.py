"""Many objects through the node-local cache: what `fs.cat_objects` / `iter_cat_objects` do when `cache_dir` is set.

Objects named with their generation (a listing's info dicts) are served from complete entries (no
request); the rest are read by the usual batched read, one call for all of them, and each object read
is then written to the cache on the cache's threads, off the read's path: the call returns as soon as
the bytes are in, and a fill (sidecar, fsync, atomic rename) never delays it. Fills waiting hold at most
`BACKLOG` bytes; an object beyond that is not cached this time (it is the next). A process that exits
finishes its pending fills first (they run on a non-daemon pool). Paths without a generation or size
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

from .entry import Meta
from .store import NodeCache

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
    bucket, key, _ = fs.split_path(fs._strip_protocol(info["name"]))
    return bucket, key, str(info["generation"]), int(info["size"]), info.get("crc32c")


def _hits(cache: NodeCache, wanted: list[tuple[int, tuple]]) -> dict[int, bytes]:
    """{position: bytes} of the wanted objects that have a complete entry (read on a cache thread)."""
    out = {}
    for i, (bucket, key, generation, size, _) in wanted:
        held = cache.lookup(bucket, key, generation, size)
        if held is not None:
            try:
                data = held.read()
                meta = Meta.read((held.path or "")[:-len("data")] + "meta")
            finally:
                held.release()
            if meta is not None and meta.crc32c is not None and google_crc32c.value(data) == meta.crc32c:
                out[i] = data  # (filled without fsync: every read is checked; a torn entry is read again)
    return out


def _fill(cache: NodeCache, entry: tuple, data: bytes) -> None:
    bucket, key, generation, size, crc = entry
    try:
        # checked (size, crc32c), then renamed in; not fsynced when every read checks the crc32c (`_hits`)
        cache.get(bucket, key, generation, size, crc, lambda: data, durable=crc is None)
    except Exception as exc:  # noqa: BLE001 - the read succeeded; only caching it failed
        log.warning("fluxfs node-local cache: %s/%s not cached: %s", bucket, key, exc)
    finally:
        with _guard:
            _pending[0] -= len(data)
            _filling.pop((cache.directory, entry), None)


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
        return {fs._strip_protocol(infos[i]["name"]): hits[i] for i in range(len(infos))}
    misses = [info for i, info in enumerate(infos) if i not in hits]
    got = await uncached(fs, misses, on_error=on_error)
    pool = cache._executor()
    for i, entry in entries:
        if i in hits:
            continue
        data = got.get(fs._strip_protocol(infos[i]["name"]))
        if not isinstance(data, (bytes, bytearray)):
            continue
        with _guard:
            if _pending[0] + len(data) > BACKLOG:
                continue  # the disk is behind: this one is read from storage again next time
            _pending[0] += len(data)
            _filling[(cache.directory, entry)] = pool.submit(_fill, cache, entry, bytes(data))
    out = {}
    for i, info in enumerate(infos):  # the order asked, as the uncached read answers
        name = fs._strip_protocol(info["name"] if isinstance(info, dict) else info)
        if i in hits:
            out[name] = hits[i]
        elif name in got:
            out[name] = got[name]
    return out
