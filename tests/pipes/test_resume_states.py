"""Resume states that cannot be resumed from (forged, stale, another dataset's) are refused naming what is wrong.

FluxIterableDataset's `load_state_dict`, ListObjects' and ReadObjects' `reset(initial_state)` and
`reader_states`; a valid state (saved as JSON, or in the older layout) still resumes exactly.
"""
from __future__ import annotations

import json
from collections import Counter
from itertools import islice

import pytest

from fluxfs.pipes import FluxIterableDataset, ListObjects, ReadObjects, ResumeStateError, reader_states

from .conftest import N_SMALL, expected_bytes
from tests.conftest import edited


def make(bucket, options, prefix="small/", **kwargs) -> FluxIterableDataset:
    kwargs = {"shuffle": True, "seed": 2, "rank": 1, "world_size": 2, "read_batch": 8, **kwargs}
    return FluxIterableDataset.from_prefix(f"flux://{bucket}/{prefix}", storage_options=options, **kwargs)


def started_state(bucket, options, k=5, **kwargs) -> dict:
    ds = make(bucket, options, **kwargs)
    it = iter(ds)
    for _ in range(k):
        next(it)
    return ds.state_dict()


# (what is forged, how, the message the dataset gives); the dataset has 200 objects, this reader 100 of them
FORGED = {
    "not-a-dict": (lambda s: [s], r"FluxIterableDataset resume state must be a dict, not list"),
    "missing-key": (lambda s: edited(s, cursor=KeyError), r"FluxIterableDataset resume state has no 'cursor' key"),
    "epoch-text": (lambda s: edited(s, epoch="0"), r"'epoch' must be an integer >= 0, not '0'"),
    "shuffle-int": (lambda s: edited(s, shuffle=1), r"'shuffle' must be True or False, not 1"),
    "negative-cursor": (lambda s: edited(s, cursor=[-1, 0]),
                        r"'cursor' must be \[slot position, item\] \(integers >= 0\), not \[-1, 0\]"),
    "cursor-past-end": (lambda s: edited(s, cursor=[101, 0]),
                        r"'cursor' must be \[position in 0\.\.100, 0\] \(reader 1 of 2 has 100 slots\), "
                        r"not \[101, 0\]"),
    "cursor-item": (lambda s: edited(s, cursor=[3, 2]), r"'cursor' must be \[position in 0\.\.100, 0\]"),
    "split": (lambda s: edited(s, split=[2, 2]),
              r"'split' must be None or \[index, count\] with 0 <= index < count, not \[2, 2\]"),
    "runs-shape": (lambda s: edited(s, runs=[[0, 5]]), r"'runs' must be None or a list of \[start, stop, step >= 1"),
    "runs-past-end": (lambda s: edited(s, runs=[[0, 500, 1, 0, None]]),
                      r"'runs' must be runs of slots 0\.\.199 \(the epoch has 200\)"),
    "version": (lambda s: edited(s, version=99), r"resume state has version 99; this fluxfs reads version 2"),
    "unknown-key": (lambda s: edited(s, extra=1), r"resume state has unknown keys \['extra'\]"),
    "other-dataset": (lambda s: edited(s, dataset="FluxShardDataset"),
                      r"it was saved by 'FluxShardDataset', not by FluxIterableDataset"),
    "other-seed": (lambda s: edited(s, seed=3), r"saved with \(seed, shuffle, shuffle_buffer\) = \(3, True, 0\); "
                                                r"this dataset has \(2, True, 0\)"),
    "other-listing-size": (lambda s: edited(s, listed=2000), r"state was saved over 2000 objects; the dataset now has "
                                                             r"200"),
    "other-listing": (lambda s: edited(s, listing="0123456789abcdef"),
                      r"saved over another listing of 200 objects \(names digest 0123456789abcdef"),
    "buffered": (lambda s: edited(s, buffered=[[0, 0]]), r"'buffered' must be at most shuffle_buffer=0 samples"),
    "gathered-empty": (lambda s: {"readers": []}, r"'readers' must be a non-empty list of reader states, not \[\]"),
    "older-layout-incomplete": (lambda s: {"epoch": 0, "num_objects": 200, "seed": 2, "shuffle": True},
                                r"resume state has no 'shard' key"),
    "no-layout": (lambda s: {"epoch": 0, "rows": 3}, r"has no 'version' key and is not the older layout"),
}


@pytest.mark.parametrize("case", list(FORGED))
def test_forged_object_dataset_state_is_refused_naming_the_key(data_bucket, storage_options, case):
    forge, message = FORGED[case]
    state = started_state(data_bucket, storage_options)
    ds = make(data_bucket, storage_options)
    with pytest.raises(ResumeStateError, match=message):
        ds.load_state_dict(forge(state))
    assert isinstance(ResumeStateError("x"), ValueError)


def rest_of(ds) -> list[str]:
    out = []
    for key, data in ds:
        assert data == expected_bytes(key), key
        out.append(key)
    return out


@pytest.mark.parametrize("layout", ["json", "older"])
def test_valid_state_resumes_exactly_after_json_or_from_the_older_layout(data_bucket, storage_options, layout):
    """Every object of the epoch once across the stop: the state as JSON, or converted from the older layout."""
    def reader(rank):
        return make(data_bucket, storage_options, rank=rank)

    head, rest = [], []
    for rank in (0, 1):
        ds = reader(rank)
        head += [k for k, _ in islice(iter(ds), 13 + rank)]
        state = json.loads(json.dumps(ds.state_dict()))
        if layout == "older":  # what the previous release saved
            state = {"epoch": state["epoch"], "position": state["cursor"][0], "shard": state["split"],
                     "seed": state["seed"], "shuffle": state["shuffle"], "num_objects": state["listed"],
                     "planned_readers": state["planned_readers"], "runs": state["runs"]}
        again = reader(rank)
        again.load_state_dict(state)
        rest += rest_of(again)
    assert len(head) == 27
    assert Counter(head + rest) == Counter(f"small/{i:08d}" for i in range(N_SMALL))


def test_a_dataset_state_not_started_then_resumed_reads_the_whole_share(data_bucket, storage_options):
    ds = make(data_bucket, storage_options)
    state = ds.state_dict()
    assert state["split"] is None
    again = make(data_bucket, storage_options)
    again.load_state_dict(state)
    assert sorted(rest_of(again)) == sorted(rest_of(make(data_bucket, storage_options)))


def test_list_objects_refuses_a_forged_or_foreign_state(data_bucket, storage_options):
    url = f"flux://{data_bucket}/small/"
    node = ListObjects(url, storage_options=storage_options)
    with pytest.raises(ResumeStateError, match=rf"ListObjects\({url}\) resume state has no 'yielded' key"):
        node.reset({"last_name": None})
    with pytest.raises(ResumeStateError, match=r"'yielded' must be an integer >= 0, not -3"):
        node.reset({"last_name": None, "yielded": -3})
    with pytest.raises(ResumeStateError, match=rf"'last_name' must be the name of the last object yielded, under "
                                               rf"'{data_bucket}/small/' \(None when 'yielded' is 0; it is 4\), not "
                                               rf"'{data_bucket}/data/00000004'"):
        node.reset({"last_name": f"{data_bucket}/data/00000004", "yielded": 4})  # another listing's state
    with pytest.raises(ResumeStateError, match=r"'last_name' must be .*, not 7"):
        node.reset({"last_name": 7, "yielded": 4})
    node.reset({"last_name": f"{data_bucket}/small/00000004", "yielded": 5})
    assert next(node)["name"] == f"{data_bucket}/small/00000005"


@pytest.mark.parametrize("state,message", [
    ({"source": None}, r"ReadObjects resume state has no 'offset' key"),
    ({"offset": 0}, r"ReadObjects resume state has no 'source' key"),
    ({"source": None, "offset": -1}, r"'offset' must be an integer in 0\.\.6, not -1"),
    ({"source": None, "offset": 7}, r"'offset' must be an integer in 0\.\.6, not 7"),
    ({"source": None, "offset": "2"}, r"'offset' must be an integer in 0\.\.6, not '2'"),
    ({"source": {"last_name": 3, "yielded": 1}, "offset": 0}, r"'last_name' must be the name of the last object"),
    ("source", r"ReadObjects resume state must be a dict, not str"),
])
def test_read_objects_refuses_a_forged_state(data_bucket, storage_options, state, message):
    node = ReadObjects(ListObjects(f"flux://{data_bucket}/small/", storage_options=storage_options),
                       storage_options=storage_options, batch_size=7)
    with pytest.raises(ResumeStateError, match=message):
        node.reset(state)
    node.shutdown()


def test_read_objects_valid_state_resumes_every_object_once(data_bucket, storage_options):
    def node():
        return ReadObjects(ListObjects(f"flux://{data_bucket}/small/", storage_options=storage_options),
                           storage_options=storage_options, batch_size=7, prefetch=2)

    first = node()
    head = [k for k, _ in islice(first, 45)]
    state = json.loads(json.dumps(first.state_dict()))
    again = node()
    again.reset(state)
    assert Counter(head + [k for k, _ in again]) == Counter(f"small/{i:08d}" for i in range(N_SMALL))


@pytest.mark.parametrize("states,message", [
    ([[1, 2]], r"reader_states: loader state 0 must be a dict \(a StatefulDataLoader's state_dict\(\)\), not list"),
    ([{"_snapshot": {}}], r"loader state 0: '_snapshot' must hold '_worker_snapshots', a dict of 'worker_<n>'"),
    ([{"_snapshot": {"_worker_snapshots": {"w": {}}}}], r"'_worker_snapshots', a dict of 'worker_<n>'"),
    ([{"dataset_state": None}], r"a loader state holds no dataset state"),
])
def test_reader_states_refuses_what_is_not_a_loader_state(states, message):
    with pytest.raises(ResumeStateError, match=message):
        reader_states(*states)
