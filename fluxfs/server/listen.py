"""Starting and stopping the server's one listening port (both `run()` and `fluxfs serve` go through here):
aiohttp's runner for HTTP, and on the same host:port the gRPC services, piped by `grpc/front.py` to the
in-process gRPC server (`grpc/endpoint.py`)."""
from __future__ import annotations

from typing import Any

from aiohttp import web

from .grpc.endpoint import GrpcEndpoint
from .grpc.front import OnePortSite


class Listening:
    """A started server: `port` (the one URL's), `close()` stops HTTP and gRPC and removes gRPC's socket."""

    def __init__(self, runner: web.AppRunner, site: OnePortSite, grpc: GrpcEndpoint):
        self.runner, self.site, self.grpc = runner, site, grpc
        self.port: int = site.port

    @classmethod
    async def start(cls, srv: Any, host: str, port: int) -> "Listening":
        """Listen on host:port; OSError (port in use, ...) with nothing left running."""
        runner = web.AppRunner(srv.app(), access_log=None, handle_signals=False)
        await runner.setup()
        grpc = GrpcEndpoint(srv)
        site = OnePortSite(runner, host, port, grpc, backlog=1024)
        try:
            await site.start()
        except BaseException:
            await runner.cleanup()
            raise
        return cls(runner, site, grpc)

    async def close(self) -> None:
        await self.grpc.close()
        await self.runner.cleanup()
