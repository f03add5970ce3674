"""Which share of an epoch (its *split*) a reader, one (rank, DataLoader worker) pair, reads, and in what order.

The global order (sorted, or a permutation seeded by `seed` and the epoch) is the same on every
rank and worker, so dealing it by a global reader index (`epochs.reader_runs`) gives every object
to exactly one of them per epoch. ("Shard" is kept for a tar file, `pipes.shards`.)
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as np
import numpy.random  # now, not in each forked DataLoader worker: ~0.1 s of CPU there
import torch.distributed as dist
import torch.utils.data


@dataclass(frozen=True)
class Split:
    """This reader's split of the epoch: `index` in 0..count-1, where count = world_size x num_workers."""

    index: int
    count: int
    rank: int
    world_size: int
    worker_id: int
    num_workers: int


def distributed_rank(rank: Optional[int] = None, world_size: Optional[int] = None) -> tuple[int, int]:
    """(rank, world_size): as given, else from torch.distributed when initialised, else (0, 1)."""
    if rank is None or world_size is None:
        if dist.is_available() and dist.is_initialized():
            rank = dist.get_rank() if rank is None else rank
            world_size = dist.get_world_size() if world_size is None else world_size
        else:
            rank = 0 if rank is None else rank
            world_size = 1 if world_size is None else world_size
    if world_size < 1 or not 0 <= rank < world_size:
        raise ValueError(f"rank {rank} is not in range for world_size {world_size}")
    return rank, world_size


def check_drop_uneven(value: object, where: str) -> Optional[bool]:
    """`drop_uneven` as given: False (pad), True (drop) or None (neither); anything else is a TypeError."""
    if value is not None and not isinstance(value, bool):
        raise TypeError(f"{where}: drop_uneven must be False (pad to equal counts under torch.distributed), True "
                        f"(drop to equal counts) or None (every sample once, counts may differ), not {value!r}")
    return value


def equal_counts(drop_uneven: Optional[bool], world_size: int) -> bool:
    """Whether every reader must read the same number of items: `drop_uneven`, or padding under DDP."""
    return drop_uneven is True or (drop_uneven is False and world_size > 1)


def current_split(rank: int, world_size: int) -> Split:
    """The split of this DataLoader worker (or of the main process when there are no workers)."""
    info = torch.utils.data.get_worker_info()
    worker_id, num_workers = (info.id, info.num_workers) if info is not None else (0, 1)
    # Rank-major numbering: rank r's workers hold splits r*W .. r*W+W-1.
    return Split(rank * num_workers + worker_id, world_size * num_workers, rank, world_size, worker_id, num_workers)


def epoch_order(n: int, shuffle: bool, seed: int, epoch: int) -> np.ndarray:
    """Indices 0..n-1 in this epoch's order: identity, or a permutation fixed by (seed, epoch)."""
    if not shuffle:
        return np.arange(n, dtype=np.int64)
    return np.random.default_rng([seed, epoch]).permutation(n)

