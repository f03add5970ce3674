"""`Fill`: one entry being filled by this process alongside the ranged reads that asked for it.

The object is fetched in parts of `part` bytes, each part once per process: the reads of this process
asking for a part share its one GET and are answered from its bytes in memory; the part is written to
the entry's reserved temporary file and checksummed on the fills' threads (`jobs.py`: a process that
exits completes the fills under way first), off the reads' path. The
entry's size and crc32c come with the first part's answer, so every read starts its parts at once (no
GET ahead of the others). Parts no read asked for are fetched in the background when no read of this
process waits on storage (or after `BACKGROUND_MAX_WAIT`), so they use idle time instead of competing
with the reads an epoch waits on. With every part on disk the parts' crc32c are combined and checked
against the object's, the file is fsynced and renamed into place (the sidecar lists the parts' crc32c: a
ranged read checks the parts it reads): only then does the entry look complete. Any failure
leaves no entry (the temporary and the lock file go); the reads then go to storage themselves.
"""
from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import weakref
from typing import Any, Optional


from ..gcs import checksums
from ..gcs import fork
from ..gcs.checksums import crc32c_combine
from . import direct, jobs, progress
from .entry import Meta, open_fixed, temp_name
from .fetcher import Fetcher
from .lock import FileLock
from .store import UNWRITABLE, NodeCache, _unlink

log = logging.getLogger("fluxfs.cache")

BACKGROUND_PARTS = 2      # parts no read asked for, in flight at once per process (all fills together)
IDLE_WAIT = 0.02          # seconds without a read waiting on storage before a background part starts
BACKGROUND_MAX_WAIT = 0.5  # ... or this long at most (reads that never pause still let a fill complete)
FILLS: dict[tuple[str, str], "Fill"] = {}  # fills this process is doing, by (cache directory, entry id)
TOO_LARGE: set[tuple[str, str]] = set()   # entries larger than their cache's limit: read from storage as asked
_LOOP_STATE: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()  # per loop: see `_state`


def _busy() -> bool:
    return bool(FILLS)


def _state() -> dict:
    """This loop's background semaphore, count of reads waiting on a part from storage, and their idle event."""
    loop = asyncio.get_running_loop()
    state = _LOOP_STATE.get(loop)
    if state is None:
        state = _LOOP_STATE[loop] = {"sem": asyncio.Semaphore(BACKGROUND_PARTS), "waiting": 0, "idle": asyncio.Event()}
        state["idle"].set()
    return state


class Fill:
    """This process's fill of entry `eid` (its exclusive `lock` held): see the module docstring."""

    @staticmethod
    def _after_fork() -> None:
        """A forked worker owns none of its parent's fills (called by the one fork hook, `gcs/fork.py`)."""
        FILLS.clear()
        _LOOP_STATE.clear()

    def __init__(self, fetch: Fetcher, cache: NodeCache, path: str, eid: str, store: str, bucket: str, key: str,
                 generation: str, lock: FileLock, part: int):
        self.fetch, self.cache, self.path, self.eid, self.lock, self.part = fetch, cache, path, eid, lock, part
        self.store = store
        self.bucket, self.key, self.generation = bucket, key, generation
        self.meta: Optional[Meta] = None   # known with the first part's answer (or a metadata GET)
        self.count = 0                     # parts, once the size is known
        self.parts: dict[int, asyncio.Future] = {}  # part -> its bytes (None once written: read the file)
        self.crcs: dict[int, int] = {}     # part -> crc32c of its bytes, once written
        self.ready = asyncio.get_running_loop().create_future()  # True: file reserved; False: not cached
        self.tmp: Optional[str] = None
        self.fd: Optional[int] = None
        self.dfd: Optional[int] = None     # the same file opened with O_DIRECT for the parts' writes, if allowed
        self.writing = 0                   # writes on the fills' threads (the file is closed after them)
        self.flags_at = 0                  # where the parts' flags start in the lock file (progress.py)
        self.closed = False
        FILLS[(cache.directory, eid)] = self

    # -- parts ------------------------------------------------------------------------------

    def part_len(self, p: int) -> int:
        assert self.meta is not None
        return max(0, min(self.part, self.meta.size - p * self.part))

    def get(self, p: int, background: bool = False) -> asyncio.Future:
        """Part `p`'s future: its bytes, or None once it is in the file (fetched now unless under way)."""
        fut = self.parts.get(p)
        if fut is None:
            fut = self.parts[p] = asyncio.get_running_loop().create_future()
            fut.add_done_callback(lambda f: f.cancelled() or f.exception())  # retrieved: no "never retrieved"
            asyncio.ensure_future(self._fetch(p, fut, background))
        return fut

    async def _fetch(self, p: int, fut: asyncio.Future, background: bool) -> None:
        state = _state()
        if not background:
            state["waiting"] += 1
            state["idle"].clear()
        try:
            lo = p * self.part
            got = await self.fetch.read_ranges(self.path, [(lo, lo + self.part)], generation=self.generation,
                                               max_gap=0)
            if self.meta is None and not self.closed:
                self.known(int(got.size), got.crc32c)
            data = got[0]
            if self.meta is not None and len(data) != self.part_len(p):
                raise ValueError(f"node-local cache: part {p} of {self.bucket}/{self.key}#{self.generation} has "
                                 f"{len(data)} bytes, not {self.part_len(p)}")
        except BaseException as exc:  # its readers see it (and read from storage)
            if not fut.done():
                fut.set_exception(exc)
            if not (self.meta is not None and p >= self.count):  # past the end: a read's own mistake
                self.abort()
            return
        finally:
            if not background:
                state["waiting"] -= 1
                if not state["waiting"]:
                    state["idle"].set()
        if not fut.done():
            fut.set_result(data)
        if await self.ready and not self.closed:
            await self._write(p, data)

    async def _write(self, p: int, data: bytes) -> None:
        """Part `p` into the file and checksummed, on the fills' threads; every part in: `finish`."""
        self.writing += 1
        try:
            self.crcs[p] = await jobs.run(_write_part, self.fd, self.dfd, data, p * self.part, busy=_busy)
        except BaseException as exc:  # the reads were served from memory; nothing is cached
            self.writing -= 1
            if self.closed:
                self._close_fd()
            else:
                self._failed(exc)
            return
        self.writing -= 1
        if self.closed:
            self._close_fd()
            return
        self.lock.publish(b"\x01", self.flags_at + p)  # in the file: other processes may read it from there
        done = self.parts[p] = asyncio.get_running_loop().create_future()
        done.set_result(None)  # in the file now: its bytes leave memory with the reads that got them
        if len(self.crcs) == self.count:
            await self.finish()

    # -- the entry ----------------------------------------------------------------------------

    def known(self, size: int, crc32c: Optional[int]) -> None:
        """The object's size and crc32c: room is reserved for it (or it is not cached) on the fills' threads."""
        self.count = max(1, -(-size // self.part))
        self.meta = Meta(self.bucket, self.key, str(self.generation), size, crc32c, store=self.store,
                         parts=(self.part, (2**32 - 1,) * self.count))  # the sidecar's room: its widest crc32c
        asyncio.ensure_future(self._open())

    async def _open(self) -> None:
        assert self.meta is not None
        need = self.meta.size + len(self.meta.to_bytes())
        tmp = None
        if self.cache.limit is not None and need > self.cache.limit:
            if len(TOO_LARGE) > 10_000:
                TOO_LARGE.clear()
            TOO_LARGE.add((self.cache.directory, self.eid))  # never fits: no fill is tried for it again
        try:
            if self.cache.limit is None or need <= self.cache.limit:
                tmp = await jobs.run(self.cache.reserve, self.eid, need, busy=_busy)
            if tmp is not None and not self.closed:
                self.fd = open_fixed(tmp, os.O_RDWR)
                if self.part % direct.BLOCK == 0:
                    self.dfd = direct.open_direct(tmp)
        except BaseException as exc:  # not cached; the reads go on
            if tmp is not None:
                _unlink(tmp)
            if not self.ready.done():
                self.ready.set_result(False)
            self._failed(exc)
            return
        self.tmp = tmp
        if self.fd is None:  # larger than the limit, no room, or abandoned meanwhile: not cached
            if tmp is not None:
                _unlink(tmp)
            if not self.ready.done():
                self.ready.set_result(False)
            self.abort()
            return
        head = progress.header(os.path.basename(tmp), self.part, self.count, self.meta.size, self.meta.crc32c)
        self.lock.publish(head + bytes(self.count))  # other processes read from this fill (progress.py)
        self.flags_at = len(head)
        self.ready.set_result(True)
        asyncio.ensure_future(self._rest())

    async def _rest(self) -> None:
        """The parts no read asked for, when no read of this process waits on storage (or after a while)."""
        state = _state()
        for p in range(self.count):
            if self.closed:
                return
            if p in self.parts:
                continue
            async with state["sem"]:
                give_up = asyncio.get_running_loop().time() + BACKGROUND_MAX_WAIT
                while state["waiting"] and not self.closed:
                    left = give_up - asyncio.get_running_loop().time()
                    if left <= 0:
                        break
                    try:
                        await asyncio.wait_for(state["idle"].wait(), left)
                    except asyncio.TimeoutError:
                        break
                    await asyncio.sleep(IDLE_WAIT)  # a stream's next read follows its last at once
                if self.closed or p in self.parts:
                    continue
                try:
                    await self.get(p, background=True)
                except BaseException:  # the fill is abandoned (abort)
                    return

    async def finish(self) -> None:
        """Every part is in: the parts' crc32c combined and checked, fsync and rename (on the fills' threads)."""
        assert self.meta is not None and self.tmp is not None
        whole = 0
        for p in range(self.count):
            whole = crc32c_combine(whole, self.crcs[p], self.part_len(p))
        meta_tmp = os.path.join(self.cache.directory, temp_name(self.eid))
        try:
            if self.meta.crc32c is not None and whole != self.meta.crc32c:
                raise ValueError(f"crc32c mismatch filling {self.bucket}/{self.key}#{self.generation} "
                                 "(the bytes received differ from the object)")
            crcs = tuple(self.crcs[p] for p in range(self.count))
            self.meta = dataclasses.replace(self.meta, parts=(self.part, crcs))
            await jobs.run(self.cache.commit, self.fd, self.tmp, meta_tmp, self.eid, self.meta, busy=_busy)
        except BaseException as exc:  # a fill that fails leaves nothing; the reads were served
            _unlink(meta_tmp)
            self._failed(exc)
            return
        self._close()
        self.lock.mark_filling(False)
        self.lock.release()

    def _failed(self, exc: BaseException) -> None:
        if isinstance(exc, OSError) and exc.errno in UNWRITABLE:
            self.cache.warns.full(exc)
        else:
            log.warning("fluxfs node-local cache: %s not cached: %s", self.path, exc)
        self.abort()

    def abort(self) -> None:
        """No entry: the temporary and the lock file go, the lock is let go; later reads start anew."""
        if self.closed:
            return
        self._close()
        if self.tmp is not None:
            _unlink(self.tmp)
        if not self.ready.done():
            self.ready.set_result(False)
        if self.lock.shared is False:
            self.lock.remove()
        self.lock.release()

    def _close(self) -> None:
        self.closed = True
        if FILLS.get((self.cache.directory, self.eid)) is self:
            del FILLS[(self.cache.directory, self.eid)]
        self._close_fd()

    def _close_fd(self) -> None:
        if self.fd is not None and not self.writing:  # a write under way closes it when it ends
            os.close(self.fd)
            self.fd = None
            if self.dfd is not None:
                os.close(self.dfd)
                self.dfd = None

    def read_file(self, at: int, n: int) -> bytes:
        """`n` bytes at `at` of the parts already in the file (call without awaiting since the part's future)."""
        assert self.fd is not None
        return os.pread(self.fd, n, at)


fork.reset_in_child(Fill)  # the class: its `_after_fork` in every forked child


def _write_part(fd: int, dfd: Optional[int], data: Any, offset: int) -> int:
    """`data` written at `offset` of `fd` (with O_DIRECT through `dfd` if given: `direct.py`); its crc32c.
    A padded tail goes past the object's end: the commit truncates the file to its size."""
    view = memoryview(data).cast("B")
    crc = checksums.crc32c(data if isinstance(data, bytes) else bytes(view))
    if dfd is not None:
        try:
            direct.write(dfd, [view], offset)
            return crc
        except OSError as exc:
            if exc.errno not in direct.REFUSED:
                raise  # through the page cache only where the filesystem refuses the direct write
    at = offset
    while view:
        n = os.pwrite(fd, view, at)
        view, at = view[n:], at + n
    return crc
