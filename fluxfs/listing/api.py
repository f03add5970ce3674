"""The listing entry points: `iter_objects` (streamed batches), `list_all`, and `find` (gcsfs's `_find`).

Each runs one `Lister` on the filesystem's event loop and shapes what it yields; `find`
also fills the dircache (`dircache.fill_dircache`). `du` is `FluxFileSystem._du` over `find`.
"""
from __future__ import annotations

import asyncio
import contextlib
import operator
from typing import TYPE_CHECKING, Any, AsyncIterator

from ..gcs.pager import list_pages
from ..gcs.timestamps import TimestampCache
from .dircache import fill_dircache
from .lister import _DONE, LIST_FIELDS, Lister

if TYPE_CHECKING:  # pragma: no cover
    from ..gcs.client import Client


def split_listing_path(client: "Client", path: str, prefix: str = "") -> tuple[str, str]:
    """(bucket, key prefix) for a listing of `path` treated as a directory, plus `prefix` (gcsfs's rule)."""
    bucket, key, _ = client.split_path(path)
    if not bucket:
        raise ValueError(f"cannot list {path!r}: no bucket named")
    key = key.rstrip("/")
    return bucket, (key + "/" if key else "") + prefix


def _make_progress(progress: Any, what: str):
    """None/False: quiet; True: a tqdm total-count bar on stderr; else an object with update(n)."""
    if progress is None or progress is False:
        return None, False
    if progress is True:
        from tqdm.auto import tqdm

        return tqdm(desc=f"listing {what}", unit=" obj", unit_scale=True, leave=False), True
    return progress, False


async def iter_objects(
    client: "Client",
    path: str,
    prefix: str = "",
    sort: bool = False,
    batch_size: int | None = None,
    *,
    concurrency: int | None = None,
    page_size: int | None = None,
    include_temp: bool = False,
    progress: Any = None,
    mtime: bool = False,
    versions: bool = False,
    start_offset: str | None = None,
    end_offset: str | None = None,
) -> AsyncIterator[list[dict]]:
    """Batches of info dicts (gcsfs shape) for every object under `path`/ + `prefix`, as they arrive.

    `path` is a bucket or a "directory" in it; `prefix` is a raw key prefix below it, so
    ``("bkt", prefix="img_")`` lists keys starting with ``img_``. Unsorted by default (pages
    come out as workers fetch them); ``sort=True`` yields names in ascending order, still
    streaming. Batches are whole pages unless `batch_size` regroups them. Temporary objects
    of fluxfs (named like one under `temp_prefix` *and* marked as one: `hidden.py`) are left out unless
    `include_temp`; a user's other objects under that prefix, even named like a temporary, are listed.
    `mtime=True` adds gcsfs's "mtime" (UTC datetime from "updated"), as `find` returns it. `versions=True` lists every
    generation (noncurrent ones of versioned buckets too), each its own info dict with its
    "generation". `start_offset`/`end_offset` (object keys, no bucket) keep the listing to keys in
    ``[start_offset, end_offset)`` within the prefix, as GCS's parameters of those names (a share of a
    prefix, listed by one of several processes). Closing the iterator early cancels the listing.
    """
    if batch_size is not None and batch_size < 1:
        raise ValueError(f"batch_size must be at least 1, not {batch_size}")
    bucket, key_prefix = split_listing_path(client, path, prefix)
    concurrency = concurrency or client.options.list_concurrency
    page_size = page_size or client.options.list_page_size
    if not 1 <= page_size <= 1000:
        raise ValueError(f"page_size must be between 1 and 1000 (GCS's cap), not {page_size}")
    if progress is None:
        progress = client.options.progress or None
    bar, own_bar = _make_progress(progress, f"{bucket}/{key_prefix}")
    lister = Lister(client, bucket, key_prefix, concurrency=concurrency, page_size=page_size, sort=sort,
                    include_temp=include_temp, progress=bar, queue_size=max(8, 2 * concurrency), mtime=mtime,
                    versions=versions, start_offset=start_offset, end_offset=end_offset)
    task = asyncio.ensure_future(lister.run())
    try:
        held: list[dict] = []
        while True:
            batch = await lister.queue.get()
            if batch is _DONE:
                break
            if isinstance(batch, BaseException):
                raise batch
            if batch_size is None:
                yield batch
                continue
            held.extend(batch)
            while len(held) >= batch_size:
                out, held = held[:batch_size], held[batch_size:]
                yield out
        if held:
            yield held
        await task
    finally:
        if not task.done():
            task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await task
        if own_bar:
            bar.close()


async def list_all(client: "Client", path: str, prefix: str = "", sort: bool = True, **kwargs: Any) -> list[dict]:
    """Every info dict under `path`/ + `prefix` in one list (sorted by name unless sort=False).

    kwargs go to `iter_objects` (concurrency, page_size, include_temp, progress, mtime).
    """
    batches: list[list[dict]] = []
    # Unsorted streaming, one sort at the end: no worker waits for the lowest span to drain
    # as in sorted streaming.
    async for batch in iter_objects(client, path, prefix, sort=False, **kwargs):
        batches.append(batch)
    return _concat(batches, sort)


_name = operator.itemgetter("name")


def _concat(batches: list[list[dict]], sort: bool) -> list[dict]:
    """The batches as one list, sorted by name if asked.

    Each batch is a sorted run and the runs cover disjoint key ranges (spans partition the
    key space and each is paged in order), so ordering the runs by their first name already
    sorts the whole; the final timsort then only confirms one run (n comparisons, not
    n log(runs)), and still sorts correctly should a server ever return a page out of order.
    """
    if sort:
        batches.sort(key=lambda b: b[0]["name"])
    out = [it for b in batches for it in b] if len(batches) != 1 else batches[0]
    if sort:
        out.sort(key=_name)
    return out


async def find(client: "Client", path: str, maxdepth: int | None = None, withdirs: bool = False,
               detail: bool = False, prefix: str = "", update_cache: bool = True, versions: bool = False) -> Any:
    """What gcsfs's `_find` returns for the same bucket, from the parallel lister.

    Like gcsfs: list `path` as a directory; if that finds nothing, `path` may be an object
    itself; fill the dircache from the flat listing (not when `prefix` makes it partial).
    `versions=True`: every generation, named "bucket/key#generation" as gcsfs names them; the
    dircache is left alone (it holds live objects only).
    """
    path = client.strip_protocol(path)
    if maxdepth is not None and maxdepth < 1:
        raise ValueError("maxdepth must be at least 1")
    objects = await list_all(client, path, prefix, mtime=True, versions=versions)
    bucket, key, _ = client.split_path(path)
    if not objects and key and not prefix:
        # gcsfs then lists with the key itself as prefix and keeps only an exact match:
        # the smallest key starting with `key` is `key`, so one single-result page answers it
        # (its generations, with versions, come first too: one page of them).
        items = []
        async for page in list_pages(client, bucket, prefix=key, fields=LIST_FIELDS, page_size=1000 if versions else 1,
                                     max_pages=1, params={"versions": "true"} if versions else None, what=path):
            items = [it for it in (page.get("items") or []) if it["name"] == key]
        for it in items:
            it["name"], it["size"], it["type"] = f"{bucket}/{key}", int(it.get("size", 0)), "file"
        add_mtimes(items)
        objects = items
    dirs = fill_dircache(client, path, objects, prefix=prefix, update_cache=update_cache and not versions)
    if withdirs:
        objects = sorted(objects + list(dirs.values()), key=lambda o: o["name"])
    if maxdepth:
        depth = path.rstrip("/").count("/") + maxdepth
        objects = [o for o in objects if o["name"].count("/") <= depth]
    if versions:  # gcsfs's names for generations: "bucket/key#generation"
        named = [(f"{o['name']}#{o['generation']}" if o.get("type") == "file" else o["name"], o) for o in objects]
        return dict(named) if detail else [n for n, _ in named]
    if detail:
        return {o["name"]: o for o in objects}
    return [o["name"] for o in objects]


def add_mtimes(objects: list[dict]) -> None:
    """Set gcsfs's "mtime" (a UTC datetime) from "updated" where missing, as gcsfs's `_process_object` does.

    Each distinct timestamp string is parsed once (objects written together share theirs).
    """
    parsed = TimestampCache()
    for o in objects:
        ts = o.get("updated")
        if ts is not None and "mtime" not in o:
            o["mtime"] = parsed[ts]
