"""FluxShardDataset's and ReadShards' resume states: forged or foreign ones are refused naming what is wrong.

A valid state (saved as JSON, or in the older layout) still resumes exactly: every sample once.
"""
from __future__ import annotations

import json
import warnings
from collections import Counter
from itertools import islice

import pytest
from torchdata.nodes import IterableWrapper

from fluxfs.pipes import ResumeStateError
from fluxfs.pipes.shards import FluxShardDataset, MissingIndexWarning, ReadShards

from .conftest import all_sample_keys, payload
from tests.conftest import edited


@pytest.fixture(scope="module")
def options(flux_server) -> dict:
    return {"endpoint_url": flux_server.url, "token": "anon"}


def make(bucket, options, shards=None, **kwargs) -> FluxShardDataset:
    kwargs = {"shuffle": True, "seed": 3, "shuffle_buffer": 4, "rank": 1, "world_size": 2, "drop_uneven": None,
              **kwargs}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", MissingIndexWarning)
        if shards is None:  # 5 shards
            return FluxShardDataset.from_prefix(f"flux://{bucket}/ds/", storage_options=options, **kwargs)
        urls = [f"flux://{bucket}/ds/shard-{i:06d}.tar" for i in shards]
        return FluxShardDataset.from_shards(urls, storage_options=options, **kwargs)


def keys_of(samples) -> list[str]:
    out = []
    for s in samples:
        assert s["bin"] == payload(s["__key__"]), s["__key__"]
        out.append(s["__key__"])
    return out


def started_state(bucket, options, k=3) -> dict:
    ds = make(bucket, options)
    it = iter(ds)
    for _ in range(k):
        next(it)
    return ds.state_dict()


# Reader 1 of 2 over 5 shards: slots 1 and 3 of the epoch's order.
FORGED = {
    "not-a-dict": (lambda s: "state", r"FluxShardDataset resume state must be a dict, not str"),
    "missing-key": (lambda s: edited(s, rng=KeyError), r"FluxShardDataset resume state has no 'rng' key"),
    "negative-cursor": (lambda s: edited(s, cursor=[0, -2]),
                        r"'cursor' must be \[slot position, item\] \(integers >= 0\), not \[0, -2\]"),
    "cursor-past-end": (lambda s: edited(s, cursor=[3, 0]), r"'cursor' must be \[slot position in 0\.\.2, item >= 0\] "
                                                           r"\(reader 1 of 2 has 2 slots\), not \[3, 0\]"),
    "cursor-item-at-end": (lambda s: edited(s, cursor=[2, 5]), r"'cursor' must be \[slot position in 0\.\.2"),
    "too-many-buffered": (lambda s: edited(s, buffered=[[1, i] for i in range(5)]),
                          r"'buffered' must be at most shuffle_buffer=4 samples"),
    "buffered-slot": (lambda s: edited(s, buffered=[[9, 0]]), r"'buffered' must be \[slot, item\] pairs with slot < 5"),
    "buffered-shape": (lambda s: edited(s, buffered=[[1]]), r"'buffered' must be a list of \[slot, item\] pairs"),
    "rng": (lambda s: edited(s, rng={"bit_generator": "MT19937"}),
            r"'rng' must be None or a numpy PCG64 generator state"),
    "split-text": (lambda s: edited(s, split="1/2"), r"'split' must be None or \[index, count\]"),
    "planned": (lambda s: edited(s, planned_readers=0), r"'planned_readers' must be an integer >= 1 or None, not 0"),
    "resumes": (lambda s: edited(s, resumes=-1), r"'resumes' must be an integer >= 0, not -1"),
    "objects-state": (lambda s: edited(s, dataset="FluxIterableDataset", shuffle_buffer=0, buffered=[]),
                      r"it was saved by 'FluxIterableDataset', not by FluxShardDataset"),
    "other-buffer": (lambda s: edited(s, shuffle_buffer=8), r"saved with \(seed, shuffle, shuffle_buffer\) = "
                                                            r"\(3, True, 8\); this dataset has \(3, True, 4\)"),
    "gathered-not-a-list": (lambda s: {"readers": "x"}, r"'readers' must be a non-empty list of reader states"),
    "gathered-one-forged": (lambda s: {"readers": [edited(s, split=[0, 2]), edited(s, cursor=[-1, 0])]},
                            r"'cursor' must be \[slot position, item\] \(integers >= 0\), not \[-1, 0\]"),
}


@pytest.mark.parametrize("case", list(FORGED))
def test_forged_shard_dataset_state_is_refused_naming_the_key(shard_bucket, options, case):
    forge, message = FORGED[case]
    state = started_state(shard_bucket, options)
    with pytest.raises(ResumeStateError, match=message):
        make(shard_bucket, options).load_state_dict(forge(state))


@pytest.mark.parametrize("shards,message", [
    ((0, 1), r"state was saved over 5 shards; the dataset now has 2"),
    ((1, 0, 2, 3, 4), r"state was saved over another listing of 5 shards \(names digest [0-9a-f]{16}; this dataset's "
                      r"is [0-9a-f]{16}\)"),
])
def test_a_state_of_another_listing_is_refused(shard_bucket, options, shards, message):
    state = started_state(shard_bucket, options)
    with pytest.raises(ResumeStateError, match=message):
        make(shard_bucket, options, shards).load_state_dict(state)


@pytest.mark.parametrize("layout", ["json", "older"])
@pytest.mark.parametrize("k", [0, 2, 5])
def test_valid_state_resumes_every_sample_once(shard_bucket, options, layout, k):
    head, rest = [], []
    for rank in (0, 1):
        ds = make(shard_bucket, options, rank=rank)
        it = iter(ds)
        head += keys_of(islice(it, k + rank))
        state = json.loads(json.dumps(ds.state_dict()))
        if layout == "older":  # what the previous release saved
            state = {"epoch": state["epoch"], "seed": state["seed"], "shuffle": state["shuffle"],
                     "shuffle_buffer": state["shuffle_buffer"], "num_shards": state["listed"],
                     "planned_readers": state["planned_readers"], "reader": state["split"], "runs": state["runs"],
                     "cursor": state["cursor"], "buffered": state["buffered"], "rng": state["rng"],
                     "resumes": state["resumes"]}
        again = make(shard_bucket, options, rank=rank)
        again.load_state_dict(state)
        rest += keys_of(again)
    assert len(head) >= k
    assert Counter(head + rest) == Counter(all_sample_keys())


def node_and_state(bucket, options):
    urls = [f"flux://{bucket}/ds/shard-{i:06d}.tar" for i in range(5)]
    node = ReadShards(IterableWrapper(urls), storage_options=options)
    next(node)
    return (lambda: ReadShards(IterableWrapper(urls), storage_options=options)), node.state_dict()


@pytest.mark.parametrize("change,message", [
    ({"samples": KeyError}, r"ReadShards resume state has no 'samples' key"),
    ({"source": KeyError}, r"ReadShards resume state has no 'source' key"),
    ({"samples": -1}, r"'samples' must be an integer >= 0, not -1"),
    ({"samples": "1"}, r"'samples' must be an integer >= 0, not '1'"),
    ({"shard": None, "samples": 3}, r"'samples' must be 0 when 'shard' is None, not 3"),
    ({"shard": ["B/ds/x.tar"]}, r"'shard' must be None or \[path, size >= 0, generation or None, crc32c or None, "
                                r"has_index\], not \['B/ds/x\.tar'\]"),
    ({"samples": 8}, r"'samples' must be in 0\.\.7 \(flux://\S+/ds/shard-000000\.tar has 7 samples\), not 8"),
])
def test_read_shards_refuses_a_forged_state(shard_bucket, options, change, message):
    new_node, state = node_and_state(shard_bucket, options)
    with pytest.raises(ResumeStateError, match=message):
        new_node().reset(edited(state, **change))


def test_read_shards_valid_state_resumes_every_sample_once(shard_bucket, options):
    warnings.simplefilter("ignore", MissingIndexWarning)
    new_node, _ = node_and_state(shard_bucket, options)
    node = new_node()
    head = keys_of(next(node) for _ in range(9))
    state = json.loads(json.dumps(node.state_dict()))
    again = new_node()
    again.reset(state)
    assert head + keys_of(again) == all_sample_keys()


@pytest.mark.parametrize("change,message", [
    ({"cursor": [0, 9]}, r"FluxShardDataset resume state: sample 9 of slot 0 is past the 7 samples of "
                         r"flux://\S+/ds/shard-000000\.tar"),
    ({"buffered": [[0, 9]]}, r"sample 9 of slot 0 is past the 7 samples of flux://\S+/ds/shard-000000\.tar"),
    ({"buffered": [[2, 1], [2, 9]]}, r"'buffered' names samples \[slot, item\] the shards do not hold: \[\[2, 9\]\]"),
])
def test_a_sample_past_the_end_of_its_shard_is_refused_when_read(shard_bucket, options, change, message):
    """Slot k is shard k (no shuffle, one reader); shard 0 has 7 samples and an index, shard 2 (5) none."""
    kwargs = dict(shuffle=False, shuffle_buffer=4, rank=0, world_size=1)
    ds = make(shard_bucket, options, **kwargs)
    next(iter(ds))
    again = make(shard_bucket, options, **kwargs)
    again.load_state_dict(edited(ds.state_dict(), **change))
    with pytest.raises(ResumeStateError, match=message):
        next(iter(again))
