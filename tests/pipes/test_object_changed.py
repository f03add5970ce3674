"""One changed object, one error: every pipes reader raises fluxfs's ObjectChanged naming the object.

The shard map dataset, the shard stream (iterable dataset), a DCP load and `load_file` of safetensors
all read through `fs.read_ranges`; an object overwritten or deleted after its generation was known is
the same exception type from each, still catchable as the types each raised before.
"""
from __future__ import annotations

import pytest
import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint import DefaultLoadPlanner

from fluxfs.errors import ObjectChanged, PreconditionFailed
from fluxfs.pipes.checkpoint import FluxStorageReader, FluxStorageWriter
from fluxfs.pipes.checkpoint.errors import CheckpointChangedError
from fluxfs.pipes.safetensors import load_file, save_file
from fluxfs.pipes.shards import FluxShardDataset, FluxShardMapDataset, ShardError
from tests.conftest import make_fs
from tests.shards.conftest import put_shard, shard_bytes, shard_keys

CHANGES = ["overwrite", "delete"]


@pytest.fixture
def so(flux_server) -> dict:
    return {"endpoint_url": flux_server.url, "token": "anon", "skip_instance_cache": True}


def change(fs, path: str, how: str) -> None:
    if how == "overwrite":
        fs.pipe_file(path, fs.cat_file(path))  # same bytes, a new generation
    else:
        fs.rm(path)


def check(err: pytest.ExceptionInfo, path: str) -> None:
    """The one type every reader raises, naming the object, catchable as what callers caught before."""
    assert isinstance(err.value, ObjectChanged), type(err.value).__mro__
    assert isinstance(err.value, FileNotFoundError) and isinstance(err.value, PreconditionFailed)
    assert path in str(err.value) and "generation" in str(err.value)


@pytest.mark.parametrize("how", CHANGES)
def test_shard_map_dataset(flux_server, bucket, so, how):
    fs = make_fs(flux_server)
    for name in ("a", "b"):
        put_shard(fs, f"{bucket}/m/{name}.tar", shard_bytes(shard_keys(0, 3)))
    ds = FluxShardMapDataset([f"flux://{bucket}/m/a.tar", f"flux://{bucket}/m/b.tar"], storage_options=so)
    assert ds[4]["__key__"] == "s0/0001"
    change(fs, f"{bucket}/m/b.tar", how)
    with pytest.raises(ShardError) as err:
        ds[4]
    check(err, f"{bucket}/m/b.tar")


@pytest.mark.parametrize("how", CHANGES)
def test_shard_stream(flux_server, bucket, so, how):
    fs = make_fs(flux_server)
    for name in ("a", "b"):
        put_shard(fs, f"{bucket}/s/{name}.tar", shard_bytes(shard_keys(0, 3)))
    # one small range in flight: b's reads start after a's first sample, so after the change
    it = iter(FluxShardDataset.from_prefix(f"flux://{bucket}/s/", storage_options=so, range_size=512,
                                           ranges_in_flight=1))
    next(it)
    change(fs, f"{bucket}/s/b.tar", how)
    with pytest.raises(ShardError) as err:
        list(it)
    check(err, f"{bucket}/s/b.tar")


@pytest.mark.parametrize("how", CHANGES)
def test_dcp_load(flux_server, bucket, so, how):
    fs = make_fs(flux_server)
    url = f"flux://{bucket}/ck"
    dcp.save({"w": torch.zeros(1000)}, storage_writer=FluxStorageWriter(url, **so))
    reader = FluxStorageReader(url, **so)
    metadata = reader.read_metadata()  # the steps dcp.load runs, the data file changed before the reads
    reader.set_up_storage_reader(metadata, True)
    target = {"w": torch.full((1000,), -1.0)}
    planner = DefaultLoadPlanner()
    planner.set_up_planner(target, metadata, True)
    plan = reader.prepare_local_plan(planner.create_local_plan())
    data = [p for p in fs.find(f"{bucket}/ck") if not p.endswith(".metadata")]
    for path in data:
        change(fs, path, how)
    with pytest.raises(CheckpointChangedError) as err:
        reader.read_data(plan, planner).wait()
    check(err, data[0])
    assert torch.equal(target["w"], torch.full((1000,), -1.0))


@pytest.mark.parametrize("how", CHANGES)
def test_load_file_of_safetensors(flux_server, bucket, how):
    fs = make_fs(flux_server)
    path = f"{bucket}/w.safetensors"
    tensors = {"a": torch.arange(100_000, dtype=torch.float32), "b": torch.ones(10)}   # past the header probe
    save_file(tensors, f"flux://{path}", fs=fs)
    real = fs._read_ranges

    async def change_before_the_tensor_reads(p, ranges, **kw):
        if "into" in kw:  # the header was read: the object changes before its tensors are
            if how == "overwrite":
                await fs._pipe_file(path, await fs._cat_file(path))
            else:
                await fs._rm_file(path)
        return await real(p, ranges, **kw)

    fs._read_ranges = change_before_the_tensor_reads
    with pytest.raises(ObjectChanged) as err:
        load_file(f"flux://{path}", fs=fs)
    check(err, path)


def test_filesystems_without_generations_read_through_the_generic_path():
    """memory:// has no generations and no read_ranges: both shard readers read it through cat_file."""
    from fluxfs.pipes.shards import ShardWriter

    with ShardWriter("memory://changed-generic/m/{:02d}.tar", max_samples=5) as w:
        w.write_all({"__key__": f"{i:04d}", "bin": bytes([i]) * (1000 + i)} for i in range(12))
    ds = FluxShardMapDataset(w.shards, max_gap=0)
    got = ds.__getitems__([1, 2, 9])
    assert [(s["__key__"], s["bin"]) for s in got] == [(f"{i:04d}", bytes([i]) * (1000 + i)) for i in (1, 2, 9)]
    streamed = list(FluxShardDataset.from_prefix("memory://changed-generic/m/", range_size=700))
    assert [(s["__key__"], s["bin"]) for s in streamed] == [(f"{i:04d}", bytes([i]) * (1000 + i)) for i in range(12)]
