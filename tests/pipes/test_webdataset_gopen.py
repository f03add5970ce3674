"""webdataset over flux:// URLs with `register_webdataset`: shards written by webdataset's ShardWriter and read by
WebDataset (also in DataLoader workers), byte-exact, without a process per shard."""
from __future__ import annotations

import pytest
import torch

from tests.conftest import make_fs

wds = pytest.importorskip("webdataset")


@pytest.fixture
def registered(monkeypatch, storage_options):
    """flux:// registered for this test only (webdataset's table restored after)."""
    import importlib

    from fluxfs.pipes import register_webdataset

    gopen = importlib.import_module("webdataset.gopen")
    monkeypatch.setattr(gopen, "gopen_schemes", dict(gopen.gopen_schemes))
    register_webdataset(storage_options)
    return gopen.gopen_schemes


def _samples(n: int) -> list[dict]:
    return [{"__key__": f"s{i:04d}", "txt": f"sample {i}".encode(), "bin": bytes([i % 256]) * (i * 37 % 900)}
            for i in range(n)]


def _write_shards(bucket: str, samples: list[dict]) -> None:
    with wds.ShardWriter(f"flux://{bucket}/shard-%d.tar", maxcount=10, verbose=0) as sink:
        for s in samples:
            sink.write(s)


def test_webdataset_writes_and_reads_flux_shards(registered, flux_server, bucket):
    samples = _samples(40)
    _write_shards(bucket, samples)
    assert make_fs(flux_server).ls(bucket, detail=False) == [f"{bucket}/shard-{i}.tar" for i in range(4)]
    got = list(wds.WebDataset(f"flux://{bucket}/shard-{{0..3}}.tar", shardshuffle=False))
    assert [(g["__key__"], g["txt"], g["bin"]) for g in got] == [(s["__key__"], s["txt"], s["bin"]) for s in samples]
    assert all(g["__url__"].startswith(f"flux://{bucket}/shard-") for g in got)


def test_webdataset_in_dataloader_workers(registered, flux_server, bucket):
    samples = _samples(40)
    _write_shards(bucket, samples)
    ds = wds.WebDataset(f"flux://{bucket}/shard-{{0..3}}.tar", shardshuffle=False,
                        nodesplitter=wds.split_by_node, workersplitter=wds.split_by_worker).to_tuple("__key__", "bin")
    loader = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=2)
    assert sorted(map(tuple, loader)) == sorted((s["__key__"], s["bin"]) for s in samples)


def test_missing_shard_is_named(registered, bucket):
    with pytest.raises(FileNotFoundError, match=f"{bucket}/nope.tar"):
        list(wds.WebDataset(f"flux://{bucket}/nope.tar", shardshuffle=False))


def test_only_what_fluxfs_opens_can_be_registered(registered):
    from fluxfs.pipes import register_webdataset

    with pytest.raises(ValueError, match=r"fluxfs opens flux://, gs:// and gcs:// URLs, not s3://"):
        register_webdataset(schemes=("s3",))
    register_webdataset(schemes=("flux", "gs"), endpoint_url="http://127.0.0.1:9", token="anon")
    assert registered["gs"] is registered["flux"]
