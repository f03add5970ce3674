"""Wiring of the server: one catch-all aiohttp handler that routes on the raw path, admits each request
through the admission path gRPC shares (admission.py: auth, deny, rate limit, faults, latency, lost and cut
answers), applies other servers' habits and sends replies (paced to the caps, resets, stalls).

Routing is done on ``request.raw_path`` because object names are percent-encoded path segments
that may contain '/', '%', '?', '#' and newlines; aiohttp's router would decode them too early.
"""
from __future__ import annotations

import asyncio
import socket
from collections import Counter
from functools import lru_cache
from typing import Any, AsyncIterator, Dict, Iterable, List, Optional, Tuple
from urllib.parse import parse_qsl

from aiohttp import web

from . import admin, admission, guard, habits, json_routes, uploads, wirelog, xml_routes
from .diskerr import disk_error, is_disk_error
from .errors import ServerError
from .media import FileBody
from .pending import PendingUploads
from .profile import Profile
from .replies import Reply, error_reply
from .store import Store

# Pacing granularity for the bandwidth cap: small enough to be smooth, big enough to be cheap.
_PACE_CHUNK = 256 * 1024
# Bodies above this are written in slices of this size: one huge transport.write() makes asyncio
# copy the whole body into its buffer (measured 300 MB/s vs 1-2 GB/s for 1 MiB slices).
_WRITE_CHUNK = 1024 * 1024
_JSON_PATHS = ("/storage/v1/", "/upload/storage/v1/", "/download/storage/v1/", "/batch/storage/v1")


def _small_receive_buffer(request: web.Request) -> None:
    """Keep a paced upload's backlog on the client's side, as a slow link does: the kernel would
    otherwise take megabytes at loopback speed into its receive buffer and let the client believe
    they had arrived."""
    sock = request.transport.get_extra_info("socket") if request.transport is not None else None
    if sock is not None:
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, _PACE_CHUNK)
        except OSError:
            pass


def _skip(views: List[memoryview], n: int) -> List[memoryview]:
    """`views` without their first `n` bytes."""
    out = []
    for mv in views:
        if n >= len(mv):
            n -= len(mv)
            continue
        out.append(mv[n:])
        n = 0
    return out


@lru_cache(maxsize=1024)
def _parse_query(query: str) -> Tuple[Tuple[str, str], ...]:
    return tuple(dict(parse_qsl(query, keep_blank_values=True, errors="surrogateescape")).items())


def parse_query(query: str) -> Dict[str, str]:
    """The query string as a dict (last value wins), parsed once per distinct string: small GETs
    repeat the same few (``alt=media``). A fresh dict each call, so routes may change theirs."""
    return dict(_parse_query(query))


class Server:
    """State shared by the routes: the store, the profile, upload sessions and counters."""

    def __init__(self, root: Optional[str] = None, **settings: Any):
        self.store = Store(root)
        self.profile = Profile(**settings)
        self.resumable: Dict[str, Any] = {}   # upload_id -> uploads.Resumable
        self.multipart: Dict[str, Any] = {}   # upload_id -> xml_routes.Multipart
        # With a root, unfinished uploads are on disk too and come back after a restart.
        self.pending: Optional[PendingUploads] = PendingUploads(root) if root else None
        if self.pending is not None:
            uploads.restore_sessions(self)
            xml_routes.restore_uploads(self)
        self.requests: Counter = Counter()
        self.faults: Counter = Counter()
        # Requests being served per op, and the most seen at once: how a test sees that a
        # client really overlaps its requests (e.g. a listing fanned out over ranges).
        self.in_flight: Counter = Counter()
        self.peak_in_flight: Counter = Counter()
        self.bytes_in = 0
        self.bytes_out = 0
        self.data_reads = 0  # object GETs that return the object's bytes (alt=media, XML GET), not metadata

    def stats(self) -> Dict[str, Any]:
        return {"requests": dict(self.requests), "faults": dict(self.faults),
                "in_flight": {op: n for op, n in self.in_flight.items() if n},
                "peak_in_flight": dict(self.peak_in_flight),
                "bytes_in": self.bytes_in, "bytes_out": self.bytes_out, "data_reads": self.data_reads,
                "keys_scanned": self.store.keys_scanned,
                "generations_made": self.store.generations_made}

    def reset_stats(self) -> None:
        self.requests.clear()
        self.faults.clear()
        self.peak_in_flight.clear()
        self.bytes_in = self.bytes_out = self.data_reads = 0
        self.store.keys_scanned = 0
        self.store.generations_made = 0

    async def body(self, request: web.Request) -> bytes:
        """The request body; under a bandwidth cap it is taken off the socket at the capped rate."""
        chunks = await self.body_chunks(request)
        return chunks[0] if len(chunks) == 1 else b"".join(chunks)

    async def body_chunks(self, request: web.Request) -> list[bytes]:
        """The request body as the chunks it arrived in (for multipart parts: joining 8 MiB costs a
        copy that the final assembly repeats anyway)."""
        s = self.profile.s
        if (not s["bandwidth_mbps"] and not s["link_mbps"] and self.profile.stall_at(request.get("op")) is None) \
                or not request.can_read_body:
            parts = [await request.read()]
            self.bytes_in += len(parts[0])
            return parts
        parts = [chunk async for chunk in self.body_iter(request)]
        return parts or [b""]

    async def body_iter(self, request: web.Request) -> AsyncIterator[bytes]:
        """The request body, chunk by chunk as it arrives (``--root`` writes it to disk so, never
        holding a whole upload in memory).

        Pacing uploads like downloads matters: a real GCS stream is capped both ways, and
        parallel part uploads only pay off if one stream cannot carry the whole checkpoint.
        """
        if not request.can_read_body:
            return
        pacer = admission.Pacer(self.profile, inbound=True)
        stall = self.profile.stall_at(request.get("op"))
        if pacer.paced:
            _small_receive_buffer(request)
        got = 0
        step = _PACE_CHUNK if pacer.paced or stall is not None else _WRITE_CHUNK
        while True:
            if stall is not None and got >= stall:
                await self.stall(request)
                stall = None
            chunk = await request.content.read(step if stall is None else max(1, min(step, stall - got)))
            if not chunk:
                break
            got += len(chunk)
            self.bytes_in += len(chunk)
            yield chunk
            # Leave the rest in the socket while the caps say wait: TCP back-pressure paces the client.
            await pacer.pace(len(chunk))

    async def drain(self, request: web.Request) -> None:
        """Read and drop what is left of the body, so an uploading client sees the answer, not a broken pipe."""
        if request.can_read_body:
            while await request.content.read(_WRITE_CHUNK):
                pass

    async def stall(self, request: web.Request) -> None:
        """Stop moving bytes (`stall_after`) while the setting holds and the client is still there."""
        self.faults[request.get("op")] += 1
        while self.profile.s["stall_after"] is not None and request.transport is not None \
                and not request.transport.is_closing():
            await asyncio.sleep(0.05)

    def app(self) -> web.Application:
        wirelog.install()  # a request aiohttp refuses is logged as one line naming why
        # Uploads of multi-GB parts are legal; the default 1 MiB client_max_size is not GCS.
        app = web.Application(client_max_size=1 << 40)
        # [\s\S]: names may hold newlines, which '.' would not match after aiohttp decodes the path.
        app.router.add_route("*", r"/{tail:[\s\S]*}", self.handle)
        return app

    async def handle(self, request: web.Request) -> web.StreamResponse:
        raw = request.raw_path
        path, _, query = raw.partition("?")
        control = path.startswith("/_fluxfs/")
        refused = guard.check(request, self.profile.s, control, path.startswith("/storage/v1/"))
        if refused is not None:
            if request.can_read_body:
                await request.read()
            if control:
                return web.json_response({"error": {"code": refused.code, "message": refused.message}},
                                         status=refused.code)
            return await self.send(request, error_reply(refused, not path.startswith(_JSON_PATHS)), False)
        if control:
            try:
                return await admin.handle(self, request, path, query)
            except (ServerError, ValueError, TypeError, KeyError) as e:
                code = e.code if isinstance(e, ServerError) else 400
                return web.json_response({"error": {"code": code, "message": str(e)}}, status=code)
        q = parse_query(query) if query else {}
        is_xml = not path.startswith(_JSON_PATHS)
        try:
            op, route = (xml_routes.route if is_xml else json_routes.route)(request.method, path, q)
        except ServerError as e:
            return await self.send(request, self._as_configured(error_reply(e, is_xml), q, path, is_xml), False)
        if op == "read" and request.method == "GET" and (is_xml or q.get("alt") == "media"
                                                        or path.startswith("/download/")):
            self.data_reads += 1
        request["op"] = op
        try:
            # Every method but GET/HEAD changes something (a batch's calls are admitted one by one, batch.py).
            admitted = admission.admit(self, op, admission.bearer(request.headers.get("Authorization")),
                                       request.method not in ("GET", "HEAD") and op != "batch")
        except ServerError as reject:
            # Read the body first so an uploading client sees the answer rather than a broken pipe.
            if request.can_read_body:
                await request.read()
            return await self.send(request, self._as_configured(error_reply(reject, is_xml), q, path, is_xml), False)
        with admission.in_flight(self, op):
            try:
                await admission.latency(self)
                reply = await route(self, request, q)
            except ServerError as e:
                reply = error_reply(e, is_xml)
            except OSError as e:  # a disk write no route named (they answer 507 naming the object themselves)
                if not is_disk_error(e):
                    raise
                reply = error_reply(disk_error(e, f"what this '{op}' request writes"), is_xml)
            except (ValueError, TypeError, KeyError, AttributeError) as e:
                # Malformed input that slipped past the routes' own checks (e.g. a non-numeric generation
                # inside a JSON body): a 400 naming the problem, never a bare 500.
                reply = error_reply(ServerError(400, f"Invalid request: {type(e).__name__}: {e}", "invalid"), is_xml)
        if admitted.lost:
            # Done, but the answer never arrives: the connection closes before its first byte.
            if request.transport is not None:
                request.transport.abort()
            return web.Response(status=reply.status)
        if reply.status < 300 and reply.body.__class__ is bytes and reply.body and admission.cut(self, op):
            # carried out, but the answer arrives cut off (cut_replies)
            reply = Reply(reply.status, reply.body[:len(reply.body) // 2], reply.headers)
        return await self.send(request, self._as_configured(reply, q, path, is_xml), admitted.reset)

    def _as_configured(self, reply: Reply, q: Dict[str, str], path: str, is_xml: bool) -> Reply:
        """The reply with the habits of other servers the profile asks for (habits.py), if any."""
        s = self.profile.s
        if is_xml or (s["error_style"] == "gcs" and not s["omit_zero_fields"]):
            return reply
        return habits.apply(reply, s, media=q.get("alt") == "media" or path.startswith("/download/"))

    async def send(self, request: web.Request, reply: Reply, reset: bool) -> web.StreamResponse:
        body = reply.body
        if body.__class__ is FileBody:  # a body file (--root): streamed, unless a fault needs it whole
            if request.method == "HEAD" or reset or self.profile.stall_at(request.get("op")) is not None:
                body = bytes(body) if request.method != "HEAD" else body.f.close()
            else:
                return await self._send_file(request, reply, body)
        pieces = body if body.__class__ is list else None
        n = (sum(map(len, pieces)) if pieces is not None else len(body)) if body is not None else 0
        paced = bool(self.profile.s["bandwidth_mbps"] or self.profile.s["link_mbps"])
        if request.method == "HEAD":  # headers only, with the Content-Length a GET would have
            resp = web.StreamResponse(status=reply.status, headers=reply.headers)
            resp.content_length = reply.length if reply.length is not None else n
            await resp.prepare(request)
            await resp.write_eof()
            return resp
        self.bytes_out += n
        stall = self.profile.stall_at(request.get("op"))
        if not reset and stall is None and n <= (_PACE_CHUNK if paced else _WRITE_CHUNK):
            if self.profile.s["link_mbps"]:
                await asyncio.sleep(self.profile.link_wait(n, asyncio.get_running_loop().time()))
            if pieces is not None:
                body = b"".join(pieces)
            return web.Response(status=reply.status, body=body if n else None, headers=reply.headers)
        # Streamed in slices: big bodies, bodies paced to the bandwidth caps, injected resets.
        resp = web.StreamResponse(status=reply.status, headers=reply.headers)
        resp.content_length = n
        try:
            await resp.prepare(request)
            views = pieces if pieces is not None else [memoryview(body) if n else memoryview(b"")]
            if stall is not None and stall < n:
                await self._stream(resp, views, stall)
                await self.stall(request)
                views, n = _skip(views, stall), n - stall
            await self._stream(resp, views, n // 2 if reset else n)
            if reset:
                # Abort (RST) rather than close: the client sees a connection reset mid-body.
                if request.transport is not None:
                    request.transport.abort()
                return resp
            await resp.write_eof()
        except ConnectionError:
            pass  # the client went away mid-body: nothing to report
        return resp

    async def _send_file(self, request: web.Request, reply: Reply, body: FileBody) -> web.StreamResponse:
        resp = web.StreamResponse(status=reply.status, headers=reply.headers)
        resp.content_length = len(body)
        self.bytes_out += len(body)
        pieces = body.pieces()
        try:
            await resp.prepare(request)
            await self._stream(resp, pieces, len(body))
            await resp.write_eof()
        except ConnectionError:
            pass  # the client went away mid-body: nothing to report
        finally:
            pieces.close()
            body.f.close()
        return resp

    async def _stream(self, resp: web.StreamResponse, views: Iterable[memoryview], stop: int) -> None:
        """Write the first `stop` bytes of `views` (in order) in slices, paced to the caps (admission.Pacer)."""
        pacer = admission.Pacer(self.profile)
        step = _PACE_CHUNK if pacer.paced else _WRITE_CHUNK
        pos = 0
        for mv in views:
            off = 0
            while off < len(mv) and pos < stop:
                chunk = mv[off:off + min(step, stop - pos)]
                off += len(chunk)
                pos += len(chunk)
                await pacer.pace(len(chunk))  # a chunk leaves when the caps say its last byte may have arrived
                await resp.write(chunk)
