"""The filesystem's side of the node-local cache (`cache_dir`): the cache's `Fetcher`, built from the client.

The cache (`fluxfs.cache`) is handed a `Fetcher` (this package's plain reads bound to the client: `direct.cat_file`,
`ranges.read_ranges`, `batched.cat_objects`) and the `NodeCache` of the client's options; it never holds the
filesystem, so a miss is read without coming back into it. `cached_cat(fs, info)` is the one line a reader with a
listing's info adds (exported as `fluxfs.support.cached_cat`).
"""
from __future__ import annotations

import functools
from typing import Any, Optional

from ..cache import Fetcher, NodeCache, cache_of, reader
from ..gcs import bridge
from ..gcs.client import Client, client_of
from . import batched, direct, ranges


def fetcher(client: Client) -> Fetcher:
    """What the cache reads storage through: the plain reads (never the cache) bound to `client`."""
    return Fetcher(client, functools.partial(direct.cat_file, client), functools.partial(ranges.read_ranges, client),
                   functools.partial(batched.cat_objects, client, pin=True))


async def acached_cat(fs: Any, info: dict, cache: Optional[NodeCache] = None, **kwargs: Any) -> bytes:
    """The object `info` names ("bucket/key", size, generation, crc32c: a listing's info dict), through
    `cache` (default: the filesystem's, from its `cache_dir`; None: straight from storage). No metadata request."""
    client = client_of(fs)
    return await reader.acached_cat(fetcher(client), info, cache if cache is not None else cache_of(client.options),
                                    **kwargs)


def cached_cat(fs: Any, info: dict, cache: Optional[NodeCache] = None) -> bytes:
    """Blocking `acached_cat`: `data = cached_cat(fs, info)` in place of `fs.cat_file(info["name"])`."""
    return bridge.run(fs, acached_cat, fs, info, cache=cache)
