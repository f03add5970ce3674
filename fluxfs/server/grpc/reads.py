"""Object reads over gRPC: `BidiReadObject` (many ranges by read_id on one stream, the object's metadata and
a read handle in the first response, 2 MiB crc32c-checksummed pieces, range_end on each range's last piece),
`ReadObject` and `GetObject`; the profile's latency, bandwidth and link caps, lost answers and mid-body cuts apply
per range, as to HTTP GETs (admission.py)."""
from __future__ import annotations

import asyncio
from typing import Any, AsyncIterator, Optional, Tuple

import grpc
from google.cloud._storage_v2 import types as v2

from ...gcs.checksums import crc32c
from ..objects import Obj
from ..preconditions import check_preconditions
from .appendable import is_unfinalized
from .convert import object_pb
from ..admission import Pacer, in_flight, latency
from .status import RpcError, bucket_name, cut_status, gate, lost_status, optional

PIECE = 2 * 1024 * 1024  # content per message, as GCS sends it
BidiReadResponse = v2.BidiReadObjectResponse.pb()
ReadResponse = v2.ReadObjectResponse.pb()
ObjectRangeData = v2.ObjectRangeData.pb()


def open_object(srv: Any, spec: Any) -> Tuple[Any, Obj]:
    """(bucket record, object) a read spec names, its preconditions checked: NOT_FOUND naming a missing one."""
    bucket = bucket_name(spec.bucket)
    name = spec.object_
    b = srv.store.bucket(bucket)
    obj = srv.store.get(bucket, name, optional(spec, "generation") or None)
    check_preconditions(obj, optional(spec, "if_generation_match"), optional(spec, "if_generation_not_match"),
                        optional(spec, "if_metageneration_match"), optional(spec, "if_metageneration_not_match"))
    return b, obj


def span(obj: Obj, offset: int, length: int, what: str, where: str) -> Tuple[int, int]:
    """[start, end) of a range (a negative offset counts from the end, length 0 = to the end): OUT_OF_RANGE
    past the end, INVALID_ARGUMENT for a negative length."""
    size = obj.size
    if length < 0:
        raise RpcError(grpc.StatusCode.INVALID_ARGUMENT, f"{what}: negative read length {length}.")
    start = max(0, size + offset) if offset < 0 else offset
    if start > size:
        raise RpcError(grpc.StatusCode.OUT_OF_RANGE, f"{what}: read offset {offset} is past the end of "
                                                     f"{where} ({size} bytes).")
    return start, size if length == 0 else min(size, start + length)


def pieces(obj: Obj, start: int, end: int) -> AsyncIterator[Tuple[int, bytes]]:
    """(offset, content) pieces of [start, end), at least one (empty for an empty range)."""
    async def gen():
        pos = start
        while True:
            stop = min(end, pos + PIECE)
            yield pos, bytes(obj.read(pos, stop))
            pos = stop
            if pos >= end:
                return
    return gen()


async def bidi_read_object(srv: Any, requests: AsyncIterator[Any], context: grpc.aio.ServicerContext):
    """BidiReadObject: the first message names the object; every message may add ranges."""
    first = None
    async for first in requests:  # noqa: B007 - takes the first message, used below
        break
    if first is None or not first.HasField("read_object_spec"):
        raise RpcError(grpc.StatusCode.INVALID_ARGUMENT, "The first BidiReadObjectRequest must carry "
                                                         "read_object_spec.")
    loop = asyncio.get_running_loop()
    opened = loop.time()  # the ranges of the opening message are due one latency after it, with the metadata
    opening = gate(srv, context, "metadata")
    b, obj = open_object(srv, first.read_object_spec)
    await latency(srv)
    if opening.lost:  # opened, but the stream is cut before its first answer
        await context.abort(*lost_status())
    head = BidiReadResponse()
    head.metadata.CopyFrom(object_pb(b, obj, not is_unfinalized(srv, b.name, obj)))
    head.read_handle.handle = f"{b.name}/{obj.name}#{obj.generation}".encode("utf-8", "surrogateescape")
    yield head
    # Ranges are served in the order they arrive; each one's first byte is due a latency after it arrived,
    # so ranges sent together wait once, as parallel requests would (a reader task notes the arrivals).
    arrived: asyncio.Queue = asyncio.Queue()

    def note(message: Any, at: Optional[float] = None) -> None:
        due = (loop.time() if at is None else at) + srv.profile.s["latency_ms"] / 1000.0
        for rr in message.read_ranges:
            arrived.put_nowait((due, rr))

    async def take() -> None:
        try:
            async for message in requests:
                note(message)
        except Exception:  # the client went away: nothing more to serve
            pass
        finally:
            arrived.put_nowait(None)

    note(first, opened)
    reader = asyncio.ensure_future(take())
    pacer = Pacer(srv.profile)
    try:
        while True:
            item = await arrived.get()
            if item is None:
                return
            with in_flight(srv, "read"):
                async for out in _serve_range(srv, context, f"{b.name}/{obj.name}", obj, item, pacer):
                    yield out
    finally:
        reader.cancel()


async def _serve_range(srv: Any, context: grpc.aio.ServicerContext, where: str, obj: Obj, item: Tuple[float, Any],
                       pacer: Pacer):
    due, rr = item
    admitted = gate(srv, context, "read", data=True)
    cut = admitted.reset
    start, end = span(obj, rr.read_offset, rr.read_length, f"read_id {rr.read_id}", where)
    stop = start + (end - start) // 2 if cut else end
    wait = due - asyncio.get_running_loop().time()
    if wait > 0:  # the profile's first-byte latency, counted from the range's arrival
        await asyncio.sleep(wait)
    if admitted.lost:  # the stream is cut before this range's first byte
        await context.abort(*lost_status())
    pacer.restart()
    stall = srv.profile.stall_at("read")  # the stream stops moving after this many bytes (as HTTP answers do)
    async for pos, content in pieces(obj, start, stop):
        if stall is not None and pacer.sent + len(content) > stall:
            content = content[:max(0, stall - pacer.sent)]
            if not content:
                await asyncio.Event().wait()  # until the client gives up on the stream
        out = BidiReadResponse()
        piece = out.object_data_ranges.add()
        piece.checksummed_data.content, piece.checksummed_data.crc32c = srv.profile.corrupt(content, crc32c(content))
        piece.read_range.read_offset = pos
        piece.read_range.read_length = len(content)
        piece.read_range.read_id = rr.read_id
        piece.range_end = not cut and pos + len(content) >= end  # a stalled stream's short piece never ends it
        srv.bytes_out += len(content)
        await pacer.pace(len(content))
        if cut and not content:
            break
        yield out
    if cut:
        await context.abort(*cut_status())


async def read_object(srv: Any, request: Any, context: grpc.aio.ServicerContext):
    """ReadObject: one range (read_offset, read_limit) streamed, metadata and checksums in the first message."""
    admitted = gate(srv, context, "read", data=True)
    cut = admitted.reset
    b, obj = open_object(srv, request)
    if request.read_limit < 0:
        raise RpcError(grpc.StatusCode.INVALID_ARGUMENT, f"Negative read_limit {request.read_limit}.")
    where = f"{b.name}/{obj.name}"
    start, end = span(obj, request.read_offset, request.read_limit, where, where)
    await latency(srv)
    if admitted.lost:  # the stream is cut before its first answer
        await context.abort(*lost_status())
    pacer, first = Pacer(srv.profile), True
    stop = start + (end - start) // 2 if cut else end
    async for _pos, content in pieces(obj, start, stop):
        out = ReadResponse()
        out.checksummed_data.content = content
        out.checksummed_data.crc32c = crc32c(content)
        if first:
            finalized = not is_unfinalized(srv, b.name, obj)
            out.metadata.CopyFrom(object_pb(b, obj, finalized))
            out.content_range.start, out.content_range.end = start, end
            out.content_range.complete_length = obj.size
            if finalized:
                out.object_checksums.crc32c = obj.crc32c_int
            first = False
        srv.bytes_out += len(content)
        await pacer.pace(len(content))
        yield out
    if cut:
        await context.abort(*cut_status())


async def get_object(srv: Any, request: Any, context: grpc.aio.ServicerContext) -> Any:
    """GetObject: the object's metadata."""
    gate(srv, context, "metadata")
    b, obj = open_object(srv, request)
    return object_pb(b, obj, not is_unfinalized(srv, b.name, obj))


async def delete_object(srv: Any, request: Any, context: grpc.aio.ServicerContext) -> Any:
    """DeleteObject: as objects.delete (an unfinalized appendable object too)."""
    gate(srv, context, "delete", writes=True)
    bucket = bucket_name(request.bucket)
    name = request.object_
    srv.store.delete(bucket, name, optional(request, "generation") or None,
                     {"if_gen": optional(request, "if_generation_match"),
                      "if_gen_not": optional(request, "if_generation_not_match"),
                      "if_meta": optional(request, "if_metageneration_match"),
                      "if_meta_not": optional(request, "if_metageneration_not_match")})
    from google.protobuf import empty_pb2
    return empty_pb2.Empty()
