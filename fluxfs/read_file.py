"""Direct object reads: one GET, parallel ranged GETs pinned to one generation, and `FluxReadFile`.

Every read learns the object's size, generation and crc32c from the response headers
(``Content-Range``, ``x-goog-generation``, ``x-goog-hash``), so no metadata request is
needed, and every whole-object read is verified against the crc32c.
"""
from __future__ import annotations

import asyncio
import bisect
import collections
import concurrent.futures
import dataclasses
import io
import itertools
import logging
from typing import TYPE_CHECKING, Any, Callable, Iterator, Optional
from urllib.parse import quote

import aiohttp
import google_crc32c

from .gcs import bridge, http
from .gcs.checksums import crc_from_b64
from .errors import ChecksumMismatch, raise_for_status

if TYPE_CHECKING:  # pragma: no cover
    from .core import FluxFileSystem

logger = logging.getLogger("fluxfs.read_file")

# Ranged GETs of 8 MiB: on the cloud profile (30 ms first byte, 100 MB/s per request) the
# first byte is ~25% of a request's time, and 16 of them in flight (128 MiB) saturate what
# the 2-core client can receive; smaller ranges cost more requests and CPU per byte.
DEFAULT_CHUNK = 8 * 2**20
DEFAULT_RANGE_CONCURRENCY = 16


@dataclasses.dataclass
class Fetched:
    """Bytes of one GET and what the headers said about the object they came from."""

    body: bytes
    start: int
    size: int                 # the whole object's size
    generation: Optional[str]
    crc32c: Optional[int]     # the whole object's crc32c, if the server sent it


def _crc_from_headers(headers: Any) -> Optional[int]:
    return crc_from_b64(http.goog_hash(headers, "crc32c"))


def media_url(fs: "FluxFileSystem", bucket: str, key: str) -> str:
    """The JSON API download URL of an object."""
    return f"{fs._location}/download/storage/v1/b/{quote(bucket, safe='')}/o/{quote(key, safe='')}"


async def _get_once(fs, bucket, key, start, end, generation, check) -> Fetched:
    """One GET (optionally ranged [start, end)), verified against x-goog-hash when it covers the object."""
    params = {"alt": "media"}
    if generation is not None:
        params["generation"] = str(generation)
    headers = {}
    if start is not None:
        headers["Range"] = f"bytes={start}-{end - 1}" if end is not None else f"bytes={start}-"
    what = f"{bucket}/{key}"
    resp = await http.request_once(fs, "GET", media_url(fs, bucket, key), what=what, params=params,
                                   headers=headers, ok=(200, 206, 416))
    if resp.status == 416:
        if start == 0:
            # GCS answers a ranged GET of an empty object with 416: read it whole instead.
            return await _get_once(fs, bucket, key, None, None, generation, check)
        raise ValueError(f"Requested range {start}-{end} not satisfiable for {what}")
    h = resp.headers
    body = resp.body
    gen = h.get("x-goog-generation")
    crc = _crc_from_headers(h)
    if resp.status == 206:
        cr = h.get("Content-Range", "")
        first, _, total = cr.partition(" ")[2].partition("/")
        size = int(total)
        begin = int(first.split("-")[0]) if first and first != "*" else 0
    else:
        size, begin = len(body), 0
    if check and crc is not None and begin == 0 and len(body) == size and google_crc32c.value(body) != crc:
        raise ChecksumMismatch(f"crc32c mismatch reading {what} (generation {gen}): bytes corrupted in transit")
    return Fetched(body, begin, size, gen, crc)


async def get_range(fs: "FluxFileSystem", bucket: str, key: str, start: Optional[int] = None,
                    end: Optional[int] = None, generation: Optional[str] = None, check: bool = True) -> Fetched:
    """GET bytes [start, end) (all when both are None) under the read retry policy."""
    policy = fs.retry_policy("read")
    return await policy.run(lambda _attempt: _get_once(fs, bucket, key, start, end, generation, check),
                            what=f"read {bucket}/{key}")


@dataclasses.dataclass
class Streamed:
    """Bytes of one ranged GET kept as the chunks aiohttp received: joining them would cost a copy."""

    chunks: list              # bytes objects, in order
    start: int
    size: int                 # the whole object's size
    generation: Optional[str]
    crc32c: Optional[int]


Head = Callable[[int, Optional[str], Optional[int]], None]


def _content_range(value: str) -> tuple[int, int]:
    """(first byte, object size) from "bytes a-b/size"."""
    first, _, total = value.partition(" ")[2].partition("/")
    return (int(first.split("-")[0]) if first and first != "*" else 0), int(total)


async def _stream_once(fs, bucket, key, start: int, end: int, generation, on_head: Optional[Head]) -> Streamed:
    """One GET of [start, end), its body collected chunk by chunk; `on_head(size, generation, crc32c)`
    is called as soon as the headers tell them (before the body, on a 206), so a caller can start
    the other ranges one transfer time earlier."""
    params = {"alt": "media"}
    if generation is not None:
        params["generation"] = str(generation)
    what = f"{bucket}/{key}"
    session = await fs._set_session()
    async with http.timeouts_named(fs, what), \
            session.get(media_url(fs, bucket, key), params=fs._get_params(params),
                        headers=fs._get_headers({"Range": f"bytes={start}-{end - 1}"}),
                        timeout=fs.options.http_timeout) as r:
        if r.status == 416 and start == 0:
            # GCS answers a ranged GET of an empty object with 416: read it whole instead.
            got = await _get_once(fs, bucket, key, None, None, generation, True)
            if on_head is not None:
                on_head(got.size, got.generation, got.crc32c)
            return Streamed([got.body] if got.body else [], 0, got.size, got.generation, got.crc32c)
        if r.status not in (200, 206):
            body = await r.read()
            if r.status == 416:
                raise ValueError(f"Requested range {start}-{end} not satisfiable for {what}")
            raise_for_status(r.status, body, what, r.headers)
            raise_for_status(500, body or f"unexpected HTTP {r.status}".encode(), what)
        if r.status == 200 and start > 0:
            # A whole object where a later range was asked for: slicing it would misplace bytes.
            raise ValueError(f"the server ignored the Range header (bytes={start}-{end - 1}) reading {what}")
        h = r.headers
        gen = h.get("x-goog-generation")
        crc = _crc_from_headers(h)
        begin, size = _content_range(h.get("Content-Range", "")) if r.status == 206 else (0, -1)
        if r.status == 206 and on_head is not None:
            on_head(size, gen, crc)
        chunks = []
        n = 0
        async for data, _ in r.content.iter_chunks():  # one buffered chunk at a time, no joining
            if data:
                chunks.append(data)
                n += len(data)
    if r.status == 200:  # the server sent the whole object (empty, or it ignored Range)
        begin, size = 0, n
        if crc is not None:
            value = 0
            for c in chunks:
                value = google_crc32c.extend(value, c)
            if value != crc:
                raise ChecksumMismatch(f"crc32c mismatch reading {what} (generation {gen}): bytes corrupted in transit")
        if on_head is not None:
            on_head(size, gen, crc)
    elif n != min(end, size) - begin:
        raise aiohttp.ClientPayloadError(f"short body reading {what}: {n} bytes for range {begin}-{end}")
    return Streamed(chunks, begin, size, gen, crc)


async def get_chunks(fs: "FluxFileSystem", bucket: str, key: str, start: int, end: int,
                     generation: Optional[str] = None, on_head: Optional[Head] = None) -> Streamed:
    """GET bytes [start, end) as received chunks, under the read retry policy.

    A retry after the headers were seen is pinned to the generation they named, so the
    bytes can never come from two versions.
    """
    seen = {"gen": generation}

    def head(size: int, gen: Optional[str], crc: Optional[int]) -> None:
        if seen["gen"] is None:
            seen["gen"] = gen
        if on_head is not None:
            on_head(size, gen, crc)

    policy = fs.retry_policy("read")
    return await policy.run(lambda _attempt: _stream_once(fs, bucket, key, start, end, seen["gen"], head),
                            what=f"read {bucket}/{key}")


def _split(start: int, end: int, chunk: int) -> list[tuple[int, int]]:
    return [(a, min(a + chunk, end)) for a in range(start, end, chunk)]


async def read_object(fs: "FluxFileSystem", bucket: str, key: str, *, start: Optional[int] = None,
                      end: Optional[int] = None, size_hint: Optional[int] = None,
                      generation: Optional[str] = None, chunk: Optional[int] = None,
                      concurrency: Optional[int] = None) -> Fetched:
    """Read an object (or [start, end) of it) with parallel ranged GETs pinned to one generation.

    The first GET is unpinned unless `generation` is given (so the current version is read)
    and tells size and generation; the rest of the object is fetched in `chunk`-sized ranges
    pinned to that generation, so an overwrite in the middle cannot mix two versions.
    A whole-object read is checked against the object's crc32c.
    """
    chunk = chunk or DEFAULT_CHUNK
    concurrency = concurrency or DEFAULT_RANGE_CONCURRENCY
    s = start or 0
    if start is None and end is None and size_hint is not None and size_hint <= chunk:
        # Known small: one plain GET (no Range header, no 416 dance for empty objects).
        return await get_range(fs, bucket, key, generation=generation)
    first_end = s + chunk if end is None else min(end, s + chunk)
    if end is not None and first_end <= s:
        return Fetched(b"", s, -1, generation, None)
    first = await get_chunks(fs, bucket, key, s, first_end, generation)
    stop = first.size if end is None else min(end, first.size)
    got = sum(map(len, first.chunks))
    ranges = _split(s + got, stop, chunk) if s + got < stop else []
    gen = first.generation
    sem = asyncio.Semaphore(concurrency)

    async def one(a: int, b: int) -> list:
        async with sem:
            return (await get_chunks(fs, bucket, key, a, b, gen)).chunks

    tasks = [asyncio.ensure_future(one(a, b)) for a, b in ranges]
    try:
        parts = await asyncio.gather(*tasks)
    except BaseException:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise
    # One copy: every received chunk of every range straight into the result.
    body = b"".join(itertools.chain(first.chunks, *parts))
    if s == 0 and stop == first.size and first.crc32c is not None and google_crc32c.value(body) != first.crc32c:
        raise ChecksumMismatch(f"crc32c mismatch reading {bucket}/{key} (generation {gen}) with parallel ranges")
    return Fetched(body, s, first.size, gen, first.crc32c)


class _Block:
    """One block of a read handle, as the chunks received (a join would cost a copy of every byte)."""

    __slots__ = ("chunks", "ends", "length")

    def __init__(self, chunks: list):
        self.chunks = [c for c in chunks if len(c)]
        self.ends = list(itertools.accumulate(len(c) for c in self.chunks))
        self.length = self.ends[-1] if self.ends else 0

    def views(self, off: int, n: int) -> Iterator:
        """Buffers covering bytes [off, off + n) of the block: whole chunks as they are, else memoryview slices."""
        k = bisect.bisect_right(self.ends, off)
        while n > 0 and k < len(self.chunks):
            c = self.chunks[k]
            a = off - (self.ends[k] - len(c))
            take = min(n, len(c) - a)
            yield c if a == 0 and take == len(c) else memoryview(c)[a:a + take]
            off += take
            n -= take
            k += 1


class FluxReadFile(io.RawIOBase):
    """Read handle: parallel ranged GETs with a bounded prefetch window, pinned to one generation.

    Blocks of `block_size` bytes are fetched on the filesystem's event loop; reading at a
    position keeps up to `prefetch` blocks ahead in flight. Objects no larger than
    `whole_object_limit` are fetched entirely on the first read. The generation seen by
    the first GET is pinned for every later range, and the crc32c is checked once every
    byte has passed through the handle in order. Not thread-safe (one reader per handle).
    """

    def __init__(self, fs: "FluxFileSystem", path: str, mode: str = "rb", block_size: Optional[int] = None,
                 *, prefetch: Optional[int] = None, whole_object_limit: Optional[int] = None,
                 generation: Optional[str] = None, **kwargs: Any):
        super().__init__()
        if mode != "rb":
            raise ValueError(f"FluxReadFile only reads ('rb'), not {mode!r}: {path}")
        self.fs = fs
        self.mode = mode
        self.path = fs._strip_protocol(path)
        bucket, key, path_gen = fs.split_path(self.path)
        if not key:
            raise IsADirectoryError(f"cannot open a bucket for reading: {path}")
        self.bucket, self.key = bucket, key
        self.blocksize = block_size if block_size and block_size > 0 else DEFAULT_CHUNK
        self.prefetch = prefetch or DEFAULT_RANGE_CONCURRENCY
        self.whole_object_limit = whole_object_limit if whole_object_limit is not None else 64 * 2**20
        self.generation: Optional[str] = generation or path_gen
        self.size: Optional[int] = None
        self._crc_expected: Optional[int] = None
        self._pos = 0
        self._blocks: "collections.OrderedDict[int, _Block]" = collections.OrderedDict()
        self._pending: dict[int, concurrent.futures.Future] = {}
        self._crc: Optional[int] = 0   # running crc32c of bytes [0, _crc_pos); None once given up
        self._crc_pos = 0
        self._open_first()

    # -- fetching -----------------------------------------------------------------------

    def _run(self, coro) -> concurrent.futures.Future:
        return bridge.submit(self.fs, coro, f"FluxReadFile ({self.path})")

    def _open_first(self) -> None:
        """The first block, unpinned: its headers tell size, generation and crc32c (no metadata request).

        The other blocks of a whole-object read start as soon as those headers arrive, not
        after the first block's body: one transfer time less before they are all in flight.
        """
        head: concurrent.futures.Future = concurrent.futures.Future()

        def on_head(size: int, gen: Optional[str], crc: Optional[int]) -> None:
            if not head.done():
                head.set_result((size, gen, crc))

        def on_done(f: concurrent.futures.Future) -> None:
            if not head.done():
                head.set_exception(concurrent.futures.CancelledError() if f.cancelled() else
                                   f.exception() or RuntimeError(f"no headers reading {self.path}"))

        first = self._run(get_chunks(self.fs, self.bucket, self.key, 0, self.blocksize, self.generation, on_head))
        first.add_done_callback(on_done)
        try:
            self.size, self.generation, self._crc_expected = head.result()
        except BaseException:
            first.cancel()
            raise
        self._pending[0] = first
        if self.size <= self.whole_object_limit:
            self._request(range(1, self._nblocks()))

    def _nblocks(self) -> int:
        return (self.size + self.blocksize - 1) // self.blocksize

    def _request(self, indexes) -> None:
        for i in indexes:
            if i in self._blocks or i in self._pending or i >= self._nblocks():
                continue
            a = i * self.blocksize
            b = min(a + self.blocksize, self.size)
            self._pending[i] = self._run(get_chunks(self.fs, self.bucket, self.key, a, b, self.generation))

    def _store(self, i: int, got: Streamed) -> _Block:
        if i == 0 and got.start == 0 and sum(map(len, got.chunks)) > self.blocksize:
            # A whole-object answer (a server ignoring Range): cut it into blocks.
            body = b"".join(got.chunks)
            for j in range(self._nblocks()):
                self._store(j, Streamed([body[j * self.blocksize:(j + 1) * self.blocksize]], j * self.blocksize,
                                        got.size, got.generation, got.crc32c))
            return self._blocks[0]
        blk = self._blocks[i] = _Block(got.chunks)
        # Feed the running crc while blocks arrive in order.
        while self._crc is not None and self._crc_pos < self.size:
            j = self._crc_pos // self.blocksize
            nxt = self._blocks.get(j)
            if nxt is None:
                break
            for c in nxt.chunks:
                self._crc = google_crc32c.extend(self._crc, c)
            self._crc_pos += nxt.length
        if self._crc is not None and self._crc_pos >= self.size and self._crc_expected is not None:
            if self._crc != self._crc_expected:
                raise ChecksumMismatch(f"crc32c mismatch reading {self.path} (generation {self.generation})")
            self._crc = None  # verified; nothing more to do
        # Bounded memory: keep the prefetch window plus as many blocks behind it.
        limit = max(2 * self.prefetch, self._nblocks() if self.size <= self.whole_object_limit else 0)
        while len(self._blocks) > limit:
            old, _ = self._blocks.popitem(last=False)
            if self._crc is not None and old * self.blocksize >= self._crc_pos:
                self._crc = None  # a block left before being hashed: can no longer verify the whole
        return blk

    def _block(self, i: int) -> _Block:
        blk = self._blocks.get(i)
        if blk is not None:
            self._blocks.move_to_end(i)
            return blk
        self._request([i])
        fut = self._pending.pop(i)
        try:
            got = fut.result()
        except FileNotFoundError as exc:
            raise FileNotFoundError(f"{self.path} was overwritten or deleted while open: generation "
                                    f"{self.generation} is gone ({exc})") from exc
        return self._store(i, got)

    def _ensure_ahead(self, i: int) -> None:
        self._request(range(i, min(i + self.prefetch, self._nblocks())))
        # Move finished prefetches into the cache (and the crc) without blocking.
        for j in [j for j, f in self._pending.items() if f.done() and not f.cancelled() and not f.exception()]:
            self._store(j, self._pending.pop(j).result())

    # -- io API ---------------------------------------------------------------------------

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    @property
    def loc(self) -> int:
        """fsspec's name for the position."""
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        if self.closed:
            raise ValueError("I/O operation on closed file")
        if whence == io.SEEK_SET:
            pos = offset
        elif whence == io.SEEK_CUR:
            pos = self._pos + offset
        elif whence == io.SEEK_END:
            pos = self.size + offset
        else:
            raise ValueError(f"invalid whence {whence}")
        if pos < 0:
            raise ValueError(f"negative seek position {pos} in {self.path}")
        self._pos = pos
        return pos

    def _views(self, n: int) -> Iterator:
        """Buffers holding the next `n` bytes (fewer at the end), advancing the position."""
        while n > 0:
            i, off = divmod(self._pos, self.blocksize)
            self._ensure_ahead(i)
            blk = self._block(i)
            take = min(n, blk.length - off)
            if take <= 0:
                return
            yield from blk.views(off, take)
            n -= take
            self._pos += take

    def _copy_out(self, out: memoryview) -> int:
        """Copy bytes from the current position into `out`; returns how many."""
        done = 0
        for v in self._views(min(len(out), max(0, self.size - self._pos))):
            out[done:done + len(v)] = v
            done += len(v)
        return done

    def readinto(self, b) -> int:
        if self.closed:
            raise ValueError("I/O operation on closed file")
        mv = memoryview(b).cast("B")
        return self._copy_out(mv)

    def read(self, size: int = -1) -> bytes:
        if self.closed:
            raise ValueError("I/O operation on closed file")
        remaining = max(0, self.size - self._pos)
        n = remaining if size is None or size < 0 else min(size, remaining)
        if n == 0:
            return b""
        parts = list(self._views(n))
        if len(parts) == 1:
            return parts[0] if isinstance(parts[0], bytes) else bytes(parts[0])
        return b"".join(parts)  # one copy, straight from the received chunks

    def peek(self, size: int = 0) -> bytes:
        """Bytes ahead of the position without moving it (at most 8 KiB: lets readline avoid 1-byte reads)."""
        if self._pos >= self.size:
            return b""
        i, off = divmod(self._pos, self.blocksize)
        blk = self._block(i)
        return b"".join(blk.views(off, max(1, min(size or 8192, 8192))))

    def readall(self) -> bytes:
        return self.read(-1)

    def close(self) -> None:
        if not self.closed:
            for fut in self._pending.values():
                fut.cancel()
            self._pending.clear()
            self._blocks.clear()
        super().close()

    def info(self) -> dict:
        return {"name": self.path, "size": self.size, "generation": self.generation, "type": "file"}

    def __repr__(self) -> str:
        return f"<FluxReadFile {self.path} generation={self.generation}>"
