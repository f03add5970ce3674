"""Whole objects through the node-local cache: what `cat_file` and "rb" `open` of a whole object do when
`cache_dir` is set, and `acached_cat`, a read with a listing's info (no metadata GET). A miss is fetched
through the `Fetcher` the filesystem's side hands in (`fetcher.py`), never through the filesystem.

Every read through the cache names a generation: the one in the path (`key#generation`), the listing's
(`info["generation"]`), or the live one from a metadata GET, so an object overwritten since it was cached
is read anew, never served stale.
"""
from __future__ import annotations

import contextlib
import os
from typing import Any, AsyncIterator, BinaryIO, Iterator, Optional

from ..errors import ObjectChanged, object_changed
from ..gcs import bridge
from .fetcher import Fetcher
from .store import NodeCache

FILL_PART = 64 * 2**20  # an object opened through the cache is fetched this much at a time (parallel ranges)
_CACHES: dict[tuple, NodeCache] = {}  # one per directory, limit, sharing and stall bound in this process


def cache_of(options: Any) -> Optional[NodeCache]:
    """The NodeCache of a filesystem's options (`cache_dir`, `cache_limit`, `cache_shared`, `read_timeout`), None
    when off; built on first use and shared by every filesystem of this process with the same ones."""
    directory = options.cache_dir
    if not directory:
        return None
    where = (os.path.abspath(os.path.expanduser(directory)), options.cache_limit, options.cache_shared,
             options.read_timeout)
    cache = _CACHES.get(where)
    if cache is None:
        cache = _CACHES.setdefault(where, NodeCache(*where))
    return cache


async def cat_file(fetch: Fetcher, cache: NodeCache, path: str, **kwargs: Any) -> bytes:
    """A whole object through the cache (`fs._cat_file(path)` with `cache_dir` set)."""
    bucket, key, generation = fetch.split_path(path)
    meta = await fetch.head(bucket, key, kwargs.pop("generation", None) or generation or None)
    info = _info(bucket, key, meta)
    with _changed(info):
        return await acached_cat(fetch, info, cache, **kwargs)


@contextlib.contextmanager
def _changed(info: dict) -> Iterator[None]:
    """The generation a metadata GET named vanished before its bytes were read: `ObjectChanged`, as a read
    without the cache says it (not a bare FileNotFoundError)."""
    try:
        yield
    except ObjectChanged:
        raise
    except FileNotFoundError as exc:
        raise object_changed(info["name"], info["generation"]) from exc


def open_file(fetch: Fetcher, cache: NodeCache, path: str, **kwargs: Any) -> Optional[BinaryIO]:
    """`fs.open(path, "rb")` through the cache: a local file (the entry stays until it is closed), or None
    when the call asks for what the cache does not do (an fsspec cache_type, cache_options)."""
    if kwargs.get("cache_type") not in (None, "adaptive") or kwargs.get("cache_options"):
        return None
    bucket, key, generation = fetch.split_path(path)
    if not key:
        return None  # FluxReadFile names the mistake
    meta = bridge.run(fetch, fetch.head, bucket, key, kwargs.get("generation") or generation or None)
    info = _info(bucket, key, meta)
    name, gen, size = f"{bucket}/{key}", info["generation"], info["size"]

    def parts() -> Iterator[bytes]:  # a large object goes to disk a part at a time, not whole in memory
        for start in range(0, size, FILL_PART) or [0]:
            yield bridge.run(fetch, fetch.cat_file, name, start=start,
                             end=min(start + FILL_PART, size) if size else None, generation=gen)

    with _changed(info):
        f = cache.open(bucket, key, gen, size, info["crc32c"], parts, store=fetch.store)
    f.path, f.size = name, info["size"]  # type: ignore[attr-defined]
    return f


def _info(bucket: str, key: str, meta: dict) -> dict:
    return {"name": f"{bucket}/{key}", "generation": str(meta["generation"]), "size": int(meta.get("size") or 0),
            "crc32c": meta.get("crc32c")}


async def acached_cat(fetch: Fetcher, info: dict, cache: Optional[NodeCache], **kwargs: Any) -> bytes:
    """The object `info` names ("bucket/key", size, generation, crc32c: a listing's info dict), through
    `cache` (None: straight from storage). No metadata request."""
    name = fetch.strip_protocol(info["name"])
    generation = info.get("generation")
    if cache is None or not generation:
        return await fetch.cat_file(name, generation=generation or None, **kwargs)
    bucket, key, _ = fetch.split_path(name)

    size = int(info.get("size") or 0)

    def get() -> Any:  # a large object a part at a time: to disk as it comes, progress seen by those waiting
        if size <= FILL_PART:
            return fetch.cat_file(name, generation=generation, **kwargs)

        async def parts() -> AsyncIterator[bytes]:
            for start in range(0, size, FILL_PART):
                yield await fetch.cat_file(name, start=start, end=min(start + FILL_PART, size), generation=generation,
                                           **kwargs)
        return parts()

    return await cache.aget(bucket, key, generation, size, info.get("crc32c"), get, store=fetch.store)
