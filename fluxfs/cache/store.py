"""`NodeCache`: one directory of object bytes shared by every process on a node, filled once per entry.

`get` / `open` / `aget` take what the caller knows of the object (bucket, key, generation, size, crc32c)
and a `fetch` that reads it from storage. A complete entry of that generation is served from disk;
otherwise one process fills it (an exclusive flock on the entry) while the others wait on a shared lock
and then read the entry. A fill is written to a temporary name, checked (size and crc32c) and renamed
into place: nothing half-written ever looks complete. An object that cannot fit under the limit, or a
full disk, is streamed through from storage without caching (a full disk warns once per cache). Small
objects that `fs.cat_objects` cached live in packs (packs.py, objects.py): `get` serves them from there too.
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import dataclasses
import functools
import errno
import inspect
import io
import logging
import os
import sqlite3
import threading
from typing import Any, AsyncIterator, Awaitable, BinaryIO, Callable, Iterator, Optional, Union


from ..gcs import checksums, fork
from . import body, checks, evict, index, packs
from .entry import DIR_LOCK, Meta, check_directory, crc_value, entry_id, open_fixed, temp_name, write_tag
from .limit import parse_limit
from .held import Held, LockedFile
from .lock import FileLock
from .warn import UNWRITABLE, Warnings

log = logging.getLogger("fluxfs.cache")

Fetch = Callable[[], body.Body]  # reads the whole object from storage (blocking)
AsyncFetch = Callable[[], Union[Awaitable[body.Body], AsyncIterator[bytes]]]


class NodeCache:
    """The node-local cache in `directory`, holding at most `limit` bytes ("200GiB"; None: the disk's space).
    A directory another user owns, or that group/others may write, is refused unless `shared` (see
    `entry.check_directory`)."""

    def __init__(self, directory: Union[str, os.PathLike], limit: Any = None, shared: bool = False,
                 stall: float = 60.0):
        self.directory = os.path.abspath(os.path.expanduser(os.fspath(directory)))
        self.limit = parse_limit(limit)
        self.shared = bool(shared)
        self.stall = float(stall)  # seconds a wait on another process's lock may see no progress (read_timeout)
        if os.path.exists(self.directory) and not os.path.isdir(self.directory):
            raise NotADirectoryError(f"cache_dir {self.directory!r} is a file, not a directory: name a directory "
                                     "(it is made, mode 0700, if missing)")
        os.makedirs(self.directory, mode=0o700, exist_ok=True)  # made here: this user's only
        check_directory(self.directory, self.shared)
        write_tag(self.directory)
        self.warns = Warnings(self.directory)
        self.checks = checks.Checks()  # whole entries this process checked (or wrote), and ones that failed
        self._after_fork()
        fork.reset_in_child(self)  # a forked worker starts its own threads

    def _after_fork(self) -> None:
        self._pool: Optional[concurrent.futures.ThreadPoolExecutor] = None
        self._guard = threading.Lock()  # a thread of the parent may have held it at the fork

    def __repr__(self) -> str:
        return f"NodeCache({self.directory!r}, limit={self.limit!r})"

    def path_of(self, eid: str, kind: str) -> str:
        """The file of kind data/meta/lock of entry `eid`."""
        return os.path.join(self.directory, f"{eid}.{kind}")

    # -- reading --------------------------------------------------------------------------

    def get(self, bucket: str, key: str, generation: Any, size: int, crc32c: Any, fetch: Fetch,
            durable: bool = True, store: str = "") -> bytes:
        """The object's bytes: from the cache, or fetched once for the node (blocking). `durable=False`: the
        fill is not fsynced (for many small objects whose every read checks the crc32c: `objects.py`).
        `store`: the endpoint the bytes come from (`entry.store_id`): part of the entry's name."""
        for _attempt in range(2):
            held = self.hold(bucket, key, generation, size, crc32c, fetch, durable, store=store, checked_by_caller=True)
            try:
                data = held.read()
            finally:
                held.release()
            if held.path is None or held.crc32c is None or checksums.crc32c(data) == held.crc32c:
                return data
            self.failed_check(held.path)  # read whole anyway: checked on every read (~0.1 s of CPU per GB)
        return data  # pragma: no cover - a refill checks what it writes

    def open(self, bucket: str, key: str, generation: Any, size: int, crc32c: Any, fetch: Fetch,
             store: str = "") -> BinaryIO:
        """A readable binary file of the object; a cached entry stays (is not evicted) until it is closed."""
        held = self.hold(bucket, key, generation, size, crc32c, fetch, store=store)
        if held.path is None:
            return io.BytesIO(held.data)  # type: ignore[arg-type]
        try:
            return LockedFile(held)
        except BaseException:
            held.release()
            raise

    async def aget(self, bucket: str, key: str, generation: Any, size: int, crc32c: Any,
                   fetch: AsyncFetch, store: str = "") -> bytes:
        """`get` for a coroutine: file work and lock waits run on the cache's threads, `fetch` on this loop."""
        loop = asyncio.get_running_loop()

        def fetch_here() -> body.Body:
            got = fetch()
            if inspect.isawaitable(got):
                got = asyncio.run_coroutine_threadsafe(got, loop).result()  # type: ignore[arg-type]
            return body.chunks_from(got, loop) if hasattr(got, "__anext__") else got

        return await loop.run_in_executor(self.executor(), functools.partial(
            self.get, bucket, key, generation, size, crc32c, fetch_here, store=store))

    def executor(self) -> concurrent.futures.ThreadPoolExecutor:
        """The cache's threads for file work and lock waits off an event loop (made on first use)."""
        with self._guard:
            if self._pool is None:
                self._pool = concurrent.futures.ThreadPoolExecutor(32, thread_name_prefix="fluxfs-cache")
            return self._pool

    def lookup(self, bucket: str, key: str, generation: Any, size: Optional[int] = None,
               checked_by_caller: Union[bool, str] = False, store: str = "", crc32c: Any = None) -> Optional[Held]:
        """The complete entry of that generation, held (shared lock; `release()` it), or None: never waits. `crc32c`
        (when the caller knows it): an entry of another crc32c is a miss. `checked_by_caller`: the caller checks what
        it reads against the sidecar's crc32c ("parts": its parts' crc32c when it lists them, else checked here)."""
        crc = crc_value(crc32c)
        eid = entry_id(bucket, key, generation, store)
        lock = FileLock(self.path_of(eid, "lock"))
        try:
            if not lock.try_acquire(shared=True):
                return None
        except OSError:  # no lock file and none can be made (a read-only disk): not an entry to serve
            return None
        if self.is_complete(eid, bucket, key, generation, size, checked_by_caller, store=store, crc=crc):
            meta = Meta.read(self.path_of(eid, "meta")) or Meta("", "", "", 0, None)
            return Held(self.path_of(eid, "data"), None, lock, meta.crc32c, meta.parts)
        lock.release()
        if self.checks.is_bad(eid):
            self.discard(eid)  # failed its check just now: removed unless another process reads it
        return None

    def hold(self, bucket: str, key: str, generation: Any, size: int, crc32c: Any, fetch: Fetch,
             durable: bool = True, store: str = "", checked_by_caller: bool = False) -> Held:
        """The entry held for reading, filling it first if no process has; see the module docstring."""
        if generation is None or generation == "":
            raise ValueError(f"the node-local cache needs the generation of {bucket}/{key}: the bytes of an "
                             "object overwritten since would otherwise be served")
        crc = crc_value(crc32c)
        try:  # packed by fs.cat_objects: checked as it is read (a torn one is dropped and filled again)
            packed = packs.read_batch(self.directory, [(0, (store, bucket, key, str(generation), int(size), crc))],
                                      self.stall)
        except sqlite3.Error as exc:
            self.warns.index(exc)
            packed = {}
        if packed:
            return Held(None, packed[0], None)
        eid = entry_id(bucket, key, generation, store)
        meta = Meta(bucket, key, str(generation), int(size), crc, durable, store)
        need = int(size) + len(meta.to_bytes())
        if self.limit is not None and need > self.limit:
            return self._stream(meta, fetch)  # can never fit: never cached, nothing evicted for it
        lock = FileLock(self.path_of(eid, "lock"))
        try:
            waited = lock.acquire(shared=True, stall=self.stall)  # waits while another process fills it
        except OSError as exc:  # the lock file cannot even be made: no inode or block left, a read-only disk
            if exc.errno not in UNWRITABLE:
                raise OSError(exc.errno, exc.strerror, lock.path) from exc
            self.warns.full(exc)
            return self._stream(meta, fetch)
        if not waited:
            return self._stalled(lock, meta, fetch)
        try:
            if self.is_complete(eid, bucket, key, generation, size, checked_by_caller, store, crc):
                return self._hit(eid, lock)
            if not lock.acquire(shared=False, stall=self.stall):  # one filler per entry on the node
                return self._stalled(lock, meta, fetch)
            if self.is_complete(eid, bucket, key, generation, size, checked_by_caller, store, crc):  # filled meanwhile
                lock.downgrade()
                return self._hit(eid, lock)
            if lock.was_filling():
                evict.remove_entry(self.directory, eid, include_data=False)  # a killed filler's leftovers
            lock.mark_filling(True)
            try:
                return self._fill(eid, meta, need, fetch, lock, durable)
            finally:
                lock.mark_filling(False)
        except BaseException:
            if lock.shared is False:  # a failed fill: no entry, so no lock file either
                lock.remove()
            lock.release()
            raise

    def is_complete(self, eid: str, bucket: str, key: str, generation: Any, size: Optional[int],
                    checked_by_caller: Union[bool, str] = False, store: str = "", crc: Optional[int] = None) -> bool:
        """The entry is complete and is the object asked for: its sidecar names it (and the size, and the crc32c
        the caller knows: an entry of another crc32c, say from a store reset since, is a miss and is refilled)."""
        meta = Meta.read(self.path_of(eid, "meta"))
        if meta is None or not meta.names(bucket, key, generation, size, store):
            return False
        if crc is not None and meta.crc32c != crc:
            return False
        try:
            by = checked_by_caller is True or (checked_by_caller == "parts" and meta.parts is not None)
            verdict = self.checks.verify(eid, self.path_of(eid, "data"), meta, by)
        except FileNotFoundError:
            return False
        if verdict is False:
            self.failed_check(self.path_of(eid, "data"))
        return bool(verdict)

    def failed_check(self, path: str) -> None:
        """An entry whose bytes fail its crc32c (changed on disk): not served again; dropped unless in use."""
        eid = self.checks.failed(path)
        if eid is not None:
            log.warning("fluxfs node-local cache %s: entry %s fails its crc32c (changed on disk): read from "
                        "storage and filled again", self.directory, eid)
            self.discard(eid)

    def discard(self, eid: str) -> None:
        """Remove an entry that is not to be served (corrupt, or not the caller's object) unless someone holds
        it (their lock: the next fill replaces it)."""
        lock = FileLock(self.path_of(eid, "lock"))
        try:
            if lock.try_acquire(shared=False):
                evict.remove_entry(self.directory, eid)
                lock.remove()
        except OSError:
            pass
        finally:
            lock.release()

    def _hit(self, eid: str, lock: FileLock) -> Held:
        path = self.path_of(eid, "data")
        try:
            os.utime(path, follow_symlinks=False)  # recency for LRU eviction (evict.py)
        except OSError:
            pass
        return Held(path, None, lock, (Meta.read(self.path_of(eid, "meta")) or Meta("", "", "", 0, None)).crc32c)

    # -- filling ----------------------------------------------------------------------------

    def _stream(self, meta: Meta, fetch: Fetch) -> Held:
        data = body.joined(fetch())
        body.check(data, meta)
        return Held(None, data, None)

    def _stalled(self, lock: FileLock, meta: Meta, fetch: Fetch) -> Held:
        """Another process held the entry without progress for `stall` seconds (stopped, hung): read from storage."""
        lock.release()
        log.warning("fluxfs node-local cache %s: %s/%s#%s: the process holding it made no progress for %g s; "
                    "read from storage", self.directory, meta.bucket, meta.key, meta.generation, self.stall)
        return self._stream(meta, fetch)

    def _fill(self, eid: str, meta: Meta, need: int, fetch: Fetch, lock: FileLock, durable: bool = True) -> Held:
        """Under the entry's exclusive lock: reserve room, fetch, write, check, rename; then share the lock."""
        tmp = self.reserve(eid, need)
        if tmp is None:
            lock.release()
            return self._stream(meta, fetch)
        try:
            data = self._write(tmp, eid, meta, fetch(), durable, lock)
        except BaseException:
            _unlink(tmp)
            raise
        if data is not None:  # the disk filled up: read through
            lock.release()
            return Held(None, data, None)
        lock.downgrade()
        return Held(self.path_of(eid, "data"), None, lock)

    def reserve(self, eid: str, need: int) -> Optional[str]:
        """A temporary file of `need` bytes (the object's and its sidecar's) allocated under the limit (evicting
        as needed), or None: stream."""
        try:
            return self._reserve_locked(eid, need)
        except OSError as exc:
            if exc.errno not in UNWRITABLE:
                raise
            self.warns.full(exc)
            return None

    def _reserve_locked(self, eid: str, need: int) -> Optional[str]:
        with self.dir_locked():
            if not evict.make_room(self.directory, need, self.limit, skip=eid):
                return None
            tmp = os.path.join(self.directory, temp_name(eid))
            fd = open_fixed(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
            try:
                os.posix_fallocate(fd, 0, need)  # the space (object and sidecar) is taken now, as counted
            except OSError as exc:
                os.close(fd)
                _unlink(tmp)
                if exc.errno in UNWRITABLE:
                    self.warns.full(exc)
                    return None
                if exc.errno not in (errno.EOPNOTSUPP, errno.EINVAL):
                    raise OSError(exc.errno, exc.strerror, tmp) from exc
                fd = open_fixed(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
                os.ftruncate(fd, need)
            os.close(fd)
            return tmp

    def _write(self, tmp: str, eid: str, meta: Meta, got: body.Body, durable: bool = True,
               lock: Optional[FileLock] = None) -> Optional[bytes]:
        """The fetched chunks to `tmp` (checked as they pass), the sidecar, then the rename that makes the
        entry complete: None. On a full disk the object's bytes, for the caller to read without caching."""
        chunks = [got] if isinstance(got, (bytes, bytearray, memoryview)) else got
        meta_tmp = os.path.join(self.directory, temp_name(eid))
        crc = n = 0
        try:
            with os.fdopen(open_fixed(tmp, os.O_RDWR), "r+b", buffering=0) as f:
                it = iter(chunks)
                for chunk in it:
                    chunk = bytes(chunk) if not isinstance(chunk, bytes) else chunk
                    try:
                        body.write_all(f.fileno(), chunk, n)
                    except OSError as exc:
                        if exc.errno not in UNWRITABLE:
                            raise
                        self.warns.full(exc)
                        data = os.pread(f.fileno(), n, 0) + chunk + b"".join(map(bytes, it))  # on from storage
                        body.check(data, meta)
                        return data
                    crc, n = checksums.extend(crc, chunk), n + len(chunk)
                    if lock is not None:
                        lock.touch()  # progress, for readers waiting on the entry (a bounded wait)
                body.check_sums(n, crc, meta)
                self.commit(f.fileno(), tmp, meta_tmp, eid, meta, durable)
            return None
        except OSError as exc:
            _unlink(meta_tmp)
            if exc.errno not in UNWRITABLE:
                raise
            self.warns.full(exc)  # the sidecar did not fit: the bytes are all in `tmp`, checked
            with os.fdopen(open_fixed(tmp), "rb") as f:
                return f.read(n)
        finally:
            _unlink(tmp)

    def commit(self, fd: int, tmp: str, meta_tmp: str, eid: str, meta: Meta, durable: bool = True) -> None:
        """Make the checked fill in `tmp` (open as `fd`, `meta.size` bytes written) the complete entry: fsync,
        then, under the directory lock (an evictor's scan sees each file once), the reservation becomes
        the object's size, the sidecar is written and both are renamed into place."""
        if durable:
            os.fsync(fd)  # a complete-looking entry holds its bytes, even after a power loss
        with self.dir_locked():
            os.ftruncate(fd, meta.size)
            with os.fdopen(open_fixed(meta_tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL), "wb") as m:
                m.write(dataclasses.replace(meta, durable=durable).to_bytes())
            os.replace(meta_tmp, self.path_of(eid, "meta"))
            os.replace(tmp, self.path_of(eid, "data"))  # the entry appears complete only now
        self.checks.good(eid, os.fstat(fd).st_ino)  # checked as written

    # -- the directory as a whole -----------------------------------------------------------

    def entries(self) -> list[tuple[Meta, float]]:
        """Complete entries, whole and packed (what they are, last use as a Unix time), least recently used first."""
        out, now = [], evict.scan(self.directory)
        for eid, (mtime, _nbytes) in now.complete.items():
            meta = Meta.read(self.path_of(eid, "meta"))
            if meta is not None:
                out.append((meta, mtime))
        db = evict.index_db(self.directory)
        for store, bucket, key, generation, size, crc, pack in index.entries(db) if db is not None else ():
            if pack in now.packs:  # packed objects: last used when their pack was
                out.append((Meta(bucket, key, generation, size, crc, False, store), now.packs[pack][0]))
        return sorted(out, key=lambda e: e[1])

    def usage(self) -> int:
        """Bytes the cache's files take (entries, sidecars, fills in progress), counted while no name changes."""
        with self.dir_locked():
            return evict.scan(self.directory).used

    def clear(self) -> tuple[int, int, int]:
        """Remove every entry not in use: (entries removed, bytes freed, entries kept because in use)."""
        with self.dir_locked():
            return evict.clear(self.directory)

    @contextlib.contextmanager
    def dir_locked(self) -> Iterator[None]:
        """The directory lock: space accounting, eviction and the renames that complete entries, one at a time."""
        with FileLock(os.path.join(self.directory, DIR_LOCK)) as dirlock:
            if not dirlock.acquire(shared=False, stall=self.stall):
                raise TimeoutError(errno.ETIMEDOUT, f"the process holding its {DIR_LOCK} made no progress for "
                                                    f"{self.stall:g} s")
            yield


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass

