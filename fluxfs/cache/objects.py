"""Many objects through the node-local cache: what `fs.cat_objects` / `iter_cat_objects` do when `cache_dir` is set.

Objects named with their generation (a listing's info dicts) are served from complete entries: packed ones
(packs.py: one index query per call, each pack read once) or whole-object ones (store.py), looked up on
the event loop's thread for a call of at most `INLINE` bytes (a loader's batch: a hop to a thread and
back cost more, in GIL waits on a busy worker, than the lookup and preads themselves). The misses are
claimed first (claims.py: rows in the index, in the pack this process holds open for its claims, under
the directory lock), so objects another process is downloading are waited for and read from its pack, not
downloaded again; the rest are read by the usual batched read, one call for all of them, and the claimed
ones written to their pack off the read's path by one filler thread per process, which lingers until `FILL`
bytes are queued (or `LINGER` seconds) and writes the calls' claims at once: runs end to end across calls, one
index transaction for them all (no fsync: every read of an entry checks its crc32c, so an entry torn by a power
loss is read from storage again); a read of an object still queued asks it to write at once and waits. Claims hold at
most `BACKLOG` bytes per process; an object beyond that is not cached this time (it is the next). A
process that exits finishes its pending fills first (the filler is a non-daemon thread); one killed mid-fill leaves rows
that never became complete, removed by the next claim that meets them (and read from storage by those
waiting on them). Paths without a generation or size are read from storage as without a cache.
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import os
import sqlite3
import threading
from typing import Any, Optional


from ..gcs import checksums
from . import claims, packs
from ..gcs import fork
from .claims import Entry
from .entry import crc_value, entry_id
from .fetcher import Fetcher
from .store import NodeCache

log = logging.getLogger("fluxfs.cache")

BACKLOG = 64 * 2**20    # bytes claimed and not written to the cache yet, per process
PACK_MAX = 64 * 2**20   # one pack holds at most this much of a call's claims (more goes to the next)
INLINE = 8 * 2**20      # a call asking for at most this much looks its hits up on the event loop's thread
FILL = 4 * 2**20        # the filler writes once this much is queued (one O_DIRECT buffer: `direct.BUFFER`) ...
LINGER = 0.05           # ... or this many seconds after it was handed the first claims, whichever comes first


class _Queued:
    """This process's fills not written yet: the backlog bytes they hold (`pending`), each by entry (`filling`), the
    calls' claims queued for the filler thread, its executor, and the lock over them; a forked worker has none."""

    def __init__(self) -> None:
        self._after_fork()

    def _after_fork(self) -> None:  # the one fork hook calls this in a forked child
        self.guard = threading.Lock()  # a thread of the parent may have held it at the fork
        self.pending = 0
        self.queue: list[tuple[NodeCache, list[claims.Claim], dict, int, concurrent.futures.Future]] = []
        self.queued = 0  # bytes claimed in `queue`
        self.now = threading.Event()  # the filler writes without lingering further
        self.filling: dict[tuple, concurrent.futures.Future] = {}
        self.filler: Optional[concurrent.futures.ThreadPoolExecutor] = None


_QUEUED = _Queued()
fork.reset_in_child(_QUEUED)


def _cacheable(fetch: Fetcher, info: Any, name: str) -> Optional[Entry]:
    """(store, bucket, key, generation, size, crc32c) of an info dict (`name`: its path stripped) that names a
    generation and a size, else None."""
    if not isinstance(info, dict) or not info.get("generation") or info.get("size") is None:
        return None
    bucket, key, _ = fetch.split_path(name)
    try:
        crc = crc_value(info.get("crc32c"))
    except ValueError:
        return None  # the uncached read names the mistake
    return fetch.store, bucket, key, str(info["generation"]), int(info["size"]), crc


def _hits(cache: NodeCache, wanted: list[tuple[int, Entry]]) -> dict[int, bytes]:
    """{position: bytes} of the wanted objects that have a complete entry (read on a cache thread)."""
    try:
        out = packs.read_batch(cache.directory, [(i, e) for i, e in wanted], cache.stall)
    except sqlite3.Error as exc:
        cache.warns.index(exc)
        out = {}
    for i, (store, bucket, key, generation, size, crc) in wanted:
        if i in out or not os.path.exists(cache.path_of(entry_id(bucket, key, generation, store), "data")):
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
                cache.failed_check(held.path)
    return out


def _most(cache: NodeCache) -> int:
    """A pack's most bytes: PACK_MAX, and a tenth of the limit (eviction frees whole packs, so a pack must be small
    beside the limit)."""
    return PACK_MAX if cache.limit is None else max(1, min(PACK_MAX, cache.limit // 10))


def _write_later(cache: NodeCache, made: list[claims.Claim], got: dict[Entry, Any], reserved: int) -> None:
    """This process's claims queued for the filler thread, which writes (or lets go, with nothing read) all that is
    queued when it runs, off the read's path; `reserved`: the backlog bytes they hold until then."""
    done: concurrent.futures.Future = concurrent.futures.Future()
    with _QUEUED.guard:
        for e in (e for c in made for e in c.entries):
            _QUEUED.filling[(cache.directory, e)] = done
        _QUEUED.queue.append((cache, made, got, reserved, done))
        _QUEUED.queued += sum(c.size for c in made)
        if _QUEUED.queued >= FILL:
            _QUEUED.now.set()
        if len(_QUEUED.queue) == 1:  # the first queued since the filler last took the queue: it runs once more
            if _QUEUED.filler is None:
                _QUEUED.filler = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="fluxfs-cache-fill")
            _QUEUED.filler.submit(_fill)


def _fill() -> None:
    """The filler's run: every call's queued claims written at once, per cache directory (`claims.write`: runs of
    objects end to end across calls, one "complete" transaction for them all), after lingering for more."""
    _QUEUED.now.wait(LINGER)
    with _QUEUED.guard:
        queued, _QUEUED.queue, _QUEUED.queued = _QUEUED.queue, [], 0
        _QUEUED.now.clear()
    by_dir: dict[str, tuple[NodeCache, list, dict]] = {}
    for cache, made, got, _, _ in queued:
        mine = by_dir.setdefault(cache.directory, (cache, [], {}))
        mine[1].extend(made)
        mine[2].update(got)
    try:
        for cache, made, got in by_dir.values():
            try:
                claims.write(cache, made, got)
            except Exception as exc:  # the reads succeeded; only caching them failed
                log.warning("fluxfs node-local cache: %d objects not cached: %s", len(got), exc)
    finally:
        with _QUEUED.guard:
            for cache, made, _, reserved, _ in queued:
                _QUEUED.pending -= reserved
                for e in (e for c in made for e in c.entries):
                    _QUEUED.filling.pop((cache.directory, e), None)
        for *_, done in queued:
            done.set_result(None)


async def _claim(cache: NodeCache, wanted: list[Entry]) -> tuple[list[claims.Claim], list[Entry], int]:
    """`claims.claim` on a cache thread within this process's backlog: (claims, objects others claimed, backlog
    bytes the claims hold). Cancelled meanwhile (Ctrl-C): whatever it claimed is let go by the filler thread."""
    with _QUEUED.guard:
        room = max(0, min(BACKLOG - _QUEUED.pending, sum(e[4] for e in set(wanted))))
        _QUEUED.pending += room

    def settle(made: list[claims.Claim]) -> int:
        held = sum(c.size for c in made)
        with _QUEUED.guard:
            _QUEUED.pending -= room - held
        return held

    fut = cache.executor().submit(claims.claim, cache, wanted, room, _most(cache))
    try:
        made, theirs = await asyncio.wrap_future(fut)
    except asyncio.CancelledError:
        def let_go(f: concurrent.futures.Future) -> None:
            made = [] if f.cancelled() or f.exception() is not None else f.result()[0]
            _write_later(cache, made, {}, settle(made))
        fut.add_done_callback(let_go)
        raise
    except Exception as exc:  # the objects can still be read; only caching them failed
        log.warning("fluxfs node-local cache: %d objects not cached: %s", len(wanted), exc)
        settle([])
        return [], [], 0
    return made, theirs, settle(made)


def flush() -> None:
    """Wait until this process's queued fills are written (tests, benchmarks)."""
    with _QUEUED.guard:
        waiting = list(_QUEUED.filling.values())
        if waiting:
            _QUEUED.now.set()
    concurrent.futures.wait(waiting)


async def cat_objects(fetch: Fetcher, cache: NodeCache, infos: list, on_error: str) -> dict:
    """`fetch.cat_objects(infos, on_error=...)`'s answer, the cached objects served from the cache; the misses
    claimed first (`claims.py`), so objects another process is downloading are waited for, not downloaded again."""
    names = [fetch.strip_protocol(info["name"] if isinstance(info, dict) else info) for info in infos]  # once each
    entries = [(i, e) for i, e in ((i, _cacheable(fetch, info, names[i])) for i, info in enumerate(infos))
               if e is not None]
    if not entries:
        return await fetch.cat_objects(infos, on_error=on_error)
    loop = asyncio.get_running_loop()
    with _QUEUED.guard:  # an object this process is still writing to the cache: wait for it rather than read it again
        mine = [f for f in (_QUEUED.filling.get((cache.directory, e)) for _, e in entries) if f is not None]
    if mine:
        _QUEUED.now.set()
        await asyncio.gather(*map(asyncio.wrap_future, set(mine)), return_exceptions=True)
    if sum(e[4] for _, e in entries) <= INLINE:  # a loader's batch: no hop to a thread and back (GIL waits)
        hits = _hits(cache, entries)
    else:
        hits = await loop.run_in_executor(cache.executor(), _hits, cache, entries)
    if len(hits) == len(infos):
        return {names[i]: hits[i] for i in range(len(infos))}
    misses = {i: e for i, e in entries if i not in hits}
    made, theirs, reserved = await _claim(cache, list(misses.values()))
    waited = set(theirs)
    first = [info for i, info in enumerate(infos) if i not in hits and misses.get(i) not in waited]
    wait = asyncio.ensure_future(claims.wait_for(cache, theirs)) if theirs else None
    got: dict = {}
    try:
        try:
            got = await fetch.cat_objects(first, on_error=on_error) if first else {}
        finally:  # on every path: written, or let go
            named = {e: names[i] for i, e in misses.items()}
            _write_later(cache, made, {e: got.get(named[e]) for c in made for e in c.entries}, reserved)
        if wait is not None:
            await wait
            late = [(i, e) for i, e in misses.items() if e in waited]
            more = await loop.run_in_executor(cache.executor(), _hits, cache, late)
            hits.update(more)
            rest = [infos[i] for i, _ in late if i not in more]  # a claimer that gave up or stalled: storage
            if rest:
                got.update(await fetch.cat_objects(rest, on_error=on_error))
    finally:
        if wait is not None:
            wait.cancel()
    out = {}
    for i, name in enumerate(names):  # the order asked, as the uncached read answers
        if i in hits:
            out[name] = hits[i]
        elif name in got:
            out[name] = got[name]
    return out
