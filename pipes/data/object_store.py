"""The filesystem calls pipes' data loading makes: list a prefix, look objects up, read a batch of them."""
from __future__ import annotations

import os
import warnings
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Iterator, Optional, Sequence

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


class AmbiguousPrefixWarning(UserWarning):
    """A prefix URL without a trailing '/' names no directory but starts several keys: all of them are read."""


def prefix_listing(fs, url: str, bucket: str, key_prefix: str, bare: bool = False,
                   keep: Optional[Callable[[dict], bool]] = None) -> list[dict]:
    """The objects a dataset's prefix URL names, read as `fs.find` reads a path: ``.../train`` is the directory
    ``train/`` when there is one (never ``train2/`` beside it), else every key starting with ``train``.

    The latter, when it starts other keys than ``train`` itself (among those `keep` keeps), is read as a
    key prefix (as documented) with an `AmbiguousPrefixWarning` naming a few; `bare`: every key starting with
    `key_prefix`, directory or not, without the warning.
    """
    if bare or not key_prefix or key_prefix.endswith("/"):
        return list(list_objects(fs, bucket, key_prefix))
    inside = list(list_objects(fs, bucket, key_prefix + "/"))
    if inside:
        return inside
    rows = list(list_objects(fs, bucket, key_prefix))
    exact = f"{bucket}/{key_prefix}"
    others = sorted(r["name"] for r in rows if r["name"] != exact and (keep is None or keep(r)))
    if others:
        shown = ", ".join(n[len(bucket) + 1:] for n in others[:4]) + (f" and {len(others) - 4} more"
                                                                     if len(others) > 4 else "")
        warnings.warn(
            f"{url} names no directory (nothing under {url}/), so it is read as a key prefix: the {len(others)} "
            f"object(s) whose keys start with {key_prefix!r} ({shown}), from however many directories. End the "
            f"URL with '/' to read one directory; pass bare_prefix=True to read a key prefix without this warning",
            AmbiguousPrefixWarning, stacklevel=2)
    return rows


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
