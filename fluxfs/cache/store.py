"""`NodeCache`: one directory of object bytes shared by every process on a node, filled once per entry.

`get` / `open` / `aget` take what the caller knows of the object (bucket, key, generation, size, crc32c)
and a `fetch` that reads it from storage. A complete entry of that generation is served from disk;
otherwise one process fills it (an exclusive flock on the entry) while the others wait on a shared lock
and then read the entry. A fill is written to a temporary name, checked (size and crc32c) and renamed
into place: nothing half-written ever looks complete. An object that cannot fit under the limit, or a
full disk, is streamed through from storage without caching (a full disk warns once per cache).
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import errno
import io
import logging
import os
import threading
import warnings
from typing import Any, Awaitable, BinaryIO, Callable, Optional, Sequence, Union

import google_crc32c

from ..errors import ChecksumMismatch
from . import evict
from .entry import DIR_LOCK, TAG, TAG_TEXT, Meta, crc_value, entry_id, temp_name
from .limit import parse_limit
from .lock import FileLock

log = logging.getLogger("fluxfs.cache")

Body = Union[bytes, bytearray, memoryview, Sequence[bytes]]
Fetch = Callable[[], Body]                 # reads the whole object from storage (blocking)
AsyncFetch = Callable[[], Awaitable[Body]]
_FULL = (errno.ENOSPC, errno.EDQUOT)


@dataclasses.dataclass
class Held:
    """An entry being read: `path` (a complete local file) stays in place while `lock` is held; or the
    object's bytes (`data`) when it was streamed through without caching."""

    path: Optional[str]
    data: Optional[bytes]
    lock: Optional[FileLock]

    def read(self) -> bytes:
        if self.data is not None:
            return self.data
        with open(self.path, "rb") as f:  # type: ignore[arg-type]
            return f.read()

    def release(self) -> None:
        if self.lock is not None:
            self.lock.release()


class _LockedFile(io.BufferedReader):
    """A cached entry opened for reading; closing it releases the entry's shared lock (eviction waits)."""

    def __init__(self, held: Held):
        super().__init__(io.FileIO(held.path, "rb"))  # type: ignore[arg-type]
        self._held = held

    def close(self) -> None:
        try:
            super().close()
        finally:
            self._held.release()


class NodeCache:
    """The node-local cache in `directory`, holding at most `limit` bytes ("200GiB"; None: the disk's space)."""

    def __init__(self, directory: Union[str, os.PathLike], limit: Any = None):
        self.directory = os.path.abspath(os.path.expanduser(os.fspath(directory)))
        self.limit = parse_limit(limit)
        os.makedirs(self.directory, exist_ok=True)
        _write_tag(self.directory)
        self._warned = False
        self._pool: Optional[concurrent.futures.ThreadPoolExecutor] = None
        self._pool_pid = 0
        self._guard = threading.Lock()

    def __repr__(self) -> str:
        return f"NodeCache({self.directory!r}, limit={self.limit!r})"

    def _path(self, eid: str, kind: str) -> str:
        return os.path.join(self.directory, f"{eid}.{kind}")

    # -- reading --------------------------------------------------------------------------

    def get(self, bucket: str, key: str, generation: Any, size: int, crc32c: Any, fetch: Fetch) -> bytes:
        """The object's bytes: from the cache, or fetched once for the node (blocking)."""
        held = self.hold(bucket, key, generation, size, crc32c, fetch)
        try:
            return held.read()
        finally:
            held.release()

    def open(self, bucket: str, key: str, generation: Any, size: int, crc32c: Any, fetch: Fetch) -> BinaryIO:
        """A readable binary file of the object; a cached entry stays (is not evicted) until it is closed."""
        held = self.hold(bucket, key, generation, size, crc32c, fetch)
        if held.path is None:
            return io.BytesIO(held.data)  # type: ignore[arg-type]
        try:
            return _LockedFile(held)
        except BaseException:
            held.release()
            raise

    async def aget(self, bucket: str, key: str, generation: Any, size: int, crc32c: Any,
                   fetch: AsyncFetch) -> bytes:
        """`get` for a coroutine: file work and lock waits run on the cache's threads, `fetch` on this loop."""
        loop = asyncio.get_running_loop()

        def fetch_here() -> Body:
            return asyncio.run_coroutine_threadsafe(fetch(), loop).result()

        return await loop.run_in_executor(self._executor(), self.get, bucket, key, generation, size, crc32c,
                                          fetch_here)

    def _executor(self) -> concurrent.futures.ThreadPoolExecutor:
        with self._guard:
            if self._pool is None or self._pool_pid != os.getpid():  # a forked worker starts its own
                self._pool = concurrent.futures.ThreadPoolExecutor(32, thread_name_prefix="fluxfs-cache")
                self._pool_pid = os.getpid()
            return self._pool

    def lookup(self, bucket: str, key: str, generation: Any, size: Optional[int] = None) -> Optional[Held]:
        """The complete entry of that generation, held (shared lock; `release()` it), or None: never waits."""
        eid = entry_id(bucket, key, generation)
        lock = FileLock(self._path(eid, "lock"))
        if not lock.try_acquire(shared=True):
            return None
        if self._complete(eid, bucket, key, generation, size):
            return Held(self._path(eid, "data"), None, lock)
        lock.release()
        return None

    def hold(self, bucket: str, key: str, generation: Any, size: int, crc32c: Any, fetch: Fetch) -> Held:
        """The entry held for reading, filling it first if no process has; see the module docstring."""
        if generation is None or generation == "":
            raise ValueError(f"the node-local cache needs the generation of {bucket}/{key}: the bytes of an "
                             "object overwritten since would otherwise be served")
        crc = crc_value(crc32c)
        eid = entry_id(bucket, key, generation)
        meta = Meta(bucket, key, str(generation), int(size), crc)
        need = int(size) + len(meta.to_bytes())
        if self.limit is not None and need > self.limit:
            return self._stream(meta, fetch)  # can never fit: never cached, nothing evicted for it
        lock = FileLock(self._path(eid, "lock"))
        lock.acquire(shared=True)  # waits while another process fills it
        if self._complete(eid, bucket, key, generation, size):
            return self._hit(eid, lock)
        lock.acquire(shared=False)  # one filler per entry on the node
        try:
            if self._complete(eid, bucket, key, generation, size):  # filled while we waited
                lock.downgrade()
                return self._hit(eid, lock)
            evict.remove_entry(self.directory, eid, include_data=False)  # a killed filler's leftovers
            return self._fill(eid, meta, need, fetch, lock)
        except BaseException:
            lock.release()
            raise

    def _complete(self, eid: str, bucket: str, key: str, generation: Any, size: Optional[int]) -> bool:
        meta = Meta.read(self._path(eid, "meta"))
        if meta is None or not meta.names(bucket, key, generation, size):
            return False
        try:
            return os.stat(self._path(eid, "data")).st_size == meta.size
        except FileNotFoundError:
            return False

    def _hit(self, eid: str, lock: FileLock) -> Held:
        path = self._path(eid, "data")
        try:
            os.utime(path)  # recency for LRU eviction (evict.py)
        except OSError:
            pass
        return Held(path, None, lock)

    # -- filling ----------------------------------------------------------------------------

    def _stream(self, meta: Meta, fetch: Fetch) -> Held:
        data = _joined(fetch())
        _check(data, meta)
        return Held(None, data, None)

    def _fill(self, eid: str, meta: Meta, need: int, fetch: Fetch, lock: FileLock) -> Held:
        """Under the entry's exclusive lock: reserve room, fetch, check, write, rename; then share the lock."""
        tmp = self._reserve(eid, meta.size, need)
        if tmp is None:
            lock.release()
            return self._stream(meta, fetch)
        try:
            data = _joined(fetch())
            _check(data, meta)
            written = self._write(tmp, eid, meta, data)
        except BaseException:
            _unlink(tmp)
            raise
        if not written:
            lock.release()
            return Held(None, data, None)
        lock.downgrade()
        return Held(self._path(eid, "data"), None, lock)

    def _reserve(self, eid: str, size: int, need: int) -> Optional[str]:
        """A temporary file of `size` bytes allocated under the limit (evicting as needed), or None: stream."""
        with FileLock(os.path.join(self.directory, DIR_LOCK)) as dirlock:
            dirlock.acquire(shared=False)
            if not evict.make_room(self.directory, need, self.limit, skip=eid):
                return None
            tmp = os.path.join(self.directory, temp_name(eid))
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o644)
            try:
                if size:
                    os.posix_fallocate(fd, 0, size)  # the space is taken now, in every process's accounting
            except OSError as exc:
                os.close(fd)
                _unlink(tmp)
                if exc.errno in _FULL:
                    self._warn_full(exc)
                    return None
                if exc.errno not in (errno.EOPNOTSUPP, errno.EINVAL):
                    raise OSError(exc.errno, exc.strerror, tmp) from exc
                fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o644)
                os.ftruncate(fd, size)
            os.close(fd)
            return tmp

    def _write(self, tmp: str, eid: str, meta: Meta, data: bytes) -> bool:
        """Bytes to `tmp`, sidecar, then the rename that makes the entry complete; False on a full disk."""
        meta_tmp = os.path.join(self.directory, temp_name(eid))
        try:
            with open(tmp, "r+b") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())  # a complete-looking entry holds its bytes, even after a power loss
            with open(meta_tmp, "wb") as f:
                f.write(meta.to_bytes())
            os.replace(meta_tmp, self._path(eid, "meta"))
            os.replace(tmp, self._path(eid, "data"))  # the entry appears complete only now
            return True
        except OSError as exc:
            _unlink(tmp)
            _unlink(meta_tmp)
            if exc.errno not in _FULL:
                raise
            self._warn_full(exc)
            return False

    def _warn_full(self, exc: OSError) -> None:
        if not self._warned:
            self._warned = True
            msg = (f"fluxfs node-local cache {self.directory}: {exc.strerror or exc}; objects that do not fit "
                   "are read from storage without caching")
            log.warning(msg)
            warnings.warn(msg, RuntimeWarning, stacklevel=4)

    # -- the directory as a whole -----------------------------------------------------------

    def entries(self) -> list[tuple[Meta, float]]:
        """Complete entries (sidecar, last use as a Unix time), least recently used first."""
        out = []
        for eid, (mtime, _nbytes) in evict.scan(self.directory).complete.items():
            meta = Meta.read(self._path(eid, "meta"))
            if meta is not None:
                out.append((meta, mtime))
        return sorted(out, key=lambda e: e[1])

    def usage(self) -> int:
        """Bytes the cache's files take (entries, sidecars, fills in progress)."""
        return evict.scan(self.directory).used

    def clear(self) -> tuple[int, int, int]:
        """Remove every entry not in use: (entries removed, bytes freed, entries kept because in use)."""
        with FileLock(os.path.join(self.directory, DIR_LOCK)) as dirlock:
            dirlock.acquire(shared=False)
            return evict.clear(self.directory)


def _joined(body: Body) -> bytes:
    if isinstance(body, bytes):
        return body
    if isinstance(body, (bytearray, memoryview)):
        return bytes(body)
    return b"".join(body)


def _check(data: bytes, meta: Meta) -> None:
    """The fetched bytes are the object's: its size and crc32c, else ChecksumMismatch and nothing cached."""
    what = f"{meta.bucket}/{meta.key}#{meta.generation}"
    if len(data) != meta.size:
        raise ChecksumMismatch(f"node-local cache: read {len(data)} bytes of {what}, which has {meta.size}: "
                               "not cached")
    if meta.crc32c is not None and google_crc32c.value(data) != meta.crc32c:
        raise ChecksumMismatch(f"node-local cache: crc32c mismatch filling {what}: not cached")


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def _write_tag(directory: str) -> None:
    path = os.path.join(directory, TAG)
    if os.path.exists(path):
        return
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        return
    with os.fdopen(fd, "w") as f:
        f.write(TAG_TEXT)


def is_cache_dir(directory: str) -> bool:
    """True when `directory` holds the tag a NodeCache writes (`fluxfs cache clear` refuses other directories)."""
    try:
        with open(os.path.join(directory, TAG), encoding="utf-8", errors="replace") as f:
            return f.read(len(TAG_TEXT)) == TAG_TEXT
    except OSError:
        return False
