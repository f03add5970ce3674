"""JSON API object calls: list, get (resource or media), delete, patch/update, compose, move, copy/rewrite."""
from __future__ import annotations

import base64
import binascii
from typing import Dict

from aiohttp import web

from ..gcs.checksums import crc32c_combine, crc_to_b64
from ..gcs.limits import MAX_COMPOSE_SOURCES, MAX_LIST_PAGE
from .copies import put_copy
from .errors import ServerError
from .fields import apply_fields, parse_fields
from .folder_store import folder_prefixes
from .json_request import (base_url, bool_param, int_param, json_body, meta_from, preconds,
                           resource_reply)
from .layout import ZONAL_COMPOSE_MESSAGE, refuse_zonal_copy
from .media import media_reply
from .objects import EXTRA_FIELDS, with_kms_key
from .objjson import entries_json
from .preconditions import check_preconditions
from .replies import JSON_CT, Reply, compact_json, json_reply



def _token_encode(key: str) -> str:
    return base64.urlsafe_b64encode(key.encode("utf-8", "surrogatepass")).decode("ascii")


def _token_decode(tok: str) -> str:
    try:
        raw = base64.b64decode(tok.encode("ascii") + b"=" * (-len(tok) % 4), altchars=b"-_", validate=True)
        return raw.decode("utf-8", "surrogatepass")
    except (ValueError, binascii.Error, UnicodeError):
        raise ServerError(400, f"Invalid pageToken {tok!r}", "invalid") from None


async def object_list(srv, request: web.Request, q: Dict[str, str], bucket: str) -> Reply:
    mr = int_param(q, "maxResults")
    mr = MAX_LIST_PAGE if mr is None or mr <= 0 else min(mr, MAX_LIST_PAGE)
    resume = _token_decode(q["pageToken"]) if q.get("pageToken") else ""
    if bool_param(q, "versions"):  # every generation; a page may end inside one name's generations
        objs, prefixes, at = srv.store.list_versions(
            bucket, prefix=q.get("prefix", ""), delimiter=q.get("delimiter", ""),
            start_offset=q.get("startOffset", ""), end_offset=q.get("endOffset", ""),
            resume=_version_resume(resume) if resume else None, max_results=mr)
        nxt = None if at is None else f"{at[1]}/{at[0]}"
    else:
        objs, prefixes, nxt = srv.store.list(
            bucket, prefix=q.get("prefix", ""), delimiter=q.get("delimiter", ""),
            start_offset=q.get("startOffset", ""), end_offset=q.get("endOffset", ""), resume=resume,
            max_results=mr, include_trailing=bool_param(q, "includeTrailingDelimiter"), raw=True)
    if nxt is None and bool_param(q, "includeFoldersAsPrefixes") and q.get("delimiter") == "/":
        prefixes = folder_prefixes(srv.store.bucket(bucket), q.get("prefix", ""), prefixes)
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
        out["prefixes"] = compact_json(prefixes)
    if nxt is not None:
        out["nextPageToken"] = compact_json(_token_encode(nxt))
    if tree is not None:  # top-level keys in the selection's order, as apply_fields orders them
        out = {k: out[k] for k in tree if k in out}
    text = "{" + ",".join([f'"{k}":{v}' for k, v in out.items()]) + "}"
    return Reply(200, text.encode(), {"Content-Type": JSON_CT})


def _version_resume(text: str):
    """(name, generation) from the resume text of a versions listing's page token ("GEN/NAME")."""
    gen, sep, name = text.partition("/")
    if not sep or not gen.isdigit():
        raise ServerError(400, "Invalid pageToken for a listing with versions=true.", "invalid")
    return name, int(gen)


async def object_get(srv, request: web.Request, q: Dict[str, str], bucket: str, name: str, media: bool) -> Reply:
    gen = int_param(q, "generation")
    obj = srv.store.get(bucket, name, gen)
    check_preconditions(obj, **preconds(q), read=True)
    if media:
        return media_reply(request, obj)
    return resource_reply(request, q, obj, bucket)


async def object_delete(srv, request: web.Request, q: Dict[str, str], bucket: str, name: str) -> Reply:
    srv.store.delete(bucket, name, int_param(q, "generation"), preconds(q))
    return Reply(204, b"")


async def object_patch(srv, request: web.Request, q: Dict[str, str], bucket: str, name: str, replace: bool) -> Reply:
    body = await json_body(srv, request)
    changes = {k: v for k, v in body.items() if k in ("contentType", "metadata") + EXTRA_FIELDS}
    if replace:  # objects.update replaces the writable metadata wholesale
        changes.setdefault("metadata", None)
        obj = srv.store.get(bucket, name, int_param(q, "generation"))
        if obj.metadata and changes["metadata"] is not None:
            changes["metadata"] = {**{k: None for k in obj.metadata}, **changes["metadata"]}
    obj = srv.store.patch(bucket, name, changes, int_param(q, "generation"), preconds(q))
    return resource_reply(request, q, obj, bucket)


async def compose(srv, request: web.Request, q: Dict[str, str], bucket: str, name: str) -> Reply:
    body = await json_body(srv, request)
    sources = body.get("sourceObjects") or []
    if not sources:
        raise ServerError(400, "At least one source object is required for compose.", "required")
    if srv.store.bucket(bucket).zonal:
        raise ServerError(400, ZONAL_COMPOSE_MESSAGE, "invalid")
    if len(sources) > MAX_COMPOSE_SOURCES:
        raise ServerError(400, f"The number of source objects provided is {len(sources)}; compose accepts at most "
                               f"{MAX_COMPOSE_SOURCES}.", "invalid")
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
    limit = srv.profile.s["max_components"]  # None (no limit, as GCS today) unless set to emulate a server with one
    if limit is not None and components > limit:
        raise ServerError(400, f"The composite would have {components} components; the limit is {limit}.")
    ctype, md, extra = meta_from(body.get("destination") or {})
    extra = with_kms_key(extra, q.get("kmsKeyName"))
    # The composite is its sources' bodies side by side, never joined (bodies are immutable: a
    # replaced source keeps its old bytes here), its crc32c derived from theirs, as GCS does.
    crc = 0
    for o in parts:
        crc = crc32c_combine(crc, o.crc32c_int, o.size)
    obj = put_copy(srv, bucket, name, parts, content_type=ctype, metadata=md, extra=extra,
                   component_count=components, preconditions=preconds(q), crc=crc_to_b64(crc))
    return resource_reply(request, q, obj, bucket)


async def move(srv, request: web.Request, q: Dict[str, str], bucket: str, name: str, dname: str) -> Reply:
    """objects.move: rename within a bucket in one step (no await in between, so nobody sees both
    or neither); source preconditions are ifSource*, destination ones the plain if* parameters."""
    if dname == name:
        raise ServerError(400, "The source and destination object names of a move must differ.", "invalid")
    src = srv.store.get(bucket, name)
    check_preconditions(src, **preconds(q, source=True))
    obj = put_copy(srv, bucket, dname, [src], content_type=src.content_type, metadata=src.metadata,
                   extra=src.extra, component_count=src.component_count, preconditions=preconds(q), crc=src._crc)
    srv.store.delete(bucket, name, generation=src.generation)
    return resource_reply(request, q, obj, bucket)


async def copy(srv, request: web.Request, q: Dict[str, str], bucket: str, name: str, dbucket: str, dname: str,
               rewrite: bool) -> Reply:
    body = await json_body(srv, request)
    refuse_zonal_copy("Rewrite" if rewrite else "Copy", {b: srv.store.bucket(b).zonal for b in (bucket, dbucket)})
    src = srv.store.get(bucket, name, int_param(q, "sourceGeneration"))
    check_preconditions(src, **preconds(q, source=True))
    if body:
        ctype, md, extra = meta_from(body)
        ctype = ctype or src.content_type
    else:
        ctype, md, extra = src.content_type, src.metadata, src.extra
    obj = put_copy(srv, dbucket, dname, [src], content_type=ctype, metadata=md, extra=extra,
                   component_count=src.component_count, preconditions=preconds(q), crc=src._crc)
    if not rewrite:
        return resource_reply(request, q, obj, dbucket)
    res = obj.resource(dbucket, base_url(request))
    out = {"kind": "storage#rewriteResponse", "totalBytesRewritten": str(obj.size), "objectSize": str(obj.size),
           "done": True, "resource": res}
    if "fields" in q:
        out = apply_fields(out, parse_fields(q["fields"]))
    return json_reply(out)
