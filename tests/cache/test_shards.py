"""The node-local cache behind the shard datasets (`cache_dir=`): epoch 1 fills it, epoch 2 makes no data GET
and yields the same samples; an overwritten shard is read anew; a limit below one epoch still yields
every sample once; two DataLoader workers download each shard once. On the embedded server."""
from __future__ import annotations

import time

import pytest
import torch.utils.data
from torchdata.nodes import IterableWrapper, Loader

from fluxfs.cache import NodeCache
from fluxfs.pipes.shards import FluxShardDataset, FluxShardMapDataset, ReadShards
from tests.conftest import make_fs
from tests.shards.conftest import put_shard, shard_bytes

SHARDS, PER = 4, 6
pytestmark = pytest.mark.filterwarnings("ignore::fluxfs.pipes.shards.MissingIndexWarning")


def keys(i: int) -> list[str]:
    return [f"s{i}/{j:03d}" for j in range(PER)]


def fields(key: str) -> dict[str, bytes]:
    return {"bin": key.encode() * 3000}  # ~20 KB a sample: a shard spans several of the cache's fill parts


@pytest.fixture
def shard_set(flux_server, bucket, monkeypatch):
    from fluxfs.cache import ranges
    monkeypatch.setattr(ranges, "PART", 32 * 1024)  # a shard is several parts: the fill's part logic is exercised
    fs = make_fs(flux_server)
    for i in range(SHARDS):
        put_shard(fs, f"{bucket}/c/shard-{i:04d}.tar", shard_bytes(keys(i), fields), index=i % 2 == 0)
    return [f"flux://{bucket}/c/shard-{i:04d}.tar" for i in range(SHARDS)]


def data_reads(server) -> int:
    return server.stats()["data_reads"]


def samples(ds) -> list[tuple[str, bytes]]:
    return sorted((s["__key__"], s["bin"]) for s in ds)


EXPECTED = sorted((k, f["bin"]) for i in range(SHARDS) for k in keys(i) for f in [fields(k)])


def opts(server, tmp_path, **more) -> dict:
    return {"endpoint_url": server.url, "token": "anon", "cache_dir": str(tmp_path / "cache"), **more}


def two_epochs(server, make):
    server.reset_stats()
    first = samples(make())
    cold = data_reads(server)
    server.reset_stats()
    second = samples(make())
    return first, second, cold, data_reads(server)


def test_shard_dataset_second_epoch_makes_no_data_get(flux_server, shard_set, tmp_path):
    so = opts(flux_server, tmp_path)
    ds = FluxShardDataset.from_shards(shard_set, storage_options=so)
    first, second, cold, warm = two_epochs(flux_server, lambda: ds)
    assert first == second == EXPECTED
    assert cold > 0 and warm == 0
    want = [f"c/shard-{i:04d}.tar" for i in range(SHARDS)]
    for _ in range(100):  # the last fill's rename may still be under way on the cache's threads
        cached = sorted(m.key for m, _ in NodeCache(tmp_path / "cache").entries() if m.key.endswith(".tar"))
        if cached == want:
            break
        time.sleep(0.05)
    assert cached == want  # (the indexes are cached too)


def test_shard_map_dataset_second_epoch_makes_no_data_get(flux_server, shard_set, tmp_path):
    ds = FluxShardMapDataset.from_shards(shard_set[::2], storage_options=opts(flux_server, tmp_path))
    expected = sorted((k, fields(k)["bin"]) for i in (0, 2) for k in keys(i))
    first, second, cold, warm = two_epochs(flux_server, lambda: [ds[i] for i in range(len(ds))])
    assert first == second == expected
    assert cold > 0 and warm == 0


def test_read_shards_second_epoch_makes_no_data_get(flux_server, shard_set, tmp_path):
    so = opts(flux_server, tmp_path)
    first, second, cold, warm = two_epochs(
        flux_server, lambda: Loader(ReadShards(IterableWrapper(shard_set), storage_options=so)))
    assert first == second == EXPECTED
    assert cold > 0 and warm == 0


def test_an_overwritten_shard_is_read_anew(flux_server, bucket, shard_set, tmp_path):
    so = opts(flux_server, tmp_path)
    assert samples(FluxShardDataset.from_shards(shard_set, storage_options=so)) == EXPECTED
    new = {"bin": b"new bytes"}
    put_shard(make_fs(flux_server), f"{bucket}/c/shard-0001.tar", shard_bytes(keys(1), lambda k: new), index=False)
    got = dict(samples(FluxShardDataset.from_shards(shard_set, storage_options=so)))
    assert all(got[k] == b"new bytes" for k in keys(1))
    assert got[keys(0)[0]] == fields(keys(0)[0])["bin"]


def test_a_limit_below_one_epoch_still_yields_every_sample_once(flux_server, shard_set, tmp_path):
    size = make_fs(flux_server).info(shard_set[0])["size"]
    so = opts(flux_server, tmp_path, cache_limit=int(size * 2.5))
    for _ in range(2):
        assert samples(FluxShardDataset.from_shards(shard_set, storage_options=so)) == EXPECTED
        assert NodeCache(tmp_path / "cache").usage() <= size * 2.5


def test_two_workers_download_each_shard_once(flux_server, shard_set, tmp_path):
    so = opts(flux_server, tmp_path)
    ds = FluxShardDataset.from_shards(shard_set, storage_options=so)
    flux_server.reset_stats()
    loader = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=2)
    assert sorted((s["__key__"], s["bin"]) for s in loader) == EXPECTED
    sizes = sum(make_fs(flux_server).info(u)["size"] for u in shard_set)
    assert flux_server.stats()["bytes_out"] < sizes * 1.2  # each shard's bytes sent once
    flux_server.reset_stats()
    assert sorted((s["__key__"], s["bin"]) for s in loader) == EXPECTED
    assert data_reads(flux_server) == 0
