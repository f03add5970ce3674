"""gRPC statuses as GCS's gRPC API answers them, and the profile applied to each RPC (auth, deny, rate
limit, injected faults), counted in the same stats as HTTP requests."""
from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Iterator, Optional, Tuple

import grpc

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


def gate(srv: Any, context: grpc.aio.ServicerContext, op: str, data: bool = False) -> bool:
    """Count one request of `op` (a data read too) and apply the profile as HTTP requests get it:
    a bearer token if required, denied ops, the rate limit, injected faults. Raises RpcError for a refusal;
    returns whether this data stream (a read's range, an appendable write stream: `data`) is to be cut
    midway (`reset_rate`, `cut_replies`)."""
    srv.requests[op] += 1
    if data and op == "read":
        srv.data_reads += 1
    prof = srv.profile
    s = prof.s
    if s["require_token"] is not None:
        auth = dict(context.invocation_metadata() or ()).get("authorization")
        if auth != "Bearer " + s["require_token"]:
            raise RpcError(grpc.StatusCode.UNAUTHENTICATED,
                           "Anonymous caller does not have storage access (missing or wrong bearer token).")
    if op in s["deny_ops"]:
        raise RpcError(grpc.StatusCode.PERMISSION_DENIED, f"The caller does not have permission for '{op}' "
                                                          "operations.")
    if not prof.rate_ok():
        srv.faults[op] += 1
        raise RpcError(grpc.StatusCode.RESOURCE_EXHAUSTED,
                       "The rate of requests exceeds the limit; reduce your request rate.")
    code, reset = prof.fault(op)
    if code is not None:
        srv.faults[op] += 1
        raise RpcError(_CODES.get(code, grpc.StatusCode.UNAVAILABLE), f"Injected fault ({code}) for a '{op}' "
                                                                      "request.")
    if not data:
        return False  # a stream without a body to cut (reset_rate still counts only where it cuts)
    if not reset and prof.cut_reply(op):
        reset = True
    if reset:
        srv.faults[op] += 1
    return reset


@contextmanager
def in_flight(srv: Any, op: str) -> Iterator[None]:
    """Count `op` as being served (stats' peak_in_flight, as for HTTP requests) while the block runs."""
    srv.in_flight[op] += 1
    if srv.in_flight[op] > srv.peak_in_flight[op]:
        srv.peak_in_flight[op] = srv.in_flight[op]
    try:
        yield
    finally:
        srv.in_flight[op] -= 1


def cut_status() -> Tuple[grpc.StatusCode, str]:
    """How a stream cut mid-body ends: UNAVAILABLE, which clients retry from the bytes they have."""
    return grpc.StatusCode.UNAVAILABLE, "Injected fault: the stream was cut mid-body."


def optional(msg: Any, field: str) -> Optional[Any]:
    """A proto3 optional field's value, or None when it is not set (for a field without presence, such as a
    spec's generation, its zero value means unset)."""
    try:
        return getattr(msg, field) if msg.HasField(field) else None
    except ValueError:
        return getattr(msg, field) or None
