"""Object body responses shared by the JSON and XML APIs: Range, x-goog-hash and generation headers."""
from __future__ import annotations

import base64
import re

from aiohttp import web

from ..gcs.chunks import Chunked

from .errors import ServerError
from .objects import Obj
from .replies import Reply
from .timestamps import http_date

_RANGE = re.compile(r"bytes=(\d*)-(\d*)$")


def object_headers(obj: Obj) -> dict:
    h = {"Content-Type": obj.content_type,
         "ETag": f'"{obj.etag}"' if obj.md5 is None else f'"{base64.b64decode(obj.md5).hex()}"',
         "Last-Modified": http_date(obj.updated),
         "Accept-Ranges": "bytes",
         "x-goog-generation": str(obj.generation),
         "x-goog-metageneration": str(obj.metageneration),
         "x-goog-stored-content-length": str(obj.size),
         "x-goog-stored-content-encoding": (obj.extra or {}).get("contentEncoding", "identity"),
         "x-goog-storage-class": "STANDARD"}
    hashes = f"crc32c={obj.crc32c}"
    if obj.md5 is not None:
        hashes += f",md5={obj.md5}"
    h["x-goog-hash"] = hashes
    if obj.component_count is not None:
        h["x-goog-component-count"] = str(obj.component_count)
    if obj.metadata:
        for k, v in obj.metadata.items():
            h["x-goog-meta-" + k] = v
    return h


def parse_range(header: str, size: int):
    """(start, end_exclusive) or None for the whole object; raises 416 when unsatisfiable."""
    m = _RANGE.match(header.strip().replace(" ", ""))
    if not m or (m.group(1) == "" and m.group(2) == ""):
        return None  # malformed ranges are ignored, as HTTP says
    a, b = m.group(1), m.group(2)
    if a == "":  # suffix: the last N bytes
        n = int(b)
        if n == 0:
            raise ServerError(416, f"Requested range not satisfiable: {header} (object size {size})")
        return max(0, size - n), size
    start = int(a)
    if size == 0 and start == 0:
        return None  # an open-ended range on an empty object: the (empty) whole object
    end = size if b == "" else min(int(b) + 1, size)
    if start >= size or (b != "" and int(b) < start):
        raise ServerError(416, f"Requested range not satisfiable: {header} (object size {size})")
    return start, end


def media_reply(request: web.Request, obj: Obj) -> Reply:
    h = object_headers(obj)
    rng = request.headers.get("Range")
    r = parse_range(rng, obj.size) if rng else None
    if r is None:
        if request.method == "HEAD":
            return Reply(200, None, h, length=obj.size)
        return Reply(200, _body(obj, 0, obj.size), h)
    start, end = r
    h["Content-Range"] = f"bytes {start}-{end - 1}/{obj.size}"
    if request.method == "HEAD":
        return Reply(206, None, h, length=end - start)
    return Reply(206, _body(obj, start, end), h)


def _body(obj: Obj, start: int, end: int):
    """What a GET sends: the chunks of a multipart-uploaded body are sent as they are, never joined."""
    if obj.data.__class__ is Chunked and end > start:
        views = obj.data.views(start, end)
        return views[0] if len(views) == 1 else views
    return obj.read(start, end)


def goog_hashes(headers) -> dict:
    """{"md5": b64, "crc32c": b64} as sent in x-goog-hash headers (possibly repeated, comma-separated)."""
    out = {}
    for part in headers.getall("x-goog-hash", []):
        for kv in part.split(","):
            k, _, v = kv.strip().partition("=")
            if k in ("md5", "crc32c") and v:
                out[k] = v
    return out

