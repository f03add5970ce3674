"""GCS JSON API v1: /storage/v1 (buckets, objects, compose, copy/rewrite), /upload and /download."""
from __future__ import annotations

import base64
import binascii
import json
from functools import lru_cache, partial
from typing import Any, Dict, List, Optional, Tuple
from urllib.parse import parse_qsl, unquote

from aiohttp import web

from .app import Reply, json_reply
from ..gcs.checksums import crc32c_combine, crc_to_b64
from .fields import apply_fields, parse_fields
from .media import media_reply
from .objjson import _encode, entries_json, object_json
from .store import EXTRA_FIELDS, Chunked, ServerError, check_preconditions

MAX_LIST = 1000      # GCS caps maxResults at 1000
MAX_COMPOSE = 32     # GCS: at most 32 source objects per compose call
MAX_COMPONENTS = 1024
_JSON_CT = "application/json; charset=UTF-8"  # as app.json_reply sends
# Query keys that name preconditions; a request carrying none of them skips parsing all eight.
_PRECOND_KEYS = frozenset(p + c + "Match" for p in ("if", "ifSource") for c in
                          ("Generation", "GenerationNot", "Metageneration", "MetagenerationNot"))


def _int(q: Dict[str, str], key: str) -> Optional[int]:
    v = q.get(key)
    if v is None or v == "":
        return None
    try:
        return int(v)
    except ValueError:
        raise ServerError(400, f"Invalid value for {key}: {v!r}", "invalidParameter")


def preconds(q: Dict[str, str], source: bool = False) -> Dict[str, Optional[int]]:
    if _PRECOND_KEYS.isdisjoint(q):
        return dict(_NO_PRECONDS)
    p = "ifSource" if source else "if"
    return {"if_gen": _int(q, p + "GenerationMatch"), "if_gen_not": _int(q, p + "GenerationNotMatch"),
            "if_meta": _int(q, p + "MetagenerationMatch"), "if_meta_not": _int(q, p + "MetagenerationNotMatch")}


_NO_PRECONDS: Dict[str, Optional[int]] = {"if_gen": None, "if_gen_not": None, "if_meta": None, "if_meta_not": None}


def base_url(request: web.Request) -> str:
    return f"{request.scheme}://{request.host}"


def _bool(q: Dict[str, str], key: str) -> bool:
    return q.get(key, "").lower() == "true"


async def _json_body(srv, request: web.Request) -> Dict[str, Any]:
    raw = await srv.body(request)
    if not raw.strip():
        return {}
    try:
        body = json.loads(raw)
    except ValueError:
        raise ServerError(400, "Request body is not valid JSON.", "parseError")
    if not isinstance(body, dict):
        raise ServerError(400, "Request body must be a JSON object.", "invalid")
    return body


def _resource_reply(request, q, obj, bucket, status=200) -> Reply:
    tree = parse_fields(q["fields"]) if "fields" in q else None
    return Reply(status, object_json(obj, bucket, base_url(request), tree).encode(), {"Content-Type": _JSON_CT})


def _meta_from(body: Dict[str, Any]) -> Tuple[Optional[str], Optional[Dict[str, str]], Dict[str, Any]]:
    md = body.get("metadata")
    if md is not None and not isinstance(md, dict):
        raise ServerError(400, "metadata must be an object of string values.", "invalid")
    if md:
        md = {str(k): str(v) for k, v in md.items() if v is not None}
    extra = {k: body[k] for k in EXTRA_FIELDS if body.get(k) is not None}
    return body.get("contentType"), md, extra


# ---------------------------------------------------------------- routing
def parse_query(query: str) -> Dict[str, str]:
    """The query string as a dict (last value wins), parsed once per distinct string: small GETs
    repeat the same few (``alt=media``). A fresh dict each call, so routes may change theirs."""
    return dict(_parse_query(query))


@lru_cache(maxsize=1024)
def _parse_query(query: str) -> Tuple[Tuple[str, str], ...]:
    return tuple(dict(parse_qsl(query, keep_blank_values=True, errors="surrogateescape")).items())


def route(method: str, path: str, q: Dict[str, str]):
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
            from .uploads import resumable_cancel, resumable_chunk, upload_start
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
        from .batch import handle_batch
        return "batch", handle_batch, {}
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
    if segs[5] != "o":
        raise ServerError(404, f"Not found: {method} {path}", "notFound")
    if n == 6 or (n == 7 and segs[6] == ""):
        if method == "GET":
            return "list", object_list, dict(bucket=bucket)
        if method == "POST":  # objects.insert on the non-upload path (metadata only, empty body)
            from .uploads import upload_start
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


# ---------------------------------------------------------------- buckets
async def bucket_list(srv, request, q):
    base = base_url(request)
    items = [b.resource(base) for _, b in sorted(srv.store.buckets.items()) if b.name.startswith(q.get("prefix", ""))]
    out: Dict[str, Any] = {"kind": "storage#buckets"}
    if items:
        out["items"] = items
    if "fields" in q:
        out = apply_fields(out, parse_fields(q["fields"]))
    return json_reply(out)


async def bucket_insert(srv, request, q):
    body = await _json_body(srv, request)
    name = body.get("name") or q.get("name")
    if not name:
        raise ServerError(400, "Bucket name is required.", "required")
    b = srv.store.create_bucket(name, labels=body.get("labels"))
    return json_reply(b.resource(base_url(request)))


async def bucket_get(srv, request, q, bucket):
    if request.method in ("PATCH", "PUT"):
        body = await _json_body(srv, request)
        b = srv.store.bucket(bucket)
        if "labels" in body:
            b.labels = body["labels"] or None
        b.metageneration += 1
    res = srv.store.bucket(bucket).resource(base_url(request))
    if "fields" in q:
        res = apply_fields(res, parse_fields(q["fields"]))
    return json_reply(res)


async def bucket_delete(srv, request, q, bucket):
    srv.store.delete_bucket(bucket)
    return Reply(204, b"")


async def bucket_test_permissions(srv, request, q, bucket):
    srv.store.bucket(bucket)
    perms = [v for k, v in _multi(request, "permissions")]
    return json_reply({"kind": "storage#testIamPermissionsResponse", "permissions": perms})


def _multi(request, key):
    from urllib.parse import parse_qsl
    return [(k, v) for k, v in parse_qsl(request.raw_path.partition("?")[2]) if k == key]


# ---------------------------------------------------------------- objects
def _token_encode(key: str) -> str:
    return base64.urlsafe_b64encode(key.encode("utf-8", "surrogatepass")).decode("ascii")


def _token_decode(tok: str) -> str:
    try:
        raw = base64.b64decode(tok.encode("ascii") + b"=" * (-len(tok) % 4), altchars=b"-_", validate=True)
        return raw.decode("utf-8", "surrogatepass")
    except (ValueError, binascii.Error, UnicodeError):
        raise ServerError(400, f"Invalid pageToken {tok!r}", "invalid")


async def object_list(srv, request, q, bucket):
    mr = _int(q, "maxResults")
    mr = MAX_LIST if mr is None or mr <= 0 else min(mr, MAX_LIST)
    resume = _token_decode(q["pageToken"]) if q.get("pageToken") else ""
    objs, prefixes, nxt = srv.store.list(
        bucket, prefix=q.get("prefix", ""), delimiter=q.get("delimiter", ""), start_offset=q.get("startOffset", ""),
        end_offset=q.get("endOffset", ""), resume=resume, max_results=mr,
        include_trailing=_bool(q, "includeTrailingDelimiter"), raw=True)
    tree = parse_fields(q["fields"]) if "fields" in q else None
    base = base_url(request)
    # The page is assembled as JSON text: each item's text comes from objjson (cached per object),
    # so a page costs a join rather than 1,000 dict builds, filters and encodes.
    out: Dict[str, str] = {"kind": '"storage#objects"'}
    if objs:
        item_tree = tree.get("items", False) if tree is not None else None
        if item_tree is not False:
            out["items"] = entries_json(objs, bucket, base, item_tree)
    if prefixes:
        out["prefixes"] = _encode(prefixes)
    if nxt is not None:
        out["nextPageToken"] = _encode(_token_encode(nxt))
    if tree is not None:  # top-level keys in the selection's order, as apply_fields orders them
        out = {k: out[k] for k in tree if k in out}
    text = "{" + ",".join([f'"{k}":{v}' for k, v in out.items()]) + "}"
    return Reply(200, text.encode(), {"Content-Type": _JSON_CT})


async def object_get(srv, request, q, bucket, name, media):
    gen = _int(q, "generation")
    obj = srv.store.get(bucket, name, gen)
    check_preconditions(obj, **preconds(q), read=True)
    if media:
        return media_reply(request, obj)
    return _resource_reply(request, q, obj, bucket)


async def object_delete(srv, request, q, bucket, name):
    srv.store.delete(bucket, name, _int(q, "generation"), preconds(q))
    return Reply(204, b"")


async def object_patch(srv, request, q, bucket, name, replace):
    body = await _json_body(srv, request)
    changes = {k: v for k, v in body.items() if k in ("contentType", "metadata") + EXTRA_FIELDS}
    if replace:  # objects.update replaces the writable metadata wholesale
        changes.setdefault("metadata", None)
        obj = srv.store.get(bucket, name, _int(q, "generation"))
        if obj.metadata and changes["metadata"] is not None:
            changes["metadata"] = {**{k: None for k in obj.metadata}, **changes["metadata"]}
    obj = srv.store.patch(bucket, name, changes, _int(q, "generation"), preconds(q))
    return _resource_reply(request, q, obj, bucket)


async def compose(srv, request, q, bucket, name):
    body = await _json_body(srv, request)
    sources = body.get("sourceObjects") or []
    if not sources:
        raise ServerError(400, "At least one source object is required for compose.", "required")
    if len(sources) > MAX_COMPOSE:
        raise ServerError(400, f"The number of source objects provided is {len(sources)}; compose accepts at most "
                               f"{MAX_COMPOSE}.", "invalid")
    parts = []
    components = 0
    for s in sources:
        sname = s.get("name")
        if not sname:
            raise ServerError(400, "Each source object needs a name.", "required")
        g = s.get("generation")
        obj = srv.store.get(bucket, sname, int(g) if g not in (None, "") else None)
        pre = (s.get("objectPreconditions") or {}).get("ifGenerationMatch")
        if pre not in (None, "") and int(pre) != obj.generation:
            raise ServerError(412, f"Precondition ifGenerationMatch={pre} failed for source object {sname}.")
        components += obj.component_count or 1
        parts.append(obj)
    if components > MAX_COMPONENTS:
        raise ServerError(400, f"The composite would have {components} components; the limit is {MAX_COMPONENTS}.")
    ctype, md, extra = _meta_from(body.get("destination") or {})
    # The composite is its sources' bodies side by side, never joined (bodies are immutable: a
    # replaced source keeps its old bytes here), its crc32c derived from theirs, as GCS does.
    crc = 0
    for o in parts:
        crc = crc32c_combine(crc, o.crc32c_int, o.size)
    obj = srv.store.put(bucket, name, Chunked([p for o in parts for p in _pieces(o)]), content_type=ctype,
                        metadata=md, extra=extra, component_count=components, preconditions=preconds(q),
                        crc=crc_to_b64(crc))
    return _resource_reply(request, q, obj, bucket)


def _pieces(obj) -> list:
    """A compose source's body as the pieces it is stored in (views, not copies)."""
    if obj.data.__class__ is Chunked:
        return list(obj.data.chunks)
    return [obj.read()]


async def move(srv, request, q, bucket, name, dname):
    """objects.move: rename within a bucket in one step (no await in between, so nobody sees both
    or neither); source preconditions are ifSource*, destination ones the plain if* parameters."""
    if dname == name:
        raise ServerError(400, "The source and destination object names of a move must differ.", "invalid")
    src = srv.store.get(bucket, name)
    check_preconditions(src, **preconds(q, source=True))
    obj = srv.store.put(bucket, dname, bytes(src.read()), content_type=src.content_type, metadata=src.metadata,
                        extra=src.extra, component_count=src.component_count, preconditions=preconds(q),
                        crc=src._crc)
    srv.store.delete(bucket, name, generation=src.generation)
    return _resource_reply(request, q, obj, bucket)


async def copy(srv, request, q, bucket, name, dbucket, dname, rewrite):
    body = await _json_body(srv, request)
    src = srv.store.get(bucket, name, _int(q, "sourceGeneration"))
    check_preconditions(src, **preconds(q, source=True))
    srv.store.bucket(dbucket)
    if body:
        ctype, md, extra = _meta_from(body)
        ctype = ctype or src.content_type
    else:
        ctype, md, extra = src.content_type, src.metadata, src.extra
    obj = srv.store.put(dbucket, dname, bytes(src.read()), content_type=ctype, metadata=md, extra=extra,
                        component_count=src.component_count, preconditions=preconds(q), crc=src._crc)
    if not rewrite:
        return _resource_reply(request, q, obj, dbucket)
    res = obj.resource(dbucket, base_url(request))
    out = {"kind": "storage#rewriteResponse", "totalBytesRewritten": str(obj.size), "objectSize": str(obj.size),
           "done": True, "resource": res}
    if "fields" in q:
        out = apply_fields(out, parse_fields(q["fields"]))
    return json_reply(out)
