"""How many samples each shard holds, known before any is read: what equal shares per rank are cut from.

An index's first line carries its shard's sample count (`index.SAMPLES_KEY`), so one small ranged read
per shard tells it. An index written before that line had the count is read whole; a shard without an
index has its headers scanned (`indexer.build_index`), and a compressed one, which has no index, is streamed.
"""
from __future__ import annotations

import json
from typing import Any, Optional, Sequence

from fluxfs.handle import cache_lock

from .catalog import ShardInfo, is_compressed_name, read_index
from .index import FORMAT_KEY, SAMPLES_KEY, VERSION, ShardIndex, index_path
from .indexer import build_index, per_shard
from .stream import ShardReader, UnitRead

HEAD_BYTES = 4096  # an index's first line fits (its extra keys included) in all but odd cases: then it is read whole


def _head_count(fs: Any, shard: ShardInfo) -> Optional[int]:
    """The sample count in the first line of the shard's index (checked against the shard), or None."""
    try:
        with cache_lock(fs):
            head = fs.cat_file(index_path(shard.path), start=0, end=HEAD_BYTES)
    except FileNotFoundError:
        return None  # read_index says what happened
    if b"\n" not in head:
        return None
    try:
        meta = json.loads(head.split(b"\n", 1)[0])
    except ValueError:
        return None
    if not isinstance(meta, dict) or meta.get(FORMAT_KEY) != VERSION:
        return None
    count, size = meta.get(SAMPLES_KEY), meta.get("size")
    if not isinstance(count, int) or isinstance(count, bool) or count < 0 or not isinstance(size, int):
        return None
    ShardIndex(shard.path, size, [], meta.get("generation")).check_current(shard.size, shard.generation)
    return count


def sample_count(fs: Any, shard: ShardInfo, protocol: str) -> int:
    """The number of samples `shard` holds."""
    if shard.has_index:
        count = _head_count(fs, shard)
        if count is not None:
            return count
        return len(read_index(fs, shard, must_exist=True).samples)  # type: ignore[union-attr]
    url = shard.url(protocol)
    if is_compressed_name(shard.path):
        return sum(1 for _ in ShardReader(fs).samples(UnitRead(shard, url), None))
    return len(build_index(fs, url, size=shard.size, generation=shard.generation).samples)


def sample_counts(fs: Any, shards: Sequence[ShardInfo], protocol: str) -> list[int]:
    """`sample_count` of every shard, concurrently, in order."""
    return per_shard(fs, lambda s: sample_count(fs, s, protocol), list(shards))
