"""fs.read_into: byte ranges of one object straight into caller buffers, checked, pinned, retried."""
from __future__ import annotations

import os

import pytest

from fluxfs.errors import ChecksumMismatch
from fluxfs.server import objects as server_objects

DATA = os.urandom(3 * 2**20 + 12345)  # the `stored` object (tests/reads/conftest.py)


def test_segments_land_in_their_buffers_and_the_whole_is_verified(stored):
    fs, path = stored
    cuts = [0, 5, 1000, 2**20 - 1, 2**20 + 3, 2 * 2**20, len(DATA)]
    bufs = [bytearray(b - a) for a, b in zip(cuts, cuts[1:])]
    got = fs.read_into(path, list(zip(cuts, bufs))[::-1], range_size=2**20 + 1)   # any order
    assert b"".join(bufs) == DATA
    assert got.verified and got.size == len(DATA) and got.requests == 4 and got.bytes_received == len(DATA)


def test_gaps_are_dropped_or_skipped(stored):
    fs, path = stored
    a, b = bytearray(100), bytearray(100)
    got = fs.read_into(path, [(10, a), (5000, b)])            # 4890 bytes apart: one GET, gap dropped
    assert (bytes(a), bytes(b)) == (DATA[10:110], DATA[5000:5100])
    assert got.requests == 1 and got.bytes_received == 5090 and not got.verified
    got = fs.read_into(path, [(10, a), (3 * 2**20, b)], max_gap=2**20)   # far apart: two GETs
    assert (bytes(a), bytes(b)) == (DATA[10:110], DATA[3 * 2**20:3 * 2**20 + 100])
    assert got.requests == 2 and got.bytes_received == 200


def test_bad_segments_are_refused(stored):
    fs, path = stored
    with pytest.raises(ValueError, match="segments overlap at offset 50"):
        fs.read_into(path, [(0, bytearray(100)), (50, bytearray(10))])
    with pytest.raises(ValueError, match="the buffer for offset 0 is read-only"):
        fs.read_into(path, [(0, b"0123")])
    with pytest.raises(ValueError, match="lie past the end of"):
        fs.read_into(path, [(len(DATA) + 10, bytearray(10))])


def test_a_corrupted_body_is_caught_from_the_ranges_crcs(stored, monkeypatch):
    fs, path = stored
    real = server_objects.Obj.crc32c
    # The server now announces a crc32c the bytes do not have, as if they were corrupted in transit.
    monkeypatch.setattr(server_objects.Obj, "crc32c", property(lambda self: "AAAAAA==" if self.name == "o"
                                                                else real.fget(self)))
    with pytest.raises(ChecksumMismatch, match="crc32c mismatch reading .*/o"):
        fs.read_into(path, [(0, bytearray(len(DATA)))], range_size=2**20)


def test_ranges_are_retried_after_resets(flux_server, stored):
    fs, path = stored
    flux_server.configure(reset_rate=0.3, fail_ops="read", seed=3)
    buf = bytearray(len(DATA))
    assert fs.read_into(path, [(0, buf)], range_size=256 * 1024).verified
    assert buf == DATA


def test_a_sequential_reader_does_not_hold_what_it_has_read(stored):
    """torch.load reads a large checkpoint front to back: blocks behind it are dropped (once hashed),
    so the handle holds its prefetch window, not the object; a seek back still reads the right bytes."""
    fs, path = stored
    with fs.open(path, "rb", block_size=128 * 1024, prefetch=8, whole_object_limit=0) as f:
        out = bytearray(len(DATA))
        view = memoryview(out)
        most = 0
        for at in range(0, len(DATA), 300_000):
            f.readinto(view[at:at + 300_000])
            most = max(most, len(f._blocks))
        assert out == DATA and most <= 8 + 2 + 3   # held before: 2 x prefetch = 16
        f.seek(1000)
        assert f.read(5000) == DATA[1000:6000]
