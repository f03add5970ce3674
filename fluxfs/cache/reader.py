"""The node-local cache in a `FluxFileSystem`'s reads: what `fs.cache`, whole-object `cat_file` and "rb"
`open` call when `cache_dir` is set, and `cached_cat(fs, info)`, the one line a reader with listing info adds.

Every read through the cache names a generation: the one in the path (`key#generation`), the listing's
(`info["generation"]`), or the live one from a metadata GET, so an object overwritten since it was cached
is read anew, never served stale.
"""
from __future__ import annotations

import contextlib
import os
from typing import Any, AsyncIterator, BinaryIO, Iterator, Optional

from ..errors import ObjectChanged, object_changed
from ..gcs import bridge, http
from .entry import store_id
from .store import NodeCache

FILL_PART = 64 * 2**20  # an object opened through the cache is fetched this much at a time (parallel ranges)
_CACHES: dict[tuple, NodeCache] = {}  # one per directory, limit, sharing and stall bound in this process


def cache_of(fs: Any) -> Optional[NodeCache]:
    """The filesystem's NodeCache (from its `cache_dir`/`cache_limit` options), None when off; built on
    first use and shared by every filesystem of this process with the same directory and limit."""
    directory = fs.options.cache_dir
    if not directory:
        return None
    where = (os.path.abspath(os.path.expanduser(directory)), fs.options.cache_limit, fs.options.cache_shared,
             fs.options.read_timeout)
    cache = _CACHES.get(where)
    if cache is None:
        cache = _CACHES.setdefault(where, NodeCache(*where))
    return cache


def store_of(fs: Any) -> str:
    """The store the filesystem reads from (its normalized endpoint): part of every entry's name."""
    return store_id(fs.client.endpoints.location)


async def head(fs: Any, bucket: str, key: str, generation: Optional[str] = None) -> dict:
    """Live metadata of the object (or of `generation`) from the server, not a listing cache that may be stale."""
    params = {"generation": str(generation)} if generation else None
    what = f"{bucket}/{key}#{generation}" if generation else f"{bucket}/{key}"
    resp = await http.request(fs, "GET", fs.client.json_url("b/{}/o/{}", bucket, key), op="metadata", what=what,
                              params=params)
    return resp.json()


async def cat_file(fs: Any, cache: NodeCache, path: str, **kwargs: Any) -> bytes:
    """A whole object through the cache (`fs._cat_file(path)` with `cache_dir` set)."""
    bucket, key, generation = fs.split_path(path)
    meta = await head(fs, bucket, key, kwargs.pop("generation", None) or generation or None)
    info = _info(bucket, key, meta)
    with _changed(info):
        return await acached_cat(fs, info, cache=cache, **kwargs)


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


def open_file(fs: Any, cache: NodeCache, path: str, **kwargs: Any) -> Optional[BinaryIO]:
    """`fs.open(path, "rb")` through the cache: a local file (the entry stays until it is closed), or None
    when the call asks for what the cache does not do (an fsspec cache_type, cache_options)."""
    if kwargs.get("cache_type") not in (None, "adaptive") or kwargs.get("cache_options"):
        return None
    bucket, key, generation = fs.split_path(path)
    if not key:
        return None  # FluxReadFile names the mistake
    meta = bridge.run(fs, head, fs, bucket, key, kwargs.get("generation") or generation or None)
    info = _info(bucket, key, meta)
    name, gen, size = f"{bucket}/{key}", info["generation"], info["size"]

    def fetch() -> Iterator[bytes]:  # a large object goes to disk a part at a time, not whole in memory
        for start in range(0, size, FILL_PART) or [0]:
            yield bridge.run(fs, fs._cat_file, name, start=start, end=min(start + FILL_PART, size) if size else None,
                             generation=gen, cache=False)

    with _changed(info):
        f = cache.open(bucket, key, gen, size, info["crc32c"], fetch, store=store_of(fs))
    f.path, f.size = name, info["size"]  # type: ignore[attr-defined]
    return f


def _info(bucket: str, key: str, meta: dict) -> dict:
    return {"name": f"{bucket}/{key}", "generation": str(meta["generation"]), "size": int(meta.get("size") or 0),
            "crc32c": meta.get("crc32c")}


async def acached_cat(fs: Any, info: dict, cache: Optional[NodeCache] = None, **kwargs: Any) -> bytes:
    """The object `info` names ("bucket/key", size, generation, crc32c: a listing's info dict), through
    `cache` (default `fs.cache`; None: straight from storage). No metadata request."""
    cache = cache if cache is not None else fs.cache
    name = fs.client.strip_protocol(info["name"])
    generation = info.get("generation")
    if cache is None or not generation:
        return await fs._cat_file(name, generation=generation or None, cache=False, **kwargs)
    bucket, key, _ = fs.split_path(name)

    size = int(info.get("size") or 0)

    def fetch() -> Any:  # a large object a part at a time: to disk as it comes, progress seen by those waiting
        if size <= FILL_PART:
            return fs._cat_file(name, generation=generation, cache=False, **kwargs)

        async def parts() -> AsyncIterator[bytes]:
            for start in range(0, size, FILL_PART):
                yield await fs._cat_file(name, start=start, end=min(start + FILL_PART, size), generation=generation,
                                         cache=False, **kwargs)
        return parts()

    return await cache.aget(bucket, key, generation, size, info.get("crc32c"), fetch, store=store_of(fs))


def cached_cat(fs: Any, info: dict, cache: Optional[NodeCache] = None) -> bytes:
    """Blocking `acached_cat`: `data = cached_cat(fs, info)` in place of `fs.cat_file(info["name"])`."""
    return bridge.run(fs, acached_cat, fs, info, cache=cache)
