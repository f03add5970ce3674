"""Round trips through ``flux://`` URLs with plain fsspec calls, against the fluxfs server."""
from __future__ import annotations

import os

import fsspec
import pytest

from fluxfs import FluxFileSystem

MIB = 1024 * 1024


@pytest.fixture
def opts(flux_server) -> dict:
    return {"endpoint_url": flux_server.url, "token": "anon"}


def test_url_to_fs(opts, bucket):
    fs, path = fsspec.url_to_fs(f"flux://{bucket}/a/b.bin", **opts)
    assert isinstance(fs, FluxFileSystem)
    assert path == f"{bucket}/a/b.bin"


def test_open_write_then_read(opts, bucket):
    data = os.urandom(1_500_000)
    url = f"flux://{bucket}/dir/file.bin"
    with fsspec.open(url, "wb", **opts) as f:
        f.write(data[:100])
        f.write(data[100:])
    with fsspec.open(url, "rb", **opts) as f:
        assert f.read(10) == data[:10]
        f.seek(1_000_000)
        assert f.read(1000) == data[1_000_000:1_001_000]
        f.seek(0)
        assert f.read() == data


def test_multipart_write_through_url(opts, flux_server, bucket):
    """Several 5 MiB parts through fsspec.open: exact bytes, and no parts or temporaries left behind."""
    data = os.urandom(11 * MIB + 7)
    url = f"flux://{bucket}/big/parts.bin"
    with fsspec.open(url, "wb", part_size=5 * MIB, **opts) as f:
        for i in range(0, len(data), 1_000_000):
            f.write(data[i:i + 1_000_000])
    with fsspec.open(url, "rb", **opts) as f:
        assert f.read() == data
    assert flux_server.list_names(bucket) == ["big/parts.bin"]
    assert flux_server.multipart_uploads(bucket) == []


@pytest.mark.parametrize("size", [10, 11 * MIB], ids=["small", "multipart"])
def test_write_failure_leaves_nothing(opts, flux_server, bucket, size):
    """A `with` block that raises must not publish a partial object (gcsfs would), nor leave parts behind."""
    url = f"flux://{bucket}/partial.bin"
    with pytest.raises(RuntimeError):
        with fsspec.open(url, "wb", part_size=5 * MIB, **opts) as f:
            f.write(os.urandom(size))
            raise RuntimeError("boom")
    fs, path = fsspec.url_to_fs(url, **opts)
    fs.invalidate_cache()
    assert not fs.exists(path)
    assert flux_server.list_names(bucket) == []
    assert flux_server.multipart_uploads(bucket) == []


def test_exclusive_create(opts, bucket):
    url = f"flux://{bucket}/once.bin"
    with fsspec.open(url, "xb", **opts) as f:
        f.write(b"first")
    with pytest.raises(FileExistsError):
        with fsspec.open(url, "xb", **opts) as f:
            f.write(b"second")
    with fsspec.open(url, "rb", **opts) as f:
        assert f.read() == b"first"


def test_pipe_cat_ls_find_rm(opts, bucket):
    fs, _ = fsspec.url_to_fs(f"flux://{bucket}", **opts)
    files = {f"{bucket}/t/{i:02d}.txt": f"value {i}".encode() for i in range(12)}
    files[f"{bucket}/t/sub/deep.txt"] = b"deep"
    fs.pipe(files)
    assert fs.cat(f"flux://{bucket}/t/03.txt") == b"value 3"
    assert fs.cat(sorted(files)) == files
    listing = fs.ls(f"{bucket}/t", detail=True)
    by_name = {e["name"]: e for e in listing}
    assert set(by_name) == {f"{bucket}/t/{i:02d}.txt" for i in range(12)} | {f"{bucket}/t/sub"}
    assert by_name[f"{bucket}/t/03.txt"]["size"] == len(b"value 3")
    assert by_name[f"{bucket}/t/03.txt"]["type"] == "file"
    assert by_name[f"{bucket}/t/sub"]["type"] == "directory"
    assert sorted(fs.find(f"flux://{bucket}/t")) == sorted(files)
    assert sorted(fs.find(f"{bucket}/t/sub")) == [f"{bucket}/t/sub/deep.txt"]
    fs.rm(f"{bucket}/t/00.txt")
    fs.rm(f"{bucket}/t/sub", recursive=True)
    fs.invalidate_cache()
    assert sorted(fs.find(f"{bucket}/t")) == sorted(k for k in files if not k.endswith(("00.txt", "deep.txt")))
    with pytest.raises(FileNotFoundError):
        fs.cat(f"{bucket}/t/00.txt")


def test_module_level_cat_and_open_files(opts, bucket):
    fs, _ = fsspec.url_to_fs(f"flux://{bucket}", **opts)
    fs.pipe({f"{bucket}/m/a": b"A", f"{bucket}/m/b": b"B"})
    files = fsspec.open_files(f"flux://{bucket}/m/*", "rb", **opts)
    contents = {}
    for of in files:
        with of as f:
            contents[of.path] = f.read()
    assert contents == {f"{bucket}/m/a": b"A", f"{bucket}/m/b": b"B"}


def test_missing_file(opts, bucket):
    with pytest.raises(FileNotFoundError):
        with fsspec.open(f"flux://{bucket}/nope", "rb", **opts) as f:
            f.read()
