"""The gRPC services served, as generic handlers over the client library's own message types
(`google.storage.v2.Storage`, `google.storage.control.v2.StorageControl`, `google.longrunning.Operations`);
every handler's errors end its RPC with the gRPC status GCS uses (status.py), and a unary RPC admitted with its
answer to be lost (`lose_replies`) is carried out, then ended as a cut stream."""
from __future__ import annotations

import functools
from typing import Any, Callable, Dict, List, Tuple

import grpc
from google.cloud._storage_v2 import types as v2
from google.cloud.storage_control_v2 import types as ctl
from google.longrunning import operations_pb2
from google.protobuf import empty_pb2

from ..errors import ServerError
from . import control, reads, writes
from .status import RpcError, abort, lost_answer, lost_status

_FAILURES = (RpcError, ServerError, ValueError, TypeError, KeyError, UnicodeError)


def _unary(srv: Any, fn: Callable) -> Callable:
    @functools.wraps(fn)
    async def call(request: Any, context: grpc.aio.ServicerContext) -> Any:
        try:
            out = await fn(srv, request, context)
        except _FAILURES as e:
            await abort(context, e)
            return None
        if lost_answer():  # carried out; the answer is lost on the way (lose_replies)
            await context.abort(*lost_status())
        return out
    return call


def _streaming(srv: Any, fn: Callable) -> Callable:
    @functools.wraps(fn)
    async def call(request: Any, context: grpc.aio.ServicerContext) -> Any:
        try:
            async for out in fn(srv, request, context):
                yield out
        except _FAILURES as e:
            await abort(context, e)
    return call


def _pb(t: Any) -> Any:
    return t.pb() if hasattr(t, "pb") else t


# method -> (kind, handler, request type, response type)
_STORAGE: Dict[str, Tuple[str, Callable, Any, Any]] = {
    "BidiReadObject": ("stream_stream", reads.bidi_read_object, v2.BidiReadObjectRequest, v2.BidiReadObjectResponse),
    "ReadObject": ("unary_stream", reads.read_object, v2.ReadObjectRequest, v2.ReadObjectResponse),
    "GetObject": ("unary_unary", reads.get_object, v2.GetObjectRequest, v2.Object),
    "DeleteObject": ("unary_unary", reads.delete_object, v2.DeleteObjectRequest, empty_pb2.Empty),
    "BidiWriteObject": ("stream_stream", writes.bidi_write_object, v2.BidiWriteObjectRequest,
                        v2.BidiWriteObjectResponse),
}
_CONTROL: Dict[str, Tuple[str, Callable, Any, Any]] = {
    "GetStorageLayout": ("unary_unary", control.get_storage_layout, ctl.GetStorageLayoutRequest, ctl.StorageLayout),
    "CreateFolder": ("unary_unary", control.create_folder, ctl.CreateFolderRequest, ctl.Folder),
    "GetFolder": ("unary_unary", control.get_folder, ctl.GetFolderRequest, ctl.Folder),
    "ListFolders": ("unary_unary", control.list_folders, ctl.ListFoldersRequest, ctl.ListFoldersResponse),
    "DeleteFolder": ("unary_unary", control.delete_folder, ctl.DeleteFolderRequest, empty_pb2.Empty),
    "RenameFolder": ("unary_unary", control.rename_folder, ctl.RenameFolderRequest, operations_pb2.Operation),
}
_OPERATIONS: Dict[str, Tuple[str, Callable, Any, Any]] = {
    "GetOperation": ("unary_unary", control.get_operation, operations_pb2.GetOperationRequest,
                     operations_pb2.Operation),
}


def _service(srv: Any, name: str, methods: Dict[str, Tuple[str, Callable, Any, Any]]) -> Any:
    table = {}
    for method, (kind, fn, req, resp) in methods.items():
        make = getattr(grpc, f"{kind}_rpc_method_handler")
        wrap = _unary if kind.endswith("unary") else _streaming
        table[method] = make(wrap(srv, fn), request_deserializer=_pb(req).FromString,
                             response_serializer=_pb(resp).SerializeToString)
    return grpc.method_handlers_generic_handler(name, table)


def handlers(srv: Any) -> List[Any]:
    """The generic handlers of every service served, bound to the server `srv` (its store and profile)."""
    return [_service(srv, "google.storage.v2.Storage", _STORAGE),
            _service(srv, "google.storage.control.v2.StorageControl", _CONTROL),
            _service(srv, "google.longrunning.Operations", _OPERATIONS)]
