"""Training on N ranks as a team would: gloo ranks as processes, DataLoader workers, DistributedDataParallel.

One run of `tests/pipes/_ddp_child.py` over 2 ranks (each through its own server on one shared root, so what a
server sent is what its rank read): the map-style dataset's sampler splits by rank, and DDP loops over uneven
tar shards and over objects end every epoch with the same number of steps on every rank.
"""
from __future__ import annotations

import pytest

from fluxfs.pipes import FluxSampler
from tests import _gloo
from tests.shards.conftest import put_shard, shard_bytes, shard_keys

from ._ddp_child import EPOCHS

N_OBJECTS = 51  # 2 ranks x 1 worker: 26 a rank, one object read twice
SHARD_COUNTS = (9, 2, 14, 1, 5)  # 31 samples: uneven shards over 2 ranks x 2 workers


def test_sampler_splits_the_order_by_rank_like_distributed_sampler():
    def shares(n, world, **kwargs):
        return [list(FluxSampler(n, seed=3, rank=r, world_size=world, **kwargs)) for r in range(world)]

    padded = shares(10, 3)
    assert [len(s) for s in padded] == [4, 4, 4] and set(sum(padded, [])) == set(range(10))
    assert len(sum(padded, [])) - len(set(sum(padded, []))) == 2  # the order's first 2 repeated
    dropped = shares(10, 3, drop_uneven=True)
    assert [len(s) for s in dropped] == [3, 3, 3] and len(set(sum(dropped, []))) == 9
    once = shares(10, 3, drop_uneven=None)
    assert sorted(sum(once, [])) == list(range(10)) and [len(s) for s in once] == [4, 3, 3]
    assert [len(FluxSampler(10, rank=r, world_size=3)) for r in range(3)] == [4, 4, 4]
    assert list(FluxSampler(10, seed=3)) == FluxSampler(10, seed=3).whole_order(0).tolist()  # one process: all
    from fluxfs.pipes.shards.map_dataset import BlockSampler  # the shard map dataset's sampler(block=...)

    blocks = [list(BlockSampler(50, block=4, window=8, seed=1, rank=r, world_size=4)) for r in range(4)]
    assert [len(b) for b in blocks] == [13] * 4 and set(sum(blocks, [])) == set(range(50))


@pytest.fixture(scope="module")
def team(tmp_path_factory):
    """The child's reports, one per rank, and the objects' total bytes."""
    root, out = tmp_path_factory.mktemp("root"), tmp_path_factory.mktemp("ranks")
    with _gloo.written_root(root) as (first, fs, bucket):
        objects = {f"{bucket}/objects/{i:04d}": bytes([i]) * (500 + 37 * i) for i in range(N_OBJECTS)}
        fs.pipe(objects)
        for i, n in enumerate(SHARD_COUNTS):
            put_shard(fs, f"{bucket}/shards/shard-{i:06d}.tar", shard_bytes(shard_keys(i, n)))
        reports = _gloo.run_ranks_on(root, first, 2, "tests.pipes._ddp_child", out, bucket)
    return reports, sum(map(len, objects.values())), bucket


def test_map_sampler_gives_each_rank_its_disjoint_equal_share_and_reads_only_it(team):
    reports, total_bytes, bucket = team
    names = {f"objects/{i:04d}" for i in range(N_OBJECTS)}
    for epoch in (0, 1):
        zero, one = (set(r[f"sampler{epoch}"]) for r in reports)
        assert len(reports[0][f"sampler{epoch}"]) == len(reports[1][f"sampler{epoch}"]) == 26
        assert zero | one == names and len(zero & one) <= 1  # one object padded onto the second rank
    assert reports[0]["sampler0"] != reports[0]["sampler1"]  # set_epoch: a new order
    assert reports[0]["sampler_len"] == reports[1]["sampler_len"] == 26
    for r in reports:  # each rank read about its half of the bytes (read-ahead included), not all of them
        assert 0.4 * total_bytes < r["reads0"]["bytes"] < 0.65 * total_bytes, (r["reads0"], total_bytes)


def test_ddp_over_uneven_shards_takes_the_same_steps_on_every_rank_each_epoch(team):
    reports, _, _ = team
    per_reader = -(-sum(SHARD_COUNTS) // 4)  # 8: 31 samples padded to 32 over 2 ranks x 2 workers
    assert [r["shard_steps"] for r in reports] == [[2 * -(-per_reader // 3)] * EPOCHS] * 2  # 2 workers x 3 batches


def test_ddp_over_objects_takes_the_same_steps_on_every_rank_each_epoch(team):
    reports, _, _ = team
    assert [r["object_steps"] for r in reports] == [[-(-26 // 4)] * EPOCHS] * 2  # 26 objects per rank
