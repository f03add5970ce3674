"""gcsfs (the class fluxfs builds on) works unchanged against the servers: open/cat/pipe/ls/find/rm."""
from __future__ import annotations

import os

import gcsfs.core
import pytest


@pytest.fixture
def gfs(gcs_server):
    # gcsfs.core.GCSFileSystem, not gcsfs.GCSFileSystem: the latter's gRPC bucket-layout probe stalls on emulators.
    return gcsfs.core.GCSFileSystem(endpoint_url=gcs_server.url, token="anon", skip_instance_cache=True)


def test_pipe_cat_info(gfs, any_bucket):
    data = os.urandom(5000)
    gfs.pipe(f"{any_bucket}/a/b.bin", data)
    assert gfs.cat(f"{any_bucket}/a/b.bin") == data
    assert gfs.cat_file(f"{any_bucket}/a/b.bin", start=10, end=20) == data[10:20]
    info = gfs.info(f"{any_bucket}/a/b.bin")
    assert info["size"] == 5000 and info["type"] == "file"


def test_open_write_read(gfs, any_bucket):
    # Bigger than one 5 MiB block: gcsfs switches to a resumable upload with several chunks.
    data = os.urandom(6 * 1024 * 1024 + 3)
    with gfs.open(f"{any_bucket}/big.bin", "wb", block_size=5 * 1024 * 1024) as f:
        f.write(data[:1000])
        f.write(data[1000:])
    with gfs.open(f"{any_bucket}/big.bin", "rb") as f:
        assert f.read(10) == data[:10]
        f.seek(5 * 1024 * 1024)
        assert f.read(100) == data[5 * 1024 * 1024:5 * 1024 * 1024 + 100]
    assert gfs.cat(f"{any_bucket}/big.bin") == data


def test_ls_find_rm(gfs, any_bucket):
    files = {f"{any_bucket}/d/{i}.txt": str(i).encode() for i in range(5)}
    files[f"{any_bucket}/d/sub/x.txt"] = b"x"
    gfs.pipe(files)
    listing = gfs.ls(f"{any_bucket}/d", detail=False)
    assert sorted(listing) == sorted([f"{any_bucket}/d/{i}.txt" for i in range(5)] + [f"{any_bucket}/d/sub"])
    assert sorted(gfs.find(f"{any_bucket}/d")) == sorted(files)
    assert gfs.cat(sorted(files)) == files
    gfs.rm(f"{any_bucket}/d", recursive=True)
    gfs.invalidate_cache()
    assert gfs.find(f"{any_bucket}/d") == []
    with pytest.raises(FileNotFoundError):
        gfs.cat(f"{any_bucket}/d/0.txt")


def test_missing_is_file_not_found(gfs, any_bucket):
    with pytest.raises(FileNotFoundError):
        gfs.cat(f"{any_bucket}/nope")
    with pytest.raises(FileNotFoundError):
        gfs.info(f"{any_bucket}/nope")


@pytest.mark.parametrize("tail", [b"\r", b"\n", b"\r\n", b"\r\n\r\n"])
def test_pipe_keeps_payloads_ending_in_line_breaks(gfs, any_bucket, tail):
    """gcsfs's multipart upload separates parts with bare LF: a payload's own trailing CR/LF must survive."""
    data = os.urandom(100) + tail
    gfs.pipe(f"{any_bucket}/eol.bin", data)
    assert gfs.cat(f"{any_bucket}/eol.bin") == data
