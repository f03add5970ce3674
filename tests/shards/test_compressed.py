"""Compressed shards (.tar.gz, .tgz, bzip2, xz): streamed by FluxShardDataset and ReadShards as webdataset reads
them, told by their magic bytes; refused by random access (indexing, FluxShardMapDataset) with a clear error."""
from __future__ import annotations

import bz2
import gzip
import lzma
import warnings

import pytest
from torchdata.nodes import IterableWrapper, Loader

from fluxfs.pipes.shards import FluxShardDataset, FluxShardMapDataset, MissingIndexWarning, ReadShards, ShardError
from fluxfs.pipes.shards.indexer import build_index

from .conftest import payload, sample_fields, shard_bytes, shard_keys

COMPRESS = {"gzip": gzip.compress, "bzip2": bz2.compress, "xz": lzma.compress}


@pytest.fixture
def options(flux_server) -> dict:
    return {"endpoint_url": flux_server.url, "token": "anon", "skip_instance_cache": True}


def _keys(samples) -> list[str]:
    out = []
    for s in samples:
        assert s["bin"] == payload(s["__key__"]) and s["cls"] == sample_fields(s["__key__"])["cls"]
        out.append(s["__key__"])
    return out


@pytest.mark.parametrize("range_size", [2**20, 700])  # one GET; many small ones (pieces cut mid-stream)
def test_gzip_shards_stream_in_the_iterable_dataset_and_read_shards(fs, bucket, options, range_size):
    tar0, tar1 = shard_bytes(shard_keys(0, 6)), shard_bytes(shard_keys(1, 4))
    fs.pipe(f"{bucket}/z/a.tar.gz", gzip.compress(tar0))
    fs.pipe(f"{bucket}/z/b.tgz", gzip.compress(tar1[:3000]) + gzip.compress(tar1[3000:]))  # two gzip members
    want = shard_keys(0, 6) + shard_keys(1, 4)
    with warnings.catch_warnings():
        warnings.simplefilter("error", MissingIndexWarning)  # compressed shards cannot have one: no advice to
        ds = FluxShardDataset.from_prefix(f"flux://{bucket}/z/", storage_options=options, range_size=range_size)
        assert _keys(ds) == want
        parts = [FluxShardDataset.from_prefix(f"flux://{bucket}/z/", storage_options=options, rank=r, world_size=3)
                 for r in range(3)]  # fewer shards than readers: each shard read in parts
        shares = [_keys(p) for p in parts]  # compressed shards are counted (streamed) for equal shares
        assert [len(s) for s in shares] == [4, 4, 4]  # 10 samples padded to 12
        assert set(k for s in shares for k in s) == set(want)
        node = ReadShards(IterableWrapper([f"flux://{bucket}/z/a.tar.gz", f"flux://{bucket}/z/b.tgz"]),
                          storage_options=options, range_size=range_size)
        assert _keys(Loader(node)) == want


@pytest.mark.parametrize("kind", sorted(COMPRESS))
def test_compression_is_told_by_magic_bytes_not_the_name(fs, bucket, options, kind):
    fs.pipe(f"{bucket}/m/{kind}.tar", COMPRESS[kind](shard_bytes(shard_keys(2, 3))))
    with pytest.warns(MissingIndexWarning):
        ds = FluxShardDataset.from_shards(f"flux://{bucket}/m/{kind}.tar", storage_options=options)
    assert _keys(ds) == shard_keys(2, 3)


@pytest.mark.parametrize("name", ["a.tar.gz", "plain-name.tar"])
def test_random_access_refuses_compressed_shards_saying_why(fs, bucket, options, name):
    fs.pipe(f"{bucket}/r/{name}", gzip.compress(shard_bytes(shard_keys(0, 2))))
    url = f"flux://{bucket}/r/{name}"
    why = rf"^{url} at byte 0: a gzip-compressed tar: random access .* needs uncompressed \.tar shards"
    with pytest.raises(ShardError, match=why):
        build_index(fs, url)
    with pytest.raises(ShardError, match=why):
        FluxShardMapDataset(url, storage_options=options)
    if name.endswith(".gz"):
        with pytest.raises(FileNotFoundError, match=r"no \.tar shards under .* \(1 other objects\): 1 of them are "
                                                    r"compressed tars, which only FluxShardDataset and "
                                                    r"ReadShards read"):
            FluxShardMapDataset.from_prefix(f"flux://{bucket}/r/", storage_options=options)


def test_truncated_or_corrupt_gzip_and_zstd_are_named(fs, bucket, options):
    packed = gzip.compress(shard_bytes(shard_keys(0, 3)))
    fs.pipe(f"{bucket}/t/cut.tar.gz", packed[:-20])
    bad = bytearray(packed)
    bad[40:60] = b"\xff" * 20
    fs.pipe(f"{bucket}/t/bad.tar.gz", bytes(bad))
    with pytest.raises(ShardError, match=r"t/cut\.tar\.gz at byte \d+: truncated: the gzip stream ends"):
        list(FluxShardDataset.from_shards(f"flux://{bucket}/t/cut.tar.gz", storage_options=options))
    with pytest.raises(ShardError, match=r"t/bad\.tar\.gz at byte \d+: corrupt gzip data|"
                                         r"t/bad\.tar\.gz \(gzip-decompressed\) at byte \d+"):
        list(FluxShardDataset.from_shards(f"flux://{bucket}/t/bad.tar.gz", storage_options=options))
    fs.pipe(f"{bucket}/t/z.tar.zst", b"\x28\xb5\x2f\xfd" + bytes(2000))
    with pytest.raises(ShardError, match=r"t/z\.tar\.zst at byte 0: a zstd-compressed tar: not supported"):
        list(FluxShardDataset.from_shards(f"flux://{bucket}/t/z.tar.zst", storage_options=options))
