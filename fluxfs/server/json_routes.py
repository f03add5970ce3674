"""GCS JSON API v1 routing: /storage/v1 (buckets, objects, compose, copy/rewrite, move), /upload,
/download and /batch, each request mapped to an op name (for stats, faults, deny rules) and a handler."""
from __future__ import annotations

from functools import lru_cache, partial
from typing import Any, Callable, Dict, List, Tuple
from urllib.parse import unquote

from .batch import handle_batch
from .errors import ServerError
from .folders import folder_route
from .json_buckets import (bucket_delete, bucket_get, bucket_insert, bucket_list, bucket_storage_layout,
                           bucket_test_permissions)
from .json_objects import compose, copy, move, object_delete, object_get, object_list, object_patch
from .uploads import resumable_cancel, resumable_chunk, upload_start


def route(method: str, path: str, q: Dict[str, str]) -> Tuple[str, Callable[..., Any]]:
    """Map (method, raw path) to (op name, handler)."""
    op, fn, kw = _route(method, path, "upload_id" in q, q.get("alt") == "media")
    return op, (partial(fn, **kw) if kw else fn)


# Parsing the path (splits, unquotes, branches) costs more than the lookup: small GETs repeat paths.
@lru_cache(maxsize=8192)
def _route(method: str, path: str, upload_id: bool, media: bool) -> Tuple[str, Any, Dict[str, Any]]:
    segs = path.split("/")
    if path.startswith("/upload/"):
        # /upload/storage/v1/b/B/o
        if len(segs) == 7 and segs[4] == "b" and segs[6] == "o":
            bucket = unquote(segs[5])
            if method in ("PUT", "POST") and upload_id:  # gcsfs POSTs its chunks
                return "write", resumable_chunk, dict(bucket=bucket)
            if method == "POST":
                return "write", upload_start, dict(bucket=bucket)
            if method == "PUT" and upload_id:
                return "write", resumable_chunk, dict(bucket=bucket)
            if method == "DELETE" and upload_id:
                return "write", resumable_cancel, dict(bucket=bucket)
        raise ServerError(404, f"Not found: {method} {path}", "notFound")
    if path.startswith("/download/"):
        segs = segs[1:]  # drop leading '' so the rest looks like /storage/v1/...
        if len(segs) >= 7 and segs[3] == "b" and segs[5] == "o" and method in ("GET", "HEAD"):
            return "read", object_get, dict(bucket=unquote(segs[4]), name=_name(segs[6:]), media=True)
        raise ServerError(404, f"Not found: {method} {path}", "notFound")
    if path.startswith("/batch/"):
        if method != "POST":
            raise ServerError(405, "Batch requests are POSTs.", "methodNotAllowed")
        return "batch", handle_batch, dict(route=route)  # the batch runs its calls through route()
    # /storage/v1/b[/B[/o[/NAME[...]]]]
    n = len(segs)
    if n < 4 or segs[3] != "b":
        raise ServerError(404, f"Not found: {method} {path}", "notFound")
    if n == 4 or (n == 5 and segs[4] == ""):
        if method == "GET":
            return "bucket", bucket_list, {}
        if method == "POST":
            return "bucket", bucket_insert, {}
        raise ServerError(405, f"Method not allowed: {method}", "methodNotAllowed")
    bucket = unquote(segs[4])
    if n == 5:
        h = {"GET": bucket_get, "DELETE": bucket_delete, "PATCH": bucket_get, "PUT": bucket_get}.get(method)
        if h is None:
            raise ServerError(405, f"Method not allowed: {method}", "methodNotAllowed")
        return "bucket", h, dict(bucket=bucket)
    if segs[5] == "iam" and n == 7 and segs[6] == "testPermissions":
        return "bucket", bucket_test_permissions, dict(bucket=bucket)
    if segs[5] == "storageLayout" and n == 6 and method == "GET":
        return "bucket", bucket_storage_layout, dict(bucket=bucket)
    if segs[5] in ("folders", "operations"):  # HNS folders (folders.py)
        return folder_route(method, bucket, segs[5:])
    if segs[5] != "o":
        raise ServerError(404, f"Not found: {method} {path}", "notFound")
    if n == 6 or (n == 7 and segs[6] == ""):
        if method == "GET":
            return "list", object_list, dict(bucket=bucket)
        if method == "POST":  # objects.insert on the non-upload path (metadata only, empty body)
            return "write", upload_start, dict(bucket=bucket)
        raise ServerError(405, f"Method not allowed: {method}", "methodNotAllowed")
    rest = segs[6:]
    if method == "POST":
        if len(rest) >= 2 and rest[-1] == "compose":
            return "compose", compose, dict(bucket=bucket, name=_name(rest[:-1]))
        for i in range(len(rest) - 2, 0, -1):
            # objects.move (same bucket): /o/SRC/moveTo/o/DST
            if rest[i] == "moveTo" and rest[i + 1] == "o":
                return "copy", move, dict(bucket=bucket, name=_name(rest[:i]), dname=_name(rest[i + 2:]))
        for verb in ("copyTo", "rewriteTo"):
            for i in range(len(rest) - 4, 0, -1):
                if rest[i] == verb and rest[i + 1] == "b" and rest[i + 3] == "o":
                    return "copy", copy, dict(bucket=bucket, name=_name(rest[:i]), dbucket=unquote(rest[i + 2]),
                                          dname=_name(rest[i + 4:]), rewrite=verb == "rewriteTo")
    name = _name(rest)
    if method in ("GET", "HEAD"):
        return "read", object_get, dict(bucket=bucket, name=name, media=media)
    if method == "DELETE":
        return "delete", object_delete, dict(bucket=bucket, name=name)
    if method in ("PATCH", "PUT"):
        return "metadata", object_patch, dict(bucket=bucket, name=name, replace=method == "PUT")
    raise ServerError(405, f"Method not allowed: {method}", "methodNotAllowed")


def _name(segs: List[str]) -> str:
    # Clients encode '/' as %2F; a client that did not is still served (segments rejoined).
    name = unquote("/".join(segs), errors="surrogateescape")
    if not name:
        raise ServerError(400, "Object name must not be empty.", "required")
    return name
