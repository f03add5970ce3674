"""Objects whose names need percent-encoding read back byte for byte by every GET path (their URLs are built
and encoded once, handed to aiohttp as they are): whole, in parallel ranges, into buffers, batched."""
from __future__ import annotations

import os

import pytest

from tests.conftest import make_fs

NAMES = ["a b/c d.bin", "plus+and&eq=.bin", "pct%41%2F.bin", "caf\u00e9/\u00fcber.bin", "semi;colon,comma'.bin"]


@pytest.fixture
def named_objects(gcs_server, any_bucket):
    fs = make_fs(gcs_server)
    data = {name: os.urandom(2**20 + 3 + i) for i, name in enumerate(NAMES)}
    for name, body in data.items():
        fs.pipe_file(f"{any_bucket}/{name}", body)
    return fs, any_bucket, data


def test_names_needing_encoding_read_whole_ranged_and_into_buffers(named_objects):
    fs, bucket, data = named_objects
    for name, body in data.items():
        path = f"{bucket}/{name}"
        assert fs.cat_file(path) == body
        assert fs.cat_file(path, start=5, end=len(body) - 2) == body[5:-2]
        assert fs.cat_file(path, chunk=256 * 1024) == body  # parallel ranged GETs
        buf = bytearray(len(body) - 10)
        fs.read_ranges(path, [(10, len(body))], into=[buf], chunk=300 * 1024)
        assert bytes(buf) == body[10:]


def test_names_needing_encoding_read_batched(named_objects):
    fs, bucket, data = named_objects
    got = fs.cat_objects(list(fs.find(bucket, detail=True).values()))
    assert got == {f"{bucket}/{name}": body for name, body in data.items()}
