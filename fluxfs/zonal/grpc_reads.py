"""Reads of zonal objects over gRPC `BidiReadObject` (google-cloud-storage's `AsyncMultiRangeDownloader`):
every range of a read goes out at once on one stream, and open streams are pooled per object generation.

A read stream costs a round trip to open; with it open, any number of ranges are in flight on it (the
library multiplexes concurrent `download_ranges` calls), so the ranges of one object (a large object's
8 MiB pieces, `read_ranges`' groups, a read handle's blocks) share the streams already open for its
generation. A stream cut mid-read is resumed by the library at the byte it had reached (its checks refuse a
chunk at the wrong offset or with the wrong crc32c); a read covering the whole object is checked against
the object's crc32c. An unpinned read opens a stream of its own (a pooled one may hold an older generation).
"""
from __future__ import annotations

import asyncio
import collections
import dataclasses
import logging
from typing import TYPE_CHECKING, Any, Optional

import google_crc32c

from ..errors import ChecksumMismatch
from ..gcs.redact import get_logger
from .grpc_client import grpc_client
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
POOL_LIMIT = 64          # idle read streams kept open per gRPC client, least recently used closed first


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
    """Open read streams by (bucket, key, generation): shared by concurrent reads, idle ones closed past a limit."""

    def __init__(self, limit: int = POOL_LIMIT):
        self.limit = limit
        self.open: "collections.OrderedDict[tuple, Any]" = collections.OrderedDict()
        self.users: dict[int, int] = {}
        self.opening: dict[tuple, asyncio.Future] = {}
        self.closing: set = set()

    async def acquire(self, client: "Client", bucket: str, key: str, generation: Optional[str]) -> Any:
        """An open stream of `bucket/key` (of `generation`, else a new one of the live generation)."""
        if generation:
            k = (bucket, key, str(generation))
            mrd = self.open.get(k)
            if mrd is not None and mrd.is_stream_open:
                self.open.move_to_end(k)
                self.users[id(mrd)] = self.users.get(id(mrd), 0) + 1
                return mrd
            pending = self.opening.get(k)
            if pending is None:
                pending = self.opening[k] = asyncio.ensure_future(_open(client, bucket, key, generation))
                pending.add_done_callback(lambda _f: self.opening.pop(k, None))
            mrd = await asyncio.shield(pending)
        else:
            mrd = await _open(client, bucket, key, None)
        k = (bucket, key, str(mrd.generation))
        if self.open.get(k) is None or not self.open[k].is_stream_open:
            self.open[k] = mrd
        self.users[id(mrd)] = self.users.get(id(mrd), 0) + 1
        return mrd

    def release(self, mrd: Any, broken: bool = False) -> None:
        """Done with `mrd`; a `broken` stream (its read failed) leaves the pool."""
        self.users[id(mrd)] = left = self.users.get(id(mrd), 1) - 1
        pooled = [k for k, v in self.open.items() if v is mrd]
        if broken or not pooled:
            for k in pooled:
                del self.open[k]
            if left <= 0:
                self._close(mrd)
            return
        idle = [k for k, v in self.open.items() if self.users.get(id(v), 0) <= 0]
        for k in idle[:max(0, len(self.open) - self.limit)]:
            self._close(self.open.pop(k))

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
        return await AsyncMultiRangeDownloader.create_mrd(grpc_client(client), bucket, key,
                                                          generation=int(generation) if generation else None,
                                                          retry_policy=async_retry(client, "read"))
    except Exception as exc:
        reraise(exc, what)
        raise


def pool_of(client: "Client") -> StreamPool:
    """The stream pool of the gRPC client `client` reads through (one per process, loop and endpoint)."""
    grpc = grpc_client(client)
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
    pool = pool_of(client)
    mrd = await pool.acquire(client, bucket, key, generation)
    broken = True
    try:
        size, gen = _size(mrd), str(mrd.generation)
        s = start or 0
        stop = size if end is None else min(end, size)
        if s >= size and s > 0:
            raise ValueError(f"Requested range {s}-{end} not satisfiable for {what} (size {size})")
        spans = [(a, min(a + chunk, stop)) for a in range(s, stop, chunk)]
        bufs = [_Chunks() for _ in spans]
        ranges = [(a, b - a, buf) for (a, b), buf in zip(spans, bufs)]
        try:
            for i in range(0, len(ranges), MAX_RANGES):
                await mrd.download_ranges(ranges[i:i + MAX_RANGES])
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            reraise(exc, named)
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
