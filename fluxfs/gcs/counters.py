"""Requests and bytes of one filesystem, counted on its HTTP session: what `FluxFileSystem.stats()` reports.

aiohttp's trace hooks see every request of the session (fluxfs's own and gcsfs's: info, ls, ...) as its
headers go out (a request aiohttp re-sends silently counts twice, as the server sees it twice), every body
chunk sent, and each answer's body once it has arrived in full (a body cut off or left unread is not
counted). They run on the filesystem's event loop, one thread, so plain integers need no lock, and a
chunk or a body (never a byte) is the unit of work. Not counted: zonal buckets' gRPC streams, the
blocking deletes at interpreter exit, and reads the node-local cache answers (no request at all).
"""
from __future__ import annotations

import collections
from typing import Any
from urllib.parse import unquote

import aiohttp

from . import fork

# The kinds of request: as GCS bills and rate-limits them, and as the embedded server counts them.
KINDS = ("list", "read", "metadata", "write", "compose", "copy", "delete", "bucket", "other")


def request_kind(method: str, path: str, query: str = "") -> str:
    """The kind of a JSON or XML API request, from its method and URL path (and query, for XML uploads)."""
    segs = path.split("/")
    if path.startswith("/upload/"):
        return "write"
    if path.startswith("/download/"):
        return "read"
    if path.startswith("/storage/v1/"):
        if len(segs) <= 5 or segs[5] != "o":  # /storage/v1/b[/B[/...]]: buckets, layouts, folders
            return "bucket" if len(segs) <= 6 or segs[5] in ("iam", "storageLayout") else "other"
        rest = segs[6:]
        if not rest or rest == [""]:
            return "list" if method == "GET" else "write"
        if method == "POST":
            if rest[-1] == "compose":
                return "compose"
            if any(s in ("copyTo", "rewriteTo", "moveTo") for s in rest):
                return "copy"
            return "other"
        if method == "DELETE":
            return "delete"
        if method in ("PATCH", "PUT"):
            return "metadata"
        return "read"  # GET/HEAD of an object: its bytes (alt=media) or its metadata
    if path.startswith("/batch/"):
        return "other"
    # XML API: /BUCKET[/KEY]
    has_key = len(segs) > 2 and any(segs[2:])
    if not has_key:
        return "list" if method == "GET" else "bucket"
    if method in ("GET", "HEAD"):
        return "list" if "uploadId" in unquote(query) else "read"
    if method == "DELETE" and "uploadId" not in query:
        return "delete"
    return "write"  # PUT objects and parts, POST initiate/complete, DELETE abort


class Counters:
    """Requests by kind (`KINDS`: "read" is an object's bytes or its metadata, "metadata" a patch), their total,
    and body bytes received (`bytes_read`) and sent (`bytes_written`) by one filesystem in this process."""

    def __init__(self) -> None:
        self.reset()
        fork.reset_in_child(self)

    def _after_fork(self) -> None:
        """A forked child (a DataLoader worker) counts its own requests from zero."""
        self.reset()

    def reset(self) -> None:
        self.requests: collections.Counter = collections.Counter()
        self.bytes_read = 0
        self.bytes_written = 0

    def _received(self, n: int) -> None:
        self.bytes_read += n

    def snapshot(self) -> dict[str, Any]:
        requests = {k: self.requests[k] for k in KINDS if self.requests[k]}
        return {"requests": requests, "requests_total": sum(requests.values()),
                "bytes_read": self.bytes_read, "bytes_written": self.bytes_written}

    def trace_config(self) -> aiohttp.TraceConfig:
        """Hooks for an aiohttp session that count into this object."""

        async def sent_headers(_session: Any, _ctx: Any, params: Any) -> None:
            url = params.url
            self.requests[request_kind(params.method, url.raw_path, url.raw_query_string)] += 1

        async def sent_chunk(_session: Any, _ctx: Any, params: Any) -> None:
            self.bytes_written += len(params.chunk)

        async def answered(_session: Any, _ctx: Any, params: Any) -> None:
            # The body is read later, by whichever way the caller streams it: counted once it has all arrived.
            body = params.response.content
            body.on_eof(lambda: self._received(getattr(body, "total_bytes", 0)))

        config = aiohttp.TraceConfig()
        config.on_request_headers_sent.append(sent_headers)
        config.on_request_chunk_sent.append(sent_chunk)
        config.on_request_end.append(answered)
        config.fluxfs_counters = self  # type: ignore[attr-defined]  # found by requests sent past aiohttp (lean_get)
        config.freeze()
        return config


def count_on(session: aiohttp.ClientSession, counters: Counters) -> aiohttp.ClientSession:
    """Add `counters`' hooks to `session` (once)."""
    config = getattr(counters, "_config", None)
    if config is None:
        config = counters._config = counters.trace_config()  # type: ignore[attr-defined]
    if config not in session.trace_configs:
        session.trace_configs.append(config)
    return session
