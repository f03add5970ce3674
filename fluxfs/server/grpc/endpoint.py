"""The in-process gRPC server behind the shared port: a `grpc.aio` server on the server's event loop,
listening on a unix socket in a private temporary directory (mode 0700), started when the first gRPC
connection arrives (so HTTP-only use never imports grpc) and removed when the server stops or the
process exits."""
from __future__ import annotations

import asyncio
import atexit
import functools
import os
import shutil
import tempfile
from typing import Any, Optional


class GrpcEndpoint:
    """Starts the gRPC server once, on first use; `path()` is what `FrontProtocol` connects to."""

    def __init__(self, srv: Any):
        self.srv = srv
        self._start: Optional[asyncio.Future] = None
        self._server: Any = None
        self._dir: Optional[str] = None
        self._remove: Any = None
        self.told_tls = False  # a TLS gRPC connection was refused and logged (front.py), once per server

    async def path(self) -> str:
        """The unix socket path of the running gRPC server (started by the first caller)."""
        if self._start is None:
            self._start = asyncio.ensure_future(self._begin())
        return await asyncio.shield(self._start)

    async def _begin(self) -> str:
        import grpc  # the first gRPC connection pays for these imports, HTTP-only use never does

        from .services import handlers

        self._dir = tempfile.mkdtemp(prefix="fluxfs-grpc-")
        self._remove = functools.partial(shutil.rmtree, self._dir, True)
        atexit.register(self._remove)
        path = os.path.join(self._dir, "grpc.sock")
        server = grpc.aio.server(options=[("grpc.max_receive_message_length", 64 << 20),
                                          ("grpc.max_send_message_length", 64 << 20)])
        server.add_generic_rpc_handlers(handlers(self.srv))
        server.add_insecure_port("unix:" + path)
        await server.start()
        self._server = server
        return path

    async def close(self) -> None:
        """Stop the gRPC server (open streams end) and remove its directory."""
        if self._start is not None and not self._start.done():
            self._start.cancel()
        if self._server is not None:
            await self._server.stop(grace=None)
            self._server = None
        if self._dir is not None:
            self._remove()
            atexit.unregister(self._remove)
            self._dir = None
