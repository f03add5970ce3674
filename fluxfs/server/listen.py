"""Starting and stopping the server's one listening port (both `run()` and `fluxfs serve` go through here):
one asyncio server on host:port whose connections `grpc/front.py` tells apart, HTTP to aiohttp's protocol (the
runner's public `server` factory), gRPC piped to the in-process gRPC server (`grpc/endpoint.py`)."""
from __future__ import annotations

import asyncio
from typing import Any

from aiohttp import web

from .grpc.endpoint import GrpcEndpoint
from .grpc.front import FrontProtocol


class Listening:
    """A started server: `port` (the one URL's), `close()` stops HTTP and gRPC and removes gRPC's socket."""

    def __init__(self, runner: web.AppRunner, server: asyncio.AbstractServer, grpc: GrpcEndpoint):
        self.runner, self.server, self.grpc = runner, server, grpc
        self.port: int = server.sockets[0].getsockname()[1]

    @classmethod
    async def start(cls, srv: Any, host: str, port: int) -> "Listening":
        """Listen on host:port; OSError (port in use, ...) with nothing left running."""
        runner = web.AppRunner(srv.app(), access_log=None, handle_signals=False)
        await runner.setup()
        grpc = GrpcEndpoint(srv)
        http = runner.server  # aiohttp's protocol factory, what its own sites listen with
        try:
            server = await asyncio.get_running_loop().create_server(lambda: FrontProtocol(http, grpc), host, port,
                                                                    backlog=1024)
        except BaseException:
            await runner.cleanup()
            raise
        return cls(runner, server, grpc)

    async def close(self) -> None:
        """No new connection, then gRPC's streams end, then aiohttp closes its connections and the app."""
        self.server.close()
        await self.grpc.close()
        await self.runner.cleanup()
