"""ListObjects and ReadObjects in torchdata pipelines (Batcher, ParallelMapper, Prefetcher, Loader), with resume."""
from __future__ import annotations

from collections import Counter
from itertools import islice

import pytest
from torchdata.nodes import Batcher, IterableWrapper, Loader, ParallelMapper, Prefetcher

from fluxfs.pipes import ListObjects, ObjectMeta, ReadObjects

from .conftest import N_DATA, N_SMALL, expected_bytes


def checked(item):
    """The mapping step: verify bytes (a stand-in for decoding) and keep the key."""
    key, data = item
    return key, data == expected_bytes(key)


def pipeline(url: str, storage_options: dict) -> Loader:
    node = ListObjects(url, storage_options=storage_options)
    node = ReadObjects(node, storage_options=storage_options, batch_size=32, prefetch=2)
    node = ParallelMapper(node, checked, num_workers=2, method="thread")
    node = Batcher(node, batch_size=16, drop_last=False)
    return Loader(Prefetcher(node, prefetch_factor=2))


def keys_of(batches) -> list[str]:
    out = []
    for batch in batches:
        for key, ok in batch:
            assert ok, f"wrong bytes for {key}"
            out.append(key)
    return out


def test_pipeline_reads_every_object_once(data_bucket, storage_options):
    keys = keys_of(pipeline(f"flux://{data_bucket}/data/", storage_options))
    assert Counter(keys) == Counter(f"data/{i:08d}" for i in range(N_DATA))
    assert keys == sorted(keys)  # ListObjects lists in name order, and the pipeline keeps it


def test_pipeline_resumes_where_it_stopped(data_bucket, storage_options):
    url = f"flux://{data_bucket}/data/"
    uninterrupted = keys_of(pipeline(url, storage_options))
    loader = pipeline(url, storage_options)
    first = keys_of(islice(iter(loader), 9))  # 144 items: inside a 32-object read
    state = loader.state_dict()

    resumed = pipeline(url, storage_options)
    resumed.load_state_dict(state)
    rest = keys_of(resumed)
    assert first + rest == uninterrupted
    # A second epoch on the resumed loader starts from the beginning again.
    assert keys_of(resumed) == uninterrupted


def test_read_objects_state_round_trips_at_every_offset(data_bucket, storage_options):
    url = f"flux://{data_bucket}/small/"
    whole = [k for k, _ in ReadObjects(ListObjects(url, storage_options=storage_options),
                                       storage_options=storage_options, batch_size=7, prefetch=3)]
    for stop in (0, 1, 6, 7, 8, 50, N_SMALL):
        node = ReadObjects(ListObjects(url, storage_options=storage_options), storage_options=storage_options,
                           batch_size=7, prefetch=3)
        head = [k for k, _ in islice(node, stop)]
        state = node.state_dict()
        again = ReadObjects(ListObjects(url, storage_options=storage_options), storage_options=storage_options,
                            batch_size=7, prefetch=3)
        again.reset(state)
        assert head + [k for k, _ in again] == whole, f"stopped at {stop}"


def meta_of(data: bytes, meta: ObjectMeta):
    return meta.key, meta.size, len(data)


def test_read_objects_from_urls_with_missing_policy(data_bucket, storage_options):
    urls = [f"flux://{data_bucket}/small/{i:08d}" for i in range(5)]
    gone = f"flux://{data_bucket}/small/gone"
    node = ReadObjects(IterableWrapper(urls + [gone]), storage_options=storage_options, on_missing="skip",
                       transform=meta_of)
    got = list(node)
    assert [g[0] for g in got] == [f"small/{i:08d}" for i in range(5)]
    assert all(size == n == len(expected_bytes(key)) for key, size, n in got)
    assert node.missing == [gone]
    with pytest.raises(FileNotFoundError, match=gone):
        list(ReadObjects(IterableWrapper(urls + [gone]), storage_options=storage_options))


def test_list_objects_streams_infos_and_resumes_by_name(data_bucket, storage_options):
    url = f"flux://{data_bucket}/small/"
    infos = list(ListObjects(url, storage_options=storage_options))
    assert [i["name"] for i in infos] == [f"{data_bucket}/small/{i:08d}" for i in range(N_SMALL)]
    assert all(i["size"] == len(expected_bytes(i["name"].partition("/")[2])) for i in infos)
    node = ListObjects(url, storage_options=storage_options)
    head = [i["name"] for i in islice(node, 57)]
    again = ListObjects(url, storage_options=storage_options)
    again.reset(node.state_dict())
    assert head + [i["name"] for i in again] == [i["name"] for i in infos]


def test_list_objects_empty_prefix_names_the_url(data_bucket, storage_options):
    url = f"flux://{data_bucket}/no-such-prefix/"
    with pytest.raises(FileNotFoundError, match=url):
        list(ListObjects(url, storage_options=storage_options))
