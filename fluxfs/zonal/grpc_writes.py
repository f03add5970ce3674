"""Appendable objects on zonal buckets over gRPC `BidiWriteObject` (google-cloud-storage's
`AsyncAppendableObjectWriter`): open (a new object, create-only, or a takeover of an unfinalized one),
append, finalize (the server checks the whole object's crc32c), close unfinalized, discard.

What GCS allows: an appendable object exists (unfinalized, readable up to its persisted size) from the
moment its write stream opens; a new object replaces the live one then. Finalizing makes it a normal,
immutable object. A write that fails or is cancelled is discarded: its stream closed and its generation
deleted (pinned, so nothing else is touched), so no half-written object stays under the name; an append
to an existing object cannot be taken back (GCS has no truncate): the bytes it persisted stay, unfinalized.
"""
from __future__ import annotations

import asyncio
import base64
from typing import TYPE_CHECKING, Any, Optional

from ..errors import AppendTakenOver, ResumeImpossible
from ..gcs.checksums import crc_to_b64
from ..gcs.redact import get_logger
from . import grpc_resume
from .gcs_adapter import blob_with, close_stream, extra
from .grpc_client import connect, grpc_client
from .grpc_errors import async_retry, reraise

if TYPE_CHECKING:  # pragma: no cover
    from ..gcs.client import Client

logger = get_logger(__name__)


async def open_writer(client: "Client", bucket: str, key: str, generation: Optional[int],
                      resource: Optional[dict] = None) -> Any:
    """An open appendable writer: `generation` None makes a new object, 0 only if none exists
    (FileExistsError otherwise), a generation takes that unfinalized object over (appending at its end)."""
    from google.cloud.storage.asyncio.async_appendable_object_writer import AsyncAppendableObjectWriter

    what = f"{bucket}/{key}"
    writer = AsyncAppendableObjectWriter(await connect(client), bucket, key, generation=generation)
    if resource:
        writer.blob = blob_with(bucket, key, resource)
    try:
        await grpc_resume.open_stream(client, writer, what)
        grpc_resume.track(writer, await grpc_resume.within(client, grpc_resume.persisted_crc(client, writer), what)
                          if generation else 0)
    except BaseException as exc:
        await grpc_resume.release(writer)  # a refused open leaves the stream's call running
        if not isinstance(exc, Exception):
            raise
        _raise_named(exc, what, generation)
    return writer


def _raise_named(exc: BaseException, what: str, generation: Optional[int]) -> None:
    from google.api_core import exceptions as gexc

    if isinstance(exc, gexc.FailedPrecondition) and "finalized" in (exc.message or ""):
        raise PermissionError(f"cannot append to {what}: it is finalized (GCS appends only to unfinalized "
                              f"appendable objects; write a new object instead)") from exc
    if isinstance(exc, gexc.FailedPrecondition) and generation == 0:
        raise FileExistsError(f"{what} already exists (mode 'xb' creates only new objects)") from exc
    if isinstance(exc, (gexc.NotFound, gexc.FailedPrecondition)) and generation:
        raise FileNotFoundError(f"cannot append to {what}#{generation}: that generation is no longer live "
                                f"({exc.message})") from exc
    reraise(exc, what)


async def append(client: "Client", writer: Any, data: bytes, crc: Optional[int] = None) -> None:
    """Append `data` (its crc32c `crc`, when known) at the writer's end and flush it (sent in 2 MiB messages); a
    broken stream is resumed from the persisted size (`grpc_resume`), never by the library's retry, which resends
    the wrong bytes."""
    try:
        await grpc_resume.append(client, writer, data, crc)
    except (ResumeImpossible, AppendTakenOver):
        raise
    except Exception as exc:
        _raise_named(exc, f"{writer.bucket_name}/{writer.object_name}", writer.generation)


async def finalize(client: "Client", writer: Any, crc: int) -> dict:
    """Finalize: the object becomes a normal one; the server refuses it unless its crc32c is `crc`. Everything
    was flushed, so the library's retry (reopen, check the size, finalize) is safe here."""
    try:
        obj = await grpc_resume.within(client, writer.close(finalize_on_close=True, full_object_checksum=crc,
                                                 retry_policy=async_retry(client, "write")),
                            f"{writer.bucket_name}/{writer.object_name}", writing=True)
    except Exception as exc:
        _raise_named(exc, f"{writer.bucket_name}/{writer.object_name}", writer.generation)
    return resource_of(writer.bucket_name, obj)


async def close_unfinalized(client: "Client", writer: Any) -> dict:
    """Persist what was appended and close the stream, leaving the object appendable; its resource."""
    what = f"{writer.bucket_name}/{writer.object_name}"
    try:
        try:
            if not extra(writer).taken:
                await grpc_resume.within(client, writer.flush(), what, writing=True)
                # The stream's own close, not the writer's: its retry re-opens the stream, which takes the
                # object over again (failing another writer's appends) only to close it.
                await grpc_resume.within(client, close_stream(writer), what)
        except Exception as exc:
            if not grpc_resume.taken_over(exc):
                raise
            # Another writer took the object over after our last append: each append ended confirmed, so all
            # of them persisted; nothing was lost.
        await grpc_resume.release(writer)
        obj = await grpc_resume.within(client, grpc_client(client).get_object(writer.bucket_name, writer.object_name,
                                                                   generation=writer.generation), what)
    except Exception as exc:
        _raise_named(exc, what, writer.generation)
    return resource_of(writer.bucket_name, obj)


async def discard(client: "Client", writer: Any, delete: bool) -> None:
    """Cancel a failed write's stream (unflushed bytes are dropped: a half-close would persist them, and the
    writer's close retries by taking the object over again); with `delete`, delete the generation it created."""
    what = f"{writer.bucket_name}/{writer.object_name}"
    try:
        await grpc_resume.release(writer)
    except asyncio.CancelledError as exc:  # the stream's call was cancelled with the part using it
        task = asyncio.current_task()
        if task is not None and task.cancelling():  # this discard itself is being cancelled
            raise
        logger.debug("closing the cancelled write stream of %s: %r", what, exc)
    except Exception as exc:  # a broken stream: nothing left to close
        logger.debug("closing the write stream of %s: %s", what, exc)
    if delete and writer.generation:
        try:
            await grpc_resume.within(client, grpc_client(client).delete_object(writer.bucket_name, writer.object_name,
                                                                    generation=int(writer.generation)), what)
        except Exception as exc:
            from google.api_core import exceptions as gexc

            if not isinstance(exc, gexc.NotFound):
                reraise(exc, what)


def resource_of(bucket: str, obj: Any) -> dict:
    """A gRPC `Object` as the JSON API's object resource (what `client.object_info` takes)."""
    pb = type(obj).pb(obj) if hasattr(type(obj), "pb") else obj
    res: dict = {"bucket": bucket, "name": pb.name, "size": str(pb.size), "generation": str(pb.generation),
                 "metageneration": str(pb.metageneration), "contentType": pb.content_type or None,
                 "storageClass": pb.storage_class or None, "metadata": dict(pb.metadata) or None}
    if pb.checksums.HasField("crc32c"):
        res["crc32c"] = crc_to_b64(pb.checksums.crc32c)
    if pb.checksums.md5_hash:
        res["md5Hash"] = base64.b64encode(pb.checksums.md5_hash).decode()
    for field, name in (("create_time", "timeCreated"), ("update_time", "updated"), ("finalize_time", "finalized")):
        if pb.HasField(field):
            res[name] = getattr(pb, field).ToJsonString()
    return {k: v for k, v in res.items() if v is not None}
