"""Object body responses shared by the JSON and XML APIs: Range, x-goog-hash and generation headers."""
from __future__ import annotations

import base64
import re
from typing import Any, Dict, Optional, Tuple

from aiohttp import web

from ..gcs.chunks import Chunked

from .errors import ServerError
from .objects import Obj
from .replies import Reply
from .timestamps import http_date

_RANGE = re.compile(r"bytes=(\d*)-(\d*)$")


def object_etag(obj: Obj) -> str:
    """The ETag GCS sends for an object body: its MD5 in hex, or generation-metageneration without one."""
    return base64.b64decode(obj.md5).hex() if obj.md5 else obj.etag


def hash_header(obj: Obj) -> str:
    """The x-goog-hash value of an object: crc32c, and md5 when it has one."""
    return f"crc32c={obj.crc32c}" + (f",md5={obj.md5}" if obj.md5 is not None else "")


def object_headers(obj: Obj) -> dict:
    """The headers of an object body: type, ETag, dates, generations, hashes, x-goog-meta-*."""
    h = {"Content-Type": obj.content_type,
         "ETag": f'"{object_etag(obj)}"',
         "Last-Modified": http_date(obj.updated),
         "Accept-Ranges": "bytes",
         "x-goog-generation": str(obj.generation),
         "x-goog-metageneration": str(obj.metageneration),
         "x-goog-stored-content-length": str(obj.size),
         "x-goog-stored-content-encoding": (obj.extra or {}).get("contentEncoding", "identity"),
         "x-goog-storage-class": "STANDARD"}
    h["x-goog-hash"] = hash_header(obj)
    if obj.component_count is not None:
        h["x-goog-component-count"] = str(obj.component_count)
    if obj.metadata:
        for k, v in obj.metadata.items():
            h["x-goog-meta-" + k] = v
    return h


def parse_range(header: str, size: int) -> Optional[Tuple[int, int]]:
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
    """An object body (or the Range asked for: 206), headers only on HEAD."""
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


class FileBody:
    """Bytes [start, end) of a body file under ``--root``, sent a MiB at a time (app.send) rather than
    read whole into memory. The file is opened at once: an overwrite that unlinks it meanwhile cannot
    cut the answer short."""

    __slots__ = ("f", "start", "end")

    def __init__(self, path: str, start: int, end: int):
        self.f, self.start, self.end = open(path, "rb"), start, end

    def __len__(self) -> int:
        return self.end - self.start

    def pieces(self):
        """The bytes, a MiB at a time (then the file is closed)."""
        try:
            self.f.seek(self.start)
            left = len(self)
            while left > 0:
                piece = self.f.read(min(_FILE_STEP, left))
                if not piece:
                    raise OSError(f"{self.f.name} ended {left} bytes early")
                left -= len(piece)
                yield memoryview(piece)
        finally:
            self.f.close()

    def __bytes__(self) -> bytes:
        return b"".join(self.pieces())


_FILE_STEP = 1024 * 1024


def _body(obj: Obj, start: int, end: int):
    """What a GET sends: the chunks of a multipart-uploaded body are sent as they are, never joined;
    a large body file is streamed from disk."""
    if obj.data.__class__ is Chunked and end > start:
        views = obj.data.views(start, end)
        return views[0] if len(views) == 1 else views
    if obj.data is None and obj.path is not None and end - start > _FILE_STEP:
        return FileBody(obj.path, start, end)
    return obj.read(start, end)


def goog_hashes(headers: Any) -> Dict[str, str]:
    """{"md5": b64, "crc32c": b64} as sent in x-goog-hash headers (possibly repeated, comma-separated)."""
    out = {}
    for part in headers.getall("x-goog-hash", []):
        for kv in part.split(","):
            k, _, v = kv.strip().partition("=")
            if k in ("md5", "crc32c") and v:
                out[k] = v
    return out

