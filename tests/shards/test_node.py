"""ReadShards: shard URLs in, samples out, composed with torchdata's nodes, resumed from its state."""
from __future__ import annotations

import warnings

import pytest
from torchdata.nodes import Batcher, IterableWrapper, Loader, ParallelMapper, Prefetcher

from fluxfs.pipes.data import ListObjects
from fluxfs.pipes.shards import MissingIndexWarning, ReadShards

from .conftest import all_sample_keys, payload


def key_checked(sample: dict) -> str:
    assert sample["bin"] == payload(sample["__key__"])
    return sample["__key__"]


def pipeline(bucket, endpoint, listed=False):
    options = {"endpoint_url": endpoint, "token": "anon"}
    if listed:
        source = ListObjects(f"flux://{bucket}/ds/shard-", storage_options=options)
        shards = ReadShards(source, storage_options=options, protocol="flux")
    else:
        urls = [f"flux://{bucket}/ds/shard-{i:06d}.tar" for i in range(5)]
        shards = ReadShards(IterableWrapper(urls), storage_options=options)
    return Loader(Prefetcher(Batcher(ParallelMapper(shards, key_checked, num_workers=2, method="thread"), 4,
                                     drop_last=False), 2))


@pytest.mark.parametrize("listed", [False, True])
def test_read_shards_composes_with_torchdata_nodes(shard_bucket, flux_server, listed):
    with pytest.warns(MissingIndexWarning, match="shard-000002.tar has no index"):
        got = [k for batch in pipeline(shard_bucket, flux_server.url, listed) for k in batch]
    assert got == all_sample_keys()


def test_read_shards_resumes_at_every_batch(shard_bucket, flux_server):
    warnings.simplefilter("ignore", MissingIndexWarning)
    full = [k for batch in pipeline(shard_bucket, flux_server.url) for k in batch]
    for stop in range(len(full) // 4 + 1):
        loader = pipeline(shard_bucket, flux_server.url)
        it = iter(loader)
        head = [k for _ in range(stop) for k in next(it)]
        state = loader.state_dict()
        again = pipeline(shard_bucket, flux_server.url)
        again.load_state_dict(state)
        assert head + [k for batch in again for k in batch] == full, f"resumed after {stop} batches"
