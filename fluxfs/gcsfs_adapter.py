"""The one module that adapts gcsfs: the `Transport` a `Client` sends through, on a gcsfs filesystem.

Everything fluxfs needs of gcsfs's internals (its session, auth headers and parameters, the endpoint,
object resources to info dicts, its listing cache updates) is read here and nowhere else, so the
accelerations depend on `fluxfs.gcs.client.Client` only.
"""
from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, Optional

from .gcs.client import Client, Endpoints

if TYPE_CHECKING:  # pragma: no cover
    from gcsfs.core import GCSFileSystem

    from .options import FluxOptions


class GcsfsTransport:
    """A gcsfs filesystem's session, auth and caches, as `Client` asks for them."""

    def __init__(self, fs: "GCSFileSystem"):
        self.fs = fs

    @property
    def loop(self) -> Any:
        return self.fs.loop

    @property
    def version_aware(self) -> bool:
        return bool(self.fs.version_aware)

    @property
    def dircache(self) -> Any:
        return self.fs.dircache

    async def session(self) -> Any:
        return await self.fs._set_session()

    def headers(self, extra: dict) -> dict:
        return self.fs._get_headers(extra)

    def params(self, extra: dict) -> dict:
        return self.fs._get_params(extra)  # adds userProject for requester pays

    def split_path(self, path: str) -> tuple[str, str, Optional[str]]:
        return self.fs.split_path(path)

    def strip_protocol(self, path: str) -> str:
        return self.fs._strip_protocol(path)

    def process_object(self, bucket: str, resource: dict) -> dict:
        return self.fs._process_object(bucket, resource)

    def invalidate_cache(self, path: Optional[str] = None) -> None:
        self.fs.invalidate_cache(path)

    async def written(self, path: str) -> None:
        await self.fs._write_file_cache_update(path)  # gcsfs's: only the parent's listing when it is cached

    async def info(self, path: str, **kwargs: Any) -> dict:
        return await self.fs._info(path, **kwargs)

    def grpc_credentials(self) -> Any:
        """gcsfs's google-auth credentials (as gcsfs's ExtendedGcsFileSystem unwraps them); None for "anon"."""
        creds = self.fs.credentials
        if getattr(creds, "token", None) == "anon":
            return None
        creds.maybe_refresh()  # a gcsfs token given as text becomes google-auth credentials once refreshed
        return creds.credentials


def start_over(fs: "GCSFileSystem") -> None:
    """In a forked child the parent's loop thread and sockets do not exist: gcsfs's loop, session and SSL context
    dropped, made again on first use (fsspec refuses to run a filesystem forked after its loop started)."""
    fs._pid = os.getpid()  # fsspec's own record, whose check (its `loop`) FluxFileSystem replaces: kept true
    fs._loop = None
    fs._session = None
    fs._ssl_context_task = None


def build_client(fs: "GCSFileSystem", options: "FluxOptions") -> Client:
    """The client of a gcsfs filesystem: its endpoint read once (gcsfs's `_location`)."""
    return Client(options, GcsfsTransport(fs), Endpoints(fs._location))
