"""The filesystem calls pipes' data loading makes: list a prefix, look objects up, read a batch of them."""
from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Iterator, Optional, Sequence

from fluxfs.handle import accelerated, cache_lock

from ..urls import parse_url

# Up to this many objects of unknown size are looked up one by one (in threads); more than that,
# and one listing of their common prefix is cheaper than a round trip per object.
_LOOKUP_INDIVIDUALLY = 256


def list_objects(fs, bucket: str, key_prefix: str) -> Iterator[dict]:
    """Info dicts of every object whose key starts with `key_prefix`, streaming from the fast lister."""
    flux = accelerated(fs)
    if flux is not None:
        for batch in flux.iter_objects(bucket, prefix=key_prefix):
            yield from batch
    else:  # another fsspec filesystem: one flat listing, filtered here (not all honour `prefix`)
        want = f"{bucket}/{key_prefix}"
        for info in fs.find(bucket, prefix=key_prefix, detail=True).values():
            name = info["name"].lstrip("/")
            if info.get("type", "file") == "file" and name.startswith(want):
                yield {**info, "name": name}


def stream_listing(fs, url: str, bucket: str, key_prefix: str, sort: bool, after: Optional[str]) -> Iterator[dict]:
    """Info dicts under the prefix (after `after` in name order, when resuming); none at all -> FileNotFoundError."""
    flux = accelerated(fs)
    if flux is not None:
        batches = flux.iter_objects(bucket, prefix=key_prefix, sort=sort)
    else:  # another fsspec filesystem: one flat listing
        batches = iter([sorted(list_objects(fs, bucket, key_prefix), key=lambda i: i["name"])])
    empty = True
    for batch in batches:
        for info in batch:
            empty = False
            if after is None or info["name"] > after:
                yield info
    if empty and after is None:
        raise FileNotFoundError(f"no objects under {url}")


def lookup_objects(fs, paths: Sequence[str]) -> dict[str, dict]:
    """Info of each existing path among `paths` ("bucket/key"); absent ones are left out."""
    paths = list(dict.fromkeys(paths))
    if len(paths) <= _LOOKUP_INDIVIDUALLY:
        def one(path: str) -> Optional[dict]:
            try:
                info = fs.info(path)
            except FileNotFoundError:
                return None
            return info if info.get("type", "file") == "file" else None

        with ThreadPoolExecutor(16) as pool:
            infos = list(pool.map(one, paths))
        return {p: {**i, "name": p} for p, i in zip(paths, infos) if i is not None}
    found: dict[str, dict] = {}
    by_bucket: dict[str, list[str]] = {}
    for p in paths:
        _, bucket, key = parse_url(p)
        by_bucket.setdefault(bucket, []).append(key)
    for bucket, keys in by_bucket.items():
        wanted = set(keys)
        for info in list_objects(fs, bucket, os.path.commonprefix(keys)):
            if parse_url(info["name"]).key in wanted:
                found[info["name"]] = info
    return found


def read_infos(fs, infos: list[dict]) -> dict[str, Any]:
    """{name: bytes or exception} for `infos`, in one compose-backed batched read where the filesystem is fluxfs.

    Any other filesystem (a cache in front of flux included: its `cat` serves and fills the cache) is
    read with its own concurrent `cat`.
    """
    sized = [i for i in infos if i.get("size") is not None]
    unsized = [i["name"] for i in infos if i.get("size") is None]
    out: dict[str, Any] = {}
    if sized:
        flux = accelerated(fs)
        if flux is not None:
            out.update(flux.cat_objects(sized, on_error="return"))
        else:
            unsized.extend(i["name"] for i in sized)
    if unsized:  # no sizes to plan composites with: plain concurrent GETs
        with cache_lock(fs):  # an fsspec cache read from several threads (prefetch) loses entries
            got = fs.cat(list(dict.fromkeys(unsized)), on_error="return")
        out.update((k.lstrip("/"), v) for k, v in got.items())  # some filesystems spell paths "/bucket/key"
    return out
