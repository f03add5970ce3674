"""The one module that reaches into google-cloud-storage's and grpc's internals, as `gcsfs_adapter.py` does into
gcsfs's: their private modules and the private fields of their objects, each with why. fluxfs's own state about
the library's objects (a client's stream pool, a writer's crc32c) is kept beside them here, never set on them.

Checked against google-cloud-storage 3.17.1, grpcio 1.85.3 and google-api-core 2.44.0 (the pins in
constraints.txt); setup.cfg bounds them below their next major version, and tests/zonal exercises every function
here against a gRPC server. What is a library bug we work around is in docs/compat.md ("Bugs found in the
libraries we build on").
"""
from __future__ import annotations

import dataclasses
import logging
import weakref
from typing import Any, Optional

CHECKED_AGAINST = {"google-cloud-storage": "3.17.1", "grpcio": "1.85.3", "google-api-core": "2.44.0"}


@dataclasses.dataclass
class Extra:
    """What fluxfs knows about one of the library's objects."""

    ready: bool = False          # AsyncGrpcClient: its channel connected once (`grpc_client.connect`)
    pool: Any = None             # AsyncGrpcClient: the read streams pooled per object generation (`grpc_pool`)
    bidi_read: Any = None        # AsyncGrpcClient: the bare BidiReadObject call on its channel (`grpc_reads`)
    crc: Optional[int] = None    # appendable writer: crc32c of its persisted bytes (None: not known)
    taken: bool = False          # appendable writer: another writer took the object over after our last append


_EXTRA: "weakref.WeakKeyDictionary[Any, Extra]" = weakref.WeakKeyDictionary()


def extra(obj: Any) -> Extra:
    """fluxfs's state about `obj` (an `AsyncGrpcClient`, an `AsyncAppendableObjectWriter`), kept for its life."""
    found = _EXTRA.get(obj)
    if found is None:
        found = _EXTRA[obj] = Extra()
    return found


# -- the channel under an AsyncGrpcClient ---------------------------------------------------------------------

def channel_of(made: Any) -> Any:
    """The `grpc.aio.Channel` of an `AsyncGrpcClient` (its generated client's transport): its connectivity is
    watched (`connect`) and the bare `BidiReadObject` call is made on it. The library exposes no channel."""
    return made.grpc_client.transport.grpc_channel


async def close_channel(made: Any) -> None:
    """Close an `AsyncGrpcClient`'s channel (before a fork: gRPC's core cannot cross one with a channel open)."""
    await made.grpc_client.transport.close()


def grpc_calls_alive() -> bool:
    """Whether any gRPC call object is still alive in this process (grpc's `aio._call.Call`, a private module:
    a call still referenced keeps gRPC's core busy, and a child forked then could not use gRPC)."""
    import gc

    try:
        from grpc.aio._call import Call
    except ImportError:  # pragma: no cover - another grpc layout: assume the worst
        return True
    return any(issubclass(type(o), Call) for o in gc.get_objects())  # type(): no __class__ lookups


# -- reads -----------------------------------------------------------------------------------------------------

def bidi_read_types() -> tuple:
    """The protobuf classes of `BidiReadObject`'s request and response (the library's generated `_storage_v2`,
    a private package: the bare call sends and parses them without proto-plus's wrapping)."""
    from google.cloud import _storage_v2 as v2

    return v2.BidiReadObjectRequest.pb(), v2.BidiReadObjectResponse.pb()


def bidi_read_call(made: Any, request: Any, response: Any) -> Any:
    """The bare `BidiReadObject` call on `made`'s channel (its credentials), made once per client."""
    state = extra(made)
    if state.bidi_read is None:
        state.bidi_read = channel_of(made).stream_stream(
            "/google.storage.v2.Storage/BidiReadObject", request_serializer=request.SerializeToString,
            response_deserializer=response.FromString)
    return state.bidi_read


class _QuietStreamClose(logging.Filter):
    """Drops the library's log records from a read stream's receive loop (`_StreamMultiplexer._recv_loop`): what a
    pooled stream's close, a cancelled read and a server going away under an idle stream leave behind. The loop
    hands every failure to the reads waiting on the stream, and through them to the caller."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.funcName != "_recv_loop"


def quiet_read_stream_closes() -> None:
    """Install `_QuietStreamClose` on the logger of the library's private `_stream_multiplexer` module (once)."""
    log = logging.getLogger("google.cloud.storage.asyncio._stream_multiplexer")
    if not any(isinstance(f, _QuietStreamClose) for f in log.filters):
        log.addFilter(_QuietStreamClose())


# -- appendable writers ------------------------------------------------------------------------------------------

def blob_with(bucket: str, key: str, resource: dict) -> Any:
    """A `Blob` carrying a JSON resource's fields (content type, metadata, ...) for a new appendable object: the
    writer reads them from the blob, and `Blob` takes a whole resource only through its `_properties`."""
    from google.cloud.storage import Blob, Bucket

    blob = Blob(key, bucket=Bucket(None, name=bucket))
    blob._properties.update({k: v for k, v in resource.items() if k != "name"})
    return blob


def redirected(exc: BaseException) -> bool:
    """Whether a write stream failed with a redirect (GCS moved the object: reopen with its routing token), told by
    the library's private `_storage_v2` error type and `retry._helpers` reader of an ABORTED's details."""
    from google.api_core import exceptions as gexc
    from google.cloud._storage_v2.types import BidiWriteObjectRedirectedError
    from google.cloud.storage.asyncio.retry._helpers import _extract_bidi_writes_redirect_proto

    if isinstance(exc, BidiWriteObjectRedirectedError):
        return True
    if isinstance(exc, gexc.Aborted):
        try:
            return bool(_extract_bidi_writes_redirect_proto(exc))
        except Exception:  # unreadable details: not a redirect we can follow
            return False
    return False


def drop_stream(writer: Any, exc: BaseException) -> Any:
    """Make `writer` forget its broken stream, keeping what a redirect in `exc` carries (routing token, write
    handle, generation: the library's `_on_open_error`), so that its next `open` takes the object over again;
    the stream, if still open, for the caller to close (None otherwise). The writer has no public way to."""
    try:
        writer._on_open_error(exc)
    except Exception:  # nothing to keep
        pass
    stream, writer.write_obj_stream = writer.write_obj_stream, None
    writer._is_stream_open = False
    return stream if stream is not None and stream.is_stream_open else None


def detach_stream(writer: Any) -> Any:
    """Take a failed writer's stream away from it (marked closed) and return it if its call may still be running
    (a stream the library no longer counts as open still has its request task pending), else None."""
    stream = getattr(writer, "write_obj_stream", None)
    writer._is_stream_open = False
    if stream is not None and getattr(stream, "socket_like_rpc", None) is not None:
        writer.write_obj_stream = None
        return stream
    return None


async def close_stream_call(stream: Any) -> None:
    """Close a write stream's bidi call itself (`socket_like_rpc`), whatever the library thinks of the stream."""
    await stream.socket_like_rpc.close()


async def close_stream(writer: Any) -> None:
    """Close `writer`'s stream, not the writer: the writer's close retries by re-opening the stream, which takes
    the object over again (failing another writer's appends) only to close it."""
    await writer.write_obj_stream.close()


async def send_data(writer: Any, content: bytes, crc: int) -> None:
    """Send `content` (its crc32c `crc`) on `writer`'s open stream at its end, unflushed, and move the writer's
    position on as its `append` does. A bare protobuf message: `append` wraps the bytes in a BytesIO and proto-plus
    messages, copying each byte three more times (the stream's serializer takes the bare message as it is)."""
    from google.cloud import _storage_v2 as v2

    offset = int(writer.offset or 0)
    request = v2.BidiWriteObjectRequest.pb()(write_offset=offset)
    request.checksummed_data.content = content
    request.checksummed_data.crc32c = crc
    await writer.write_obj_stream.send(request)
    writer.offset = offset + len(content)
    writer.bytes_appended_since_last_flush += len(content)


def forget_position(writer: Any) -> None:
    """Make `writer`'s next `open` learn the persisted size from GCS (the writer keeps its last one otherwise)."""
    writer.offset = writer.persisted_size = None
    writer.bytes_appended_since_last_flush = 0
