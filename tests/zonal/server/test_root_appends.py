"""Zonal writes to a `--root` server: each flushed byte is appended to the body file once (a flush used to
rewrite the whole file: 768 MiB took 63 s against 3.2 s in memory), the server holds none of the object in
memory (a 1 GiB write peaked at ~2.2 GB; a one-shot write is spooled to disk), and the objects survive a
restart byte-exact with their hashes."""
from __future__ import annotations

import base64
import hashlib
import os
import re
import shutil
import tempfile

import google_crc32c
import grpc
import pytest
from google.cloud import _storage_v2 as v2

from fluxfs import FluxFileSystem
from fluxfs.server import run

from .grpcutil import arun, bidi_write, endpoint, write_spec

MiB = 1 << 20
SIZE = 64 * MiB
PART = 2 * MiB  # 32 flushes: rewriting the file at each would write ~16x the object


def _piece(i: int) -> bytes:
    return i.to_bytes(4, "big") * (MiB // 4)


def _proc(pid: int, file: str, field: str) -> int:
    with open(f"/proc/{pid}/{file}") as f:
        return int(re.search(rf"{field}:\s+(\d+)", f.read()).group(1))


@pytest.fixture
def root():
    """A root in memory (/dev/shm) where there is one: a tmpfs file's pages are not the server's RSS."""
    if not os.access("/dev/shm", os.W_OK):
        pytest.skip("no /dev/shm")
    d = tempfile.mkdtemp(prefix="fluxfs-root-", dir="/dev/shm")
    try:
        yield d
    finally:
        shutil.rmtree(d)


def _fs(srv) -> FluxFileSystem:
    return FluxFileSystem(endpoint_url=srv.url, token="anon", skip_instance_cache=True,
                          grpc_endpoint=srv.url.split("://", 1)[1].rstrip("/"))


def test_a_zonal_write_to_a_root_server_is_appended_once_and_not_held_in_memory(root):
    md5, crc = hashlib.md5(), 0
    with run(in_process=False, root=root) as srv:
        fs = _fs(srv)
        fs.mkdir("zonal-root", placement="us-central1-a", location="us-central1")
        fs.pipe_file("zonal-root/warm", b"w" * MiB)  # the gRPC paths warmed up before the baseline
        pid = srv.process.pid
        peak, written = _proc(pid, "status", "VmHWM") * 1024, _proc(pid, "io", "wchar")
        with fs.open("zonal-root/big", "wb", block_size=PART) as f:
            for i in range(SIZE // MiB):
                f.write(_piece(i))
                md5.update(_piece(i))
                crc = google_crc32c.extend(crc, _piece(i))
        wrote = _proc(pid, "io", "wchar") - written
        # Each byte written to disk once (plus metadata files), not the body again at each of 32 flushes
        # (before: 1,056 MiB written for 64 MiB).
        assert wrote < 1.5 * SIZE, f"the server wrote {wrote / MiB:.0f} MiB for a {SIZE // MiB} MiB object"
        assert arun(_one_shot(srv.url, "zonal-root", "once")) is None  # a non-appendable write: spooled to disk
        grown = _proc(pid, "status", "VmHWM") * 1024 - peak
        # ~16 MiB of gRPC buffers whatever the size (before: 141 MiB for 64 MiB, the body held twice).
        assert grown < 32 * MiB, f"the server's peak RSS grew {grown / MiB:.0f} MiB writing {SIZE // MiB} MiB objects"
    with run(in_process=False, root=root) as srv:  # restarted on the same root
        fs = _fs(srv)
        info = fs.info("zonal-root/big")
        assert int(info["size"]) == SIZE
        assert info["crc32c"] == base64.b64encode(crc.to_bytes(4, "big")).decode()
        assert info["md5Hash"] == base64.b64encode(md5.digest()).decode()
        got = hashlib.md5()
        with fs.open("zonal-root/big", "rb", block_size=8 * MiB) as f:
            while piece := f.read(8 * MiB):
                got.update(piece)
        assert got.digest() == md5.digest()
        once = fs.info("zonal-root/once")
        assert (int(once["size"]), once["md5Hash"]) == (SIZE, info["md5Hash"])


async def _one_shot(url: str, bucket: str, name: str):
    """`SIZE` bytes (those of zonal-root/big) written by one non-appendable BidiWriteObject, in 1 MiB messages."""
    async def messages():
        yield write_spec(bucket, name, appendable=False)
        at = 0
        for i in range(SIZE // MiB):
            yield v2.BidiWriteObjectRequest(write_offset=at, checksummed_data=v2.ChecksummedData(content=_piece(i)))
            at += MiB
        yield v2.BidiWriteObjectRequest(write_offset=at, finish_write=True)

    async with grpc.aio.insecure_channel(endpoint(url)) as ch:
        async for _ in bidi_write(ch)(messages()):
            pass
