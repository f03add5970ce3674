"""`fs.open(path, "rb")`: random access against the true bytes, readinto, generation pinning, torch.load."""
from __future__ import annotations

import io
import random

import pytest

from fluxfs.errors import ObjectChanged
from tests.conftest import make_fs


@pytest.fixture
def rfs(gcs_server):
    return make_fs(gcs_server, multipart="resumable")


def _blob(n: int, seed: int = 0) -> bytes:
    return random.Random(seed).randbytes(n)


@pytest.mark.parametrize("window", [
    pytest.param({}, id="whole-object-in-memory"),
    pytest.param({"whole_object_limit": 0, "prefetch": 2}, id="bounded-prefetch-window"),
])
def test_random_seeks_and_reads_match_the_bytes(rfs, any_bucket, window):
    data = _blob(300_001, 1)
    path = f"{any_bucket}/blob"
    rfs.pipe(path, data)
    rnd = random.Random(2)
    with rfs.open(path, "rb", block_size=16_384, **window) as f:
        assert f.seekable() and f.readable() and f.size == len(data)
        for _ in range(300):
            pos = rnd.randrange(0, len(data) + 10)
            n = rnd.choice([0, 1, 5, 100, 16_383, 16_384, 16_385, 70_000, -1])
            whence = rnd.choice([io.SEEK_SET, io.SEEK_END, io.SEEK_CUR])
            target = {io.SEEK_SET: pos, io.SEEK_END: pos - len(data), io.SEEK_CUR: pos - f.tell()}[whence]
            assert f.seek(target, whence) == pos == f.tell()
            got = f.read(n)
            want = data[pos:] if n < 0 else data[pos:pos + n]
            assert got == want
            assert f.tell() == min(len(data), pos + len(want)) if want else True
        f.seek(0)
        assert f.read() == data


def test_readinto_fills_the_buffer(rfs, any_bucket):
    data = _blob(100_000, 3)
    path = f"{any_bucket}/blob"
    rfs.pipe(path, data)
    with rfs.open(path, "rb", block_size=4096) as f:
        buf = bytearray(10_000)
        assert f.readinto(buf) == 10_000 and bytes(buf) == data[:10_000]
        f.seek(95_000)
        assert f.readinto(buf) == 5_000 and bytes(buf[:5_000]) == data[95_000:]
        assert f.readinto(buf) == 0
        f.seek(1)
        view = memoryview(bytearray(8 * 100)).cast("d")  # non-byte formats are filled bytewise too
        assert f.readinto(view) == 800 and view.tobytes() == data[1:801]


def test_empty_and_one_byte_objects(rfs, any_bucket):
    rfs.pipe({f"{any_bucket}/empty": b"", f"{any_bucket}/one": b"1"})
    with rfs.open(f"{any_bucket}/empty", "rb") as f:
        assert f.size == 0 and f.read() == b"" and f.read(10) == b""
    with rfs.open(f"{any_bucket}/one", "rb") as f:
        assert f.read(5) == b"1" and f.read() == b""


def test_missing_object_is_file_not_found(rfs, any_bucket):
    with pytest.raises(FileNotFoundError, match="nothing-here"):
        rfs.open(f"{any_bucket}/nothing-here", "rb")


def test_generation_is_pinned_while_open(flux_server, bucket):
    fs = make_fs(flux_server, multipart="resumable")
    path = f"{bucket}/blob"
    old = _blob(200_000, 4)
    fs.pipe(path, old)
    with fs.open(path, "rb", block_size=10_000, whole_object_limit=0, prefetch=1) as f:
        assert f.read(10_000) == old[:10_000]
        make_fs(flux_server, multipart="resumable").pipe(path, _blob(200_000, 5))
        # The old generation is gone (no versioning): the handle says so instead of mixing versions.
        with pytest.raises(FileNotFoundError, match="overwritten or deleted while open") as err:
            f.seek(150_000)
            f.read(10_000)
        assert isinstance(err.value, ObjectChanged) and err.value.path == path  # as fs.read_ranges says it
    with fs.open(path, "rb") as f:
        assert f.read() == _blob(200_000, 5)


def test_whole_read_fetches_in_parallel_ranges(flux_server, bucket):
    fs = make_fs(flux_server, multipart="resumable")
    data = _blob(5_000_000, 6)
    fs.pipe(f"{bucket}/big", data)
    flux_server.reset_stats()
    with fs.open(f"{bucket}/big", "rb", block_size=1_000_000) as f:
        assert f.read() == data
    assert flux_server.stats()["requests"]["read"] == 5  # five ranges, no metadata request


def test_torch_load_of_a_torch_save_file(rfs, any_bucket):
    torch = pytest.importorskip("torch")
    state = {"w": torch.arange(300_000, dtype=torch.float32).reshape(300, 1000), "b": torch.ones(7),
             "meta": {"step": 3, "name": "x"}}
    buf = io.BytesIO()
    torch.save(state, buf)
    path = f"{any_bucket}/ckpt.pt"
    rfs.pipe(path, buf.getvalue())  # written with a plain pipe
    for opts in ({}, {"block_size": 65_536, "whole_object_limit": 0, "prefetch": 3}):
        with rfs.open(path, "rb", **opts) as f:
            loaded = torch.load(f, weights_only=True)
        assert torch.equal(loaded["w"], state["w"]) and torch.equal(loaded["b"], state["b"])
        assert loaded["meta"] == state["meta"]
