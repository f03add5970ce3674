"""Control endpoints under /_fluxfs/ (exempt from faults and latency; they need the server's token when it
requires one, and JSON bodies: guard.py) used by ServerHandle.

POST configure {settings} | GET stats | POST reset_stats | POST bucket {"name"} |
POST generate {"bucket","count","size","prefix","seed"} | GET names?bucket=&prefix= |
GET uploads?bucket= | POST forget_sessions {"bucket"} (resumable sessions lost as in a restart) |
POST backdate {"bucket","name","seconds"} (a live object's timeCreated and updated moved into the past) | GET health
"""
from __future__ import annotations

import json
from typing import Any, Dict
from urllib.parse import parse_qsl

from aiohttp import web

from ..gcs.limits import MAX_OBJECT_SIZE
from .errors import ServerError
from .store import prefix_successor
from .uploads import forget_sessions

# Objects one generate call may create: about 150 bytes of index each, so at most ~1.5 GB of memory.
MAX_GENERATE = 10_000_000


async def _body(request: web.Request) -> Dict[str, Any]:
    raw = await request.read()
    body = json.loads(raw) if raw.strip() else {}
    if not isinstance(body, dict):
        raise ValueError("control request body must be a JSON object")
    return body


async def handle(srv, request: web.Request, path: str, query: str) -> web.StreamResponse:
    cmd = path[len("/_fluxfs/"):]
    q = dict(parse_qsl(query, keep_blank_values=True))
    m = request.method
    if cmd == "health":
        return web.json_response({"ok": True})
    if cmd == "configure" and m == "POST":
        return web.json_response(srv.profile.configure(**await _body(request)))
    if cmd == "settings" and m == "GET":
        return web.json_response(srv.profile.public())
    if cmd == "stats" and m == "GET":
        return web.json_response(srv.stats())
    if cmd == "reset_stats" and m == "POST":
        srv.reset_stats()
        return web.json_response({"ok": True})
    if cmd == "bucket" and m == "POST":
        b = await _body(request)
        srv.store.create_bucket(b["name"], exist_ok=True)
        return web.json_response({"name": b["name"]})
    if cmd == "generate" and m == "POST":
        b = await _body(request)
        size = b.get("size", 1024)
        if isinstance(size, list):
            size = tuple(size)
        count = int(b["count"])
        if count > MAX_GENERATE:
            raise ValueError(f"generate: count {count} is over the limit of {MAX_GENERATE:,} objects per call")
        if max(size if isinstance(size, tuple) else (size,)) > MAX_OBJECT_SIZE:
            raise ValueError(f"generate: size {size!r} is over GCS's largest object ({MAX_OBJECT_SIZE} bytes)")
        n = srv.store.generate(b["bucket"], count, size, b.get("prefix", ""), int(b.get("seed", 0)))
        return web.json_response({"count": n})
    if cmd == "names" and m == "GET":
        prefix = q.get("prefix", "")
        objs = srv.store.bucket(q["bucket"]).objects
        names = (list(objs.irange(minimum=prefix, maximum=prefix_successor(prefix), inclusive=(True, False)))
                 if prefix else list(objs.keys()))
        return web.json_response(names)
    if cmd == "uploads" and m == "GET":
        bucket = q["bucket"]
        out = [{"key": u.key, "upload_id": uid, "parts": sorted(u.parts)}
               for uid, u in srv.multipart.items() if u.bucket == bucket]
        return web.json_response(sorted(out, key=lambda d: (d["key"], d["upload_id"])))
    if cmd == "backdate" and m == "POST":
        b = await _body(request)
        obj = srv.store.backdate(b["bucket"], b["name"], float(b["seconds"]))
        return web.json_response({"name": obj.name, "created": obj.created})
    if cmd == "forget_sessions" and m == "POST":
        return web.json_response(forget_sessions(srv, (await _body(request))["bucket"]))
    raise ServerError(404, f"unknown control endpoint {m} {path}")

