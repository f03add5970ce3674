"""`Client`: the narrow view of a filesystem that every acceleration takes (listing, reads, writes, temporaries).

`core.FluxFileSystem` builds one (`fs.client`) and hands it down, so no acceleration module holds the
gcsfs object or reads its privates: requests go through the `Transport` (gcsfs's session and auth, adapted
in `fluxfs/gcsfs_adapter.py`, the one module that touches gcsfs's internals; a per-bucket transport plugs in
here), URLs come from `Endpoints`, and what the server refused is remembered in a declared `ServerRefusals`.
"""
from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, Optional, Protocol
from urllib.parse import quote

from . import tempnames

if TYPE_CHECKING:  # pragma: no cover
    import asyncio

    import aiohttp

    from ..options import FluxOptions
    from ..temp_registry import TempRegistry
    from .retry import RetryPolicy


@dataclasses.dataclass
class ServerRefusals:
    """What this filesystem's server refused once, so later calls go around it (kept in a forked child:
    the server has not changed; a filesystem built anew, or unpickled, starts empty)."""

    compose_denied: bool = False               # compose refused (403): batched reads go direct
    xml_multipart_unsupported: bool = False    # no XML multipart upload: multipart="xml" writes compose
    compose_component_probed: bool = False     # the one check past 1,024 components was made
    compose_component_limit: Optional[int] = None  # the component limit that check found (None: none)


@dataclasses.dataclass(frozen=True)
class Endpoints:
    """The server's URLs, from its location (``https://storage.googleapis.com`` or an emulator's)."""

    location: str

    def json_url(self, fmt: str, *parts: str) -> str:
        """A JSON API URL: `fmt` like "b/{}/o/{}" with each part percent-encoded."""
        return f"{self.location}/storage/v1/" + fmt.format(*(quote(p, safe="") for p in parts))

    def upload_url(self, bucket: str) -> str:
        """The JSON API media upload URL of a bucket."""
        return f"{self.location}/upload/storage/v1/b/{quote(bucket, safe='')}/o"

    def xml_url(self, bucket: str, key: str = "") -> str:
        """An XML API URL (`/BUCKET/KEY`), used for multipart uploads."""
        return f"{self.location}/{quote(bucket, safe='')}/{quote(key, safe='/')}"

    def media_url(self, bucket: str, key: str) -> str:
        """The JSON API media download URL of an object (`?alt=media` added by the caller)."""
        return f"{self.location}/download/storage/v1/b/{quote(bucket, safe='')}/o/{quote(key, safe='')}"


class Transport(Protocol):
    """What the client needs of the filesystem underneath: its session, auth, paths and listing cache."""

    @property
    def loop(self) -> "asyncio.AbstractEventLoop": ...
    @property
    def version_aware(self) -> bool: ...
    @property
    def dircache(self) -> Any: ...
    async def session(self) -> "aiohttp.ClientSession": ...
    def headers(self, extra: dict) -> dict: ...
    def params(self, extra: dict) -> dict: ...
    def split_path(self, path: str) -> tuple[str, str, Optional[str]]: ...
    def strip_protocol(self, path: str) -> str: ...
    def process_object(self, bucket: str, resource: dict) -> dict: ...
    def invalidate_cache(self, path: Optional[str] = None) -> None: ...
    async def written(self, path: str) -> None: ...
    async def info(self, path: str, **kwargs: Any) -> dict: ...
    def grpc_credentials(self) -> Any: ...


class Client:
    """Options, retry policies, job id, URLs, requests (through the transport), refusals, temporaries."""

    def __init__(self, options: "FluxOptions", transport: Transport, endpoints: Endpoints):
        self.options = options
        self.transport = transport
        self.endpoints = endpoints
        self.refused = ServerRefusals()
        self.temporaries: "TempRegistry | None" = None  # set by the filesystem once the client exists
        self.layouts: dict = {}          # bucket -> BucketLayout learned (zonal/layout.py)
        self.layout_lookups: dict = {}   # (bucket, loop id) -> the lookup in flight
        self._auto_job_id = tempnames.new_job_id()

    def after_fork(self) -> None:
        """In a forked child: a job id of its own (the refusals stay: the server is the same)."""
        self._auto_job_id = tempnames.new_job_id()

    @property
    def job_id(self) -> str:
        """Id for this process's temporary objects; a forked worker gets its own."""
        return self.options.job_id or self._auto_job_id

    def retry_policy(self, op: str) -> "RetryPolicy":
        """The retry policy for an operation kind ("list", "read", "compose", "write", "delete", "metadata")."""
        return self.options.retry_policy(op)

    # -- URLs -------------------------------------------------------------------------------

    def json_url(self, fmt: str, *parts: str) -> str:
        return self.endpoints.json_url(fmt, *parts)

    def upload_url(self, bucket: str) -> str:
        return self.endpoints.upload_url(bucket)

    def xml_url(self, bucket: str, key: str = "") -> str:
        return self.endpoints.xml_url(bucket, key)

    def media_url(self, bucket: str, key: str) -> str:
        return self.endpoints.media_url(bucket, key)

    # -- the transport ------------------------------------------------------------------------

    @property
    def loop(self) -> "asyncio.AbstractEventLoop":
        """The event loop the filesystem's requests run on."""
        return self.transport.loop

    @property
    def version_aware(self) -> bool:
        return self.transport.version_aware

    @property
    def dircache(self) -> Any:
        """The filesystem's listing cache (fsspec's DirCache: "bucket/prefix" -> list of info dicts)."""
        return self.transport.dircache

    async def session(self) -> "aiohttp.ClientSession":
        """The aiohttp session requests go through (made on first use, again after fork)."""
        return await self.transport.session()

    def headers(self, extra: Optional[dict] = None) -> dict:
        """Request headers with auth added to `extra`."""
        return self.transport.headers(dict(extra or {}))

    def params(self, extra: Optional[dict] = None) -> dict:
        """Query parameters with the filesystem's own added (userProject for requester pays)."""
        return self.transport.params(dict(extra or {}))

    def split_path(self, path: str) -> tuple[str, str, Optional[str]]:
        """(bucket, key, generation) of a path or URL."""
        return self.transport.split_path(path)

    def strip_protocol(self, path: str) -> str:
        """"bucket/key" of a flux://, gs:// or gcs:// URL (a path without one unchanged)."""
        return self.transport.strip_protocol(path)

    def object_info(self, bucket: str, resource: dict) -> dict:
        """An info dict (gcsfs's shape) from an object resource as the JSON API returns it."""
        return self.transport.process_object(bucket, dict(resource))

    def invalidate_cache(self, path: Optional[str] = None) -> None:
        self.transport.invalidate_cache(path)

    async def written(self, path: str) -> None:
        """The listing cache after writing `path` (only the parent's listing, when cached, changes)."""
        await self.transport.written(path)

    async def info(self, path: str, **kwargs: Any) -> dict:
        """The filesystem's `info` of a path (listing cache, else a metadata request)."""
        return await self.transport.info(path, **kwargs)

    def grpc_credentials(self) -> Any:
        """The google-auth credentials gRPC calls take (None: anonymous, `token="anon"`); never logged."""
        return self.transport.grpc_credentials()


def client_of(obj: Any) -> Client:
    """`obj` when it is a `Client`, else the filesystem's (`obj.client`): for entry points callers reach
    with a filesystem (tests, benchmarks, the CLI)."""
    return obj if isinstance(obj, Client) else obj.client
