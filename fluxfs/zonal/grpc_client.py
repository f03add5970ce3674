"""The gRPC side of zonal (Rapid) buckets: one `AsyncGrpcClient` (google-cloud-storage's asyncio client) per
process, event loop and endpoint, built lazily, and whether this process may use gRPC at all.

GCS serves appendable objects and bidi reads (`BidiReadObject`, `BidiWriteObject`) only over gRPC. The
endpoint is the HTTP endpoint's host:port (the `grpc_endpoint` option overrides it: a testbench whose gRPC
port differs, or storage.googleapis.com:443); `token="anon"` is an insecure channel with anonymous
credentials (as the library makes it), else the filesystem's google-auth credentials (never logged).
gRPC channels are not fork-safe: they are closed before a fork (a DataLoader starting its workers) and a
forked child never uses its parent's (kept referenced, unused) but builds its own on first use (`_Clients`).
"""
from __future__ import annotations

import asyncio
import gc
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from ..errors import ServerUnreachable
from ..gcs import bridge, fork
from ..gcs.redact import get_logger
from .gcs_adapter import channel_of, close_channel, extra, grpc_calls_alive

if TYPE_CHECKING:  # pragma: no cover
    from ..gcs.client import Client

logger = get_logger(__name__)

GRPC = "grpc"  # the zonal_transport that reads and writes zonal buckets over gRPC


class _Clients:
    """This process's gRPC clients, by (loop, endpoint, credentials).

    gRPC's core cannot be used in a child forked while a channel is open in the parent (its threads are
    gone: a new channel never connects, or the process aborts). So the clients are closed just before a
    fork (on their loops, waited for up to `FORK_CLOSE_TIMEOUT`) and rebuilt on next use in both
    processes; a child forked while one could not be closed (a fork from the loop's own thread, or a
    close that timed out) reads and writes zonal buckets over HTTP instead, with one warning."""

    def __init__(self) -> None:
        self.clients: dict = {}
        self.orphans: list = []  # a parent's clients, in a forked child: never used, never destroyed
        self.live_at_fork = False  # a client stayed open across the fork being made
        self.grpc_unusable = False  # this process was forked while its parent's channels were open
        self.warned = False
        self.used = False  # this process built a gRPC client (only then is anything checked at fork)

    def _before_fork(self) -> None:
        for key, (loop, made, *_rest) in list(self.clients.items()):
            try:
                if not loop.is_running() or bridge.on_loop(loop):
                    raise RuntimeError("its loop cannot be waited for from here")
                asyncio.run_coroutine_threadsafe(close_channel(made), loop).result(FORK_CLOSE_TIMEOUT)
                del self.clients[key]
            except Exception as exc:  # the child then goes without gRPC
                self.live_at_fork = True
                logger.debug("gRPC channel to %s left open across fork: %s", key[1], exc)
        if self.used and not self.live_at_fork:
            gc.collect()  # a call still referenced keeps gRPC's core busy: the child could not use it
            self.live_at_fork = grpc_calls_alive()

    def _after_fork_in_parent(self) -> None:
        self.live_at_fork = False

    def _after_fork(self) -> None:
        self.orphans.append(self.clients)
        self.clients = {}
        self.grpc_unusable = self.grpc_unusable or self.live_at_fork
        self.live_at_fork = False


FORK_CLOSE_TIMEOUT = 5.0
_CLIENTS = _Clients()
fork.reset_in_child(_CLIENTS)
fork.prepare_fork(_CLIENTS)


def endpoint_of(client: "Client") -> str:
    """host:port of the gRPC endpoint: the `grpc_endpoint` option, else the HTTP endpoint's host and port."""
    given = client.options.grpc_endpoint
    if given:
        return given
    parts = urlsplit(client.endpoints.location)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    host = parts.hostname or "storage.googleapis.com"
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def grpc_usable() -> bool:
    """Whether this process may use gRPC: not when it was forked while its parent's channels were open (warned
    once; its zonal buckets are then read and written over HTTP, `transport.py`)."""
    if _CLIENTS.grpc_unusable:
        if not _CLIENTS.warned:
            _CLIENTS.warned = True
            logger.warning("this process was forked while gRPC channels were open in its parent, where they could "
                           "not be closed first: zonal buckets are read and written over HTTP here")
        return False
    return True


def grpc_client(client: "Client") -> Any:
    """The `AsyncGrpcClient` for `client`'s endpoint and credentials on the running loop (built on first use)."""
    from google.api_core.client_options import ClientOptions
    from google.auth.credentials import AnonymousCredentials
    from google.cloud.storage.asyncio.async_grpc_client import AsyncGrpcClient

    loop = asyncio.get_running_loop()
    endpoint = endpoint_of(client)
    creds = client.grpc_credentials()
    key = (id(loop), endpoint, id(creds) if creds is not None else None)
    found = _CLIENTS.clients.get(key)
    if found is not None and found[0] is loop:
        return found[1]
    options = ClientOptions(api_endpoint=endpoint)
    if creds is None:  # token="anon": the library's insecure channel
        made = AsyncGrpcClient(credentials=AnonymousCredentials(), client_options=options)
    else:
        made = AsyncGrpcClient(credentials=creds, client_options=options, attempt_direct_path=False)
    _CLIENTS.clients[key] = (loop, made)
    _CLIENTS.used = True
    return made


async def connect(client: "Client") -> Any:
    """`grpc_client(client)`, its channel connected first (once). Connection failures (refused, no gRPC server
    there) are retried for `connect_timeout` s, as the HTTP requests' are (`gcs/reach.py`), then
    ServerUnreachable names the endpoint; a connection attempt still under way is waited for (gRPC bounds it)."""
    import grpc

    made = grpc_client(client)
    if extra(made).ready:
        return made
    channel = channel_of(made)
    within = client.options.connect_timeout
    loop = asyncio.get_running_loop()
    failing_since = None
    state = channel.get_state(try_to_connect=True)
    while state != grpc.ChannelConnectivity.READY:
        if state == grpc.ChannelConnectivity.TRANSIENT_FAILURE and failing_since is None:
            failing_since = loop.time()
        left = None if failing_since is None else failing_since + within - loop.time()
        if left is not None and left <= 0:
            endpoint = endpoint_of(client)
            raise ServerUnreachable(f"no gRPC server answered at {endpoint} within {within:g} s (zonal buckets are "
                                    "read and written over gRPC): set grpc_endpoint to the server's gRPC host:port, "
                                    "or zonal_transport='http'")
        try:
            await asyncio.wait_for(channel.wait_for_state_change(state), left)
        except asyncio.TimeoutError:
            pass
        state = channel.get_state(try_to_connect=True)
    extra(made).ready = True
    return made


def client_count() -> int:
    """gRPC clients this process built and may use (tests check a forked child starts from none)."""
    return len(_CLIENTS.clients)

