"""The storage-control gRPC API (`google.storage.control.v2.StorageControl`) over the same buckets and folder
store as the JSON API: `GetStorageLayout`, `CreateFolder`, `GetFolder`, `ListFolders`, `DeleteFolder`,
`RenameFolder` (a long-running operation) and `google.longrunning.Operations/GetOperation` to poll it."""
from __future__ import annotations

import time
from typing import Any, Tuple

import grpc
from google.cloud.storage_control_v2 import types as ctl
from google.longrunning import operations_pb2
from google.protobuf import empty_pb2

from .. import folder_store, folders
from ..layout import resource_fields
from .status import RpcError, bucket_name, gate

Layout = ctl.StorageLayout.pb()
Folder = ctl.Folder.pb()
ListFoldersResponse = ctl.ListFoldersResponse.pb()
RenameFolderMetadata = ctl.RenameFolderMetadata.pb()


def _split(name: str, kind: str) -> Tuple[str, str]:
    """"projects/_/buckets/B/<kind>/REST" -> (B, REST); INVALID_ARGUMENT naming the name otherwise."""
    head, sep, rest = name.partition(f"/{kind}/")
    if not sep or not rest:
        raise RpcError(grpc.StatusCode.INVALID_ARGUMENT,
                       f"Invalid {kind[:-1]} name {name!r}: expected projects/_/buckets/BUCKET/{kind}/NAME.")
    return bucket_name(head), rest


def _folder(bucket: str, name: str, rec: dict) -> Any:
    f = Folder(name=f"projects/_/buckets/{bucket}/folders/{name}", metageneration=rec["metageneration"])
    f.create_time.FromNanoseconds(int(rec["created"] * 1e9))
    f.update_time.FromNanoseconds(int(rec["updated"] * 1e9))
    return f


async def get_storage_layout(srv: Any, request: Any, context: Any) -> Any:
    """The bucket's layout: location_type "zone" for a zonal bucket, its hierarchical namespace."""
    gate(srv, context, "bucket")
    head, sep, tail = request.name.rpartition("/")
    if tail != "storageLayout":
        raise RpcError(grpc.StatusCode.INVALID_ARGUMENT, f"Invalid storage layout name {request.name!r}: "
                                                         "expected projects/_/buckets/BUCKET/storageLayout.")
    b = srv.store.bucket(bucket_name(head))
    f = resource_fields(b.layout)
    out = Layout(name=request.name, location=f["location"], location_type=f["locationType"])
    out.hierarchical_namespace.enabled = b.hns
    out.custom_placement_config.data_locations.extend(
        (b.layout.get("customPlacementConfig") or {}).get("dataLocations") or [])
    return out


async def create_folder(srv: Any, request: Any, context: Any) -> Any:
    gate(srv, context, "folder", writes=True)
    bucket = bucket_name(request.parent)
    name = folder_store.folder_name(request.folder_id)
    return _folder(bucket, name, folder_store.create(srv.store, bucket, name, request.recursive))


async def get_folder(srv: Any, request: Any, context: Any) -> Any:
    gate(srv, context, "folder")
    bucket, name = _split(request.name, "folders")
    rec = folder_store.get(srv.store, bucket, name)
    return _folder(bucket, folder_store.folder_name(name), rec)


async def list_folders(srv: Any, request: Any, context: Any) -> Any:
    """Folders whose names start with `prefix`, in name order, paged (the token: the last name sent)."""
    gate(srv, context, "folder")
    bucket = bucket_name(request.parent)
    b = folder_store.hns_bucket(srv.store, bucket)
    prefix, after = request.prefix, request.page_token
    names, nxt = folders.page(b.folders, prefix, after, min(request.page_size or folders.MAX_PAGE, folders.MAX_PAGE))
    out = ListFoldersResponse(folders=[_folder(bucket, n, b.folders[n]) for n in names])
    if nxt is not None:
        out.next_page_token = nxt
    return out


async def delete_folder(srv: Any, request: Any, context: Any) -> Any:
    gate(srv, context, "folder", writes=True)
    bucket, name = _split(request.name, "folders")
    folder_store.delete(srv.store, bucket, name)
    return empty_pb2.Empty()


def _operations(srv: Any) -> dict:
    return srv.__dict__.setdefault("_grpc_operations", {})


def _as_of_now(op: Any, done_at: float) -> Any:
    """The operation as a poll sees it now: not done (no response) until `done_at`."""
    if time.monotonic() >= done_at:
        return op
    early = operations_pb2.Operation()
    early.CopyFrom(op)
    early.done = False
    early.ClearField("response")
    return early


async def rename_folder(srv: Any, request: Any, context: Any) -> Any:
    """RenameFolder: applied at once; its operation reports done at once, or after the configured latency."""
    gate(srv, context, "folder", writes=True)
    bucket, src = _split(request.name, "folders")
    rec, src, dst, op_id, done_at = folders.rename_now(srv, bucket, src, request.destination_folder_id)
    op = operations_pb2.Operation(name=f"projects/_/buckets/{bucket}/operations/{op_id}", done=True)
    meta = RenameFolderMetadata(source_folder_id=src, destination_folder_id=dst)
    meta.common_metadata.type_ = "rename-folder"
    meta.common_metadata.create_time.GetCurrentTime()
    op.metadata.Pack(meta)
    op.response.Pack(_folder(bucket, dst, rec))
    _operations(srv)[op.name] = (op, done_at)
    return _as_of_now(op, done_at)


async def get_operation(srv: Any, request: Any, context: Any) -> Any:
    gate(srv, context, "folder")
    found = _operations(srv).get(request.name)
    if found is None:
        raise RpcError(grpc.StatusCode.NOT_FOUND, f"No such operation: {request.name}")
    return _as_of_now(*found)
