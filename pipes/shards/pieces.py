"""`ShardPieces`: a torchdata Node yielding this rank's pieces of each epoch's shards, for `ReadShards` under DDP.

The Nodes' counterpart of `FluxShardDataset`'s equal shares: the shards (resolved once by a `ShardCatalog`,
their sample counts learnt as the dataset learns them, `counts`) are put in a (seed, epoch) order, and the
epoch's samples cut into world_size contiguous pieces of one size (`epochs.even_share`: padded by repeating
the epoch's first samples, or dropped with ``drop_uneven=True``). Each piece of a shard is an info dict with
``first`` and ``count``, which `ReadShards` reads as that range of the shard's samples.
"""
from __future__ import annotations

from typing import Any, Dict, Optional, Sequence, Union

import numpy as np
from torchdata.nodes.base_node import BaseNode

from ..data.epochs import Run, even_share, iter_slots
from ..data.resume import bad, check_int, need
from ..data.splits import check_drop_uneven, distributed_rank, epoch_order
from ..distributed.listing import list_once as resolved_once
from ..options import merge_storage_options
from .catalog import SHARD_SUFFIX, STREAMED_SUFFIXES, ShardCatalog
from .counts import sample_counts

FIRST_KEY, COUNT_KEY = "first", "count"  # a piece's samples of its shard: [first, first + count)


class ShardPieces(BaseNode[Dict[str, Any]]):
    """This rank's pieces of the shards, epoch by epoch; every rank gets the same number of samples.

    Args:
        shards: a prefix URL (``flux://bucket/train/``), or shard URLs (brace patterns allowed).
        shuffle, seed: the shards' order, fixed by (seed, epoch).
        epoch: the first epoch; each `reset()` without a state starts the next one (as torchdata's
            samplers do), so each pass of a `Loader` is a new epoch.
        rank, world_size: from torch.distributed (when initialised) unless given.
        drop_uneven: False (pad), True (drop) or None (neither: each sample once, counts may differ).
        storage_options: for the filesystem (also as keyword arguments, merged).
    """

    EPOCH_KEY = "epoch"
    YIELDED_KEY = "yielded"  # pieces of the epoch handed out

    def __init__(self, shards: Union[str, Sequence[str]], *, shuffle: bool = False, seed: int = 0, epoch: int = 0,
                 rank: Optional[int] = None, world_size: Optional[int] = None, drop_uneven: Optional[bool] = False,
                 storage_options: Optional[dict] = None, list_once: bool = True, **options: Any):
        super().__init__()
        so = merge_storage_options(type(self).__name__, storage_options, options)
        named = isinstance(shards, str) and (shards.endswith(STREAMED_SUFFIXES + (SHARD_SUFFIX,)) or "{" in shards)
        prefix = isinstance(shards, str) and not named
        self.catalog = ShardCatalog("prefix" if prefix else "urls", shards, storage_options=so, list_once=list_once)
        self.shuffle, self.seed, self._next_epoch = bool(shuffle), int(seed), int(epoch)
        self.rank, self.world_size = distributed_rank(rank, world_size)
        self.drop_uneven = check_drop_uneven(drop_uneven, type(self).__name__)
        catalog = self.catalog
        self.counts = np.asarray(resolved_once(lambda: sample_counts(catalog.fs, catalog.shards, catalog.protocol),
                                           f"the sample counts of the shards of {catalog.describe()}",
                                           catalog.list_once), dtype=np.int64)
        self.protocol = catalog.protocol

    def reset(self, initial_state: Optional[Dict[str, Any]] = None):
        super().reset(initial_state)
        owner = type(self).__name__
        skip = 0
        if initial_state is not None:
            self.epoch = check_int(owner, self.EPOCH_KEY, need(initial_state, self.EPOCH_KEY, owner))
            skip = check_int(owner, self.YIELDED_KEY, need(initial_state, self.YIELDED_KEY, owner))  # type: ignore
        else:
            self.epoch = self._next_epoch
        self._next_epoch = self.epoch + 1  # type: ignore[operator]
        self._pieces = self._plan(self.epoch)  # type: ignore[arg-type]
        if skip > len(self._pieces):
            raise bad(owner, self.YIELDED_KEY, f"at most the epoch's {len(self._pieces)} pieces", skip)
        self._yielded = skip

    def _plan(self, epoch: int) -> list[Dict[str, Any]]:
        n = len(self.catalog)
        order = epoch_order(n, self.shuffle, self.seed, epoch)
        items = self.counts[order]
        if self.drop_uneven is None:
            runs = [Run(self.rank, n, self.world_size)] if self.rank < n else []
        else:
            runs = even_share([Run(0, n)], lambda s: items[s], self.rank, self.world_size, self.drop_uneven)
        pieces = []
        for _, slot, skip, take in iter_slots(runs):
            shard = self.catalog.shards[int(order[slot])]
            count = int(self.counts[order[slot]]) - skip if take is None else take
            pieces.append({"name": shard.path, "size": shard.size, "generation": shard.generation,
                           "crc32c": shard.crc32c, FIRST_KEY: skip, COUNT_KEY: count})
        return pieces

    def next(self) -> Dict[str, Any]:
        if self._yielded >= len(self._pieces):
            raise StopIteration()
        self._yielded += 1
        return dict(self._pieces[self._yielded - 1])

    def get_state(self) -> Dict[str, Any]:
        return {self.EPOCH_KEY: self.epoch, self.YIELDED_KEY: self._yielded}

