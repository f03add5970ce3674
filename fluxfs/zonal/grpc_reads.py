"""Reads of zonal objects over gRPC `BidiReadObject`: which stream a read goes on.

A stream's first message may carry ranges, so a read made on a stream of its own costs one round trip (a
"one-shot" read). A small object is read whole that way; a large read (at least `OWN_STREAM` bytes) is cut
into `chunk`-sized ranges, each a one-shot read, `streams` at a time (and `grpc_pool.LARGE_STREAMS` per process
for all large reads together): the first tells the object's size and
generation and the rest are pinned to that generation, so an overwrite in the middle cannot mix two versions.
A stream's throughput is bounded (as an HTTP request's is), so a large read on one stream would be too.
Smaller ranged reads share the stream pooled for their object generation (`grpc_pool`). Offsets and chunk
crc32c are checked, and whole objects against their crc32c; a one-shot read cut, redirected or refused for a
retryable reason is read again by the multi-range downloader, which resumes and follows redirects.
"""
from __future__ import annotations

import asyncio
import contextlib
import functools
from typing import TYPE_CHECKING, Any, Optional

from ..errors import ChecksumMismatch, RequestTimeout
from ..gcs.checksums import crc32c
from ..gcs.progress import ProgressClock
from ..gcs.redact import get_logger
from ..gcs.tasks import gather_all
from ..gcs.urls import named
from ..gcs.verify import check_whole
from .gcs_adapter import bidi_read_call, bidi_read_types
from .grpc_client import connect
from .grpc_errors import reraise
from .grpc_pool import CHUNK, Got, pool_of, read_pooled
from .grpc_wire import ReadAnswer
from .stalls import bounded

if TYPE_CHECKING:  # pragma: no cover
    from ..gcs.client import Client

logger = get_logger(__name__)

_FREE = contextlib.nullcontext()
OWN_STREAM = 2**20  # a ranged read at least this long gets streams of its own; shorter ones share the pooled one
STREAMS = 16         # one-shot streams a large read keeps open at once


async def read(client: "Client", bucket: str, key: str, start: Optional[int] = None, end: Optional[int] = None,
               generation: Optional[str] = None, chunk: int = CHUNK, size_hint: Optional[int] = None,
               streams: int = STREAMS) -> Got:
    """Bytes [start, end) of `bucket/key` (all when both are None; of `generation` when given) over gRPC.

    A range past the end comes back short; one starting at or past a non-empty object's end is a ValueError,
    as the HTTP reads answer a 416. FileNotFoundError names the object (and the generation asked for).

    A stream that moved nothing for `read_timeout` fails the attempt (RequestTimeout), and the read retry policy
    decides how many attempts there are and the backoff between them, as for HTTP reads; the library's own retry
    (the policy's settings too, `grpc_errors.async_retry`) handles the failures gRPC reports, which a stall is not."""
    if start is None and end is None and size_hint is not None and size_hint <= chunk:
        attempt = functools.partial(read_whole, client, bucket, key, generation)
    elif end is not None and end - (start or 0) < OWN_STREAM:
        attempt = functools.partial(read_pooled, client, bucket, key, start, end, generation, chunk)
    else:  # a whole object of unknown size may well be small: its first range is not held to the large-read bound
        attempt = functools.partial(_spread, client, bucket, key, start or 0, end, generation, chunk, streams,
                                    known_large=size_hint is not None or end is not None)
    policy = client.retry_policy("read")
    return await policy.run(lambda _n: attempt(), what=f"read {bucket}/{key} over gRPC", retry_on=(RequestTimeout,))


async def _spread(client: "Client", bucket: str, key: str, s: int, end: Optional[int], generation: Optional[str],
                  chunk: int, streams: int, known_large: bool = True) -> Got:
    """[s, end) in `chunk`-sized one-shot reads, `streams` at a time, pinned to the generation the first one saw."""
    what = f"{bucket}/{key}"
    first_end = s + chunk if end is None else min(end, s + chunk)
    large = (await pool_of(client)).large
    async with (large if known_large else _FREE):
        first = await _one_shot(client, bucket, key, generation, s, first_end - s)
    if first is None:  # retryable trouble before anything came: the pooled downloader reads it
        return await read_pooled(client, bucket, key, s, end, generation, chunk)
    first = await _finish(client, bucket, key, first, first_end - s, chunk)
    got = sum(map(len, first.chunks))
    if first.crc32c is None:  # unfinalized: its persisted bytes, read by the downloader unless all came at once
        if got < first_end - s:
            return Got(first.chunks, s, s + got, first.generation, None, crcs=first.crcs)
        return await read_pooled(client, bucket, key, s, end, first.generation, chunk)
    size, gen = first.size, first.generation
    if s >= size and s > 0:
        raise ValueError(f"Requested range {s}-{end} not satisfiable for {what} (size {size})")
    stop = size if end is None else min(end, size)
    if got != min(first_end, stop) - s:
        raise ConnectionError(f"short read of {what} over gRPC: {got} bytes for range {s}-{first_end}")
    sem = asyncio.Semaphore(max(1, streams))

    async def one(a: int, b: int) -> Got:
        async with sem, large:
            part = await _one_shot(client, bucket, key, gen, a, b - a)
            if part is None:
                part = await read_pooled(client, bucket, key, a, b, gen, chunk)
            part = await _finish(client, bucket, key, part, b - a, chunk)
            n = sum(map(len, part.chunks))
            if n != b - a:
                raise ConnectionError(f"short read of {what} over gRPC: {n} bytes for range {a}-{b}")
            return part

    parts = [first] + await gather_all(one(a, min(a + chunk, stop)) for a in range(s + got, stop, chunk))
    chunks = [c for part in parts for c in part.chunks]
    crcs = None if any(p.crcs is None for p in parts) else [v for part in parts for v in part.crcs]
    if s == 0 and stop == size:
        check_whole(chunks, first.crc32c, what, gen, " over gRPC", crcs=crcs)
    return Got(chunks, s, size, gen, first.crc32c, crcs=crcs)


async def _finish(client: "Client", bucket: str, key: str, got: Got, length: int, chunk: int) -> Got:
    """`got` (a one-shot read of `length` bytes from `got.start`, 0: to the end) whole: when its stream was cut,
    the rest is read by the pooled downloader from the byte reached, pinned to the generation seen."""
    if got.complete:
        return got
    n = sum(map(len, got.chunks))
    want = got.size - got.start if length == 0 else min(length, got.size - got.start)
    if got.crc32c is None:  # unfinalized: its size may have grown meanwhile, read it again
        return await read_pooled(client, bucket, key, got.start, None if length == 0 else got.start + length,
                                 got.generation, chunk)
    if n < want:
        rest = await read_pooled(client, bucket, key, got.start + n, got.start + want, got.generation, chunk)
        got.chunks = got.chunks + rest.chunks
        got.crcs = None  # the downloader's chunks come without their crc32c values
    got.complete = True
    return got


async def read_whole(client: "Client", bucket: str, key: str, generation: Optional[str] = None) -> Got:
    """A whole object in one round trip (many small objects are many such reads side by side). A short answer
    and a whole-object crc32c mismatch are refused."""
    what = f"{bucket}/{key}"
    got = await _one_shot(client, bucket, key, generation, 0, 0)
    if got is None:
        return await read_pooled(client, bucket, key, 0, None, generation)
    got = await _finish(client, bucket, key, got, 0, CHUNK)
    n = sum(map(len, got.chunks))
    if got.crc32c is None:  # unfinalized: its persisted bytes, however many the server sent
        got.size = n
    elif n != got.size:
        raise ConnectionError(f"short read of {what} over gRPC: {n} bytes of {got.size}")
    else:
        check_whole(got.chunks, got.crc32c, what, got.generation, " over gRPC", crcs=got.crcs)
    return got


_REQUEST = bidi_read_types()[0]


async def _one_shot(client: "Client", bucket: str, key: str, generation: Optional[str], start: int,
                    length: int) -> Optional[Got]:
    """[start, start + length) (length 0: to the end) on a stream of its own, the range sent with the opening
    message and the stream closed once it ends; not `complete` when it ended early (cut, redirected, overloaded),
    None when it did before the object's metadata came. Chunks at the wrong offset or a wrong crc32c are refused;
    the crc32c of each chunk (computed once, here) is kept in `crcs`: whole-object checks combine them."""
    from google.api_core import exceptions as gexc
    from grpc.aio import AioRpcError

    what = f"{bucket}/{key}"
    grpc = await connect(client)
    request = _REQUEST()
    request.read_object_spec.bucket = f"projects/_/buckets/{bucket}"
    request.read_object_spec.object_ = key
    if generation:
        request.read_object_spec.generation = int(generation)
    rr = request.read_ranges.add()
    rr.read_offset, rr.read_length, rr.read_id = start, length, 1

    chunks: list = []
    crcs: list = []
    state: dict = {"size": None, "crc": None, "gen": None, "at": start, "done": False}
    clock = ProgressClock(client.options.read_timeout)  # progress is any message: the metadata first, then bytes

    async def receive(stream: Any) -> None:
        await stream.write(request)
        await stream.done_writing()
        async for answer in stream:  # a ReadAnswer: the data pieces sliced out once, the rest protobuf
            clock.moved()
            if answer.rest.HasField("metadata"):
                meta = answer.rest.metadata
                state["size"], state["gen"] = int(meta.size), str(meta.generation)
                if meta.HasField("checksums") and meta.checksums.HasField("crc32c") and meta.HasField("finalize_time"):
                    state["crc"] = meta.checksums.crc32c
            for part in answer.pieces:
                data = part.content
                if part.offset != state["at"]:
                    raise ChecksumMismatch(f"reading {what} over gRPC: a chunk at offset "
                                           f"{part.offset}, expected {state['at']}")
                crc = crc32c(data)
                if part.crc32c is not None and crc != part.crc32c:
                    raise ChecksumMismatch(f"crc32c mismatch reading {what} over gRPC: bytes corrupted in transit")
                if data:
                    chunks.append(data)
                    crcs.append(crc)
                    state["at"] += len(data)
                    clock.moved(len(data))
                state["done"] = state["done"] or part.range_end
            if state["done"]:
                return

    stream = None
    try:
        stream = bidi_read_call(grpc, _REQUEST, ReadAnswer)(
            metadata=(("x-goog-request-params", f"bucket=projects/_/buckets/{bucket}"),))
        try:
            await bounded(receive(stream), client.options.read_timeout, what, "BidiReadObject", clock=clock)
        except AioRpcError as exc:
            raise gexc.from_grpc_error(exc) from exc
    except asyncio.CancelledError:
        raise
    except (ChecksumMismatch, RequestTimeout):  # corrupted; stalled: this attempt failed (`read` retries a stall)
        raise
    except (gexc.NotFound, gexc.PermissionDenied, gexc.Unauthenticated, gexc.FailedPrecondition,
            gexc.OutOfRange, gexc.InvalidArgument) as exc:
        reraise(exc, named(bucket, key, generation))
    except Exception as exc:  # cut, redirected, overloaded: the downloader resumes
        logger.debug("one-shot gRPC read of %s failed (%s); reading it with the multi-range downloader", what, exc)
        state["done"] = False
    finally:
        if stream is not None:
            stream.cancel()  # ended or abandoned: nothing more is wanted from it
    size, gen, crc, done = state["size"], state["gen"], state["crc"], state["done"]
    if size is None:
        return None
    return Got(chunks, start, size, gen, crc, complete=done, crcs=crcs)
