"""Byte ranges of an object through the node-local cache: what `fs.read_ranges` does when `cache_dir` is set.

A complete entry of the generation serves every range from its local file: no request at all. Otherwise
this process fills the entry alongside the reads (one download, no second pass; `fill.py`): the reads
of this process share the parts (`PART` bytes each) their ranges cover, each fetched once, and are
answered from the parts' bytes as they arrive, while the parts are written to the entry's reserved
temporary file off their path. Another process filling the same entry, an object larger than the
limit, a full disk, a failed part: the ranges are read from storage as without a cache. With no
generation given, a metadata GET learns the live one first (never a cached older generation).
"""
from __future__ import annotations

import asyncio
import functools
import os
from typing import Any, Optional, Sequence

from ..gcs import checksums
from . import evict, progress
from .entry import crc_value, entry_id, open_fixed
from .checks import Checks
from .spans import read_fd
from .fill import FILLS, TOO_LARGE, Fill
from .lock import FileLock
from .fetcher import Fetcher
from .store import NodeCache

PART = 8 * 2**20          # the fill's unit: one ranged GET (the shard stream's range size)


def _read_from(path: str, spans: Sequence[tuple[int, int]], size: int, buffers: Optional[list]) -> list:
    with os.fdopen(open_fixed(path), "rb", buffering=0) as f:
        return read_fd(f.fileno(), spans, size, buffers)


async def read_ranges(fetch: Fetcher, cache: NodeCache, path: str, spans: list[tuple[int, int]],
                      generation: Optional[str], into: Optional[list] = None) -> Optional[tuple]:
    """(the spans' bytes, or [] with `into` filled, size, generation, crc32c) through the cache, or None:
    the caller reads them from storage (another process fills the entry, it cannot be cached, ...)."""
    bucket, key, _ = fetch.split_path(path)
    if all(e <= s for s, e in spans):
        return None  # nothing to read: no request, as without a cache
    size = crc = None
    if not generation:  # the live generation, never an older cached one
        meta = await fetch.head(bucket, key)
        generation, size, crc = str(meta["generation"]), int(meta.get("size") or 0), crc_value(meta.get("crc32c"))
    store = fetch.store
    eid = entry_id(bucket, key, generation, store)
    if size is not None and any(s > size for s, _ in spans):
        return None  # the uncached read names the mistake
    if (cache.directory, eid) in TOO_LARGE:
        return None  # larger than the limit: its ranges from storage, as asked
    for _attempt in range(3):
        fill = FILLS.get((cache.directory, eid))
        if fill is None:
            got = await _hit(cache, store, bucket, key, generation, size, crc, spans, into)
            if got is not None:
                return got
            fill = FILLS.get((cache.directory, eid)) or _start(fetch, cache, path, store, bucket, key, eid, generation,
                                                               size, crc)
            if fill is None:  # filled by another process just now, or being filled by another: read from its fill
                got = await _hit(cache, store, bucket, key, generation, size, crc, spans, into)
                if got is not None:
                    return got
                got = await progress.read(cache.directory, eid, spans, into, cache.stall)
                if got is progress.ENDED:
                    continue
                if got is None:
                    return None
                data, n, crc_ = got
                return data, n, generation, crc_
        got = await _from_fill(fill, spans, into)
        if got is not _ENDED:
            return got
    return None


_ENDED = object()  # the fill ended while a read waited: read the entry (or storage) anew


async def _from_fill(fill: Fill, spans: list[tuple[int, int]], into: Optional[list]) -> Any:
    """The spans from the parts of a fill under way (their bytes, or the file for parts written already);
    None: read from storage (a part failed, or a span starts past the object's end)."""
    P = fill.part
    want: set[int] = set()
    for s, e in spans:
        if e > s:
            end = e if fill.meta is None else min(e, fill.meta.size)
            want.update(range(s // P, max(s, end - 1) // P + 1))
    ps = sorted(p for p in want if fill.meta is None or p < fill.count)
    # shielded: a read cancelled must not cancel a part other reads (and the fill) wait for
    results = await asyncio.gather(*(asyncio.shield(fill.get(p)) for p in ps), return_exceptions=True)
    meta = fill.meta
    if meta is None:
        return None
    got = dict(zip(ps, results))
    if any(isinstance(r, BaseException) for p, r in got.items() if p < fill.count):
        return None  # storage names what went wrong, or the bytes come from there
    if any(s > meta.size for s, _ in spans):
        return None  # the uncached read names the mistake
    if any(r is None for r in got.values()) and fill.fd is None:
        return _ENDED  # written and the fill completed (or abandoned) meanwhile
    out = []
    for i, (s, e) in enumerate(spans):
        e = min(e, meta.size)
        pieces, at = [], s
        while at < e:
            p = at // P
            lo, hi = p * P, min(e, p * P + fill.part_len(p))
            r = got[p]
            whole = r is not None and at == lo and hi - lo == len(r)
            pieces.append(fill.read_file(at, hi - at) if r is None else r if whole else memoryview(r)[at - lo:hi - lo])
            at = hi
        if into is not None:
            mv, k = memoryview(into[i]).cast("B"), 0
            for piece in pieces:
                mv[k:k + len(piece)] = piece
                k += len(piece)
        else:
            out.append(pieces[0] if len(pieces) == 1 and isinstance(pieces[0], bytes) else b"".join(pieces))
    return out, meta.size, fill.generation, meta.crc32c


async def _hit(cache: NodeCache, store: str, bucket: str, key: str, generation: str, size: Optional[int],
               crc: Optional[int], spans: list[tuple[int, int]], into: Optional[list]) -> Optional[tuple]:
    """The spans from the complete entry of that generation (held while read), or None: there is none."""
    look = functools.partial(cache.lookup, bucket, key, generation, size, "parts", store, crc)
    eid = entry_id(bucket, key, generation, store)
    if not os.path.exists(cache.path_of(eid, "data")):
        return None  # a miss, told without the entry's lock: a shared hold now would turn a starting filler away
    if cache.checks.checked(eid):
        held = look()
    else:  # its first use in this process reads the whole file (its crc32c): off the event loop
        held = await asyncio.get_running_loop().run_in_executor(cache.executor(), look)
    if held is None:
        return None
    try:
        path = held.path or ""
        st = os.stat(path)
        if any(s > st.st_size for s, _ in spans):
            return None  # the uncached read names the mistake
        read = _read_from if held.parts is None else functools.partial(_read_checked, cache.checks, eid, st.st_ino,
                                                                       held.parts)
        args = (path, spans, st.st_size, into)
        if sum(e - s for s, e in spans) > 2**20:  # a large read off the event loop
            got = await asyncio.get_running_loop().run_in_executor(cache.executor(), read, *args)
        else:
            got = read(*args)
    finally:
        held.release()
    if got is None:  # a part fails its crc32c: read from storage, the entry dropped and filled again
        cache.failed_check(path)
        return None
    return got, st.st_size, generation, held.crc32c


def _read_checked(checks: Checks, eid: str, ino: int, parts: tuple[int, tuple[int, ...]], path: str,
                  spans: Sequence[tuple[int, int]], size: int, into: Optional[list]) -> Optional[list]:
    """`_read_from`, each part the spans cover checked against the sidecar's crc32c on its first read in this
    process (read whole then, the spans cut from its bytes: an aligned range is the part itself, no copy);
    None when one fails."""
    P, crcs = parts
    with os.fdopen(open_fixed(path), "rb", buffering=0) as f:
        fd, got = f.fileno(), {}
        for s, e in spans:
            for p in range(s // P, (min(e, size) - 1) // P + 1):
                if p not in got and not checks.part_checked(eid, ino, p):
                    got[p] = os.pread(fd, min(P, size - p * P), p * P)
                    if checksums.crc32c(got[p]) != crcs[p]:
                        return None
                    checks.part_good(eid, ino, p)
        if not got:
            return read_fd(fd, spans, size, into)
        out = []
        for i, (s, e) in enumerate(spans):
            e, pieces = min(e, size), []
            for p in range(s // P, (e - 1) // P + 1) if e > s else ():
                lo, hi = max(s, p * P), min(e, p * P + P)
                whole = p in got and (lo, hi) == (p * P, p * P + len(got[p]))
                pieces.append(got[p] if whole else memoryview(got[p])[lo - p * P:hi - p * P] if p in got
                              else os.pread(fd, hi - lo, lo))
            if into is not None:
                mv, data = memoryview(into[i]).cast("B"), b"".join(pieces)
                if len(data) != mv.nbytes:
                    raise EOFError(f"node-local cache: an entry ended at byte {e} of {size}")
                mv[:] = data
            else:
                out.append(pieces[0] if len(pieces) == 1 and isinstance(pieces[0], bytes) else b"".join(pieces))
        return out


def _start(fetch: Fetcher, cache: NodeCache, path: str, store: str, bucket: str, key: str, eid: str, generation: str,
           size: Optional[int], crc: Optional[int]) -> Optional[Fill]:
    """This process's fill of the entry (registered before any await, so its other reads join it), or None:
    another process fills it, or it was completed just now."""
    lock = FileLock(cache.path_of(eid, "lock"))
    try:
        if not lock.try_acquire(shared=False):
            return None  # another process fills it (or reads it while an evictor waits): storage, this time
    except OSError:
        return None
    try:
        if cache.is_complete(eid, bucket, key, generation, size, store=store, crc=crc):
            lock.release()  # filled by another process just before we locked
            return None
        if lock.was_filling():
            evict.remove_entry(cache.directory, eid, include_data=False)  # a killed filler's leftovers
        lock.mark_filling(True)
    except BaseException:
        lock.remove()
        lock.release()
        raise
    fill = Fill(fetch, cache, path, eid, store, bucket, key, str(generation), lock, PART)
    if size is not None:
        fill.known(size, crc)
    return fill


async def through_cache(fetch: Fetcher, cache: NodeCache, path: str, ranges: Any, kwargs: dict, ranges_type: type,
                        into_type: type) -> Any:
    """`fs._read_ranges(path, ranges, **kwargs)` through the cache, as a `ranges_type` list (or an `into_type`
    result with ``into=``); None: read from storage as usual (odd arguments are refused there, by name)."""
    into = kwargs.get("into")
    try:
        spans = [(int(s), int(e)) for s, e in ranges]
        ok = all(type(v) is not bool and v == int(v) for r in ranges for v in r) and all(0 <= s <= e for s, e in spans)
    except (TypeError, ValueError):
        return None
    if not ok or (into is not None and (len(list(into)) != len(spans) or any(
            memoryview(b).nbytes != e - s for b, (s, e) in zip(into, spans)))):
        return None
    _, _, gen = fetch.split_path(path)
    got = await read_ranges(fetch, cache, path, spans, kwargs.get("generation") or gen or None,
                            list(into) if into is not None else None)
    if got is None:
        return None
    data, size, generation, crc = got
    if into is not None:
        return into_type(size=size, generation=generation, crc32c=crc, verified=True, requests=0, bytes_received=0)
    out = ranges_type(data)
    out.size, out.generation, out.crc32c = size, generation, crc
    return out
