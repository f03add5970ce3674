"""`BidiWriteObject`: appendable objects (`appendable=true` in the WriteObjectSpec makes one, visible at once
with size 0; `append_object_spec` takes an unfinalized one over by generation), data persisted on `flush`,
on `finish_write` (which finalizes) and when the client ends its side; `state_lookup` answered with the
persisted size. A non-appendable spec is a one-shot upload stored at `finish_write`."""
from __future__ import annotations

import asyncio
import os
from typing import Any, AsyncIterator, List, Optional

import grpc
from google.cloud._storage_v2 import types as v2

from ...gcs.checksums import crc32c, crc_to_b64
from .. import spool
from ..diskerr import disk_writes
from ..preconditions import check_preconditions
from .appendable import Appendable, Unflushed, current, finalize, registry
from .convert import extra_of, object_pb
from ..admission import Pacer
from .status import RpcError, bucket_name, cut_status, gate, lost_status, optional

Response = v2.BidiWriteObjectResponse.pb()


def _response(srv: Any, rec: Appendable, resource: bool = False, finalized: bool = False) -> Any:
    out = Response()
    if resource:
        b = srv.store.bucket(rec.bucket)
        out.resource.CopyFrom(object_pb(b, current(srv, rec) if not finalized else b.lookup(rec.name), finalized))
    else:  # with the persisted bytes' crc32c, as GCS and Google's testbench answer
        out.persisted_size = rec.size
        out.persisted_data_checksums.crc32c = rec.crc
    out.write_handle.handle = rec.handle
    return out


def _create(srv: Any, spec: Any) -> Appendable:
    """A new appendable object (replacing the live one unless the preconditions say otherwise)."""
    res = spec.resource
    bucket = bucket_name(res.bucket)
    obj = srv.store.put(bucket, res.name, b"", content_type=res.content_type or None,
                        metadata=dict(res.metadata) or None, extra=extra_of(res), with_md5=False,
                        preconditions={"if_gen": optional(spec, "if_generation_match"),
                                       "if_gen_not": optional(spec, "if_generation_not_match"),
                                       "if_meta": optional(spec, "if_metageneration_match"),
                                       "if_meta_not": optional(spec, "if_metageneration_not_match")})
    rec = Appendable(bucket, res.name, obj.generation)
    registry(srv)[(bucket, res.name)] = rec
    return rec


def _take_over(srv: Any, spec: Any) -> Appendable:
    """An unfinalized appendable object named by generation: NOT_FOUND if that generation is not live,
    FAILED_PRECONDITION if it is already finalized."""
    bucket = bucket_name(spec.bucket)
    name = spec.object_
    obj = srv.store.get(bucket, name)
    if obj.generation != spec.generation:
        raise RpcError(grpc.StatusCode.NOT_FOUND, f"No live generation {spec.generation} of {bucket}/{name} "
                                                  f"(the live one is {obj.generation}).")
    check_preconditions(obj, if_meta=optional(spec, "if_metageneration_match"),
                        if_meta_not=optional(spec, "if_metageneration_not_match"))
    rec = registry(srv).get((bucket, name))
    if rec is None or rec.generation != obj.generation:
        raise RpcError(grpc.StatusCode.FAILED_PRECONDITION,
                       f"{bucket}/{name} generation {obj.generation} is finalized: no more appends.")
    rec.epoch += 1
    return rec


async def bidi_write_object(srv: Any, requests: AsyncIterator[Any], context: grpc.aio.ServicerContext):
    """The write stream: first message opens (or takes over) the object, then data, flushes, lookups, finish."""
    first = None
    async for first in requests:  # noqa: B007 - takes the first message, used below
        break
    if first is None:
        return
    appendable = first.HasField("append_object_spec") or (first.HasField("write_object_spec")
                                                          and first.write_object_spec.appendable)
    admitted = gate(srv, context, "write", data=appendable, writes=True)
    if first.HasField("append_object_spec"):
        rec = _take_over(srv, first.append_object_spec)
    elif first.HasField("write_object_spec"):
        if not first.write_object_spec.appendable:
            async for out in _one_shot(srv, first, requests):
                if admitted.lost:  # stored, but the stream is cut before its answer
                    await context.abort(*lost_status())
                yield out
            return
        rec = _create(srv, first.write_object_spec)
    else:
        raise RpcError(grpc.StatusCode.UNIMPLEMENTED if first.upload_id else grpc.StatusCode.INVALID_ARGUMENT,
                       "The first BidiWriteObjectRequest must carry write_object_spec or append_object_spec "
                       "(resumable upload_id streams are not served).")
    epoch = rec.epoch
    yield _response(srv, rec, resource=True)
    pending = Unflushed(srv, rec)
    try:
        async for out in _appending(srv, rec, epoch, first, pending, requests, context, admitted):
            yield out
    finally:
        pending.close()


async def _appending(srv: Any, rec: Appendable, epoch: int, first: Any, pending: Unflushed,
                     requests: AsyncIterator[Any], context: grpc.aio.ServicerContext, admitted: Any):
    """The messages of an appendable stream, from its first (which may carry data too). Admitted with its answer
    lost, the stream is cut where it would answer its end (finish_write, or the client's half-close), once what it
    holds is persisted."""
    received = rec.size
    finished = flushed = False
    cut = admitted.reset
    pacer = Pacer(srv.profile, inbound=True)
    stall = srv.profile.stall_at("write")  # the stream stops taking bytes after this many (as HTTP bodies do)
    message: Optional[Any] = first
    while True:
        if message is None:
            async for message in requests:  # noqa: B007 - takes the next message, used below
                break
            else:
                message = None
        if cut and _cut_here(message, flushed):  # a broken stream: what was flushed stays, the rest is lost
            await context.abort(*cut_status())  # (before a takeover's ABORTED: the break reaches the client first)
        if rec.epoch != epoch and not finished:  # its unflushed bytes would land where the new writer's are
            raise RpcError(grpc.StatusCode.ABORTED, f"{rec.bucket}/{rec.name} was taken over by another writer "
                                                    "(append_object_spec on a newer stream).")
        if message is None:  # the client closed its side: what it sent is kept
            if not finished:
                pending.persist()
                if admitted.lost:
                    await context.abort(*lost_status())
                yield _response(srv, rec)
            return
        if finished:
            raise RpcError(grpc.StatusCode.FAILED_PRECONDITION,
                           f"{rec.bucket}/{rec.name} is finalized: nothing more may be sent on its stream.")
        if message.HasField("checksummed_data"):
            data = message.checksummed_data
            if message.write_offset != received:
                raise RpcError(grpc.StatusCode.OUT_OF_RANGE,
                               f"write_offset {message.write_offset} of {rec.bucket}/{rec.name} is not where its "
                               f"data ends ({received} bytes received, {rec.size} persisted).")
            if data.HasField("crc32c") and data.crc32c != crc32c(data.content):  # as Google's testbench answers
                raise RpcError(grpc.StatusCode.FAILED_PRECONDITION,
                               f"Provided CRC32C {data.crc32c} of the data at offset {message.write_offset} of "
                               f"{rec.bucket}/{rec.name} doesn't match calculated CRC32C {crc32c(data.content)}.")
            pending.add(data.content)
            received += len(data.content)
            srv.bytes_in += len(data.content)
            await pacer.pace(len(data.content))
            if stall is not None and pacer.sent >= stall:
                await asyncio.Event().wait()  # nothing more is read: the client's sends block, until it gives up
        if message.flush or message.finish_write:
            if rec.epoch != epoch:  # taken over while this message's data came in: none of it is persisted
                raise RpcError(grpc.StatusCode.ABORTED, f"{rec.bucket}/{rec.name} was taken over by another "
                                                        "writer (append_object_spec on a newer stream).")
            flushed = flushed or bool(pending.size)
            pending.persist()
        if message.finish_write:
            expect = optional(message.object_checksums, "crc32c") if message.HasField("object_checksums") else None
            finalize(srv, rec, expect)
            finished = True
            if admitted.lost:
                await context.abort(*lost_status())
            yield _response(srv, rec, resource=True, finalized=True)
        elif message.state_lookup:
            yield _response(srv, rec)
        message = None


def _cut_here(message: Optional[Any], flushed: bool) -> bool:
    """Where an injected cut (`reset_rate`, `cut_replies` of "write") breaks an appendable stream: at the first
    data after something was flushed on it (a persisted part kept, unflushed bytes dropped, as GCS keeps only
    what it persisted), else at its end (finish_write or half-close) before what it holds is persisted."""
    if message is None or message.finish_write:
        return True
    return flushed and message.HasField("checksummed_data")


async def _one_shot(srv: Any, first: Any, requests: AsyncIterator[Any]):
    """A non-appendable BidiWriteObject: every byte, then `finish_write` stores the object at once (under
    --root the bytes go to a file as they come, renamed into place: never held in memory)."""
    spec = first.write_object_spec
    res = spec.resource
    bucket = bucket_name(res.bucket)
    srv.store.bucket(bucket)  # a missing bucket is named before any byte is taken
    what = f"{bucket}/{res.name}"
    body = _Body(srv, bucket, what)
    pacer = Pacer(srv.profile, inbound=True)
    try:
        message: Optional[Any] = first
        while message is not None:
            if message.HasField("checksummed_data"):
                if message.write_offset != body.size:
                    raise RpcError(grpc.StatusCode.OUT_OF_RANGE, f"write_offset {message.write_offset} of "
                                                                 f"{what} is not where its data ends.")
                body.add(message.checksummed_data.content)
                srv.bytes_in += len(message.checksummed_data.content)
                await pacer.pace(len(message.checksummed_data.content))
            if message.finish_write:
                expect = optional(message.object_checksums, "crc32c") if message.HasField("object_checksums") \
                    else None
                obj = srv.store.put(bucket, res.name, body.done(), content_type=res.content_type or None,
                                    metadata=dict(res.metadata) or None, extra=extra_of(res),
                                    expect_crc=crc_to_b64(expect) if expect is not None else None,
                                    preconditions={"if_gen": optional(spec, "if_generation_match"),
                                                   "if_meta": optional(spec, "if_metageneration_match")})
                out = Response()
                out.resource.CopyFrom(object_pb(srv.store.bucket(bucket), obj))
                yield out
                return
            message = None
            async for message in requests:  # noqa: B007 - takes the next message, used below
                break
        raise RpcError(grpc.StatusCode.INVALID_ARGUMENT, f"The write of {what} ended without "
                                                         "finish_write: nothing was stored.")
    finally:
        body.discard()


class _Body:
    """A one-shot write's bytes: in memory, or under --root in a file of its own (spool.py) as they come."""

    def __init__(self, srv: Any, bucket: str, what: str):
        self.parts: List[bytes] = []
        self.size = 0
        self.what = what
        self.file: Any = None
        self.spooled: Any = None
        if srv.store.persist:
            self.file, self.spooled = spool.new_file(srv.store.persist.data_dir(bucket), what)

    def add(self, data: bytes) -> None:
        if self.file is not None:
            with disk_writes(self.what):
                self.file.write(data)
            self.spooled.add(data)
        else:
            self.parts.append(data)
        self.size += len(data)

    def done(self) -> Any:
        """What `store.put` takes: the Spooled file (fsynced) or the bytes."""
        if self.file is None:
            return b"".join(self.parts)
        with disk_writes(self.what):
            self.file.flush()
            os.fsync(self.file.fileno())
            self.file.close()
        return self.spooled

    def discard(self) -> None:
        """The file removed (a no-op once `store.put` renamed it into place)."""
        if self.file is not None:
            self.file.close()
            self.spooled.discard()
