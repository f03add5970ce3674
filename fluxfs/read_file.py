"""Direct object reads: one GET, parallel ranged GETs pinned to one generation, and `FluxReadFile`.

Every read learns the object's size, generation and crc32c from the response headers
(``Content-Range``, ``x-goog-generation``, ``x-goog-hash``), so no metadata request is
needed, and every whole-object read is verified against the crc32c.
"""
from __future__ import annotations

import asyncio
import base64
import collections
import concurrent.futures
import dataclasses
import io
import logging
from typing import TYPE_CHECKING, Any, Optional
from urllib.parse import quote

import google_crc32c

from . import http
from .errors import ChecksumMismatch

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


def crc_from_b64(value: Optional[str]) -> Optional[int]:
    """GCS's base64 big-endian crc32c string as an int (None stays None)."""
    if not value:
        return None
    return int.from_bytes(base64.b64decode(value), "big")


def _crc_from_headers(headers: Any) -> Optional[int]:
    values = headers.getall("x-goog-hash", []) if hasattr(headers, "getall") else [headers.get("x-goog-hash", "")]
    for v in values:
        for part in (v or "").split(","):
            name, _, val = part.strip().partition("=")
            if name == "crc32c" and val:
                return crc_from_b64(val)
    return None


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
    return await policy.run(lambda: _get_once(fs, bucket, key, start, end, generation, check),
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
    first = await get_range(fs, bucket, key, s, first_end, generation)
    stop = first.size if end is None else min(end, first.size)
    got = len(first.body)
    if s + got >= stop:
        return first
    gen = first.generation
    ranges = _split(s + got, stop, chunk)
    sem = asyncio.Semaphore(concurrency)

    async def one(a: int, b: int) -> bytes:
        async with sem:
            return (await get_range(fs, bucket, key, a, b, gen, check=False)).body

    tasks = [asyncio.ensure_future(one(a, b)) for a, b in ranges]
    try:
        parts = await asyncio.gather(*tasks)
    except BaseException:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise
    body = b"".join([first.body, *parts])
    if s == 0 and stop == first.size and first.crc32c is not None and google_crc32c.value(body) != first.crc32c:
        raise ChecksumMismatch(f"crc32c mismatch reading {bucket}/{key} (generation {gen}) with parallel ranges")
    return Fetched(body, s, first.size, gen, first.crc32c)


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
        self._blocks: "collections.OrderedDict[int, bytes]" = collections.OrderedDict()
        self._pending: dict[int, concurrent.futures.Future] = {}
        self._crc: Optional[int] = 0   # running crc32c of bytes [0, _crc_pos); None once given up
        self._crc_pos = 0
        self._open_first()

    # -- fetching -----------------------------------------------------------------------

    def _run(self, coro) -> concurrent.futures.Future:
        loop = self.fs.loop
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            coro.close()
            # Blocking on our own loop would deadlock: async code should use fs._cat_file.
            raise RuntimeError(f"FluxReadFile is blocking; do not use it on the filesystem's event loop ({self.path})")
        return asyncio.run_coroutine_threadsafe(coro, loop)

    def _open_first(self) -> None:
        """The first block, unpinned: tells size, generation and crc32c (no metadata request)."""
        fetched = self._run(get_range(self.fs, self.bucket, self.key, 0, self.blocksize, self.generation)).result()
        self.size = fetched.size
        self.generation = fetched.generation
        self._crc_expected = fetched.crc32c
        self._store(0, fetched.body)
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
            self._pending[i] = self._run(get_range(self.fs, self.bucket, self.key, a, b, self.generation, check=False))

    def _store(self, i: int, data: bytes) -> None:
        self._blocks[i] = data
        # Feed the running crc while blocks arrive in order.
        while self._crc is not None and self._crc_pos < self.size:
            j = self._crc_pos // self.blocksize
            blk = self._blocks.get(j)
            if blk is None:
                break
            self._crc = google_crc32c.extend(self._crc, blk)
            self._crc_pos += len(blk)
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

    def _block(self, i: int) -> bytes:
        blk = self._blocks.get(i)
        if blk is not None:
            self._blocks.move_to_end(i)
            return blk
        self._request([i])
        fut = self._pending.pop(i)
        try:
            data = fut.result().body
        except FileNotFoundError as exc:
            raise FileNotFoundError(f"{self.path} was overwritten or deleted while open: generation "
                                    f"{self.generation} is gone ({exc})") from exc
        self._store(i, data)
        return data

    def _ensure_ahead(self, i: int) -> None:
        self._request(range(i, min(i + self.prefetch, self._nblocks())))
        # Move finished prefetches into the cache (and the crc) without blocking.
        for j in [j for j, f in self._pending.items() if f.done() and not f.exception()]:
            self._store(j, self._pending.pop(j).result().body)

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

    def _copy_out(self, out: memoryview) -> int:
        """Copy bytes from the current position into `out`; returns how many."""
        n = min(len(out), max(0, self.size - self._pos))
        done = 0
        while done < n:
            i, off = divmod(self._pos, self.blocksize)
            self._ensure_ahead(i)
            blk = self._block(i)
            take = min(n - done, len(blk) - off)
            out[done:done + take] = blk[off:off + take]
            done += take
            self._pos += take
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
        i, off = divmod(self._pos, self.blocksize)
        if off + n <= self.blocksize:
            # Common small read inside one block: a single slice, no intermediate buffer.
            self._ensure_ahead(i)
            blk = self._block(i)
            self._pos += n
            return blk[off:off + n] if (off or n != len(blk)) else blk
        # Spanning blocks: join slices of the cached blocks (one copy).
        parts = []
        while n > 0:
            i, off = divmod(self._pos, self.blocksize)
            self._ensure_ahead(i)
            blk = self._block(i)
            take = min(n, len(blk) - off)
            parts.append(memoryview(blk)[off:off + take])
            n -= take
            self._pos += take
        return b"".join(parts)

    def peek(self, size: int = 0) -> bytes:
        """Bytes ahead of the position without moving it (at most 8 KiB: lets readline avoid 1-byte reads)."""
        if self._pos >= self.size:
            return b""
        i, off = divmod(self._pos, self.blocksize)
        blk = self._block(i)
        return blk[off:off + max(1, min(size or 8192, 8192))]

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
