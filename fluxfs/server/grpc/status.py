"""gRPC statuses as GCS's gRPC API answers them, and the profile applied to each RPC through the one admission
path HTTP requests take too (admission.py), counted in the same stats."""
from __future__ import annotations

import contextvars
from typing import Any, Optional, Tuple

import grpc

from .. import admission
from ..admission import Admitted
from ..errors import ServerError

_CODES = {400: grpc.StatusCode.INVALID_ARGUMENT, 401: grpc.StatusCode.UNAUTHENTICATED,
          403: grpc.StatusCode.PERMISSION_DENIED, 404: grpc.StatusCode.NOT_FOUND,
          409: grpc.StatusCode.FAILED_PRECONDITION, 412: grpc.StatusCode.FAILED_PRECONDITION,
          304: grpc.StatusCode.FAILED_PRECONDITION, 416: grpc.StatusCode.OUT_OF_RANGE,
          429: grpc.StatusCode.RESOURCE_EXHAUSTED, 500: grpc.StatusCode.INTERNAL,
          501: grpc.StatusCode.UNIMPLEMENTED, 503: grpc.StatusCode.UNAVAILABLE,
          507: grpc.StatusCode.RESOURCE_EXHAUSTED}


class RpcError(Exception):
    """An error to end an RPC with: a gRPC status code and a message naming what was wrong."""

    def __init__(self, code: grpc.StatusCode, message: str):
        super().__init__(message)
        self.code = code
        self.message = message


def from_server_error(e: ServerError) -> RpcError:
    """The HTTP-side error as the gRPC status GCS uses (409 "already exists" -> ALREADY_EXISTS)."""
    code = _CODES.get(e.code, grpc.StatusCode.UNKNOWN)
    if e.code == 409 and "already" in e.message:
        code = grpc.StatusCode.ALREADY_EXISTS
    return RpcError(code, e.message)


async def abort(context: grpc.aio.ServicerContext, e: BaseException) -> None:
    """End the RPC with `e` (RpcError, ServerError, or malformed input) as its status."""
    if isinstance(e, ServerError):
        e = from_server_error(e)
    elif not isinstance(e, RpcError):
        e = RpcError(grpc.StatusCode.INVALID_ARGUMENT, f"Invalid request: {type(e).__name__}: {e}")
    await context.abort(e.code, e.message)


def bucket_name(resource: str) -> str:
    """"projects/_/buckets/B" (what the gRPC API names buckets by) -> "B"; INVALID_ARGUMENT otherwise."""
    prefix = "projects/_/buckets/"
    if not resource.startswith(prefix) or "/" in resource[len(prefix):] or len(resource) == len(prefix):
        raise RpcError(grpc.StatusCode.INVALID_ARGUMENT,
                       f"Invalid bucket name {resource!r}: expected projects/_/buckets/BUCKET.")
    return resource[len(prefix):]


def gate(srv: Any, context: grpc.aio.ServicerContext, op: str, data: bool = False,
         writes: bool = False) -> Admitted:
    """Admit one RPC of `op` (a data read too) as HTTP requests are admitted (admission.py): the bearer token, the
    read-only token refusing what `writes`, denied ops, the rate limit, injected faults; raises RpcError for a
    refusal. Its `reset` says whether this data stream (a read's range, an appendable write stream: `data`) is to
    be cut midway (`reset_rate`, `cut_replies`); its `lost`, whether the RPC is carried out and then its stream cut
    before the answer (`lose_replies`; for a unary RPC the wrapper in services.py sees to it, by `lost_answer`)."""
    if data and op == "read":
        srv.data_reads += 1
    auth = dict(context.invocation_metadata() or ()).get("authorization")
    try:
        admitted = admission.admit(srv, op, admission.bearer(auth), writes, body=data)
    except ServerError as e:
        raise from_server_error(e) from None
    if data and not admitted.reset and admission.cut(srv, op):
        admitted.reset = True
    _LOST.set(admitted.lost)
    return admitted


# Whether the RPC being served was admitted with its answer to be lost: set by `gate`, read by the unary wrapper
# (services.py) once the handler has carried it out; each RPC is served in a task, with a context, of its own.
_LOST: contextvars.ContextVar[bool] = contextvars.ContextVar("fluxfs_grpc_lost", default=False)


def lost_answer() -> bool:
    """Whether the RPC served in this task was admitted with its answer to be lost (`gate`)."""
    return _LOST.get()


def cut_status() -> Tuple[grpc.StatusCode, str]:
    """How a stream cut mid-body ends: UNAVAILABLE, which clients retry from the bytes they have."""
    return grpc.StatusCode.UNAVAILABLE, "Injected fault: the stream was cut mid-body."


def lost_status() -> Tuple[grpc.StatusCode, str]:
    """How an RPC whose answer is lost ends (`lose_replies`): carried out, then its stream cut before the answer,
    UNAVAILABLE as a broken connection is to gRPC clients, who cannot tell whether it happened."""
    return grpc.StatusCode.UNAVAILABLE, "Injected fault: the stream was cut before its answer (the request was " \
                                        "carried out)."


def optional(msg: Any, field: str) -> Optional[Any]:
    """A proto3 optional field's value, or None when it is not set (for a field without presence, such as a
    spec's generation, its zero value means unset)."""
    try:
        return getattr(msg, field) if msg.HasField(field) else None
    except ValueError:
        return getattr(msg, field) or None
