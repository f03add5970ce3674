"""The gRPC side of zonal (Rapid) buckets: one `AsyncGrpcClient` (google-cloud-storage's asyncio client) per
process, event loop and endpoint, built lazily, and which transport a zonal bucket's reads and writes take.

GCS serves appendable objects and bidi reads (`BidiReadObject`, `BidiWriteObject`) only over gRPC. The
endpoint is the HTTP endpoint's host:port (the `grpc_endpoint` option overrides it: a testbench whose gRPC
port differs, or storage.googleapis.com:443); `token="anon"` is an insecure channel with anonymous
credentials (as the library makes it), else the filesystem's google-auth credentials (never logged).
gRPC channels are not fork-safe: a forked child (a DataLoader worker) drops its parent's clients unused
(kept referenced, so no destructor touches the parent's channel) and builds its own on first use.
"""
from __future__ import annotations

import asyncio
import os
from typing import TYPE_CHECKING, Any, Optional
from urllib.parse import urlsplit

from ..gcs import fork
from .layout import is_zonal

if TYPE_CHECKING:  # pragma: no cover
    from ..gcs.client import Client

GRPC, HTTP = "grpc", "http"
TRANSPORTS = (GRPC, HTTP)


class _Clients:
    """This process's gRPC clients, by (loop, endpoint, credentials); emptied in a forked child."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.clients: dict = {}
        self.orphans: list = []  # a parent's clients, in a forked child: never used, never destroyed

    def _after_fork(self) -> None:
        self.orphans.append(self.clients)
        self.clients = {}
        self.pid = os.getpid()

    def get(self, key: tuple) -> Any:
        if self.pid != os.getpid():  # forked without the hook having run (it always runs; belt and braces)
            self._after_fork()
        return self.clients.get(key)


_CLIENTS = _Clients()
fork.reset_in_child(_CLIENTS)


def endpoint_of(client: "Client") -> str:
    """host:port of the gRPC endpoint: the `grpc_endpoint` option, else the HTTP endpoint's host and port."""
    given = client.options.grpc_endpoint
    if given:
        return given
    parts = urlsplit(client.endpoints.location)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    host = parts.hostname or "storage.googleapis.com"
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


async def uses_grpc(client: "Client", bucket: str) -> bool:
    """Whether reads and writes of `bucket` go over gRPC: a zonal bucket, unless `zonal_transport="http"`."""
    return client.options.zonal_transport == GRPC and await is_zonal(client, bucket)


def grpc_client(client: "Client") -> Any:
    """The `AsyncGrpcClient` for `client`'s endpoint and credentials on the running loop (built on first use)."""
    from google.api_core.client_options import ClientOptions
    from google.auth.credentials import AnonymousCredentials
    from google.cloud.storage.asyncio.async_grpc_client import AsyncGrpcClient

    loop = asyncio.get_running_loop()
    endpoint = endpoint_of(client)
    creds = client.grpc_credentials()
    key = (id(loop), endpoint, id(creds) if creds is not None else None)
    found = _CLIENTS.get(key)
    if found is not None and found[0] is loop:
        return found[1]
    options = ClientOptions(api_endpoint=endpoint)
    if creds is None:  # token="anon": the library's insecure channel
        made = AsyncGrpcClient(credentials=AnonymousCredentials(), client_options=options)
    else:
        made = AsyncGrpcClient(credentials=creds, client_options=options, attempt_direct_path=False)
    _CLIENTS.clients[key] = (loop, made)
    return made


def client_count() -> int:
    """gRPC clients this process built and may use (tests check a forked child starts from none)."""
    _CLIENTS.get(())
    return len(_CLIENTS.clients)

