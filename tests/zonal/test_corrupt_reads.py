"""Corrupted bytes on zonal reads over gRPC are refused, never returned: a piece whose bytes do not match its own
crc32c (corrupted in transit), and a piece whose crc32c matches its bad bytes (bad at the source), which only the
whole object's crc32c can tell; the reads combine the pieces' checked crc32c values for it, hashing no byte twice."""
from __future__ import annotations

import io
import os

import pytest

from fluxfs.errors import ChecksumMismatch
from tests.zonal.conftest import zonal_fs

MiB = 2**20


@pytest.fixture
def corrupting(zonal):
    server, bucket = zonal
    if server.server is None:
        pytest.skip("injected corruption is the embedded server's")
    fs = zonal_fs(server)
    data = os.urandom(20 * MiB + 7)  # three 8 MiB blocks of a read handle, ten 2 MiB pieces
    fs.pipe_file(f"{bucket}/ckpt", data)
    yield fs, server.server, f"{bucket}/ckpt", data
    server.server.configure(corrupt_pieces=0, corrupt_at_source=False)


@pytest.mark.parametrize("at_source", [False, True], ids=["in-transit", "at-source"])
def test_read_handle_refuses_a_corrupted_block(corrupting, at_source):
    """torch.load's path (fs.open "rb" read block by block) refuses a corrupted piece in any block."""
    fs, srv, path, data = corrupting
    srv.configure(corrupt_pieces=10**6, corrupt_at_source=at_source)
    with pytest.raises(ChecksumMismatch, match="crc32c mismatch"):
        with fs.open(path, "rb") as f:
            io.BufferedReader(f, 8 * MiB).read()
    with pytest.raises(ChecksumMismatch, match="crc32c mismatch"):
        fs.cat_file(path)
    srv.configure(corrupt_pieces=0)
    with fs.open(path, "rb") as f:
        assert io.BufferedReader(f, 8 * MiB).read() == data


def test_one_bad_piece_is_caught(corrupting):
    """A single piece bad at the source, whichever block it is in: its own crc32c agrees, the object's does not."""
    fs, srv, path, data = corrupting
    srv.configure(corrupt_pieces=1, corrupt_at_source=True)
    with pytest.raises(ChecksumMismatch, match="crc32c mismatch"):
        with fs.open(path, "rb") as f:
            f.read()
    assert srv.configure()["corrupt_pieces"] == 0  # the one bad piece was served
