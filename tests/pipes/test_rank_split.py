"""RankSplit: each rank's share of a Nodes pipeline's source, the same count on every rank, resumable."""
from __future__ import annotations

import pytest
from torchdata.nodes import Batcher, IterableWrapper, Loader

from fluxfs.pipes import ListObjects, RankSplit, ReadObjects

from .conftest import N_SMALL


@pytest.mark.parametrize("n", [0, 1, 5, 7, 9])
@pytest.mark.parametrize("world", [1, 2, 3])
@pytest.mark.parametrize("drop", [False, True, None])
def test_equal_counts_padded_or_dropped_and_resumable(n, world, drop):
    shares = [list(Loader(RankSplit(IterableWrapper(range(n)), rank=r, world_size=world, drop_uneven=drop)))
              for r in range(world)]
    if drop is None:
        assert sorted(sum(shares, [])) == list(range(n))
    elif drop:
        assert [len(s) for s in shares] == [n // world] * world and len(set(sum(shares, []))) == n // world * world
    else:
        assert [len(s) for s in shares] == [-(-n // world)] * world and set(sum(shares, [])) == set(range(n))
    for r, full in enumerate(shares):
        for k in range(len(full)):
            node = Loader(RankSplit(IterableWrapper(range(n)), rank=r, world_size=world, drop_uneven=drop))
            it = iter(node)
            head = [next(it) for _ in range(k)]
            again = Loader(RankSplit(IterableWrapper(range(n)), rank=r, world_size=world, drop_uneven=drop))
            again.load_state_dict(node.state_dict())
            assert head + list(again) == full, (r, k)


def test_a_listing_split_over_three_ranks_reads_a_third_each(data_bucket, storage_options):
    url = f"flux://{data_bucket}/small/"
    shares = [[key for batch in Loader(Batcher(ReadObjects(RankSplit(ListObjects(url, storage_options=storage_options),
                                                                      rank=r, world_size=3),
                                                            storage_options=storage_options), 16, drop_last=False))
               for key, _ in batch] for r in range(3)]
    assert [len(s) for s in shares] == [-(-N_SMALL // 3)] * 3  # 200 objects: 67 each, 1 repeated
    assert len(set(sum(shares, []))) == N_SMALL


def test_bad_state_is_refused_naming_the_key():
    from fluxfs.pipes import ResumeStateError

    node = RankSplit(IterableWrapper(range(5)), rank=0, world_size=2)
    with pytest.raises(ResumeStateError, match=r"RankSplit resume state: 'first' must be the source's first 2 items"):
        node.reset({"source": {"_num_yielded": 3}, "seen": 3, "held": [], "first": [0], "padded": False})
