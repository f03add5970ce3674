"""A group load (`group=`) and the node-local cache (`cache_dir`) together: the model read once in all,
every node's cache filled from the tensors the group's broadcasts brought.

Read as a lone load reads, through the cache, each rank's share would start a fill of every object it
touches (the whole object, fetched in the background), and rank 0's header reads a fill of every object:
across nodes each node fetched whole objects again (1.5x to 1.9x the model for 2 ranks). So a group load
reads an object through the cache only where the node holds it complete (no data GET); otherwise from
storage, its share only, and once the broadcasts have brought every byte of the object, each rank fills
its node's entry from memory (size and crc32c checked as any fill; the ranks of a node start at different
objects, one fills an entry and the others find it complete). An object loaded in part (`tensors=` leaving
some of its tensors out, `slices=` cutting some) is read through the cache as before.
"""
from __future__ import annotations

from typing import Any, Iterator

import torch

from fluxfs import FluxFileSystem

from .objects import Opened, byte_view, open_object

CHUNK = 8 * 2**20  # bytes handed to the cache's writer at a time (each is copied once, as it is written)


async def open_unfilled(fs: FluxFileSystem, path: str, where: str) -> Opened:
    """`open_object`, but starting no fill of the node's cache: its header from a complete entry (no data
    GET), else from storage."""
    if fs.cache is None:
        return await open_object(fs, path, where)
    bucket, key, _ = fs.split_path(path)
    meta = await fs.cache_fetcher.head(bucket, key)  # the live generation, as a read through the cache learns it
    generation, size = str(meta["generation"]), int(meta.get("size") or 0)
    if _holds(fs, bucket, key, generation, size, meta.get("crc32c")):
        return await open_object(fs, path, where, generation=generation)
    return await open_object(fs, path, where, generation=generation, cache=False)


def _holds(fs: FluxFileSystem, bucket: str, key: str, generation: str, size: int, crc32c: Any) -> bool:
    # checked_by_caller: the cached read that follows checks its bytes; a first-use check here would hash the
    # whole entry (gigabytes for a shard) on the event loop, up to three times per file
    held = fs.cache.lookup(bucket, key, generation, size, checked_by_caller=True,  # type: ignore[union-attr]
                           store=fs.cache_fetcher.store, crc32c=crc32c)
    if held is None:
        return False
    held.release()
    return True


def read_options(fs: FluxFileSystem, opened: Opened) -> dict[str, Any]:
    """How this rank reads its share of `opened`: through the node's cache where it holds the entry
    complete ({}), else from storage without starting a fill ({"cache": False})."""
    if fs.cache is None:
        return {}
    bucket, key, _ = fs.split_path(opened.path)
    if _holds(fs, bucket, key, str(opened.generation), opened.header.size, opened.crc32c):
        return {}
    return {"cache": False}


def whole(opened: Opened, tensors: dict[str, torch.Tensor]) -> bool:
    """The header's bytes and `tensors` (the object's tensors loaded whole) cover the object exactly."""
    infos = opened.header.tensors
    if len(opened.head) < opened.header.data_start or set(tensors) != set(infos):
        return False
    at = opened.header.data_start
    for t in sorted(infos.values(), key=lambda t: (t.start, t.end)):
        if t.start != at:
            return False  # a gap (or an overlap) no tensor holds
        at = t.end
    return at == opened.header.size


def _chunks(opened: Opened, tensors: dict[str, torch.Tensor]) -> Iterator[bytes]:
    yield bytes(opened.head.slice(0, opened.header.data_start))
    for t in sorted(opened.header.tensors.values(), key=lambda t: (t.start, t.end)):
        view = byte_view(tensors[t.name])
        for at in range(0, len(view), CHUNK):
            yield bytes(view[at:at + CHUNK])


def keep(fs: FluxFileSystem, objects: list[Opened], read: list[dict[str, Any]],
         tensors: list[dict[str, torch.Tensor]], rank: int, size: int) -> None:
    """Fill the node's cache with each object read from storage (`read[k]` {"cache": False}) whose every byte
    this rank holds (`tensors[k]`: the object's tensors loaded whole), from memory. Rank r fills objects r,
    r + size, ... first, then looks at the others: the ranks of a node fill different entries at once, and
    find the rest complete (or wait for the rank filling them) rather than writing them again."""
    cache = fs.cache
    if cache is None:
        return
    mine = range(rank % size, len(objects), size)
    for k in [*mine, *(k for k in range(len(objects)) if k % size != rank % size)]:
        opened = objects[k]
        if not read[k] or opened.generation is None or not whole(opened, tensors[k]):
            continue
        if cache.limit is not None and opened.header.size > cache.limit:
            continue  # never fits: not copied only to be dropped
        bucket, key, _ = fs.split_path(opened.path)
        # checked_by_caller: nothing is read back here (an entry another rank just filled is not read whole)
        cache.hold(bucket, key, opened.generation, opened.header.size, opened.crc32c,
                   lambda o=opened, t=tensors[k]: _chunks(o, t), store=fs.cache_fetcher.store,
                   checked_by_caller=True).release()
