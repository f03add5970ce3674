"""Ranged reads of a shard pinned to the generation its index describes, so a replaced shard is reported, not mixed.

fluxfs reads `[start, end)` of that exact generation (`fs.read_ranges`); a generation that no longer
exists (the shard was overwritten or deleted) comes back as a `ShardChanged` naming the shard. Other
fsspec filesystems have no generations: their ranges are read as they are (`cat_file`).
"""
from __future__ import annotations

from typing import NamedTuple, Optional, Sequence

from fluxfs import support
from fluxfs.errors import ObjectChanged
from fluxfs.handle import accelerated, cache_lock

from .errors import ShardChanged, ShardError


def pins_generations(fs) -> bool:
    """Whether `fs` reads a given generation (fluxfs does; local and memory filesystems and caches have none)."""
    return accelerated(fs) is not None


def _replaced(url: str, start: int, generation: Optional[str]) -> ShardError:
    return ShardChanged(url, start, f"the shard changed while being read: generation {generation} no longer exists "
                                    f"(replaced or deleted); its index describes the old one", generation)


def _checked(url: str, start: int, end: int, data: bytes) -> bytes:
    if len(data) != end - start:
        raise ShardError(url, start + len(data), f"truncated: {end - start} bytes expected from byte {start}, "
                                                 f"{len(data)} read (the shard is shorter than its index says)")
    return data


async def _read_one(fs, path: str, url: str, start: int, end: int, generation: Optional[str]) -> bytes:
    """One span through `read_ranges` (a span up to 8 MiB is one plain GET, larger ones parallel ranged GETs)."""
    try:
        data = (await fs._read_ranges(path, [(start, end)], generation=generation or None, max_gap=0))[0]
    except ObjectChanged:
        raise _replaced(url, start, generation) from None
    except ValueError as exc:  # 416: the shard ends before `start`
        if isinstance(exc, ShardError):
            raise
        raise ShardError(url, start, f"truncated: the shard ends before byte {start}") from None
    return _checked(url, start, end, data)


class Span(NamedTuple):
    """One ranged read: bytes [start, end) of the shard at `path` (named `url` in errors), of `generation`."""

    path: str
    url: str
    start: int
    end: int
    generation: Optional[str]


def read_spans(fs, spans: Sequence[Span]) -> list[bytes]:
    """The bytes of every span (of any shards), read concurrently on the filesystem's loop; in order."""
    if accelerated(fs) is not None:  # a cache in front of flux forwards attributes: a type check
        async def gather() -> list[bytes]:
            return list(await support.gather_all(_read_one(fs, *s) for s in spans))

        return support.run(fs, gather)
    out = []
    for s in spans:
        with cache_lock(fs):  # read-ahead threads share it: an fsspec cache is not thread-safe
            out.append(_checked(s.url, s.start, s.end, fs.cat_file(s.path, start=s.start, end=s.end)))
    return out


def read_range(fs, path: str, url: str, start: int, end: int, generation: Optional[str]) -> bytes:
    return read_spans(fs, [Span(path, url, start, end, generation)])[0]
