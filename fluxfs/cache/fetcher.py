"""`Fetcher`: what the node-local cache reads storage through, handed in by the filesystem's side.

The cache never holds the filesystem: `reads/cached.py` builds one `Fetcher` per client from the plain
reads (no cache) bound to it, so a miss is fetched without coming back into the filesystem (no
fs -> cache -> fs cycle), as fsspec's caching layers are handed a fetch callable.
"""
from __future__ import annotations

import dataclasses
import functools
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Optional

from ..gcs import http
from ..gcs.urls import named
from .entry import store_id

if TYPE_CHECKING:
    from ..gcs.client import Client


@dataclasses.dataclass(frozen=True)
class Fetcher:
    """The client (paths, its endpoint, its event loop, metadata GETs) and three reads bound to it."""

    client: "Client"
    cat_file: Callable[..., Awaitable[bytes]]     # (path, start=None, end=None, generation=...) -> bytes
    read_ranges: Callable[..., Awaitable[Any]]    # (path, [(start, end)], generation=..., max_gap=...) -> Ranges
    cat_objects: Callable[..., Awaitable[dict]]   # (infos, on_error=...) -> {"bucket/key": bytes | exception}

    @functools.cached_property  # asked once per object of a `cat_objects` call: the URL parsed once
    def store(self) -> str:
        """The store read from (the client's normalized endpoint): part of every entry's name."""
        return store_id(self.client.endpoints.location)

    @property
    def loop(self) -> Any:
        """The client's event loop (what `bridge.run` runs a blocking call on)."""
        return self.client.loop

    def split_path(self, path: str) -> tuple[str, str, Optional[str]]:
        return self.client.split_path(path)

    def strip_protocol(self, path: str) -> str:
        return self.client.strip_protocol(path)

    async def head(self, bucket: str, key: str, generation: Optional[str] = None) -> dict:
        """Live metadata of the object (or of `generation`) from the server, not a listing cache that may be stale."""
        params = {"generation": str(generation)} if generation else None
        resp = await http.request(self.client, "GET", self.client.json_url("b/{}/o/{}", bucket, key), op="metadata",
                                  what=named(bucket, key, generation), params=params)
        return resp.json()
