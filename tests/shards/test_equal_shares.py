"""Equal sample counts per reader (rank x DataLoader worker) under a world size > 1 or drop_uneven: padded by
repeating the epoch's first samples, or the last ones dropped; through mid-epoch and elastic resume too."""
from __future__ import annotations

import warnings
from collections import Counter

import pytest
from torch.utils.data import DataLoader
from torchdata.stateful_dataloader import StatefulDataLoader

from fluxfs.pipes import reader_states
from fluxfs.pipes.shards import FluxShardDataset, MissingIndexWarning

from .conftest import COUNTS, all_sample_keys

TOTAL = sum(COUNTS)  # 21, over shards of 7, 3, 5, 0 and 6 samples (one without an index)


def make(server, bucket, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", MissingIndexWarning)
        return FluxShardDataset.from_prefix(f"flux://{bucket}/ds/", shuffle=True, seed=3, shuffle_buffer=4,
                                            storage_options={"endpoint_url": server.url, "token": "anon"}, **kwargs)


def rank_keys(loader) -> list[str]:
    return [k for batch in loader for k in batch["__key__"]]


@pytest.mark.parametrize("world,workers,drop", [(2, 2, False), (3, 1, False), (2, 2, True), (3, 1, True)])
def test_every_rank_reads_the_same_count_padded_or_dropped(flux_server, shard_bucket, world, workers, drop):
    readers = world * workers
    per = TOTAL // readers if drop else -(-TOTAL // readers)
    for epoch in (0, 1):
        ranks = []
        for rank in range(world):
            ds = make(flux_server, shard_bucket, rank=rank, world_size=world, drop_uneven=drop)
            ds.set_epoch(epoch)
            ranks.append(rank_keys(DataLoader(ds, batch_size=2, num_workers=workers)))
        assert [len(r) for r in ranks] == [per * workers] * world, (epoch, [len(r) for r in ranks])
        seen = Counter(k for r in ranks for k in r)
        if drop:  # fewer than readers left out, none repeated
            assert max(seen.values()) == 1 and TOTAL - len(seen) == TOTAL % readers
            assert set(seen) <= set(all_sample_keys())
        else:  # every sample, and fewer than readers of them once more
            assert set(seen) == set(all_sample_keys()) and sum(seen.values()) - TOTAL == per * readers - TOTAL


def test_one_process_reads_every_sample_once_unless_drop_uneven(flux_server, shard_bucket):
    keys = rank_keys(DataLoader(make(flux_server, shard_bucket), batch_size=2, num_workers=2))
    assert Counter(keys) == Counter(all_sample_keys())
    dropped = rank_keys(DataLoader(make(flux_server, shard_bucket, drop_uneven=True), batch_size=2, num_workers=2))
    assert len(dropped) == TOTAL - TOTAL % 2 and len(set(dropped)) == len(dropped)


def test_mid_epoch_resume_keeps_every_rank_at_the_same_count(flux_server, shard_bucket):
    """Each of 2 ranks x 2 workers stops after 3 batches and resumes in a fresh loader: 11 samples per rank."""
    per_rank = 2 * -(-TOTAL // 4)
    for rank in range(2):
        full = rank_keys(StatefulDataLoader(make(flux_server, shard_bucket, rank=rank, world_size=2),
                                            batch_size=2, num_workers=2))
        loader = StatefulDataLoader(make(flux_server, shard_bucket, rank=rank, world_size=2), batch_size=2,
                                    num_workers=2)
        it = iter(loader)
        head = [k for _ in range(3) for k in next(it)["__key__"]]
        state = loader.state_dict()
        del it
        again = StatefulDataLoader(make(flux_server, shard_bucket, rank=rank, world_size=2), batch_size=2,
                                   num_workers=2)
        again.load_state_dict(state)
        assert head + rank_keys(again) == full and len(full) == per_rank


def test_elastic_resume_gives_the_new_ranks_equal_shares_of_what_is_left(flux_server, shard_bucket):
    """2 ranks x 1 worker stop after 2 batches; 3 ranks x 1 worker share the rest equally (padded)."""
    saved, head = [], []
    for rank in range(2):
        loader = StatefulDataLoader(make(flux_server, shard_bucket, rank=rank, world_size=2), batch_size=2,
                                    num_workers=1)
        it = iter(loader)
        head += [k for _ in range(2) for k in next(it)["__key__"]]
        saved.append(loader.state_dict())
        del it
    gathered = {"readers": reader_states(*saved)}
    rest = []
    for rank in range(3):
        ds = make(flux_server, shard_bucket, rank=rank, world_size=3)
        ds.load_state_dict(gathered)
        rest.append([s["__key__"] for s in DataLoader(ds, batch_size=None, num_workers=1)])
    left = TOTAL + 1 - len(head)  # the epoch over 2 readers was padded to 22
    assert [len(r) for r in rest] == [-(-left // 3)] * 3
    assert set(head) | {k for r in rest for k in r} == set(all_sample_keys())


def test_counts_come_from_an_index_written_before_headers_counted_samples(flux_server, shard_bucket, fs):
    """An index whose first line has no sample count is read whole; the shares are the same."""
    import json

    from fluxfs.pipes.shards.index import index_path

    src = f"{shard_bucket}/ds/shard-000000.tar"
    path = f"{shard_bucket}/old/shard-000000.tar"
    fs.pipe(path, fs.cat(src))
    head, rest = fs.cat(index_path(src)).split(b"\n", 1)
    meta = json.loads(head)
    assert meta.pop("samples") == COUNTS[0]
    meta["generation"] = str(fs.info(path)["generation"])
    fs.pipe(index_path(path), json.dumps(meta).encode() + b"\n" + rest)
    shares = [[s["__key__"] for s in FluxShardDataset.from_prefix(
        f"flux://{shard_bucket}/old/", rank=r, world_size=2,
        storage_options={"endpoint_url": flux_server.url, "token": "anon"})] for r in range(2)]
    assert [len(s) for s in shares] == [4, 4] and set(shares[0] + shares[1]) == set(all_sample_keys()[:COUNTS[0]])


def test_drop_uneven_other_than_true_false_none_is_refused(flux_server, shard_bucket):
    from fluxfs.pipes import FluxIterableDataset, FluxSampler

    with pytest.raises(TypeError, match=r"drop_uneven must be False .* True .* or None .*not 'yes'"):
        make(flux_server, shard_bucket, drop_uneven="yes")
    with pytest.raises(TypeError, match=r"FluxIterableDataset: drop_uneven must be"):
        FluxIterableDataset.from_prefix(f"flux://{shard_bucket}/ds/", drop_uneven=1,
                                        storage_options={"endpoint_url": flux_server.url, "token": "anon"})
    with pytest.raises(TypeError, match=r"FluxSampler: drop_uneven must be"):
        FluxSampler(10, drop_uneven="drop")


@pytest.mark.parametrize("drop", [False, True])
def test_shard_pieces_give_read_shards_equal_counts_per_rank_every_epoch(flux_server, shard_bucket, drop):
    """The Nodes' way: ReadShards(ShardPieces(prefix)) on 2 ranks, two passes of the Loader (epochs 0 and 1)."""
    from torchdata.nodes import Loader

    from fluxfs.pipes.shards import ReadShards, ShardPieces

    options = {"endpoint_url": flux_server.url, "token": "anon"}

    def loader(rank):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", MissingIndexWarning)
            return Loader(ReadShards(ShardPieces(f"flux://{shard_bucket}/ds/", shuffle=True, seed=4, rank=rank,
                                                 world_size=2, drop_uneven=drop, storage_options=options),
                                     storage_options=options, transform=lambda s: s["__key__"]))

    per = TOTAL // 2 if drop else -(-TOTAL // 2)
    ranks = [loader(r) for r in range(2)]
    epochs = [[list(r) for r in ranks] for _ in range(2)]  # each pass over a Loader is the next epoch
    for shares in epochs:
        assert [len(s) for s in shares] == [per, per]
        seen = Counter(shares[0] + shares[1])
        assert (max(seen.values()) == 1 and len(seen) == TOTAL - 1) if drop else set(seen) == set(all_sample_keys())
    assert epochs[0][0] != epochs[1][0]
    for stop in (1, 6):  # resumed mid-epoch from the Loader's state: the rest of that rank's share
        node = loader(1)
        it = iter(node)
        head = [next(it) for _ in range(stop)]
        again = loader(1)
        again.load_state_dict(node.state_dict())
        assert head + list(again) == epochs[0][1]
