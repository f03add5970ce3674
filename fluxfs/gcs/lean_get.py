"""A lean ranged GET for plain answers: the body received straight into the caller's buffers (`get_into`).

aiohttp receives a body into bytes objects of its own, which are then copied where they belong; for large
ranged reads into buffers the caller owns, an `asyncio.BufferedProtocol` on a keep-alive HTTP/1.1 connection
receives each slice of the body where it goes, with the crc32c run over it while it is hot in cache. It
handles only the answer it expects (206, identity body, Content-Length and Content-Range those of the range);
anything else (an error, 200, chunked, gzip, a refused connection) raises `Fallback`, after which the caller
sends the request again through aiohttp, so every other answer is parsed as it always was. Used only for
endpoints the session reaches without a proxy or middlewares of the caller's, over TLS (asyncio's SSL transport)
with the SSL context aiohttp's connector would use (`usable`).
"""
from __future__ import annotations

import asyncio
import ctypes
import sys
import urllib.request
import weakref
from typing import Any, Optional
from urllib.parse import urlsplit

import aiohttp
from multidict import CIMultiDict

from ..errors import RequestTimeout
from . import aiohttp_adapter, checksums, fork, reach
from .progress import ProgressClock

HEAD_MAX = 1 << 16      # an answer's headers longer than this: left to aiohttp
SCRATCH = 1 << 18       # bytes between two segments are received here and dropped
IDLE_MAX = 64           # kept-alive connections kept per pool


# A new bytes object's storage, written before anyone else holds it, as the C API's
# PyBytes_FromStringAndSize(NULL, n) is meant to be used: a body lands in the bytes returned (no bytearray copied).
_CPYTHON = sys.implementation.name == "cpython"
if _CPYTHON:
    _NEW_BYTES, _MEMORY = ctypes.pythonapi.PyBytes_FromStringAndSize, ctypes.pythonapi.PyMemoryView_FromMemory
    _NEW_BYTES.restype, _NEW_BYTES.argtypes = ctypes.py_object, (ctypes.c_void_p, ctypes.c_ssize_t)
    _MEMORY.restype, _MEMORY.argtypes = ctypes.py_object, (ctypes.c_void_p, ctypes.c_ssize_t, ctypes.c_int)
_BYTES_DATA = bytes.__basicsize__ - 1  # where a bytes object's data starts: its basic size is offsetof(ob_sval) + 1
_PYBUF_WRITE = 0x200


def fresh_bytes(n: int) -> tuple[Any, memoryview]:
    """(a new object of `n` bytes, a writable view of them): a bytes object on CPython (the view must be filled
    before the bytes are handed to anyone, and not kept), a bytearray elsewhere."""
    if not _CPYTHON or n == 0:  # (no empty bytes object is new: CPython shares one)
        buf = bytearray(n)
        return buf, memoryview(buf)
    body = _NEW_BYTES(None, n)
    return body, _MEMORY(id(body) + _BYTES_DATA, n, _PYBUF_WRITE)


class Fallback(Exception):
    """The lean path cannot answer this request: send it through aiohttp instead."""


def usable(session: aiohttp.ClientSession, url: str) -> bool:
    """Whether `url` may go the lean way on `session`: http://, or https:// with a verifying SSL context; no proxy
    (the session's or, when it trusts the environment, HTTP(S)_PROXY), default auth, cookies or middleware but
    fluxfs's FailFast; a plain TCP connector, HTTP/1.1. What this aiohttp does not say (a private attribute
    gone) is taken as a no."""
    scheme = url.partition("://")[0]
    if scheme not in ("http", "https") or not url.isascii() or "@" in url.split("/")[2] or session.closed:
        return False
    if type(session.connector) is not aiohttp.TCPConnector or len(session.cookie_jar):
        return False
    if not aiohttp_adapter.plain_session(session, reach.FailFast):
        return False
    if scheme == "https" and aiohttp_adapter.verifying_ssl_context(session) is None:
        return False
    if session.trust_env and urllib.request.getproxies().get(scheme):
        return False  # NO_PROXY may exempt the host, but aiohttp decides that: the proxy path stays aiohttp's
    return True


class _Receiver(asyncio.BufferedProtocol):
    """One connection: an answer's headers into a small buffer, then its body into the pieces of the range."""

    def __init__(self) -> None:
        self.head = bytearray(HEAD_MAX)
        self.scratch = bytearray(SCRATCH)
        self.transport: Any = None
        self.dead = False
        self.job: Optional[_Job] = None

    def connection_made(self, transport: Any) -> None:
        self.transport = transport

    def get_buffer(self, sizehint: int) -> Any:
        job = self.job
        if job is None or job.headers is None:
            return memoryview(self.head)[job.hlen if job is not None else 0:]
        return job.target()

    def buffer_updated(self, n: int) -> None:
        job = self.job
        if job is None:  # bytes nobody asked for: the connection cannot be trusted again
            self.dead = True
            self.transport.abort()
            return
        job.clock.moved(n)
        if job.done.done():  # past the answer's end: the connection is not kept
            job.keep_alive = False
        elif job.headers is None:
            job.hlen += n
            job.parse_head(self.head)
        else:
            job.received(n)

    def eof_received(self) -> bool:
        return False

    def connection_lost(self, exc: Optional[BaseException]) -> None:
        self.dead = True
        if self.job is not None and not self.job.done.done():
            self.job.done.set_exception(ConnectionResetError(f"connection lost: {exc}"))


class _Job:
    """One request's answer as it arrives: headers checked, body landed in its pieces, crc run."""

    def __init__(self, pieces: list, start: int, end: int, verify: bool, clock: ProgressClock, scratch: bytearray,
                 total: Optional[int] = None):
        self.pieces, self.start, self.end, self.total = pieces, start, end, total
        self.want = end - start
        self.crc: Optional[int] = 0 if verify else None
        self.clock, self.scratch = clock, memoryview(scratch)
        self.done: asyncio.Future = asyncio.get_running_loop().create_future()
        self.hlen = 0
        self.headers: Optional[CIMultiDict] = None
        self.keep_alive = True
        self.pos = 0    # body bytes landed
        self.i = 0      # the piece `pos` is in or before
        self._view: Any = None

    def parse_head(self, buf: bytearray) -> None:
        end = buf.find(b"\r\n\r\n", 0, self.hlen)
        if end < 0:
            if self.hlen == len(buf):
                self.done.set_exception(Fallback("headers too long"))
            return
        lines = bytes(buf[:end]).decode("latin-1").split("\r\n")
        version, _, rest = lines[0].partition(" ")
        headers: CIMultiDict = CIMultiDict()
        for line in lines[1:]:
            name, _, value = line.partition(":")
            headers.add(name.strip(), value.strip())
        self.headers = headers
        self.keep_alive = version == "HTTP/1.1" and "close" not in headers.get("Connection", "").lower()
        if not self._expected(rest.split(" ", 1)[0], headers):
            self.done.set_exception(Fallback("an answer left to aiohttp"))
            return
        early = memoryview(buf)[end + 4:self.hlen]
        while early and not self.done.done():
            dst = self.target()
            take = min(len(dst), len(early))
            dst[:take] = early[:take]
            early = early[take:]
            self.received(take)
        if early:  # more than the body: not an answer this client can keep the connection after
            self.keep_alive = False
        if self.want == 0 and not self.done.done():
            self.done.set_result(None)

    def _expected(self, status: str, headers: CIMultiDict) -> bool:
        if status != "206" or "Transfer-Encoding" in headers:
            return False
        if headers.get("Content-Encoding", "identity") != "identity":
            return False
        if headers.get("Content-Length") != str(self.want):
            return False
        unit, _, spec = headers.get("Content-Range", "").partition(" ")
        first_last, _, size = spec.partition("/")
        return (unit == "bytes" and first_last == f"{self.start}-{self.end - 1}" and size.isdigit()
                and (self.total is None or int(size) == self.total))

    def target(self) -> Any:
        """Where the next body bytes go: the current piece's rest, or scratch for bytes between pieces."""
        pos, pieces = self.pos, self.pieces
        while self.i < len(pieces):
            rel, dst = pieces[self.i]
            if pos < rel:
                self._view = self.scratch[:min(rel - pos, len(self.scratch))]
                return self._view
            if pos < rel + len(dst):
                self._view = dst[pos - rel:]
                return self._view
            self.i += 1
        self._view = self.scratch[:max(1, min(self.want - pos, len(self.scratch)))]
        return self._view

    def received(self, n: int) -> None:
        if self.crc is not None:
            self.crc = checksums.extend_view(self.crc, self._view[:n])
        self.pos += n
        if self.pos >= self.want and not self.done.done():
            self.done.set_result(None)


class Pool:
    """Kept-alive connections to one endpoint, on one event loop; forgotten in a forked child."""

    def __init__(self) -> None:
        self.idle: list[_Receiver] = []
        fork.reset_in_child(self)

    def _after_fork(self) -> None:
        self.idle = []  # the parent's sockets: never used here (the child's session gets a pool of its own)

    def close(self) -> None:
        idle, self.idle = self.idle, []
        for proto in idle:
            if proto.transport is not None:
                proto.transport.abort()

    def close_soon(self, loop: asyncio.AbstractEventLoop) -> None:
        """`close` on the pool's loop (a session may be let go from any thread); nothing once that loop is closed."""
        try:
            loop.call_soon_threadsafe(self.close)
        except RuntimeError:  # the loop is closed: its sockets go with the process
            pass

    def take(self) -> Optional[_Receiver]:
        while self.idle:
            proto = self.idle.pop()
            if not proto.dead and not proto.transport.is_closing():
                return proto
        return None

    def give(self, proto: _Receiver) -> None:
        if len(self.idle) < IDLE_MAX and not proto.dead:
            self.idle.append(proto)
        else:
            proto.transport.abort()


_POOLS: "weakref.WeakKeyDictionary[aiohttp.ClientSession, Pool]" = weakref.WeakKeyDictionary()


def pool_of(session: aiohttp.ClientSession) -> Pool:
    """The pool of `session`: closed when the session is (checked on use) or goes."""
    pool = _POOLS.get(session)
    if pool is None:
        pool = _POOLS[session] = Pool()
        weakref.finalize(session, pool.close_soon, asyncio.get_running_loop())
    return pool


def _counters_of(session: aiohttp.ClientSession) -> Any:
    for config in session.trace_configs:
        counters = getattr(config, "fluxfs_counters", None)
        if counters is not None:
            return counters
    return None


async def get_into(session: aiohttp.ClientSession, url: str, headers: dict, start: int, end: int, pieces: list,
                   verify: bool, timeout: aiohttp.ClientTimeout, what: str,
                   total: Optional[int] = None) -> tuple[CIMultiDict, Optional[int]]:
    """GET bytes [start, end) of `url` into `pieces` ((offset in the range, writable view)); returns the answer's
    headers and the crc32c of the range (None unless `verify`). Raises Fallback for an answer it does not handle
    (with `total`, one naming another object size: a whole object read by its listed size that changed since),
    RequestTimeout after `timeout.sock_read` seconds without a byte, ClientPayloadError for a body cut off."""
    pool = pool_of(session)
    if session.closed:
        pool.close()
        raise Fallback("session closed")
    parts = urlsplit(url)
    tls = aiohttp_adapter.verifying_ssl_context(session) if parts.scheme == "https" else None
    host, port = parts.hostname or "", parts.port or (443 if tls is not None else 80)
    lines = [f"GET {parts.path}?{parts.query} HTTP/1.1", f"Host: {parts.netloc}", "Accept: */*",
             "Accept-Encoding: gzip, deflate"]
    sent = {**session.headers, **headers}
    lines += [f"{k}: {v}" for k, v in sent.items() if k.lower() not in ("host", "accept", "accept-encoding")]
    request = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
    counters = _counters_of(session)
    for attempt in (0, 1):
        proto = pool.take()
        reused = proto is not None
        if proto is None:
            try:
                _, proto = await asyncio.wait_for(
                    asyncio.get_running_loop().create_connection(
                        _Receiver, host, port, ssl=tls, server_hostname=host.rstrip(".") if tls else None),
                    timeout.sock_connect)
            except (OSError, asyncio.TimeoutError) as exc:  # a certificate refused too: aiohttp words it
                raise Fallback(f"cannot connect: {exc}") from None
        limit = timeout.sock_read
        clock = ProgressClock(limit)
        job = proto.job = _Job(pieces, start, end, verify, clock, proto.scratch, total)
        ok = False
        try:
            proto.transport.write(request)
            if counters is not None:
                counters.requests["read"] += 1
            try:
                await clock.guard(job.done, lambda: RequestTimeout(_stalled(what, limit, job)))
            except ConnectionResetError as exc:
                if job.headers is not None:
                    raise aiohttp.ClientPayloadError(f"{what}: connection lost after {job.pos} body bytes "
                                                     f"of {job.want}") from None
                if reused and attempt == 0:
                    continue  # a kept-alive connection the server had closed: once more on a fresh one
                raise Fallback(str(exc)) from None
            ok = True
        finally:
            proto.job, job._view = None, None  # no view of the caller's memory kept past the call
            if ok and job.keep_alive:
                pool.give(proto)
            else:
                proto.dead = True
                proto.transport.abort()
        if counters is not None:
            counters._received(job.want)
        return job.headers, job.crc  # type: ignore[return-value]
    raise AssertionError("unreachable")  # pragma: no cover


def _stalled(what: str, limit: float, job: _Job) -> str:
    if job.headers is None:
        return f"{what}: timed out: no answer from the server within {limit:g} s (GET)"
    return f"{what}: timed out: the answer stalled for {limit:g} s after {job.pos} bytes (GET)"
