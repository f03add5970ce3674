"""One port for HTTP and gRPC: each accepted connection is peeked until its first bytes tell the HTTP/2
client preface (gRPC) from anything else. HTTP connections go to aiohttp's protocol with the peeked bytes
replayed (nothing else changes for them); gRPC connections are piped to the in-process gRPC server on its
private unix socket (endpoint.py), as gcsfs's zonal client talks gRPC to the host:port of its HTTP endpoint."""
from __future__ import annotations

import asyncio
import logging
from typing import Any, Callable, Optional

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
_LOG = logging.getLogger("fluxfs.server")
# A TLS ClientHello's ALPN extension (type 16) offering only "h2": what gRPC clients send (browsers and curl
# offer http/1.1 too, and keep getting aiohttp's "use an http:// URL" line).
_ALPN_H2_ONLY = b"\x00\x10\x00\x05\x00\x03\x02h2"
# Reading from one side of a pipe pauses while the other side's send buffer holds more than this.
_HIGH_WATER = 1 << 20


class _Pipe(asyncio.Protocol):
    """The gRPC server's side of one piped connection: what it sends goes to the client's transport;
    each side stops reading while the other side's send buffer is full (asyncio's flow control)."""

    def __init__(self, client: asyncio.Transport):
        self.client = client
        self.transport: Optional[asyncio.Transport] = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.transport.set_write_buffer_limits(high=_HIGH_WATER)

    def data_received(self, data: bytes) -> None:
        self.client.write(data)

    def eof_received(self) -> Optional[bool]:
        if not self.client.is_closing() and self.client.can_write_eof():
            self.client.write_eof()
        return None

    def connection_lost(self, exc: Optional[Exception]) -> None:
        self.client.close()

    def pause_writing(self) -> None:  # the gRPC server reads slower than the client sends
        self.client.pause_reading()

    def resume_writing(self) -> None:
        if not self.client.is_closing():
            self.client.resume_reading()


class FrontProtocol(asyncio.Protocol):
    """The listening socket's protocol: peek, then hand the connection to aiohttp or pipe it to gRPC."""

    __slots__ = ("_http", "_grpc", "_transport", "_head", "_pipe", "_queued", "_connecting")

    def __init__(self, http_factory: Callable[[], asyncio.Protocol], grpc_endpoint: Any):
        self._http = http_factory
        self._grpc = grpc_endpoint  # endpoint.GrpcEndpoint: `await path()` starts the gRPC server on first use
        self._transport: Optional[asyncio.Transport] = None
        self._head = b""
        self._pipe: Optional[_Pipe] = None
        self._queued: list = []
        self._connecting: Optional[asyncio.Future] = None  # held: a task only the loop refers to may vanish

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        if self._pipe is not None:
            if self._pipe.transport is None:
                self._queued.append(data)  # the gRPC side is still connecting
                return
            self._pipe.transport.write(data)
            return
        head = self._head + data
        n = min(len(head), len(PREFACE))
        if head[:n] != PREFACE[:n]:  # not gRPC, decided at the first byte that differs: HTTP as ever
            if head.startswith(b"\x16\x03") and _ALPN_H2_ONLY in head:
                self._refuse_tls_grpc()
            else:
                self._to_http(head)
        elif len(head) >= len(PREFACE):
            self._to_grpc(head)
        else:
            self._head = head  # a prefix of the preface so far: wait for more

    def _to_http(self, head: bytes) -> None:
        proto = self._http()
        transport = self._transport
        transport.set_protocol(proto)
        proto.connection_made(transport)
        proto.data_received(head)

    def _refuse_tls_grpc(self) -> None:
        """A TLS ClientHello offering only h2 (a gRPC client): closed at once (the client fails fast), said once
        per server."""
        if not self._grpc.told_tls:
            self._grpc.told_tls = True
            peer = self._transport.get_extra_info("peername")
            _LOG.warning("fluxfs server: refused a TLS gRPC connection from %s: this server speaks gRPC in plaintext "
                         "only, on its http:// port (gcsfs's storage-control client always uses TLS: give gcsfs the "
                         "bucket's type instead, see docs/architecture.md)", peer[0] if peer else "?")
        self._transport.abort()

    def _to_grpc(self, head: bytes) -> None:
        self._transport.set_write_buffer_limits(high=_HIGH_WATER)
        self._pipe = _Pipe(self._transport)
        self._queued.append(head)
        self._connecting = asyncio.ensure_future(self._connect())

    async def _connect(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            path = await self._grpc.path()
            await loop.create_unix_connection(lambda: self._pipe, path)
        except Exception as e:  # the gRPC server could not start: say why, drop this connection
            _LOG.warning("fluxfs server: gRPC connection dropped: %s: %s", type(e).__name__, e)
            self._transport.abort()
            return
        for chunk in self._queued:
            self._pipe.transport.write(chunk)
        self._queued = []
        if self._transport.is_closing():
            self._pipe.transport.close()

    def pause_writing(self) -> None:  # the client reads slower than the gRPC server sends
        if self._pipe is not None and self._pipe.transport is not None:
            self._pipe.transport.pause_reading()

    def resume_writing(self) -> None:
        if self._pipe is not None and self._pipe.transport is not None and not self._pipe.transport.is_closing():
            self._pipe.transport.resume_reading()

    def eof_received(self) -> Optional[bool]:
        if self._pipe is None:
            return None  # closed before a byte told what it is
        if self._pipe.transport is not None and self._pipe.transport.can_write_eof():
            self._pipe.transport.write_eof()
        return True

    def connection_lost(self, exc: Optional[Exception]) -> None:
        if self._pipe is not None and self._pipe.transport is not None:
            self._pipe.transport.close()
