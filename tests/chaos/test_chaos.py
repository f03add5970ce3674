"""Every capability under 10% injected faults (429/503, resets, slow answers) against the fluxfs server.

Each test checks what a user would: the listing is the server's exact name set, every byte read
is the byte stored, written objects are whole (never partial, never a mix of two writes), and
nothing is left behind (no temporary objects, no open multipart uploads). Each also checks the
server did inject faults, so a green run means the retries worked rather than that nothing failed.
"""
from __future__ import annotations

import random

import pytest
import torch

from fluxfs.server.synthetic import synthetic_bytes, synthetic_size
from tests.conftest import make_fs

from .conftest import FAST_RETRY, assert_clean, fault_count, faults, no_faults

MiB = 2**20
SIZES = (1, 3000)


def expected(key: str, size=SIZES) -> bytes:
    return synthetic_bytes(key, synthetic_size(key, size, 0), 0)


def payload(size: int, seed: int) -> bytes:
    return random.Random(seed).randbytes(size)


def write_in_pieces(f, data: bytes, piece: int = 300_007) -> None:
    view = memoryview(data)
    for i in range(0, len(data), piece):
        f.write(view[i:i + piece])


def test_listing_is_identical_under_faults(flux_server, bucket):
    flux_server.generate(bucket, 2500, size=1, prefix="a/", seed=0)
    flux_server.generate(bucket, 500, size=1, prefix="b/x-", seed=0)
    truth = sorted(f"{bucket}/{n}" for n in flux_server.list_names(bucket))
    # Small pages and many workers: lots of list requests and work-stealing splits to fail.
    fs = make_fs(flux_server, retry=FAST_RETRY, list_page_size=100, list_concurrency=8)
    faults(flux_server, {"list"}, seed=3)
    before = fault_count(flux_server)
    assert fs.find(bucket) == truth
    streamed = [i["name"] for batch in fs.iter_objects(bucket, sort=True) for i in batch]
    assert streamed == truth
    unsorted = [i["name"] for batch in fs.iter_objects(f"{bucket}/a") for i in batch]
    assert sorted(unsorted) == [n for n in truth if n.startswith(f"{bucket}/a/")]
    assert len(unsorted) == len(set(unsorted)) == 2500
    assert fault_count(flux_server) > before


def test_batched_reads_are_byte_identical_under_faults(flux_server, bucket, chaos_fs):
    flux_server.generate(bucket, 600, size=SIZES, prefix="r/", seed=0)
    infos = [i for batch in chaos_fs.iter_objects(f"{bucket}/r") for i in batch]
    faults(flux_server, {"list", "read", "compose", "delete"}, seed=4)
    before = fault_count(flux_server)
    got = chaos_fs.cat_objects(infos)
    assert set(got) == {i["name"] for i in infos}
    for name, data in got.items():
        assert data == expected(name.partition("/")[2]), name
    # Plain paths (metadata from range listings) through fs.cat.
    paths = sorted(got)[:300]
    chaos_fs.invalidate_cache()
    again = chaos_fs.cat(paths)
    assert all(again[p] == got[p] for p in paths) and len(again) == 300
    assert fault_count(flux_server) > before
    no_faults(flux_server)
    assert_clean(flux_server, bucket)


@pytest.mark.parametrize("multipart,part_size", [("xml", 5 * MiB), ("compose", 64 * 1024)])
def test_multipart_writes_are_whole_under_faults(flux_server, bucket, multipart, part_size):
    fs = make_fs(flux_server, retry=FAST_RETRY, multipart=multipart, part_size=part_size, write_concurrency=4)
    faults(flux_server, {"write", "compose", "delete", "read", "metadata"}, seed=5)
    before = fault_count(flux_server)
    # Compose mode: 41 parts force a second compose level (32 sources per compose).
    sizes = [2 * part_size + 17, 41 * part_size + 5] if multipart == "compose" else [2 * part_size + 17]
    datas = {f"{bucket}/w{i}": payload(n, seed=i) for i, n in enumerate(sizes)}
    for path, data in datas.items():
        with fs.open(path, "wb") as f:
            write_in_pieces(f, data)
    # Overwrites of one key: afterwards it holds exactly the last version, never a mix.
    versions = [payload(part_size + 1000, seed=100 + v) for v in range(3)]
    for v in versions:
        with fs.open(f"{bucket}/same", "wb") as f:
            write_in_pieces(f, v)
    fs.pipe({f"{bucket}/p{i}": payload(1000 + i, seed=200 + i) for i in range(20)})
    assert fault_count(flux_server) > before
    no_faults(flux_server)
    for path, data in datas.items():
        assert fs.cat_file(path) == data, path
    assert fs.cat_file(f"{bucket}/same") == versions[-1]
    for i in range(20):
        assert fs.cat_file(f"{bucket}/p{i}") == payload(1000 + i, seed=200 + i)
    assert_clean(flux_server, bucket)


def test_lost_answers_to_xml_upload_requests_leave_no_upload(flux_server, bucket):
    """Resets after the server acted (initiate, part, complete): retries must not orphan an upload."""
    fs = make_fs(flux_server, retry=FAST_RETRY, multipart="xml", part_size=5 * MiB, write_concurrency=2)
    flux_server.configure(reset_rate=0.3, fail_ops={"write"}, seed=12)
    datas = {f"{bucket}/x{i}": payload(5 * MiB + 1 + i, seed=300 + i) for i in range(6)}
    for path, data in datas.items():
        with fs.open(path, "wb") as f:
            f.write(data)
    assert fault_count(flux_server) > 0
    no_faults(flux_server)
    for path, data in datas.items():
        assert fs.cat_file(path) == data
    assert_clean(flux_server, bucket)


def test_failed_write_leaves_nothing_under_faults(flux_server, bucket):
    """An exception inside the writer while faults hit the parts: no object, no part, no upload."""
    fs = make_fs(flux_server, retry=FAST_RETRY, multipart="compose", part_size=64 * 1024, write_concurrency=4)
    faults(flux_server, {"write", "compose", "delete"}, seed=6)
    with pytest.raises(RuntimeError, match="boom"):
        with fs.open(f"{bucket}/never", "wb") as f:
            write_in_pieces(f, payload(10 * 64 * 1024, seed=1))
            raise RuntimeError("boom")
    no_faults(flux_server)
    assert flux_server.list_names(bucket) == []
    assert_clean(flux_server, bucket)


def test_checkpoint_save_and_load_under_faults(flux_server, bucket, storage_options):
    from fluxfs.pipes import FluxCheckpoint

    ckpt = FluxCheckpoint(**storage_options, part_size=5 * MiB, write_concurrency=4)
    torch.manual_seed(0)
    state = {"w": torch.randn(3 * MiB // 4 * 3), "b": torch.arange(1000), "step": 7}  # ~9 MiB: 2 parts
    faults(flux_server, {"write", "read", "delete", "metadata"}, seed=7)
    before = fault_count(flux_server)
    url = f"flux://{bucket}/ckpt/model.pt"
    ckpt.save(state, url)
    ckpt.save({**state, "step": 8}, url)
    loaded = ckpt.load(url)
    assert fault_count(flux_server) > before
    assert torch.equal(loaded["w"], state["w"]) and torch.equal(loaded["b"], state["b"])
    assert loaded["step"] == 8
    no_faults(flux_server)
    assert flux_server.list_names(bucket) == ["ckpt/model.pt"]
    assert_clean(flux_server, bucket)


@pytest.mark.filterwarnings("ignore:torch.distributed is disabled")  # one process, on purpose
def test_dcp_save_and_load_under_faults(flux_server, bucket, storage_options):
    import torch.distributed.checkpoint as dcp

    from fluxfs.pipes import FluxStorageReader, FluxStorageWriter

    torch.manual_seed(1)
    state = {"layer": {"w": torch.randn(512, 512), "b": torch.randn(512)}, "step": torch.tensor(5)}
    url = f"flux://{bucket}/dcp/run"
    faults(flux_server, {"write", "read", "list", "delete", "metadata"}, seed=8)
    before = fault_count(flux_server)
    dcp.save(state, storage_writer=FluxStorageWriter(url, **storage_options))
    target = {"layer": {"w": torch.zeros(512, 512), "b": torch.zeros(512)}, "step": torch.tensor(0)}
    dcp.load(target, storage_reader=FluxStorageReader(url, **storage_options))
    assert fault_count(flux_server) > before
    assert torch.equal(target["layer"]["w"], state["layer"]["w"])
    assert torch.equal(target["layer"]["b"], state["layer"]["b"])
    assert int(target["step"]) == 5
    no_faults(flux_server)
    assert "dcp/run/.metadata" in flux_server.list_names(bucket, "dcp/run/")
    assert_clean(flux_server, bucket)


def test_training_epoch_under_faults(flux_server, bucket, storage_options):
    from torch.utils.data import DataLoader

    from fluxfs.pipes import FluxMapDataset

    flux_server.generate(bucket, 640, size=SIZES, prefix="train/", seed=0)
    faults(flux_server, {"list", "read", "compose", "delete"}, seed=9)
    before = fault_count(flux_server)
    ds = FluxMapDataset.from_prefix(f"flux://{bucket}/train/", storage_options=storage_options)
    loader = DataLoader(ds, batch_size=32, shuffle=True, num_workers=0, collate_fn=list,
                        generator=torch.Generator().manual_seed(0))
    seen = {}
    for batch in loader:
        assert len(batch) == 32
        for key, data in batch:
            assert key not in seen
            seen[key] = data
    assert fault_count(flux_server) > before
    assert len(seen) == 640
    for key, data in seen.items():
        assert data == expected(key), key
    no_faults(flux_server)
    assert_clean(flux_server, bucket)


def test_torchdata_nodes_under_faults(flux_server, bucket, storage_options):
    from torchdata.nodes import Loader

    from fluxfs.pipes import ListObjects, ReadObjects

    flux_server.generate(bucket, 300, size=SIZES, prefix="n/", seed=0)
    faults(flux_server, {"list", "read", "compose", "delete"}, seed=10)
    before = fault_count(flux_server)
    node = ReadObjects(ListObjects(f"flux://{bucket}/n/", storage_options=storage_options),
                       storage_options=storage_options, batch_size=32)
    got = dict(Loader(node))
    assert fault_count(flux_server) > before
    assert sorted(got) == sorted(flux_server.list_names(bucket, "n/"))
    for key, data in got.items():
        assert data == expected(key), key
    no_faults(flux_server)
    assert_clean(flux_server, bucket)


def test_iterable_dataset_epoch_under_faults(flux_server, bucket, storage_options):
    from torch.utils.data import DataLoader

    from fluxfs.pipes import FluxIterableDataset

    flux_server.generate(bucket, 400, size=SIZES, prefix="it/", seed=0)
    faults(flux_server, {"list", "read", "compose", "delete"}, seed=11)
    before = fault_count(flux_server)
    ds = FluxIterableDataset.from_prefix(f"flux://{bucket}/it/", storage_options=storage_options,
                                         shuffle=True, seed=3, read_batch=32)
    seen = [s for batch in DataLoader(ds, batch_size=16, num_workers=0, collate_fn=list) for s in batch]
    assert fault_count(flux_server) > before
    assert sorted(k for k, _ in seen) == sorted(flux_server.list_names(bucket, "it/"))
    assert all(data == expected(key) for key, data in seen)
    no_faults(flux_server)
    assert_clean(flux_server, bucket)
