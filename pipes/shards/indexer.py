"""Index a shard that has none by scanning its tar headers with ranged reads, and load indexes.

The scanner says where the next header is (`TarScanner.wanted`); member data in between is never
read. Windows adapt to the members: one that held several headers doubles (small members: a few
large reads instead of one round trip per header), one that held at most one shrinks back to a
header's size (large members: only their headers are read). Every read is pinned to the generation
seen first, so the index describes one version of the shard.
"""
from __future__ import annotations

import logging
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Optional, Sequence, TypeVar

from .compressed import refuse_compressed
from .errors import ShardError
from .index import ShardIndex, index_path
from .ranges import pins_generations, read_range
from .tarformat import TarScanner

logger = logging.getLogger(__name__)
T, R = TypeVar("T"), TypeVar("R")

HEADER_WINDOW = 4096          # a header block, with room for pax records of long names
FIRST_WINDOW = 64 * 1024
MAX_WINDOW = 8 * 2**20        # as the filesystem's ranged GETs


def shard_info(fs, path: str, url: str) -> tuple[int, Optional[str]]:
    """(size, generation) of a shard; FileNotFoundError naming it when absent."""
    try:
        info = fs.info(path)
    except FileNotFoundError:
        raise FileNotFoundError(f"shard {url} does not exist") from None
    if info.get("type", "file") != "file":
        raise FileNotFoundError(f"shard {url} is not an object")
    gen = info.get("generation")
    return int(info.get("size") or 0), (str(gen) if gen not in (None, "") else None)


def build_index(fs, url: str, *, size: Optional[int] = None, generation: Optional[str] = None) -> ShardIndex:
    """Scan shard `url`'s headers with ranged reads; returns its index (not written anywhere)."""
    path = fs._strip_protocol(url)
    if size is None:
        size, generation = shard_info(fs, path, url)
    scanner = TarScanner(url)
    members = []
    window = FIRST_WINDOW
    while not scanner.ended:
        pos = scanner.wanted
        if pos >= size:
            break
        end = min(size, pos + window)
        data = read_range(fs, path, url, pos, end, generation)
        if pos == 0:
            refuse_compressed(url, data)
        found = scanner.feed(data, at=pos)
        members += found
        if len(found) >= 2:
            window = min(window * 2, MAX_WINDOW)
        elif scanner.wanted > end:
            window = HEADER_WINDOW
    scanner.finish(size)
    return ShardIndex(url, size, members, generation)


def check_empty(fs, url: str, index: ShardIndex) -> None:
    """Check that a shard whose index lists no member holds none (its headers scanned, a read or two)."""
    found = build_index(fs, url, size=index.size, generation=index.generation).members
    if found:
        raise ShardError(url, found[0].offset, f"the index lists no member, but the shard holds member "
                                               f"{found[0].name!r} here: the index does not describe this shard; "
                                               f"rebuild it with `fluxfs shard index --force {url}`")


def write_index(fs, index: ShardIndex) -> str:
    """Store `index` beside its shard; returns the index's path."""
    path = index_path(fs._strip_protocol(index.shard))
    fs.pipe_file(path, index.to_bytes())
    return path


def load_index(fs, url: str, *, build_missing: bool = True) -> ShardIndex:
    """The shard's stored index, checked against the shard's current size and generation.

    Without an index (and `build_missing`), one is built by scanning, in memory only (a warning says
    `fluxfs shard index` would store it). A stale index is a `ShardError` naming the shard.
    """
    path = fs._strip_protocol(url)
    size, generation = shard_info(fs, path, url)
    try:
        raw = fs.cat_file(index_path(path))
    except FileNotFoundError:
        if not build_missing:
            raise FileNotFoundError(f"shard {url} has no index {index_path(url)}; "
                                    f"build one with `fluxfs shard index {url}`") from None
        logger.warning("shard %s has no index: scanning its headers (store one with `fluxfs shard index`)", url)
        return build_index(fs, url, size=size, generation=generation)
    index = ShardIndex.from_bytes(url, raw)
    index.check_current(size, generation if pins_generations(fs) else index.generation)
    if index.generation is None:
        index.generation = generation
    return index


def _shared_cache(fs) -> bool:
    """Whether `fs` is one of fsspec's caching filesystems (`filecache::`, `simplecache::`, `blockcache::`): they
    keep their cache's metadata without a lock, so two threads opening files at once can lose one's entry (an
    fsspec `TypeError` in `_open`)."""
    from fsspec.implementations.cached import CachingFileSystem

    return isinstance(fs, CachingFileSystem)


def per_shard(fs, call: Callable[[T], R], items: Sequence[T], threads: int = 16) -> list[R]:
    """`call(item)` of every item (reads through `fs`), concurrently (one at a time through fsspec's caching
    filesystems), in order."""
    if len(items) <= 1 or _shared_cache(fs):
        return [call(item) for item in items]
    with ThreadPoolExecutor(min(threads, len(items))) as pool:
        return list(pool.map(call, items))


def load_indexes(fs, urls: Sequence[str], *, build_missing: bool = True, threads: int = 16) -> list[ShardIndex]:
    """`load_index` of every shard, concurrently (one at a time through fsspec's caching filesystems), in order."""
    return per_shard(fs, lambda u: load_index(fs, u, build_missing=build_missing), urls, threads)
