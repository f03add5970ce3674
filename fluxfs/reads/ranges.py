"""Byte ranges of one object, all pinned to one generation (`read_ranges`), and the one gap-coalescing rule
(`coalesce`).

Ranges less than `max_gap` apart are fetched by one GET and cut apart; a merged range up to 8 MiB is one
plain GET (the cheapest in client CPU), a larger one parallel ranged GETs (`direct.read_object`). Every GET
after the first is pinned to the generation the first one saw (or to the one given), so an object
overwritten or deleted meanwhile is one error, `ObjectChanged`, never a mix of two versions. With
``into=`` the bytes go straight into the caller's buffers (`into.read_into`).
"""
from __future__ import annotations

import asyncio
import dataclasses
import numbers
from typing import TYPE_CHECKING, Any, Optional, Sequence

from ..errors import ObjectChanged, PreconditionFailed, object_changed
from ..gcs.tasks import gather_all
from . import direct, into as into_mod

if TYPE_CHECKING:  # pragma: no cover
    from ..gcs.client import Client

# A merged range up to this size is one plain GET: ~20% less client CPU than the streaming
# parallel-range path, whose ranges are this size anyway.
ONE_GET = direct.DEFAULT_CHUNK
DEFAULT_MAX_GAP = into_mod.DEFAULT_MAX_GAP


@dataclasses.dataclass
class Group:
    """One GET's span [start, end) and the indices (into the ranges asked for) of the ranges it covers."""

    start: int
    end: int
    members: list


def coalesce(ranges: Sequence[tuple[int, int]], max_gap: int, max_size: Optional[int] = None) -> list[Group]:
    """Group (start, end) ranges, sorted by start, so ranges at most `max_gap` bytes apart (or overlapping)
    share a group, unless the group would span more than `max_size` bytes; empty ranges join like any
    other (a group of empty ranges alone is empty: nothing to fetch). Pure: the one rule the filesystem's
    `read_ranges`, the shard map dataset and the DCP reader all use."""
    if max_gap < 0:
        raise ValueError(f"max_gap must be >= 0 bytes, not {max_gap}")
    groups: list[Group] = []
    for i in sorted(range(len(ranges)), key=lambda i: ranges[i][0]):
        start, end = ranges[i]
        g = groups[-1] if groups else None
        if g is not None and start - g.end <= max_gap and (max_size is None or max(end, g.end) - g.start <= max_size):
            g.end = max(g.end, end)
            g.members.append(i)
        else:
            groups.append(Group(start, end, [i]))
    return groups


class Ranges(list):
    """The bytes of each range asked for, in order, and what the GETs said about the object."""

    size: int = -1                  # the whole object's size (-1: no GET was needed)
    generation: Optional[str] = None
    crc32c: Optional[int] = None


def _checked(ranges: Any, what: str) -> list[tuple[int, int]]:
    out = []
    for r in ranges:
        start, end = r
        for value in (start, end):
            if isinstance(value, bool) or not isinstance(value, numbers.Integral):
                raise TypeError(f"read_ranges {what}: range {r!r} needs whole byte offsets (ints)")
        if start < 0 or end < start:
            raise ValueError(f"read_ranges {what}: range {r!r} is not 0 <= start <= end")
        out.append((int(start), int(end)))
    return out


async def _get(client: "Client", bucket: str, key: str, g: Group, generation: Optional[str],
               chunk: Optional[int]) -> direct.Fetched:
    if g.end - g.start <= ONE_GET:
        return await direct.get_range(client, bucket, key, g.start, g.end, generation)
    return await direct.read_object(client, bucket, key, start=g.start, end=g.end, generation=generation, chunk=chunk)


async def read_ranges(client: "Client", path: str, ranges: Sequence[tuple[int, int]], *,
                      generation: Optional[str] = None, max_gap: int = DEFAULT_MAX_GAP, into: Optional[Sequence] = None,
                      chunk: Optional[int] = None, concurrency: Optional[int] = None,
                      limit: Optional[asyncio.Semaphore] = None, **into_kwargs: Any) -> Any:
    """The bytes of each (start, end) range of the object at `path`, as a `Ranges` list in the order asked
    (a range past the object's end comes back short; one starting past it is a ValueError).

    `generation`: read that one (else the path's ``#generation``, else the first GET's, pinned for the rest).
    `into`: one writable buffer per range, of its length, filled in place instead (returns `into.IntoResult`;
    ranges must not overlap; `into_kwargs`: `prefix`, `verify`). `limit` bounds GETs in flight (shared
    between calls), else `concurrency` (16). An object overwritten or deleted after its generation was
    known raises `ObjectChanged` naming it and the generation.
    """
    bucket, key, gen = client.split_path(path)
    what = f"{bucket}/{key}"
    spans = _checked(ranges, what)
    pinned = generation or gen or None
    if into is not None:
        return await _read_into(client, bucket, key, spans, list(into), pinned, max_gap, chunk, concurrency, limit,
                                into_kwargs)
    if into_kwargs:
        raise TypeError(f"read_ranges {what}: unexpected arguments {sorted(into_kwargs)} (they go with into=)")
    out = Ranges([b""] * len(spans))
    out.generation = pinned
    sem = limit or asyncio.Semaphore(concurrency or direct.DEFAULT_RANGE_CONCURRENCY)

    async def one(g: Group) -> None:
        async with sem:
            got = await _get(client, bucket, key, g, out.generation, chunk)
        out.generation = out.generation or got.generation
        out.size = got.size if got.size >= 0 else out.size
        out.crc32c = got.crc32c if got.crc32c is not None else out.crc32c
        body = got.body
        for i in g.members:
            s, e = spans[i]
            out[i] = body[s - got.start:e - got.start]  # the whole body itself (no copy) for a range alone

    groups = [g for g in coalesce(spans, max_gap) if g.end > g.start]
    try:
        if groups and out.generation is None:
            await one(groups[0])  # learns the generation the others are pinned to
            groups = groups[1:]
        await gather_all(one(g) for g in groups)
    except ObjectChanged:
        raise
    except (FileNotFoundError, PreconditionFailed) as exc:
        if out.generation is None:  # the first, unpinned read: the object is not there at all
            raise
        raise object_changed(what, out.generation) from exc
    return out


async def _read_into(client, bucket, key, spans, buffers, generation, max_gap, chunk, concurrency, limit, kwargs):
    what = f"{bucket}/{key}"
    if len(buffers) != len(spans):
        raise ValueError(f"read_ranges {what}: {len(spans)} ranges but {len(buffers)} buffers in into=")
    segments = []
    for (start, end), buf in zip(spans, buffers):
        n = memoryview(buf).nbytes
        if n != end - start:
            raise ValueError(f"read_ranges {what}: the buffer for range ({start}, {end}) holds {n} bytes, "
                             f"not {end - start}")
        segments.append((start, buf))
    return await into_mod.read_into(client, bucket, key, segments, generation=generation, max_gap=max_gap,
                                    range_size=chunk, concurrency=concurrency, limit=limit, **kwargs)
