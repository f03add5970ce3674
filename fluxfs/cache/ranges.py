"""Byte ranges of an object through the node-local cache: what `fs.read_ranges` does when `cache_dir` is set.

A complete entry of the generation serves every range from its local file: no request at all. Otherwise
this process fills the entry alongside the reads (one download, no second pass): the object is fetched
in parts of `PART` bytes, each part once, written to the entry's reserved temporary file; a read waits
for (or fetches first) the parts its ranges cover and is served from that file, and a background task
fetches the parts no read asked for. With every part in, the file's crc32c is checked against the
object's and it is fsynced and renamed into place: the entry appears complete only then, and a crc32c
mismatch leaves nothing cached. Another process filling the same entry, an object larger than the
limit, a full disk: the ranges are read from storage as without a cache. With no generation given, a
metadata GET learns the live one first (never a cached older generation).
"""
from __future__ import annotations

import asyncio
import errno
import logging
import os
from typing import Any, Optional, Sequence

import google_crc32c

from . import evict
from .entry import Meta, crc_value, entry_id, temp_name
from .lock import FileLock
from .store import NodeCache, _unlink

log = logging.getLogger("fluxfs.cache")

PART = 8 * 2**20          # the fill's unit: one ranged GET (the shard stream's range size)
BACKGROUND_PARTS = 4      # parts no read asked for, fetched at once per process (all fills together)
_FILLS: dict[tuple[str, str], "Fill"] = {}  # fills this process is doing, by (cache directory, entry id)
_SEM: list = []           # the background semaphore of this process's loop (made on it)


def _after_fork() -> None:  # a forked worker does not own its parent's fills
    _FILLS.clear()
    _SEM.clear()


os.register_at_fork(after_in_child=_after_fork)


class Fill:
    """One entry being filled by this process: parts fetched once each, readers served from the file."""

    def __init__(self, fs: Any, cache: NodeCache, path: str, eid: str, meta: Meta, lock: FileLock, tmp: str):
        self.fs, self.cache, self.path, self.eid, self.meta, self.lock, self.tmp = fs, cache, path, eid, meta, lock, tmp
        self.count = max(1, -(-meta.size // PART))
        self.parts: dict[int, asyncio.Future] = {}
        self.done = 0
        self.closed = False
        self.fd = os.open(tmp, os.O_RDWR | getattr(os, "O_CLOEXEC", 0))

    async def need(self, p: int, data: Optional[bytes] = None) -> None:
        """Part `p` on disk: fetched by this call unless another has (or is fetching) it; `data`: already fetched."""
        fut = self.parts.get(p)
        if fut is None:
            fut = self.parts[p] = asyncio.get_running_loop().create_future()
            fut.add_done_callback(lambda f: f.cancelled() or f.exception())  # retrieved: no "never retrieved"
            try:
                if data is None:
                    lo, hi = p * PART, min((p + 1) * PART, self.meta.size)
                    got = await self.fs._read_ranges(self.path, [(lo, hi)], generation=self.meta.generation,
                                                     max_gap=0, cache=False)
                    data = got[0]
                if self.closed:  # abandoned while this part was in flight: its descriptor is gone
                    fut.set_result(None)
                    return
                _write_all(self.fd, data, p * PART)
            except BaseException as exc:
                fut.set_exception(exc)
                self.abort()
                raise
            fut.set_result(None)
            self.done += 1
            if self.done == self.count:
                asyncio.ensure_future(self.finish())
        await fut

    async def rest(self) -> None:
        """The parts no read asked for, `BACKGROUND_PARTS` at a time for the whole process."""
        if not _SEM:
            _SEM.append(asyncio.Semaphore(BACKGROUND_PARTS))
        sem = _SEM[0]

        async def one(p: int) -> None:
            async with sem:
                if p not in self.parts and not self.closed:
                    await self.need(p)

        try:
            await asyncio.gather(*(one(p) for p in range(self.count)))
        except BaseException:  # noqa: BLE001 - the fill is abandoned (abort); the readers see their own errors
            pass

    async def finish(self) -> None:
        """Every part is in: check, fsync and rename into place (on the cache's threads), then let go."""
        loop = asyncio.get_running_loop()
        meta_tmp = os.path.join(self.cache.directory, temp_name(self.eid))
        try:
            await loop.run_in_executor(self.cache._executor(), self._commit, meta_tmp)
        except BaseException as exc:  # noqa: BLE001 - a fill that fails leaves nothing; the reads were served
            _unlink(meta_tmp)
            if not (isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT)):
                log.warning("fluxfs node-local cache: %s not cached: %s", self.path, exc)
            self.abort()
            return
        self._close()
        self.lock.mark_filling(False)
        self.lock.release()

    def _commit(self, meta_tmp: str) -> None:
        crc, at = 0, 0
        while at < self.meta.size:
            chunk = os.pread(self.fd, min(PART, self.meta.size - at), at)
            if not chunk:
                break
            crc, at = google_crc32c.extend(crc, chunk), at + len(chunk)
        what = f"{self.meta.bucket}/{self.meta.key}#{self.meta.generation}"
        if at != self.meta.size or (self.meta.crc32c is not None and crc != self.meta.crc32c):
            raise ValueError(f"crc32c mismatch filling {what} (the file read back differs from the object)")
        self.cache.commit(self.fd, self.tmp, meta_tmp, self.eid, self.meta)

    def abort(self) -> None:
        """No entry: the temporary and the lock file go, the lock is let go; later reads start anew."""
        if self.closed:
            return
        self._close()
        _unlink(self.tmp)
        if self.lock.shared is False:
            self.lock.remove()
        self.lock.release()

    def _close(self) -> None:
        self.closed = True
        _FILLS.pop((self.cache.directory, self.eid), None)
        os.close(self.fd)


def _write_all(fd: int, data: Any, offset: int) -> None:
    view = memoryview(data).cast("B")
    while view:
        n = os.pwrite(fd, view, offset)
        view, offset = view[n:], offset + n


def _read_fd(fd: int, spans: Sequence[tuple[int, int]], size: int, buffers: Optional[list]) -> list:
    """The spans' bytes from a local file (short past `size`, as a GET would be), or read into `buffers`."""
    out: list = []
    for i, (s, e) in enumerate(spans):
        e = min(e, size)
        if buffers is None:
            out.append(os.pread(fd, e - s, s) if e > s else b"")
            continue
        mv, at = memoryview(buffers[i]).cast("B"), s
        while len(mv):
            n = os.preadv(fd, [mv], at)
            if n <= 0:
                raise EOFError(f"node-local cache: an entry ended at byte {at} of {size}")
            mv, at = mv[n:], at + n
    return out


def _read_from(path: str, spans: Sequence[tuple[int, int]], size: int, buffers: Optional[list]) -> list:
    with open(path, "rb", buffering=0) as f:
        return _read_fd(f.fileno(), spans, size, buffers)


async def read_ranges(fs: Any, cache: NodeCache, path: str, spans: list[tuple[int, int]],
                      generation: Optional[str], into: Optional[list] = None) -> Optional[tuple]:
    """(the spans' bytes, or [] with `into` filled, size, generation, crc32c) through the cache, or None:
    the caller reads them from storage (another process fills the entry, it cannot be cached, ...)."""
    bucket, key, _ = fs.split_path(path)
    if all(e <= s for s, e in spans):
        return None  # nothing to read: no request, as without a cache
    size = crc = None
    if not generation:  # the live generation, never an older cached one
        from .reader import head
        meta = await head(fs, bucket, key)
        generation, size, crc = str(meta["generation"]), int(meta.get("size") or 0), crc_value(meta.get("crc32c"))
    eid = entry_id(bucket, key, generation)
    for s, _ in spans:
        if size is not None and s > size:
            return None  # the uncached read names the mistake
    fill = _FILLS.get((cache.directory, eid))
    if fill is None:
        got = await _hit(cache, bucket, key, generation, size, spans, into)
        if got is not None:
            return got
        fill = await _start(fs, cache, path, bucket, key, eid, generation, size, crc, spans)
        if fill is None:  # filled by another process just now, or not to be cached by this one
            return await _hit(cache, bucket, key, generation, size, spans, into)
    parts = sorted({p for s, e in spans if e > s for p in range(s // PART, max(s, min(e, fill.meta.size) - 1) // PART + 1)
                    if p < fill.count})
    await asyncio.gather(*(fill.need(p) for p in parts))
    if fill.closed:  # completed (or abandoned) meanwhile: read it as any other entry
        return await read_ranges(fs, cache, path, spans, generation, into)
    got = _read_fd(fill.fd, spans, fill.meta.size, into)
    return got, fill.meta.size, generation, fill.meta.crc32c


async def _hit(cache: NodeCache, bucket: str, key: str, generation: str, size: Optional[int],
               spans: list[tuple[int, int]], into: Optional[list]) -> Optional[tuple]:
    """The spans from the complete entry of that generation (held while read), or None: there is none."""
    held = cache.lookup(bucket, key, generation, size)
    if held is None:
        return None
    try:
        path = held.path or ""
        n = os.stat(path).st_size
        if any(s > n for s, _ in spans):
            return None  # the uncached read names the mistake
        meta = Meta.read(path[:-len("data")] + "meta")
        args = (path, spans, n, into)
        if sum(e - s for s, e in spans) > 2**20:  # a large read off the event loop
            got = await asyncio.get_running_loop().run_in_executor(cache._executor(), _read_from, *args)
        else:
            got = _read_from(*args)
        return got, n, generation, meta.crc32c if meta else None
    finally:
        held.release()


async def _start(fs: Any, cache: NodeCache, path: str, bucket: str, key: str, eid: str, generation: str,
                 size: Optional[int], crc: Optional[int], spans: list) -> Optional[Fill]:
    """This process's fill of the entry, its first part fetched (which tells the size and crc32c), or None."""
    lock = FileLock(cache._path(eid, "lock"))
    try:
        if not lock.try_acquire(shared=False):
            return None  # another process fills it (or reads it while an evictor waits): storage, this time
    except OSError:
        return None
    try:
        first = min(s for s, e in spans if e > s) // PART
        data = None
        if size is None:  # one ranged GET: the first part needed, and the object's size and crc32c
            got = await fs._read_ranges(path, [(first * PART, first * PART + PART)], generation=generation,
                                        max_gap=0, cache=False)
            size, crc, data = got.size, got.crc32c, got[0]
        if cache._complete(eid, bucket, key, generation, size):
            lock.release()  # filled by another process just before we locked
            return None
        if lock.was_filling():
            evict.remove_entry(cache.directory, eid, include_data=False)  # a killed filler's leftovers
        lock.mark_filling(True)
        meta = Meta(bucket, key, str(generation), int(size), crc)
        need = int(size) + len(meta.to_bytes())
        if cache.limit is not None and need > cache.limit:
            raise _NotCached
        tmp = cache._reserve(eid, need)
        if tmp is None:
            raise _NotCached
    except _NotCached:
        lock.remove()
        lock.release()
        return None
    except BaseException:
        lock.remove()
        lock.release()
        raise
    fill = _FILLS[(cache.directory, eid)] = Fill(fs, cache, path, eid, meta, lock, tmp)
    if data is not None and first < fill.count:
        await fill.need(first, data)
    asyncio.ensure_future(fill.rest())
    return fill


class _NotCached(Exception):
    """The entry cannot be cached (larger than the limit, no room): read from storage."""


async def through_cache(fs: Any, cache: NodeCache, path: str, ranges: Any, kwargs: dict, ranges_type: type,
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
    _, _, gen = fs.split_path(path)
    got = await read_ranges(fs, cache, path, spans, kwargs.get("generation") or gen or None,
                            list(into) if into is not None else None)
    if got is None:
        return None
    data, size, generation, crc = got
    if into is not None:
        return into_type(size=size, generation=generation, crc32c=crc, verified=True, requests=0, bytes_received=0)
    out = ranges_type(data)
    out.size, out.generation, out.crc32c = size, generation, crc
    return out
