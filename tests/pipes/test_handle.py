"""One filesystem handle for every pipes class: fsspec URL chains (a cache in front of flux), fork and spawn workers.

A dataset over ``filecache::flux://`` reads its first epoch from the server and its second from the
cache (zero object GETs); `fluxfs.accelerated` tells fluxfs itself from a cache forwarding its attributes;
ReadObjects in forked and spawned DataLoader workers builds a filesystem in each worker from the handle.
"""
from __future__ import annotations

import os
import pickle
from collections import Counter

import fsspec
import pytest
import torch.utils.data
from torch.utils.data import DataLoader
from torchdata.nodes.base_node import BaseNode

import fluxfs
from fluxfs import FilesystemHandle, FluxFileSystem
from fluxfs.pipes import FluxIterableDataset, FluxMapDataset, ListObjects, ReadObjects

from .conftest import SIZES, expected_bytes

N = 48  # objects per test: enough for several batches, few enough to stay fast


def chained(storage_options: dict, cache_dir) -> dict:
    """fsspec's per-protocol storage options for ``filecache::flux://``."""
    return {"flux": storage_options, "filecache": {"cache_storage": str(cache_dir)}}


@pytest.fixture
def objects(flux_server, bucket) -> str:
    """A fresh bucket with N objects under "c/" (a fresh one per test: caches start empty)."""
    flux_server.generate(bucket, N, size=SIZES, prefix="c/", seed=0)
    return bucket


def all_keys() -> Counter:
    return Counter(f"c/{i:08d}" for i in range(N))


def epoch(dataset, **loader) -> Counter:
    """Keys read in one DataLoader epoch, bytes checked exactly against what the server generated."""
    seen: Counter = Counter()
    for keys, datas in DataLoader(dataset, batch_size=32, **loader):
        for key, data in zip(keys, datas):
            assert data == expected_bytes(key), f"wrong bytes for {key}"
            seen[key] += 1
    return seen


def reads_of(flux_server) -> dict:
    return {op: n for op, n in flux_server.stats()["requests"].items() if n}


@pytest.mark.parametrize("kind", [FluxMapDataset, FluxIterableDataset])
def test_dataset_over_filecache_reads_its_second_epoch_from_the_cache(flux_server, objects, storage_options,
                                                                      tmp_path, kind):
    ds = kind.from_prefix(f"filecache::flux://{objects}/c/",
                          storage_options=chained(storage_options, tmp_path))
    flux_server.reset_stats()
    assert epoch(ds) == all_keys()
    first = reads_of(flux_server)
    assert first.get("read", 0) >= N, first  # every object fetched once, into the cache
    assert "compose" not in first, "the cache was bypassed by fluxfs's batched reads"
    assert len(os.listdir(tmp_path)) > N  # one file per object, plus the cache's own metadata

    flux_server.reset_stats()
    assert epoch(ds) == all_keys()
    assert reads_of(flux_server) == {}, "the second epoch went to the server instead of the cache"


def test_shard_dataset_over_filecache_reads_its_second_epoch_from_the_cache(flux_server, bucket, storage_options,
                                                                            tmp_path):
    from fluxfs.pipes.shards import FluxShardDataset, ShardWriter

    samples = [{"__key__": f"{i:04d}", "bin": bytes([i]) * (1000 + 97 * i)} for i in range(24)]
    with ShardWriter(f"flux://{bucket}/sh/{{:02d}}.tar", max_samples=8, storage_options=storage_options) as w:
        w.write_all(samples)
    ds = FluxShardDataset.from_prefix(f"filecache::flux://{bucket}/sh/",
                                      storage_options=chained(storage_options, tmp_path / "cache"))

    def one_epoch() -> dict:
        return {s["__key__"]: s["bin"] for s in ds}

    flux_server.reset_stats()
    assert one_epoch() == {s["__key__"]: s["bin"] for s in samples}
    assert reads_of(flux_server).get("read", 0) > 0
    flux_server.reset_stats()
    assert one_epoch() == {s["__key__"]: s["bin"] for s in samples}
    assert reads_of(flux_server) == {}, "the second epoch went to the server instead of the cache"


def test_shard_map_dataset_over_filecache_reads_its_second_pass_from_the_cache(flux_server, bucket, storage_options,
                                                                               tmp_path):
    from fluxfs.pipes.shards import FluxShardMapDataset, ShardWriter

    samples = [{"__key__": f"{i:04d}", "bin": bytes([i]) * (1000 + 97 * i)} for i in range(24)]
    with ShardWriter(f"flux://{bucket}/sh/{{:02d}}.tar", max_samples=8, storage_options=storage_options) as w:
        w.write_all(samples)
    ds = FluxShardMapDataset.from_prefix(f"filecache::flux://{bucket}/sh/",
                                         storage_options=chained(storage_options, tmp_path))
    for n in range(2):
        flux_server.reset_stats()
        got = ds.__getitems__(list(range(len(samples))))
        assert [(s["__key__"], s["bin"]) for s in got] == [(s["__key__"], s["bin"]) for s in samples]
        assert got[0]["__shard__"] == f"filecache::flux://{bucket}/sh/00.tar"
        assert bool(reads_of(flux_server)) == (n == 0), f"pass {n}: {reads_of(flux_server)}"


def test_shard_indexes_are_read_one_at_a_time_through_a_caching_filesystem(flux_server, bucket, storage_options,
                                                                            tmp_path):
    """fsspec's caching filesystems keep their cache's metadata unlocked: threads opening files at once can lose one
    entry (fsspec's TypeError in `_open`), so shard indexes are read through them one at a time."""
    from fluxfs.pipes.shards import FluxShardMapDataset, ShardWriter

    samples = [{"__key__": f"{i:04d}", "bin": bytes([i]) * 100} for i in range(24)]
    with ShardWriter(f"flux://{bucket}/sh/{{:02d}}.tar", max_samples=6, storage_options=storage_options) as w:
        w.write_all(samples)
    flux_server.configure(latency_ms=200)  # reads in flight together would overlap for long
    flux_server.reset_stats()
    ds = FluxShardMapDataset.from_prefix(f"filecache::flux://{bucket}/sh/",
                                         storage_options=chained(storage_options, tmp_path))
    assert len(ds) == len(samples)
    assert flux_server.stats()["peak_in_flight"]["read"] == 1


def test_accelerated_is_a_type_check_not_attribute_forwarding(flux_server, storage_options, tmp_path):
    flux = FilesystemHandle("flux", storage_options).fs
    assert fluxfs.accelerated(flux) is flux
    for cache in ("filecache", "simplecache", "blockcache"):
        fs = FilesystemHandle(f"{cache}::flux", {"flux": storage_options,
                                                 cache: {"cache_storage": str(tmp_path / cache)}}).fs
        assert hasattr(fs, "cat_objects"), "fsspec no longer forwards attributes: this test proves nothing"
        assert fluxfs.accelerated(fs) is None, cache
    assert fluxfs.accelerated(fsspec.filesystem("memory")) is None


def test_handle_pickles_without_its_filesystem_and_rebuilds_it(flux_server, storage_options):
    handle = FilesystemHandle("flux", storage_options)
    built = handle.fs
    assert isinstance(built, FluxFileSystem)
    data = pickle.dumps(handle)
    assert b"FluxFileSystem" not in data and b"fluxfs.core" not in data
    again = pickle.loads(data)
    assert again == handle and again._fs is None
    assert isinstance(again.fs, FluxFileSystem)
    assert "anon" not in repr(handle)  # the options (credentials) stay out of what users print


def test_flat_options_a_cache_would_drop_are_refused_naming_them(storage_options, tmp_path):
    with pytest.raises(TypeError, match=r"'endpoint_url'.*filecache does not take.*storage_options=\{'flux'"):
        FluxMapDataset.from_prefix("filecache::flux://bkt/p/", storage_options=storage_options)
    with pytest.raises(TypeError, match="'endpoint_url'"):
        ListObjects("simplecache::flux://bkt/p/", endpoint_url="http://127.0.0.1:1")
    with pytest.raises(ValueError, match="protocol or chain"):
        FilesystemHandle("flux://bkt")


class WorkerShare(BaseNode):
    """URLs dealt to DataLoader workers: worker k of n takes every n-th (module level: picklable for spawn)."""

    def __init__(self, urls: list[str]):
        super().__init__()
        self.urls = urls

    def reset(self, initial_state=None):
        super().reset(initial_state)
        info = torch.utils.data.get_worker_info()
        k, n = (info.id, info.num_workers) if info is not None else (0, 1)
        self._left = iter(self.urls[k::n])

    def next(self):
        return next(self._left)

    def get_state(self):
        return {}


class NodeDataset(torch.utils.data.IterableDataset):
    """A torchdata node run inside each DataLoader worker; items carry the pid and whether its filesystem was new."""

    def __init__(self, node: ReadObjects):
        self.node = node

    def __iter__(self):
        fresh = self.node.handle._fs is None  # nothing built in this process yet (fork hook, or unpickled)
        for key, data in self.node:
            yield key, data, os.getpid(), fresh


@pytest.mark.parametrize("context", ["fork", "spawn"])
def test_read_objects_in_forked_and_spawned_workers_builds_a_filesystem_per_worker(objects, storage_options, context):
    urls = [f"flux://{objects}/c/{i:08d}" for i in range(N)]
    node = ReadObjects(WorkerShare(urls), storage_options=storage_options, batch_size=8, prefetch=2)
    assert node.fs.cat_file(f"{objects}/c/00000000")  # the parent's filesystem, built and used
    assert b"FluxFileSystem" not in pickle.dumps(NodeDataset(node))
    loader = DataLoader(NodeDataset(node), batch_size=None, num_workers=2, multiprocessing_context=context)
    got = list(loader)
    assert Counter(k for k, *_ in got) == all_keys()
    assert all(data == expected_bytes(key) for key, data, *_ in got)
    assert len({pid for *_, pid, _ in got} - {os.getpid()}) == 2  # both workers read, none in this process
    assert all(fresh for *_, fresh in got), "a worker used a filesystem it did not build"


def test_read_objects_and_list_objects_take_a_chained_url(flux_server, objects, storage_options, tmp_path):
    so = chained(storage_options, tmp_path)
    url = f"filecache::flux://{objects}/c/"

    def read_all() -> dict:  # ReadObjects takes its ListObjects source's chain
        return dict(ReadObjects(ListObjects(url, storage_options=so), storage_options=so))

    first = read_all()
    assert first == {k: expected_bytes(k) for k in all_keys()}
    flux_server.reset_stats()
    read_all()
    assert reads_of(flux_server).get("read", 0) == 0, "ReadObjects went around the cache"


def test_read_objects_refuses_a_url_of_another_filesystem_than_its_own(objects, storage_options):
    """A ``filecache::flux://`` URL read by a flux ReadObjects would silently go around the cache."""
    from torchdata.nodes import IterableWrapper

    node = ReadObjects(IterableWrapper([f"filecache::flux://{objects}/c/00000000"]), storage_options=storage_options)
    with pytest.raises(ValueError, match=r"reads flux:// objects, not filecache::flux://\S+/c/00000000: pass "
                                         r"protocol='filecache::flux'"):
        list(node)
