"""Gloo ranks for test_group_cache.py: two ranks load a model directory, then a file, with group= and
cache_dir=, cold and then warm (launched by `tests._gloo.run_ranks` with BUCKET CACHE NODES). NODES 1: both
ranks read through one server into one cache directory (one node); NODES 2: each through its own server into
its own (two nodes)."""
from __future__ import annotations

import os
import time

from tests._gloo import GlooRank, digests, start_ranks

PART = 256 * 1024  # the cache's fill unit here: each file spans several parts, as a real shard does


def settled(cache_dir: str, entries: int) -> int:
    """The entries the node's cache holds once its fills have completed (a bounded wait, no fixed sleep)."""
    from fluxfs.cache import NodeCache

    deadline = time.monotonic() + 30
    while len(NodeCache(cache_dir).entries()) < entries and time.monotonic() < deadline:
        time.sleep(0.05)
    return len(NodeCache(cache_dir).entries())


def rank_main(me: GlooRank, bucket: str, cache: str, nodes: str) -> None:
    import torch.distributed as dist

    from fluxfs.cache import ranges
    from fluxfs.pipes.safetensors import load_file, load_model_dir

    ranges.PART = PART
    cache_dir = os.path.join(cache, f"node{me.rank % int(nodes)}")
    options = dict(me.options, cache_dir=cache_dir)
    url, file = f"flux://{bucket}/model", f"flux://{bucket}/file/model.safetensors"
    index = 1 if me.rank == 0 or nodes == "1" else 0  # rank 0 reads the model's index (a node of its own: alone)
    # The model directory (4 files and, where rank 0 is, the index), then a file of its own.
    for name, entries, call in [("dir", 4 + index, lambda: load_model_dir(url, group=None, **options)),
                                ("file", 5 + index, lambda: load_file(file, group=dist.group.WORLD, **options))]:
        me.report[f"{name}_cold"] = {"tensors": digests(me.measured("cold", call)), **me.report.pop("cold")}
        me.report[f"{name}_cold"]["entries"] = settled(cache_dir, entries) == entries
        me.report[f"{name}_warm"] = {"tensors": digests(me.measured("warm", call)), **me.report.pop("warm")}


if __name__ == "__main__":
    start_ranks(rank_main)
