"""Whole-object reads are checked against the object's crc32c, in one range or in parallel ranges (the crc run over
the joined body, while it is in cache): right bytes pass, a crc the bytes do not have is refused."""
from __future__ import annotations

import os

import pytest

from fluxfs.errors import ChecksumMismatch
from fluxfs.server import objects as server_objects

DATA = os.urandom(3 * 2**20 + 12345)  # the `stored` object (tests/reads/conftest.py)


def test_whole_reads_in_one_range_and_in_parallel_ranges_pass(stored):
    fs, path = stored
    assert fs.cat_file(path) == DATA                       # 8 MiB ranges: one
    assert fs.cat_file(path, chunk=2**20) == DATA          # four ranges, 16 in flight
    assert fs.cat_file(path, chunk=2**20 - 1) == DATA      # ranges that are no power of two
    assert fs.cat_objects([fs.info(path)]) == {path: DATA}


def test_a_crc_the_bytes_do_not_have_is_refused_by_every_whole_read(stored, monkeypatch):
    fs, path = stored
    info = fs.info(path)
    real = server_objects.Obj.crc32c
    # The server now announces a crc32c the bytes do not have, as if they were corrupted in transit.
    monkeypatch.setattr(server_objects.Obj, "crc32c", property(lambda self: "AAAAAA==" if self.name == "o"
                                                                else real.fget(self)))
    for chunk in (None, 2**20, 2**20 - 1):
        with pytest.raises(ChecksumMismatch, match="crc32c mismatch reading .*/o"):
            fs.cat_file(path, chunk=chunk)
    with pytest.raises(ChecksumMismatch, match="crc32c mismatch reading .*/o"):
        fs.cat_objects([info])
    assert fs.cat_file(path, start=1) == DATA[1:]          # not the whole object: nothing to check it against
