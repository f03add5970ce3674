"""`BidiReadObject` streams (google-cloud-storage's `AsyncMultiRangeDownloader`) pooled per object generation, and
the reads made on them: the small ranged reads in flight on one object (`read_ranges`' groups, a read handle's
blocks) share the stream open for its generation, which lingers a second after use (a server holds a worker per
open stream: none is kept idle long). A stream cut mid-read is resumed by the library at the byte it had reached
(its checks refuse a chunk at the wrong offset or with the wrong crc32c); a read covering the whole object is
checked against the object's crc32c. An unpinned read opens a stream of its own (a pooled one may hold an older
generation)."""
from __future__ import annotations

import asyncio
import dataclasses
from typing import TYPE_CHECKING, Any, Optional

from ..errors import RequestTimeout
from ..gcs.progress import ProgressClock
from ..gcs.redact import get_logger
from ..gcs.urls import named
from ..gcs.verify import check_whole
from .gcs_adapter import extra, quiet_read_stream_closes
from .grpc_client import connect
from .grpc_errors import async_retry, reraise
from .stalls import bounded

if TYPE_CHECKING:  # pragma: no cover
    from ..gcs.client import Client

logger = get_logger(__name__)


quiet_read_stream_closes()  # the library's logs of a read stream closing under it (the reads report its failures)

CHUNK = 8 * 2**20        # ranges of a large read, all sent at once on one stream
MAX_RANGES = 1000        # the library's bound on one download_ranges call
LINGER = 1.0             # seconds an idle pooled stream stays open for the next ranged read of its object
LARGE_STREAMS = 8        # one-shot streams of large reads open at once per process (see StreamPool.large)


@dataclasses.dataclass
class Got:
    """Bytes of one gRPC read, as the chunks received, and what the stream said about the object."""

    chunks: list
    start: int
    size: int                 # the whole object's size (persisted bytes, for an unfinalized object)
    generation: Optional[str]
    crc32c: Optional[int]     # the whole object's crc32c, when the server sent it (finalized objects)
    complete: bool = True     # False: a one-shot read that ended early (cut); the chunks are what came
    crcs: Optional[list] = None  # crc32c of each chunk, checked on receipt (None: not known, as the library's)


class _Chunks:
    """A write-only buffer keeping the chunks it is given (the library writes each received chunk once), each
    reported to the call's stall clock."""

    def __init__(self, clock: ProgressClock) -> None:
        self.chunks: list = []
        self.n = 0
        self.clock = clock

    def write(self, data: bytes) -> int:
        self.chunks.append(data)
        self.n += len(data)
        self.clock.moved(len(data))
        return len(data)


class StreamPool:
    """Open read streams by (bucket, key, generation), shared by the reads in flight on that object; an idle one
    lingers `LINGER` seconds for the next ranged read (a read handle's next block), then closes: the server holds
    a worker for every open stream, so none is kept idle for long."""

    def __init__(self) -> None:
        # Streams of their own that large reads hold open at once, all objects together: the server (and the
        # connection's flow control) serves a few busy streams better than many.
        self.large = asyncio.Semaphore(LARGE_STREAMS)
        self.open: dict[tuple, Any] = {}
        self.users: dict[int, int] = {}
        self.opening: dict[tuple, asyncio.Future] = {}
        self.timers: dict[int, asyncio.TimerHandle] = {}
        self.closing: set = set()

    async def acquire(self, client: "Client", bucket: str, key: str, generation: Optional[str],
                      fresh: bool = False) -> tuple[Any, bool]:
        """(an open stream of `bucket/key`, whether it was open before); of `generation` when given (shared), else
        a new one of the live generation; `fresh`: a new one in any case."""
        if generation and not fresh:
            k = (bucket, key, str(generation))
            mrd = self.open.get(k)
            if mrd is not None and mrd.is_stream_open:  # (finalized: an unfinalized one's size is of its opening)
                self._use(mrd)
                return mrd, True
            pending = self.opening.get(k)
            if pending is None:
                pending = self.opening[k] = asyncio.ensure_future(_open(client, bucket, key, generation))
                pending.add_done_callback(lambda _f: self.opening.pop(k, None))
            mrd = await asyncio.shield(pending)
        else:
            mrd = await _open(client, bucket, key, generation)
        k = (bucket, key, str(mrd.generation))
        # Only a finalized object's stream is shared: an unfinalized one grows, and a stream knows the size it
        # had when it opened (a later read of the new bytes would come back short).
        if finalized_crc(mrd)[0] and (k not in self.open or not self.open[k].is_stream_open):
            self.open[k] = mrd
        self._use(mrd)
        return mrd, False

    def _use(self, mrd: Any) -> None:
        self.users[id(mrd)] = self.users.get(id(mrd), 0) + 1
        timer = self.timers.pop(id(mrd), None)
        if timer is not None:
            timer.cancel()

    def release(self, mrd: Any, broken: bool = False, linger: bool = True) -> None:
        """Done with `mrd`: closed once unused (after `LINGER` s when pooled and `linger`); `broken` leaves the pool."""
        left = self.users[id(mrd)] = self.users.get(id(mrd), 1) - 1
        k = (mrd.bucket_name, mrd.object_name, str(mrd.generation))
        pooled = self.open.get(k) is mrd
        if broken and pooled:
            del self.open[k]
            pooled = False
        if left > 0:
            return
        if pooled and linger:
            self.timers[id(mrd)] = asyncio.get_running_loop().call_later(LINGER, self._expire, k, mrd)
            return
        if pooled:
            del self.open[k]
        self._close(mrd)

    def _expire(self, k: tuple, mrd: Any) -> None:
        self.timers.pop(id(mrd), None)
        if self.users.get(id(mrd), 0) > 0:
            return
        if self.open.get(k) is mrd:
            del self.open[k]
        self._close(mrd)

    def _close(self, mrd: Any) -> None:
        self.users.pop(id(mrd), None)
        if not mrd.is_stream_open:
            return
        task = asyncio.ensure_future(_quiet_close(mrd))
        self.closing.add(task)
        task.add_done_callback(self.closing.discard)


async def _quiet_close(mrd: Any) -> None:
    try:
        await mrd.close()
    except Exception as exc:  # a stream already broken: nothing left to close
        logger.debug("closing a read stream of %s/%s: %s", mrd.bucket_name, mrd.object_name, exc)


async def _open(client: "Client", bucket: str, key: str, generation: Optional[str]) -> Any:
    from google.cloud.storage.asyncio.async_multi_range_downloader import AsyncMultiRangeDownloader

    what = named(bucket, key, generation)
    try:
        opening = AsyncMultiRangeDownloader.create_mrd(await connect(client), bucket, key,
                                                       generation=int(generation) if generation else None,
                                                       retry_policy=async_retry(client, "read"))
        return await bounded(opening, client.options.read_timeout, what, "BidiReadObject")
    except Exception as exc:
        reraise(exc, what)
        raise


async def pool_of(client: "Client") -> StreamPool:
    """The stream pool of the gRPC client `client` reads through (one per process, loop and endpoint)."""
    grpc = await connect(client)
    state = extra(grpc)
    if state.pool is None:
        state.pool = StreamPool()
    return state.pool


def finalized_crc(mrd: Any) -> tuple[bool, Optional[int]]:
    """(finalized, the whole object's crc32c or None) from the object's metadata. Not the downloader's own
    `is_finalized` / `full_obj_server_crc32c` (google-cloud-storage 3.17): they test `finalize_time.second > 0`,
    the second of the minute, so an object finalized at :00 read as unfinalized, unpooled and unchecked."""
    meta = mrd.object_metadata
    if meta is None or not meta.finalize_time:
        return False, None
    return True, (meta.checksums.crc32c if meta.checksums and "crc32c" in meta.checksums else None)


def _size(mrd: Any) -> int:
    meta = mrd.object_metadata
    if mrd.persisted_size is not None:
        return int(mrd.persisted_size)
    return int(meta.size) if meta is not None else 0


async def read_pooled(client: "Client", bucket: str, key: str, start: Optional[int] = None,
                      end: Optional[int] = None, generation: Optional[str] = None, chunk: int = CHUNK) -> Got:
    """Bytes [start, end) of `bucket/key` (to its end when `end` is None; of `generation` when given) on the stream
    pooled for that generation, every `chunk` of the range sent at once.

    A range past the end comes back short; one starting at or past a non-empty object's end is a ValueError,
    as the HTTP reads answer a 416. FileNotFoundError names the object (and the generation asked for)."""
    what = f"{bucket}/{key}"
    pool = await pool_of(client)
    mrd, reused = await pool.acquire(client, bucket, key, generation)
    broken = True
    try:
        size, gen = _size(mrd), str(mrd.generation)
        s = start or 0
        stop = size if end is None else min(end, size)
        if s >= size and s > 0:
            broken = False
            raise ValueError(f"Requested range {s}-{end} not satisfiable for {what} (size {size})")
        spans = [(a, min(a + chunk, stop)) for a in range(s, stop, chunk)]
        try:
            bufs = await _download(mrd, spans, client.options.read_timeout)
        except (asyncio.CancelledError, RequestTimeout):  # stalled: this attempt failed, the stream leaves the pool
            raise
        except Exception as exc:
            if not reused:
                reraise(exc, named(bucket, key, generation))
            # A pooled stream the server closed meanwhile: once more on a new one.
            pool.release(mrd, broken=True)
            mrd, reused = await pool.acquire(client, bucket, key, gen, fresh=True)
            try:
                bufs = await _download(mrd, spans, client.options.read_timeout)
            except asyncio.CancelledError:
                raise
            except Exception as again:
                reraise(again, named(bucket, key, generation))
        chunks = [c for buf in bufs for c in buf.chunks]
        for (a, b), buf in zip(spans, bufs):
            if buf.n != b - a:
                raise ConnectionError(f"short read of {what} over gRPC: {buf.n} bytes for range {a}-{b}")
        crc = finalized_crc(mrd)[1]
        if s == 0 and stop == size and crc is not None:
            check_whole(chunks, crc, what, gen, " over gRPC")
        broken = False
        return Got(chunks, s, size, gen, crc)
    finally:
        pool.release(mrd, broken=broken)


async def _download(mrd: Any, spans: list, limit: float) -> list:
    """Every span of `spans` on `mrd` at once (in calls of at most `MAX_RANGES`), as received chunks; a
    RequestTimeout once no byte came for `limit` seconds."""
    clock = ProgressClock(limit)
    bufs = [_Chunks(clock) for _ in spans]
    ranges = [(a, b - a, buf) for (a, b), buf in zip(spans, bufs)]

    async def all_ranges() -> None:
        for i in range(0, len(ranges), MAX_RANGES):
            await mrd.download_ranges(ranges[i:i + MAX_RANGES])

    await bounded(all_ranges(), limit, f"{mrd.bucket_name}/{mrd.object_name}", "BidiReadObject", clock=clock)
    return bufs
