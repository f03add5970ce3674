"""The node-local cache behind the object datasets (`cache_dir=`): epoch 1 fills it, epoch 2 makes no data GET
with the same samples; an overwritten object is read anew; a limit below one epoch still yields every
sample once; two DataLoader workers download each object once. On the embedded server."""
from __future__ import annotations

import os
import time

import pytest
from torch.utils.data import DataLoader

from fluxfs.cache import NodeCache
from fluxfs.pipes import FluxIterableDataset, FluxMapDataset
from tests.conftest import make_fs

N = 120


def body(i: int) -> bytes:
    return f"object {i} ".encode() * (50 + i % 40)


EXPECTED = sorted((f"o/{i:04d}", body(i)) for i in range(N))


@pytest.fixture
def objects(flux_server, bucket) -> str:
    fs = make_fs(flux_server)
    fs.pipe({f"{bucket}/o/{i:04d}": body(i) for i in range(N)})
    return f"flux://{bucket}/o/"


def key_and_bytes(data: bytes, meta) -> tuple[str, bytes]:
    return meta.key, data


def opts(server, tmp_path, **more) -> dict:
    return {"endpoint_url": server.url, "token": "anon", "cache_dir": str(tmp_path / "cache"), **more}


def epoch(ds, workers: int = 0) -> list:
    loader = DataLoader(ds, batch_size=16, num_workers=workers, collate_fn=lambda b: b)
    return sorted(s for batch in loader for s in batch)


@pytest.mark.parametrize("kind", ["iterable", "map"])
def test_second_epoch_makes_no_data_get(flux_server, objects, tmp_path, kind):
    cls = FluxIterableDataset if kind == "iterable" else FluxMapDataset
    ds = cls.from_prefix(objects, storage_options=opts(flux_server, tmp_path), transform=key_and_bytes)
    flux_server.reset_stats()
    assert epoch(ds) == EXPECTED
    assert flux_server.stats()["data_reads"] > 0
    flux_server.reset_stats()
    assert epoch(ds) == EXPECTED
    assert flux_server.stats()["data_reads"] == 0 and flux_server.stats()["requests"].get("compose", 0) == 0
    assert len(NodeCache(tmp_path / "cache").entries()) == N


def test_an_overwritten_object_is_read_anew(flux_server, bucket, objects, tmp_path):
    so = opts(flux_server, tmp_path)
    assert epoch(FluxMapDataset.from_prefix(objects, storage_options=so, transform=key_and_bytes)) == EXPECTED
    make_fs(flux_server).pipe(f"{bucket}/o/0007", b"new bytes")
    got = dict(epoch(FluxMapDataset.from_prefix(objects, storage_options=so, transform=key_and_bytes)))
    assert got["o/0007"] == b"new bytes" and got["o/0008"] == body(8)


def test_a_limit_below_one_epoch_still_yields_every_sample_once(flux_server, objects, tmp_path):
    total = sum(len(body(i)) for i in range(N))
    so = opts(flux_server, tmp_path, cache_limit=total // 3)
    ds = FluxIterableDataset.from_prefix(objects, storage_options=so, transform=key_and_bytes)
    for _ in range(2):
        assert epoch(ds) == EXPECTED
        assert NodeCache(tmp_path / "cache").usage() <= total // 3


def test_two_workers_download_each_object_once(flux_server, objects, tmp_path):
    ds = FluxMapDataset.from_prefix(objects, storage_options=opts(flux_server, tmp_path), transform=key_and_bytes)
    flux_server.reset_stats()
    assert epoch(ds, workers=2) == EXPECTED
    assert flux_server.stats()["data_reads"] == N  # batches of 16 are direct GETs: one per object, none twice
    assert len(NodeCache(tmp_path / "cache").entries()) == N  # the workers finished their fills on exit
    flux_server.reset_stats()
    assert epoch(ds, workers=2) == EXPECTED
    assert flux_server.stats()["data_reads"] == 0


def filled_then_torn(flux_server, objects, tmp_path, count: int) -> FluxMapDataset:
    """A map dataset whose epoch filled the cache, then `count` of its entries torn as a power loss before the
    data reached the disk leaves them: their size, zeros."""
    ds = FluxMapDataset.from_prefix(objects, storage_options=opts(flux_server, tmp_path), transform=key_and_bytes)
    assert epoch(ds) == EXPECTED
    cache = NodeCache(tmp_path / "cache")
    for _ in range(100):  # the fills run off the read path
        if len(cache.entries()) == N:
            break
        time.sleep(0.05)
    for path in [os.path.join(cache.directory, n) for n in sorted(os.listdir(cache.directory))
                 if n.endswith(".data")][:count]:
        with open(path, "r+b") as f:
            f.write(b"\0" * os.path.getsize(path))
    return ds


def test_a_torn_entry_is_read_from_storage_not_returned(flux_server, objects, tmp_path):
    ds = filled_then_torn(flux_server, objects, tmp_path, 3)
    flux_server.reset_stats()
    assert epoch(ds) == EXPECTED
    assert flux_server.stats()["data_reads"] == 3


def test_a_torn_object_entry_is_not_served_by_the_other_read_paths(flux_server, objects, tmp_path):
    """Object entries are renamed into place without an fsync: a ranged read or cat_file of the same object
    (paths that trust a complete entry) checks such an entry's crc32c first and reads storage when torn."""
    filled_then_torn(flux_server, objects, tmp_path, N)
    fs = make_fs(flux_server, cache_dir=str(tmp_path / "cache"))
    path = objects.removeprefix("flux://") + "0007"
    assert fs.read_ranges(path, [(0, 10), (20, 40)]) == [body(7)[0:10], body(7)[20:40]]
    assert fs.cat_file(path) == body(7)


def test_read_objects_node_second_pass_makes_no_data_get(flux_server, objects, tmp_path):
    from torchdata.nodes import Loader

    from fluxfs.pipes import ListObjects, ReadObjects

    so = opts(flux_server, tmp_path)

    def one_pass() -> list:
        return sorted(Loader(ReadObjects(ListObjects(objects, storage_options=so), storage_options=so)))

    flux_server.reset_stats()
    assert one_pass() == EXPECTED
    assert flux_server.stats()["data_reads"] > 0
    flux_server.reset_stats()  # (no waiting: a read waits for this process's own fills of what it asks)
    assert one_pass() == EXPECTED
    assert flux_server.stats()["data_reads"] == 0


def test_a_miss_makes_no_file_in_the_cache_directory(flux_server, objects, tmp_path, monkeypatch):
    """Looking an object up makes no lock file when it has no entry (a file creation costs ~1 ms on a busy
    disk, on the read's path): with nothing cached (no room in the backlog), the directory stays empty."""
    from fluxfs.cache import objects as cache_objects
    monkeypatch.setattr(cache_objects, "BACKLOG", 0)
    ds = FluxMapDataset.from_prefix(objects, storage_options=opts(flux_server, tmp_path), transform=key_and_bytes)
    assert epoch(ds) == EXPECTED
    left = [n for n in os.listdir(tmp_path / "cache") if not n.startswith((".", "CACHEDIR"))]
    assert left == []


def test_a_fill_killed_mid_batch_leaves_nothing_once_refilled(tmp_path):
    """A worker killed while writing a batch (DataLoader terminates one slow to exit) leaves temporaries and
    sidecars; the next fill of those objects removes them, and the entries are complete and exact."""
    import google_crc32c

    from fluxfs.cache import body as cache_body, objects as cache_objects
    cache = NodeCache(tmp_path / "cache")
    datas = [body(i) for i in range(5)]
    items = [(("b", f"o/{i}", "1", len(d), google_crc32c.value(d)), d) for i, d in enumerate(datas)]
    pid = os.fork()
    if pid == 0:  # the worker: killed in the middle of writing its batch
        cache_body.write_all = lambda fd, chunk, offset: os._exit(0)
        cache_objects._fill(cache, items)
        os._exit(1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert any(n.endswith(".part") for n in os.listdir(cache.directory))
    cache_objects._fill(cache, items)
    left = sorted(n.rsplit(".", 1)[-1] for n in os.listdir(cache.directory) if not n.startswith((".", "CACHEDIR")))
    assert left == ["data"] * 5 + ["lock"] * 5 + ["meta"] * 5
    assert [cache.get("b", f"o/{i}", "1", len(d), None, lambda: b"") for i, d in enumerate(datas)] == datas
