"""JSON API bucket calls: list, insert, get/patch/update, delete, testIamPermissions, getStorageLayout."""
from __future__ import annotations

from typing import Any, Dict
from urllib.parse import parse_qsl

from aiohttp import web

from .admission import bearer, granted
from .errors import ServerError
from .fields import apply_fields, parse_fields
from .json_request import base_url, json_body
from .layout import layout_settings, storage_layout
from .replies import Reply, json_reply


async def bucket_list(srv, request: web.Request, q: Dict[str, str]) -> Reply:
    base = base_url(request)
    items = [b.resource(base) for _, b in sorted(srv.store.buckets.items()) if b.name.startswith(q.get("prefix", ""))]
    out: Dict[str, Any] = {"kind": "storage#buckets"}
    if items:
        out["items"] = items
    if "fields" in q:
        out = apply_fields(out, parse_fields(q["fields"]))
    return json_reply(out)


async def bucket_insert(srv, request: web.Request, q: Dict[str, str]) -> Reply:
    body = await json_body(srv, request)
    name = body.get("name") or q.get("name")
    if not name:
        raise ServerError(400, "Bucket name is required.", "required")
    versioning = body.get("versioning")
    if versioning is not None and not isinstance(versioning, dict):
        raise ServerError(400, "versioning must be an object such as {\"enabled\": true}.", "invalid")
    b = srv.store.create_bucket(name, labels=body.get("labels"), layout=layout_settings(body),
                                versioning=None if versioning is None else bool(versioning.get("enabled")))
    return json_reply(b.resource(base_url(request)))


async def bucket_get(srv, request: web.Request, q: Dict[str, str], bucket: str) -> Reply:
    if request.method in ("PATCH", "PUT"):
        body = await json_body(srv, request)
        if not isinstance(body.get("versioning") or {}, dict):
            raise ServerError(400, "versioning must be an object such as {\"enabled\": true}.", "invalid")
        srv.store.update_bucket(bucket, {k: body[k] for k in ("labels", "versioning") if k in body})
    res = srv.store.bucket(bucket).resource(base_url(request))
    if "fields" in q:
        res = apply_fields(res, parse_fields(q["fields"]))
    return json_reply(res)


async def bucket_storage_layout(srv, request: web.Request, q: Dict[str, str], bucket: str) -> Reply:
    """buckets.getStorageLayout: location, locationType ("zone" for a zonal bucket), hierarchicalNamespace."""
    b = srv.store.bucket(bucket)
    return json_reply(storage_layout(b.name, b.layout))


async def bucket_delete(srv, request: web.Request, q: Dict[str, str], bucket: str) -> Reply:
    srv.store.delete_bucket(bucket)
    return Reply(204, b"")


async def bucket_test_permissions(srv, request: web.Request, q: Dict[str, str], bucket: str) -> Reply:
    srv.store.bucket(bucket)
    perms = granted(srv.profile, bearer(request.headers.get("Authorization")),
                    [v for k, v in _multi(request, "permissions")])
    return json_reply({"kind": "storage#testIamPermissionsResponse", "permissions": perms})


def _multi(request, key):
    return [(k, v) for k, v in parse_qsl(request.raw_path.partition("?")[2]) if k == key]
