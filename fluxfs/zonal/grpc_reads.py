"""Reads of zonal objects over gRPC `BidiReadObject` (google-cloud-storage's `AsyncMultiRangeDownloader`):
every range of a read goes out at once on one stream, and open streams are pooled per object generation.

A read stream costs a round trip to open; with it open, any number of ranges are in flight on it (the
library multiplexes concurrent `download_ranges` calls), so the ranges of one object (a large object's
8 MiB pieces, `read_ranges`' groups, a read handle's blocks) share the stream open for its generation,
which lingers a second after use (a server holds a worker per open stream: none is kept idle long). A stream cut mid-read is resumed by the library at the byte it had reached (its checks refuse a
chunk at the wrong offset or with the wrong crc32c); a read covering the whole object is checked against
the object's crc32c. An unpinned read opens a stream of its own (a pooled one may hold an older generation).
"""
from __future__ import annotations

import asyncio
import dataclasses
import logging
from typing import TYPE_CHECKING, Any, Optional

import google_crc32c

from ..errors import ChecksumMismatch
from ..gcs.redact import get_logger
from .grpc_client import connect
from .grpc_errors import async_retry, reraise

if TYPE_CHECKING:  # pragma: no cover
    from ..gcs.client import Client

logger = get_logger(__name__)


class _QuietStreamClose(logging.Filter):
    """Drops the library's log records of what a pooled stream's close and a cancelled read leave behind
    (a recv loop ending CANCELLED, data for a read no longer waited for); real failures reach the caller."""

    def filter(self, record: logging.LogRecord) -> bool:
        text = record.getMessage()
        return not (text.startswith("Received data for unregistered read_id") or "499 CANCELLED" in text)


logging.getLogger("google.cloud.storage.asyncio._stream_multiplexer").addFilter(_QuietStreamClose())

CHUNK = 8 * 2**20        # ranges of a large read, all sent at once on one stream
MAX_RANGES = 1000        # the library's bound on one download_ranges call
LINGER = 1.0             # seconds an idle pooled stream stays open for the next ranged read of its object


@dataclasses.dataclass
class Got:
    """Bytes of one gRPC read, as the chunks received, and what the stream said about the object."""

    chunks: list
    start: int
    size: int                 # the whole object's size (persisted bytes, for an unfinalized object)
    generation: Optional[str]
    crc32c: Optional[int]     # the whole object's crc32c, when the server sent it (finalized objects)


class _Chunks:
    """A write-only buffer keeping the chunks it is given (the library writes each received chunk once)."""

    def __init__(self) -> None:
        self.chunks: list = []
        self.n = 0

    def write(self, data: bytes) -> int:
        self.chunks.append(data)
        self.n += len(data)
        return len(data)


class StreamPool:
    """Open read streams by (bucket, key, generation), shared by the reads in flight on that object; an idle one
    lingers `LINGER` seconds for the next ranged read (a read handle's next block), then closes: the server holds
    a worker for every open stream, so none is kept idle for long."""

    def __init__(self) -> None:
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
            if mrd is not None and mrd.is_stream_open:
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
        if k not in self.open or not self.open[k].is_stream_open:
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
    except Exception as exc:  # noqa: BLE001 - a stream already broken: nothing left to close
        logger.debug("closing a read stream of %s/%s: %s", mrd.bucket_name, mrd.object_name, exc)


async def _open(client: "Client", bucket: str, key: str, generation: Optional[str]) -> Any:
    from google.cloud.storage.asyncio.async_multi_range_downloader import AsyncMultiRangeDownloader

    what = f"{bucket}/{key}#{generation}" if generation else f"{bucket}/{key}"
    try:
        return await AsyncMultiRangeDownloader.create_mrd(await connect(client), bucket, key,
                                                          generation=int(generation) if generation else None,
                                                          retry_policy=async_retry(client, "read"))
    except Exception as exc:
        reraise(exc, what)
        raise


async def pool_of(client: "Client") -> StreamPool:
    """The stream pool of the gRPC client `client` reads through (one per process, loop and endpoint)."""
    grpc = await connect(client)
    pool = getattr(grpc, "_fluxfs_pool", None)
    if pool is None:
        pool = grpc._fluxfs_pool = StreamPool()
    return pool


def _size(mrd: Any) -> int:
    meta = mrd.object_metadata
    if mrd.persisted_size is not None:
        return int(mrd.persisted_size)
    return int(meta.size) if meta is not None else 0


async def read(client: "Client", bucket: str, key: str, start: Optional[int] = None, end: Optional[int] = None,
               generation: Optional[str] = None, chunk: int = CHUNK) -> Got:
    """Bytes [start, end) of `bucket/key` (all when both are None; of `generation` when given) over gRPC.

    A range past the end comes back short; one starting at or past a non-empty object's end is a ValueError,
    as the HTTP reads answer a 416. FileNotFoundError names the object (and the generation asked for)."""
    what = f"{bucket}/{key}"
    named = f"{what}#{generation}" if generation else what
    if start is None and end is None:  # a one-shot read (cat_objects, cat_file): the range goes with the open, one round trip
        return await read_whole(client, bucket, key, generation)
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
            bufs = await _download(mrd, spans)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            if not reused:
                reraise(exc, named)
            # A pooled stream the server closed meanwhile: once more on a new one.
            pool.release(mrd, broken=True)
            mrd, reused = await pool.acquire(client, bucket, key, gen, fresh=True)
            try:
                bufs = await _download(mrd, spans)
            except asyncio.CancelledError:
                raise
            except Exception as again:
                reraise(again, named)
        chunks = [c for buf in bufs for c in buf.chunks]
        for (a, b), buf in zip(spans, bufs):
            if buf.n != b - a:
                raise ConnectionError(f"short read of {what} over gRPC: {buf.n} bytes for range {a}-{b}")
        crc = mrd.full_obj_server_crc32c if mrd.is_finalized else None
        if s == 0 and stop == size and crc is not None:
            value = 0
            for c in chunks:
                value = google_crc32c.extend(value, c)
            if value != crc:
                raise ChecksumMismatch(f"crc32c mismatch reading {what} (generation {gen}) over gRPC")
        broken = False
        return Got(chunks, s, size, gen, crc)
    finally:
        pool.release(mrd, broken=broken)


async def _download(mrd: Any, spans: list) -> list:
    """Every span of `spans` on `mrd` at once (in calls of at most `MAX_RANGES`), as received chunks."""
    bufs = [_Chunks() for _ in spans]
    ranges = [(a, b - a, buf) for (a, b), buf in zip(spans, bufs)]
    for i in range(0, len(ranges), MAX_RANGES):
        await mrd.download_ranges(ranges[i:i + MAX_RANGES])
    return bufs


async def read_whole(client: "Client", bucket: str, key: str, generation: Optional[str] = None) -> Got:
    """A whole object in one round trip: the read range sent with the stream's opening message, the stream
    closed once it ends (many small objects are many such reads side by side). Chunks at the wrong offset, a
    chunk or whole-object crc32c mismatch and a short answer are refused; a stream cut, redirected or refused
    for a retryable reason is read again by the multi-range downloader (which resumes and follows redirects)."""
    from google.api_core import exceptions as gexc
    from google.cloud import _storage_v2 as v2

    what = f"{bucket}/{key}"
    named = f"{what}#{generation}" if generation else what
    grpc = await connect(client)
    spec = v2.BidiReadObjectSpec(bucket=f"projects/_/buckets/{bucket}", object_=key,
                                 generation=int(generation) if generation else 0)
    request = v2.BidiReadObjectRequest(read_object_spec=spec, read_ranges=[v2.ReadRange(read_offset=0, read_id=1)])

    async def requests():
        yield request

    chunks: list = []
    size = crc = gen = stream = None
    done = False
    try:
        stream = await grpc.grpc_client.bidi_read_object(
            requests=requests(), metadata=(("x-goog-request-params", f"bucket=projects/_/buckets/{bucket}"),))
        async for resp in stream:
            pb = type(resp).pb(resp)
            if pb.HasField("metadata"):
                meta = pb.metadata
                size, gen = int(meta.size), str(meta.generation)
                if meta.HasField("checksums") and meta.checksums.HasField("crc32c") and meta.HasField("finalize_time"):
                    crc = meta.checksums.crc32c
            for part in pb.object_data_ranges:
                data = part.checksummed_data.content
                at = sum(map(len, chunks))
                if part.read_range.read_offset != at:
                    raise ChecksumMismatch(f"reading {what} over gRPC: a chunk at offset "
                                           f"{part.read_range.read_offset}, expected {at}")
                if part.checksummed_data.HasField("crc32c") and google_crc32c.value(data) != part.checksummed_data.crc32c:
                    raise ChecksumMismatch(f"crc32c mismatch reading {what} over gRPC: bytes corrupted in transit")
                if data:
                    chunks.append(data)
                done = done or part.range_end
            if done:
                break
    except asyncio.CancelledError:
        raise
    except ChecksumMismatch:
        raise
    except (gexc.NotFound, gexc.PermissionDenied, gexc.Unauthenticated, gexc.FailedPrecondition,
            gexc.OutOfRange, gexc.InvalidArgument) as exc:
        reraise(exc, named)
    except Exception as exc:  # noqa: BLE001 - cut, redirected, overloaded: the downloader resumes
        logger.debug("one-shot gRPC read of %s failed (%s); reading it with the multi-range downloader", what, exc)
        done = False
    finally:
        if stream is not None:
            stream.cancel()  # ended or abandoned: nothing more is wanted from it
    if not done or size is None:
        return await read(client, bucket, key, 0, None, generation or gen)
    n = sum(map(len, chunks))
    if crc is None:  # unfinalized: its persisted bytes, however many the server sent
        size = n
    elif n != size:
        raise ConnectionError(f"short read of {what} over gRPC: {n} bytes of {size}")
    if crc is not None:
        value = 0
        for c in chunks:
            value = google_crc32c.extend(value, c)
        if value != crc:
            raise ChecksumMismatch(f"crc32c mismatch reading {what} (generation {gen}) over gRPC")
    return Got(chunks, 0, size, gen, crc)
