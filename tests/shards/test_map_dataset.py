"""FluxShardMapDataset: random access to shard samples, a batch's neighbours in one ranged GET, replaced shards
caught."""
from __future__ import annotations

import logging
import tarfile

import pytest
import torch.utils.data

from fluxfs.pipes.shards import FluxShardMapDataset, ShardError, ShardWriter
from fluxfs.pipes.shards.index import index_path
from fluxfs.pipes.shards.tarformat import END_OF_ARCHIVE
from tests.conftest import make_fs


def _sample(i: int) -> dict:
    return {"__key__": f"{i:04d}", "bin": bytes([i % 251]) * (2000 + 37 * i), "cls": i % 7}


@pytest.fixture
def so(flux_server) -> dict:
    return {"endpoint_url": flux_server.url, "token": "anon", "skip_instance_cache": True}


@pytest.fixture
def shards(bucket, so) -> list[str]:
    """30 samples in 3 shards of 10."""
    with ShardWriter(f"flux://{bucket}/d/{{:02d}}.tar", max_samples=10, storage_options=so) as w:
        w.write_all(_sample(i) for i in range(30))
    return w.shards


def _check(sample: dict, i: int) -> None:
    assert sample["__key__"] == f"{i:04d}"
    assert sample["bin"] == _sample(i)["bin"] and sample["cls"] == str(i % 7).encode()


def test_len_getitem_and_batches_across_shards(flux_server, bucket, shards, so):
    fs = make_fs(flux_server)
    fs.pipe_file(f"{bucket}/d/03.tar", END_OF_ARCHIVE)  # an empty shard: no samples, no error
    ds = FluxShardMapDataset(f"flux://{bucket}/d/{{00..03}}.tar", storage_options=so)
    assert len(ds) == 30
    _check(ds[0], 0)
    _check(ds[-1], 29)
    assert ds[13]["__shard__"] == shards[1]
    batch = ds.__getitems__([25, 3, 14, 3])
    for got, i in zip(batch, [25, 3, 14, 3]):
        _check(got, i)
    with pytest.raises(IndexError, match="index 30 out of range for 30 samples"):
        ds[30]
    flux_server.reset_stats()
    ds.__getitems__(list(range(10, 20)))  # a whole shard's samples: one ranged GET
    assert flux_server.stats()["requests"]["read"] == 1
    far = FluxShardMapDataset(shards, max_gap=4096, storage_options=so)
    flux_server.reset_stats()
    far.__getitems__([10, 13, 14])  # 13 and 14 are headers apart, 11 and 12 (> 4 KiB) lie between 10 and 13
    assert flux_server.stats()["requests"]["read"] == 2


def test_from_prefix_and_dataloader_with_read_ahead(bucket, shards, so):
    ds = FluxShardMapDataset.from_prefix(f"flux://{bucket}/d/", storage_options=so,
                                         transform=lambda s: (s["__key__"], len(s["bin"])))
    assert ds.shards == shards
    loader = torch.utils.data.DataLoader(ds, sampler=ds.sampler(seed=3), batch_size=4, num_workers=2,
                                         collate_fn=list)
    seen = [item for batch in loader for item in batch]
    assert sorted(seen) == [(f"{i:04d}", 2000 + 37 * i) for i in range(30)]
    assert [k for k, _ in seen] != sorted(k for k, _ in seen)  # shuffled


def test_shard_replaced_mid_epoch_is_reported(flux_server, bucket, shards, so):
    fs = make_fs(flux_server)
    ds = FluxShardMapDataset(shards, storage_options=so)
    _check(ds[15], 15)
    fs.pipe_file(fs._strip_protocol(shards[1]), fs.cat(shards[1]))  # same bytes, new generation
    with pytest.raises(ShardError, match=rf"{shards[1]} at byte \d+: the shard changed while being read: "
                                         r"generation \d+ no longer exists"):
        ds[15]
    _check(ds[5], 5)  # the other shards read on
    with pytest.raises(ShardError, match=rf"{shards[1]}: the shard was replaced after it was indexed"):
        FluxShardMapDataset(shards, storage_options=so)


def test_missing_index_is_built_and_truncation_is_named(flux_server, bucket, shards, so, caplog):
    fs = make_fs(flux_server)
    fs.rm(index_path(fs._strip_protocol(shards[2])))
    with caplog.at_level(logging.WARNING):
        ds = FluxShardMapDataset(shards, storage_options=so)
    assert f"shard {shards[2]} has no index" in caplog.text
    _check(ds[29], 29)
    with pytest.raises(FileNotFoundError, match="has no index"):
        FluxShardMapDataset(shards, build_missing_index=False, storage_options=so)
    data = fs.cat(shards[2])
    fs.pipe_file(fs._strip_protocol(shards[2]), data[:len(data) // 2])
    with pytest.raises(ShardError, match=rf"{shards[2]} at byte \d+: truncated"):
        FluxShardMapDataset(shards, storage_options=so)


def test_webdataset_written_shards_read_by_index(flux_server, bucket, so, tmp_path):
    wds = pytest.importorskip("webdataset")
    fs = make_fs(flux_server)
    path = tmp_path / "w.tar"
    with wds.TarWriter(str(path)) as sink:
        for i in range(12):
            sink.write({"__key__": f"{i:04d}", "bin": _sample(i)["bin"], "cls": i % 7})
    fs.put_file(str(path), f"{bucket}/w/w.tar")
    ds = FluxShardMapDataset(f"flux://{bucket}/w/w.tar", storage_options=so)
    assert len(ds) == 12
    for i in (0, 7, 11):
        _check(ds[i], i)
    with tarfile.open(path) as tf:  # the same bytes tar sees
        assert tf.extractfile("0007.bin").read() == ds[7]["bin"]


def test_block_sampler_keeps_runs_of_neighbours_in_a_batch(flux_server, bucket, shards, so):
    ds = FluxShardMapDataset(shards, storage_options=so)
    sampler = ds.sampler(seed=1, block=5, window=10)
    order = list(sampler)
    assert sorted(order) == list(range(30)) and order != list(range(30))
    for lo in range(0, 30, 10):  # each window of 10 holds two whole runs of 5 neighbours
        starts = sorted({i - i % 5 for i in order[lo:lo + 10]})
        assert sorted(order[lo:lo + 10]) == [s + k for s in starts for k in range(5)]
    sampler.set_epoch(1)
    assert list(sampler) != order
    flux_server.reset_stats()
    ds.__getitems__(order[:10])
    assert flux_server.stats()["requests"]["read"] <= 2  # one GET per run (two, if a run spans a shard boundary)
