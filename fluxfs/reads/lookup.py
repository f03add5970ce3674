"""Metadata for plain "bucket/key" paths (size, generation, crc32c), so a `cat` of many paths can compose.

From fsspec's listing cache when `find`/`ls` filled it, else from range listings (one request per
~1,000 objects); then `cat_paths` reads them through `batched.cat_objects`.
"""
from __future__ import annotations

import asyncio
import collections
import contextlib
from typing import TYPE_CHECKING, Optional

from ..gcs.pager import list_pages
from .batched import Result, cat_objects
from ..gcs.limits import MAX_COMPOSE_SOURCES

if TYPE_CHECKING:  # pragma: no cover
    from ..gcs.client import Client


def _cached_infos(client: "Client", paths: list[str]) -> tuple[dict[str, dict], list[str]]:
    """Infos from fsspec's listing cache (filled by find/ls), and the paths it does not know."""
    found: dict[str, dict] = {}
    missing: list[str] = []
    by_parent: dict[str, Optional[dict[str, dict]]] = {}
    for p in paths:
        parent = p.rsplit("/", 1)[0]
        index = by_parent.get(parent, False)
        if index is False:
            listing = client.dircache.get(parent)
            index = {i["name"].rstrip("/"): i for i in listing} if listing else None
            by_parent[parent] = index
        info = index.get(p) if index else None
        if info is None and p in client.dircache:  # a prefix with a listing of its own
            info = {"name": p, "size": 0, "type": "directory"}
        if info is not None and (info.get("generation") is not None or info.get("type") == "directory"):
            found[p] = info
        else:
            missing.append(p)
    return found, missing


def _common_prefix(a: str, b: str) -> str:
    """The longest common prefix of two keys: what a range listing of [a, b] can be narrowed to."""
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return a[:n]


async def _list_range(client: "Client", bucket: str, keys: list[str], end: Optional[str],
                      max_pages: int) -> dict[str, dict]:
    """List [keys[0], end) under their common prefix; infos of the wanted keys found in at most `max_pages`."""
    wanted = set(keys)
    last = keys[-1]
    prefix = _common_prefix(keys[0], last)
    found: dict[str, dict] = {}
    pages = list_pages(client, bucket, prefix=prefix, start_offset=keys[0], end_offset=end, max_pages=max_pages,
                       fields="items(name,size,generation,crc32c),nextPageToken")
    async with contextlib.aclosing(pages):
        async for page in pages:
            items = page.get("items", [])
            for it in items:
                if it["name"] in wanted:
                    found[it["name"]] = {"name": f"{bucket}/{it['name']}", "size": int(it.get("size", 0)),
                                         "generation": it.get("generation"), "crc32c": it.get("crc32c"),
                                         "type": "file"}
            if items and items[-1]["name"] >= last:
                break
    return found


async def infos_for_paths(client: "Client", paths: list[str]) -> list[dict]:
    """Info dicts for "bucket/key" paths: from the listing cache, else from range listings.

    Paths the cache does not know are listed in key ranges of ~1,000 (one request per
    1,000 objects, concurrently) when there are enough of them for compose to pay; a range
    that turns out sparse gives up after a few pages, and what is still unknown gets a
    name-only info (read directly).
    """
    found, missing = _cached_infos(client, paths)
    if len(missing) >= MAX_COMPOSE_SOURCES:
        by_bucket: dict[str, list[str]] = collections.defaultdict(list)
        for p in missing:
            b, _, k = p.partition("/")
            by_bucket[b].append(k)
        tasks = []
        for b, keys in by_bucket.items():
            keys.sort()
            chunks = [keys[i:i + 1000] for i in range(0, len(keys), 1000)]
            for n, chunk in enumerate(chunks):
                end = chunks[n + 1][0] if n + 1 < len(chunks) else None
                tasks.append((b, _list_range(client, b, chunk, end, max_pages=3)))
        sem = asyncio.Semaphore(16)

        async def limited(coro):
            async with sem:
                return await coro

        lists = await asyncio.gather(*(limited(c) for _, c in tasks))
        for (b, _), got in zip(tasks, lists):
            for k, info in got.items():
                found[f"{b}/{k}"] = info
    return [found.get(p) or {"name": p} for p in paths]


async def cat_paths(client: "Client", paths: list[str], on_error: str = "raise",
                    skip_dirs: bool = False) -> dict[str, Result]:
    """`cat` of many "bucket/key" paths: metadata from the cache or range listings, then `cat_objects`.

    `skip_dirs` (for recursive cats) drops paths the listing cache knows as directories.
    """
    infos = await infos_for_paths(client, paths)
    if skip_dirs:
        infos = [i for i in infos if i.get("type") != "directory"]
    return await cat_objects(client, infos, on_error=on_error)
