"""JSON API folder calls of HNS buckets (`/storage/v1/b/B/folders`): insert, get, list, delete, rename (a
long-running operation, done at once or, with a latency configured, that long after) and operations.get; on a
bucket without a hierarchical namespace each answers 400 as GCS does. The folders themselves: folder_store.py."""
from __future__ import annotations

import itertools
import time
from typing import Any, Dict, List, Optional, Tuple
from urllib.parse import quote, unquote

from aiohttp import web

from . import folder_store
from .copies import put_copy
from .errors import ServerError
from .json_request import base_url, bool_param, int_param, json_body
from .replies import Reply, json_reply
from .timestamps import rfc3339

_OPERATION_IDS = itertools.count(1)
MAX_PAGE = 1000


def folder_route(method: str, bucket: str, rest: List[str]) -> Tuple[str, Any, Dict[str, Any]]:
    """(op name, handler, keywords) of a request below /storage/v1/b/B/folders or /operations."""
    kind, rest = rest[0], rest[1:]
    if kind == "operations" and len(rest) == 1 and method == "GET":
        return "folder", operation_get, dict(bucket=bucket, op_id=unquote(rest[0]))
    if kind == "folders":
        if not rest or rest == [""]:
            if method == "GET":
                return "folder", folder_list, dict(bucket=bucket)
            if method == "POST":
                return "folder", folder_insert, dict(bucket=bucket)
        elif method == "POST":
            for i in range(len(rest) - 2, 0, -1):
                if rest[i] == "renameTo" and rest[i + 1] == "folders":
                    return "folder", folder_rename, dict(bucket=bucket, src=_joined(rest[:i]),
                                                         dst=_joined(rest[i + 2:]))
        elif method == "GET":
            return "folder", folder_get, dict(bucket=bucket, name=_joined(rest))
        elif method == "DELETE":
            return "folder", folder_delete, dict(bucket=bucket, name=_joined(rest))
    raise ServerError(404, f"Not found: {method} {kind}/{'/'.join(rest)}", "notFound")


def _joined(segs: List[str]) -> str:
    return unquote("/".join(segs), errors="surrogateescape")


def resource(base: str, bucket: str, name: str, rec: Dict[str, Any]) -> Dict[str, Any]:
    """A folder resource (`storage#folder`)."""
    return {"kind": "storage#folder", "id": f"{bucket}/{name}", "bucket": bucket, "name": name,
            "selfLink": f"{base}/storage/v1/b/{bucket}/folders/{quote(name, safe='')}",
            "metageneration": str(rec["metageneration"]), "createTime": rfc3339(rec["created"]),
            "updateTime": rfc3339(rec["updated"])}


async def folder_insert(srv, request: web.Request, q: Dict[str, str], bucket: str) -> Reply:
    body = await json_body(srv, request)
    name = folder_store.folder_name(body.get("name"))
    rec = folder_store.create(srv.store, bucket, name, bool_param(q, "recursive"))
    return json_reply(resource(base_url(request), bucket, name, rec))


async def folder_get(srv, request: web.Request, q: Dict[str, str], bucket: str, name: str) -> Reply:
    rec = folder_store.get(srv.store, bucket, name)
    return json_reply(resource(base_url(request), bucket, folder_store.folder_name(name), rec))


def page(folders: Any, prefix: str, after: str, size: int) -> Tuple[List[str], Optional[str]]:
    """One page of a folder listing (JSON and gRPC): up to `size` names starting with `prefix` after the token
    `after`, in name order, and the next page's token (the last name) when more follow, else None."""
    names: List[str] = []
    for name in folders.irange(minimum=max(prefix, after), inclusive=(after == "", True)):
        if not name.startswith(prefix):
            break
        if name == after:
            continue
        if len(names) >= size:
            return names, names[-1]
        names.append(name)
    return names, None


async def folder_list(srv, request: web.Request, q: Dict[str, str], bucket: str) -> Reply:
    """folders.list: every folder whose name starts with `prefix`, in name order, paged."""
    b = folder_store.hns_bucket(srv.store, bucket)
    prefix, after = q.get("prefix", ""), q.get("pageToken", "")
    names, nxt = page(b.folders, prefix, after, min(int_param(q, "pageSize") or MAX_PAGE, MAX_PAGE))
    base = base_url(request)
    out: Dict[str, Any] = {"kind": "storage#folders", "items": [resource(base, bucket, n, b.folders[n]) for n in names]}
    if nxt is not None:
        out["nextPageToken"] = nxt
    return json_reply(out)


async def folder_delete(srv, request: web.Request, q: Dict[str, str], bucket: str, name: str) -> Reply:
    folder_store.delete(srv.store, bucket, name)
    return Reply(204, b"")


async def folder_rename(srv, request: web.Request, q: Dict[str, str], bucket: str, src: str, dst: str) -> Reply:
    """folders.rename: the folder and everything below it at once; the operation is returned done."""
    rec, src, dst, op_id, done_at = rename_now(srv, bucket, src, dst)
    base = base_url(request)
    op = {"kind": "storage#operation", "name": f"projects/_/buckets/{bucket}/operations/{op_id}",
          "selfLink": f"{base}/storage/v1/b/{bucket}/operations/{op_id}", "done": True,
          "metadata": {"@type": "type.googleapis.com/google.storage.control.v2.RenameFolderMetadata",
                       "sourceFolderId": src, "destinationFolderId": dst,
                       "commonMetadata": {"type": "rename-folder", "createTime": rfc3339(time.time())}},
          "response": {"@type": "type.googleapis.com/google.storage.control.v2.Folder",
                       **resource(base, bucket, dst, rec)}}
    operations(srv)[(bucket, op_id)] = (op, done_at)
    return json_reply(_as_of_now(op, done_at))


def rename_now(srv, bucket: str, src: str, dst: str) -> Tuple[Dict[str, Any], str, str, str, float]:
    """Rename folder `src` to `dst` with everything below it, now (the JSON and gRPC APIs both): (the new
    folder's record, src, dst as folder names, a new operation id, when its operation reports done: at
    once, or after the configured latency, so clients must poll)."""

    def move_object(old: str, new: str) -> None:
        obj = srv.store.get(bucket, old)
        put_copy(srv, bucket, new, [obj], content_type=obj.content_type, metadata=obj.metadata, extra=obj.extra,
                 component_count=obj.component_count, crc=obj._crc)
        srv.store.delete(bucket, old, generation=obj.generation)

    rec = folder_store.rename(srv.store, bucket, src, dst, move_object)
    op_id = f"rename-{next(_OPERATION_IDS)}-{int(time.time())}"
    done_at = time.monotonic() + srv.profile.s["latency_ms"] / 1000.0
    return rec, folder_store.folder_name(src), folder_store.folder_name(dst), op_id, done_at


def operations(srv) -> Dict[Tuple[str, str], Any]:
    """The server's folder operations: (bucket, operation id) -> (what operations.get answers, done at)."""
    return srv.__dict__.setdefault("_folder_operations", {})


def _as_of_now(op: Dict[str, Any], done_at: float) -> Dict[str, Any]:
    """The operation as a poll sees it now: without `done`/`response` until `done_at`."""
    if time.monotonic() >= done_at:
        return op
    return {k: v for k, v in op.items() if k not in ("done", "response")}


async def operation_get(srv, request: web.Request, q: Dict[str, str], bucket: str, op_id: str) -> Reply:
    """operations.get: a folder rename's operation (done once its configured latency has passed)."""
    srv.store.bucket(bucket)
    found = operations(srv).get((bucket, op_id))
    if found is None:
        raise ServerError(404, f"No such operation: {bucket}/{op_id}", "notFound")
    return json_reply(_as_of_now(*found))
