"""Shards in a bucket for the reader tests, written with tarfile's headers (`member_bytes`) and `fs.pipe`."""
from __future__ import annotations

import hashlib

import pytest

from fluxfs.pipes.shards import ShardIndex
from fluxfs.pipes.shards.tarformat import member_bytes, scan
from fluxfs.pipes.shards.index import index_path
from fluxfs.pipes.shards.tarformat import END_OF_ARCHIVE
from tests.conftest import make_fs, new_bucket_name

# Samples per shard: uneven on purpose, one shard empty of samples.
COUNTS = (7, 3, 5, 0, 6)


def payload(key: str) -> bytes:
    """A sample's deterministic bytes (a few hundred, some over one tar block)."""
    digest = hashlib.sha256(key.encode()).digest()
    return digest * (1 + digest[0] % 24)


def sample_fields(key: str) -> dict[str, bytes]:
    return {"bin": payload(key), "cls": str(sum(payload(key)) % 10).encode()}


def shard_bytes(keys: list[str], fields=sample_fields) -> bytes:
    pieces = []
    for key in keys:
        for ext, data in fields(key).items():
            pieces += member_bytes(f"{key}.{ext}", data)
    pieces.append(END_OF_ARCHIVE)
    return b"".join(bytes(p) for p in pieces)


def put_shard(fs, path: str, data: bytes, index: bool = True) -> None:
    """Upload a shard and (`index`) its index, made from the uploaded object's size and generation."""
    fs.pipe(path, data)
    if index:
        info = fs.info(path)
        fs.pipe(index_path(path), ShardIndex(path, len(data), scan(path, data), str(info["generation"])).to_bytes())


def shard_keys(i: int, n: int) -> list[str]:
    return [f"s{i}/{j:04d}" for j in range(n)]


@pytest.fixture(scope="session")
def shard_bucket(flux_server):
    """A bucket with "ds/shard-00000{0..4}.tar" (COUNTS samples each; shard 2 without an index)."""
    name = new_bucket_name()
    flux_server.create_bucket(name)
    fs = make_fs(flux_server)
    for i, n in enumerate(COUNTS):
        put_shard(fs, f"{name}/ds/shard-{i:06d}.tar", shard_bytes(shard_keys(i, n)), index=i != 2)
    fs.pipe(f"{name}/ds/README.txt", b"not a shard")
    return name


def all_sample_keys() -> list[str]:
    return [k for i, n in enumerate(COUNTS) for k in shard_keys(i, n)]
