"""Direct reads of whole objects whose size the listing gave (`cat_objects` without compose, the read-only role's
reads): one lean GET each (gcs/lean_get.py), the body received into the bytes returned and checked against the
object's crc32c; every other answer (an error, a redirect, a size that changed since the listing) read through
aiohttp as before."""
from __future__ import annotations

import base64
import os

import pytest

from fluxfs.errors import ChecksumMismatch
from fluxfs.gcs import lean_get
from fluxfs.gcs.checksums import crc32c
from fluxfs.server import objects as server_objects
from tests.conftest import make_fs
from tests.reads.test_lean_get import DATA, QUICK, idle, scripted  # noqa: F401 - `scripted` is a fixture

KiB, MiB = 2**10, 2**20
B64 = base64.b64encode(crc32c(DATA).to_bytes(4, "big")).decode()


def test_listed_objects_are_read_by_one_lean_get_each(flux_server, bucket):
    fs = make_fs(flux_server, compose=False)
    bodies = {f"{bucket}/o{i}": os.urandom(n) for i, n in enumerate((1, 10 * KiB, MiB, 3 * MiB + 7, 0))}
    for path, body in bodies.items():
        fs.pipe_file(path, body)
    infos = [fs.info(p) for p in bodies]
    before = fs.stats()["requests"]["read"]
    got = fs.cat_objects(infos)
    assert got == bodies and all(type(b) is bytes for b in got.values())
    assert fs.stats()["requests"]["read"] - before == len(bodies)   # the empty one too, through aiohttp
    assert idle(fs) >= 1                                             # the lean path's connections, kept alive
    again = fs.cat_objects(infos)
    assert again == bodies and got[f"{bucket}/o2"] == bodies[f"{bucket}/o2"]  # the first bytes stay as received


def test_a_size_changed_since_the_listing_reads_the_object_as_it_is_now(flux_server, bucket):
    fs = make_fs(flux_server, compose=False)
    for new in (os.urandom(2 * MiB), os.urandom(MiB - 1), b""):
        fs.pipe_file(f"{bucket}/o", os.urandom(MiB))
        stale = {"name": f"{bucket}/o", "size": MiB}   # no generation: the live object is read
        fs.pipe_file(f"{bucket}/o", new)
        assert fs.cat_objects([stale]) == {f"{bucket}/o": new}


def test_a_crc_the_bytes_do_not_have_is_refused(flux_server, bucket, monkeypatch):
    fs = make_fs(flux_server, compose=False, retry=QUICK)
    fs.pipe_file(f"{bucket}/o", DATA)
    info = fs.info(f"{bucket}/o")
    real = server_objects.Obj.crc32c
    monkeypatch.setattr(server_objects.Obj, "crc32c", property(lambda self: "AAAAAA==" if self.name == "o"
                                                                else real.fget(self)))
    with pytest.raises(ChecksumMismatch, match=f"crc32c mismatch reading {bucket}/o .*corrupted in transit"):
        fs.cat_objects([info])
    assert idle(fs) >= 1   # refused by the lean path itself, not left to aiohttp


def outcome(fs, info):
    try:
        return fs.cat_objects([info])["b/o"]
    except Exception as exc:  # compared between the two paths
        return type(exc), str(exc)


@pytest.mark.parametrize("mode", ["206", "close", "200", "302", "chunked", "gzip", "404", "412", "503"])
def test_every_answer_to_a_whole_read_reads_as_through_aiohttp(scripted, monkeypatch, mode):  # noqa: F811
    info = {"name": "b/o", "size": len(DATA), "generation": "7", "crc32c": B64}
    scripted.mode = mode
    lean = outcome(make_fs(scripted, compose=False, retry=QUICK), info)
    monkeypatch.setattr(lean_get, "usable", lambda session, url: False)
    assert outcome(make_fs(scripted, compose=False, retry=QUICK), info) == lean
    if mode in ("206", "close", "200", "302", "chunked", "gzip"):
        assert lean == DATA
    scripted.seen.clear()
