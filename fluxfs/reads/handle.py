"""`FluxReadFile`: the "rb" handle: blocks fetched by ranged GETs on the filesystem's loop, a bounded
prefetch window ahead of the position, the generation pinned, and the crc32c checked in passing."""
from __future__ import annotations

import collections
import concurrent.futures
import io
from typing import TYPE_CHECKING, Any, Coroutine, Iterator, Optional

import fsspec.caching

from ..gcs import checksums
from ..errors import ChecksumMismatch, ObjectChanged
from ..gcs import bridge
from ..gcs.checksums import combine_all, crc32c_combine
from ..gcs.chunks import Chunked
from .direct import DEFAULT_CHUNK, DEFAULT_RANGE_CONCURRENCY, Streamed, get_chunks, read_object

if TYPE_CHECKING:  # pragma: no cover
    from fsspec import AbstractFileSystem


# cache_type values that mean fluxfs's own prefetching (gcsfs's default is named "adaptive");
# any other fsspec cache type is honoured: reads go through that cache, fed by `_fetch_range`.
NATIVE_CACHE_TYPES = (None, "adaptive")
# Blocks kept behind the position of a large object's reader, for short seeks back.
KEEP_BEHIND = 2


def _as_bytes(view: memoryview) -> bytes:
    """A view's bytes: the received chunk itself when the view covers all of it (no copy), else a copy."""
    whole = view.obj
    return whole if isinstance(whole, bytes) and len(view) == len(whole) else bytes(view)


class FluxReadFile(io.RawIOBase):
    """Read handle: parallel ranged GETs with a bounded prefetch window, pinned to one generation.

    Blocks of `block_size` bytes are fetched on the filesystem's event loop; reading at a
    position keeps up to `prefetch` blocks ahead in flight. Objects no larger than
    `whole_object_limit` are fetched entirely on the first read. The generation seen by
    the first GET is pinned for every later range, and the crc32c is checked once every
    byte has passed through the handle in order. Not thread-safe (one reader per handle).

    As gcsfs's GCSFile, it takes fsspec's `cache_type` / `cache_options`: the default (or
    "adaptive", gcsfs's default) is the prefetching above; any other fsspec cache type
    ("readahead", "bytes", "blockcache", "first", "all", "none", ...) is honoured: reads go
    through `self.cache`, which fetches with `_fetch_range` (ranged GETs pinned to the
    generation). Layers that set `cache` themselves (fsspec's `blockcache::`) work the same way.
    """

    def __init__(self, fs: "AbstractFileSystem", path: str, mode: str = "rb", block_size: Optional[int] = None,
                 *, prefetch: Optional[int] = None, whole_object_limit: Optional[int] = None,
                 generation: Optional[str] = None, cache_type: Optional[str] = None,
                 cache_options: Optional[dict] = None, autocommit: bool = True, **kwargs: Any):
        super().__init__()
        if cache_type not in NATIVE_CACHE_TYPES and cache_type not in fsspec.caching.caches:
            raise ValueError(f"unknown cache_type {cache_type!r} opening {path}: use one of "
                             f"{sorted(k for k in fsspec.caching.caches if k)}")
        if mode != "rb":
            raise ValueError(f"FluxReadFile only reads ('rb'), not {mode!r}: {path}")
        self.fs = fs
        self.mode = mode
        self.autocommit = autocommit
        self.client = fs.client  # what the reads take
        self.path = self.client.strip_protocol(path)
        bucket, key, path_gen = self.client.split_path(self.path)
        if not key:
            raise IsADirectoryError(f"cannot open a bucket for reading: {path}")
        self.bucket, self.key = bucket, key
        # As gcsfs: open()'s block_size, else the filesystem's (`FluxFileSystem(block_size=...)`), else 8 MiB.
        default = vars(fs).get("default_block_size") or DEFAULT_CHUNK
        self.blocksize = block_size if block_size and block_size > 0 else default
        self.prefetch = prefetch or DEFAULT_RANGE_CONCURRENCY
        self.whole_object_limit = whole_object_limit if whole_object_limit is not None else 64 * 2**20
        self.generation: Optional[str] = generation or path_gen
        self.size: Optional[int] = None
        self._crc_expected: Optional[int] = None
        self._pos = 0
        self._blocks: "collections.OrderedDict[int, Chunked]" = collections.OrderedDict()
        self._pending: dict[int, concurrent.futures.Future] = {}
        self._crc: Optional[int] = 0   # running crc32c of bytes [0, _crc_pos); None once given up
        self._crc_pos = 0
        self._block_crcs: dict[int, int] = {}  # block -> its crc32c, from its chunks' (not yet in `_crc`)
        # An fsspec cache the reads go through (None: the prefetching above).
        self.cache: Optional[fsspec.caching.BaseCache] = None
        if cache_type in NATIVE_CACHE_TYPES:
            self._open_first()
        else:
            self._open_head()
            self.cache = fsspec.caching.caches[cache_type](self.blocksize, self._fetch_range, self.size,
                                                            **(cache_options or {}))

    # -- fetching -----------------------------------------------------------------------

    def _run(self, coro: Coroutine[Any, Any, Streamed]) -> "concurrent.futures.Future[Streamed]":
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

        first = self._run(get_chunks(self.client, self.bucket, self.key, 0, self.blocksize, self.generation, on_head))
        first.add_done_callback(on_done)
        try:
            self.size, self.generation, self._crc_expected = head.result()
        except BaseException:
            first.cancel()
            raise
        self._pending[0] = first
        if self.size <= self.whole_object_limit:
            self._request(range(1, self._nblocks()))

    def _open_head(self) -> None:
        """Size, generation and crc32c from the headers of a 1-byte GET (reads go through an fsspec cache)."""
        got = bridge.run(self.fs, get_chunks, self.client, self.bucket, self.key, 0, 1, self.generation)
        self.size, self.generation, self._crc_expected = got.size, got.generation, got.crc32c
        self._crc = None   # the cache decides what is read: no running crc32c

    def _fetch_range(self, start: Optional[int] = None, end: Optional[int] = None) -> bytes:
        """Bytes [start, end) of the open generation (fsspec's fetcher; thread-safe): parallel ranged
        GETs when large; empty past the end of the object, as gcsfs's."""
        start = 0 if start is None else max(0, start)
        end = self.size if end is None else min(end, self.size)
        if start >= end:
            return b""
        try:
            got = bridge.run(self.fs, read_object, self.client, self.bucket, self.key, start=start, end=end,
                             generation=self.generation)
        except FileNotFoundError as exc:
            raise self._gone(exc) from exc
        return got.body

    def _gone(self, exc: BaseException) -> ObjectChanged:
        """The error for a read of the open generation that found it gone (also a FileNotFoundError)."""
        if isinstance(exc, ObjectChanged):
            return exc
        return ObjectChanged(f"{self.path} was overwritten or deleted while open: generation "
                             f"{self.generation} is gone ({exc})", self.path, self.generation)

    def _nblocks(self) -> int:
        return (self.size + self.blocksize - 1) // self.blocksize

    def _request(self, indexes) -> None:
        for i in indexes:
            if i in self._blocks or i in self._pending or i >= self._nblocks():
                continue
            a = i * self.blocksize
            b = min(a + self.blocksize, self.size)
            self._pending[i] = self._run(get_chunks(self.client, self.bucket, self.key, a, b, self.generation))

    def _store(self, i: int, got: Streamed) -> Chunked:
        if i == 0 and got.start == 0 and sum(map(len, got.chunks)) > self.blocksize:
            # A whole-object answer (a server ignoring Range): cut it into blocks.
            body = b"".join(got.chunks)
            for j in range(self._nblocks()):
                self._store(j, Streamed([body[j * self.blocksize:(j + 1) * self.blocksize]], j * self.blocksize,
                                        got.size, got.generation, got.crc32c))
            return self._blocks[0]
        blk = self._blocks[i] = Chunked(got.chunks)
        if got.crcs is not None and self._crc is not None:  # its chunks' crc32c, checked by the reader: combined
            self._block_crcs[i] = combine_all(got.chunks, got.crcs)
        # Feed the running crc while blocks arrive in order.
        while self._crc is not None and self._crc_pos < self.size:
            j = self._crc_pos // self.blocksize
            nxt = self._blocks.get(j)
            if nxt is None:
                break
            known = self._block_crcs.pop(j, None)
            if known is not None:
                self._crc = crc32c_combine(self._crc, known, len(nxt))
            else:
                for c in nxt.chunks:
                    self._crc = checksums.extend(self._crc, c)
            self._crc_pos += len(nxt)
        if self._crc is not None and self._crc_pos >= self.size and self._crc_expected is not None:
            if self._crc != self._crc_expected:
                raise ChecksumMismatch(f"crc32c mismatch reading {self.path} (generation {self.generation})")
            self._crc = None  # verified; nothing more to do
            self._block_crcs.clear()
        # Bounded memory: keep the prefetch window plus as many blocks behind it.
        limit = max(2 * self.prefetch, self._nblocks() if self.size <= self.whole_object_limit else 0)
        while len(self._blocks) > limit:
            old, _ = self._blocks.popitem(last=False)
            self._block_crcs.pop(old, None)
            if self._crc is not None and old * self.blocksize >= self._crc_pos:
                self._crc = None  # a block left before being hashed: can no longer verify the whole
        return blk

    def _block(self, i: int) -> Chunked:
        blk = self._blocks.get(i)
        if blk is not None:
            self._blocks.move_to_end(i)
            return blk
        self._request([i])
        fut = self._pending.pop(i)
        try:
            got = fut.result()
        except FileNotFoundError as exc:
            raise self._gone(exc) from exc
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

    def writable(self) -> bool:
        return False

    def write(self, b) -> int:
        """Python's io and gcsfs refuse a write to a read handle with io.UnsupportedOperation."""
        if self.closed:
            raise ValueError("I/O operation on closed file")
        raise io.UnsupportedOperation(f"write: {self.path} is open for reading ({self.mode!r})")

    def flush(self, force: bool = False) -> None:
        """Nothing to flush on a read handle (`force` is fsspec's signature); ValueError once closed."""
        super().flush()

    def tell(self) -> int:
        if self.closed:
            raise ValueError("I/O operation on closed file")
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
            take = min(n, len(blk) - off)
            if take <= 0:
                return
            yield from blk.views(off, off + take)
            n -= take
            self._pos += take
            if off + take == len(blk) and self.size > self.whole_object_limit:
                self._drop_behind(i)

    def _drop_behind(self, i: int) -> None:
        """Forget blocks already read past (all but the last KEEP_BEHIND before block `i`) once hashed:
        a sequential reader (torch.load) never returns to them, and held they would double its memory
        (each new received chunk then lands in fresh pages, which costs CPU as well)."""
        for j in [j for j in self._blocks if j < i - KEEP_BEHIND]:
            if self._crc is None or (j + 1) * self.blocksize <= self._crc_pos:
                del self._blocks[j]

    def _copy_out(self, out: memoryview) -> int:
        """Copy bytes from the current position into `out`; returns how many."""
        done = 0
        for v in self._views(min(len(out), max(0, self.size - self._pos))):
            out[done:done + len(v)] = v
            done += len(v)
        return done

    def _from_cache(self, n: int) -> bytes:
        """The next `n` bytes through `self.cache` (an fsspec cache), advancing the position."""
        data = self.cache._fetch(self._pos, self._pos + n)
        self._pos += len(data)
        return data

    def readinto(self, b) -> int:
        if self.closed:
            raise ValueError("I/O operation on closed file")
        mv = memoryview(b).cast("B")
        if self.cache is not None:
            data = self._from_cache(min(len(mv), max(0, self.size - self._pos)))
            mv[:len(data)] = data
            return len(data)
        return self._copy_out(mv)

    def read(self, size: int = -1) -> bytes:
        if self.closed:
            raise ValueError("I/O operation on closed file")
        remaining = max(0, self.size - self._pos)
        n = remaining if size is None or size < 0 else min(size, remaining)
        if n == 0:
            return b""
        if self.cache is not None:
            return self._from_cache(n)
        parts = list(self._views(n))
        if len(parts) == 1:
            return _as_bytes(parts[0])
        return b"".join(parts)  # one copy, straight from the received chunks

    def peek(self, size: int = 0) -> bytes:
        """Bytes ahead of the position without moving it: up to 8 KiB (or `size`) within the current block,
        as io.BufferedReader gives what it holds (readline asks peek(1), then reads up to the newline in it)."""
        if self.closed:
            raise ValueError("I/O operation on closed file")
        if self._pos >= self.size:
            return b""
        if self.cache is not None:
            return self.cache._fetch(self._pos, min(self.size, self._pos + max(size or 0, 8192)))
        i, off = divmod(self._pos, self.blocksize)
        blk = self._block(i)
        return b"".join(blk.views(off, min(len(blk), off + max(size or 0, 8192))))

    def readall(self) -> bytes:
        return self.read(-1)

    def close(self) -> None:
        if not self.closed:
            pending = getattr(self, "_pending", {})   # (not yet set when __init__ failed early)
            for fut in pending.values():
                fut.cancel()
            pending.clear()
            getattr(self, "_blocks", {}).clear()
            cache = getattr(self, "cache", None)
            if cache is not None and hasattr(cache, "close"):
                cache.close()   # a background cache's threads
        super().close()

    @property
    def closed(self) -> bool:
        return super().closed

    @closed.setter
    def closed(self, value: bool) -> None:
        """fsspec's caching layers (blockcache::) set `f.closed = True` after closing a file themselves."""
        if value:
            FluxReadFile.close(self)

    def info(self) -> dict:
        return {"name": self.path, "size": self.size, "generation": self.generation, "type": "file"}

    def url(self) -> str:
        """HTTP link to the bytes of the generation this handle reads (as gcsfs's GCSFile.url())."""
        return self.fs.url(self.path, generation=self.generation)

    def __repr__(self) -> str:
        return f"<FluxReadFile {self.path} generation={self.generation}>"
