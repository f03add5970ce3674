"""Ctrl-C stops a long `fluxfs` command within about a second, leaving nothing half-done.

Each test runs the installed `fluxfs` script as a subprocess against the embedded server slowed
down (latency and per-request bandwidth) so the command is still busy when SIGINT arrives. The
server runs in a process of its own, so its work after the interrupt (the deletes of composites)
does not wait for the test's own thread.
"""
from __future__ import annotations

import os
import re
import sys
import time
from pathlib import Path

import pytest

from fluxfs.gcs import bridge
from fluxfs.server.synthetic import synthetic_bytes
from fluxfs.temporaries import list_incomplete_uploads
from tests._sigint import bucket, interrupt_when, server  # noqa: F401 (fixtures)
from tests.conftest import make_fs

FLUXFS = str(Path(sys.executable).parent / "fluxfs")
STOP_WITHIN = 2.0  # seconds from SIGINT to exit


@pytest.fixture
def fs(server):
    return make_fs(server)


def _fluxfs(argv: list[str], ready, server) -> tuple[int, str, float]:
    """Run the installed `fluxfs` script with `argv` on `server`, SIGINT it once `ready()`."""
    return interrupt_when([FLUXFS, *argv], ready, env=dict(os.environ, STORAGE_EMULATOR_HOST=server.url),
                          what="fluxfs")


def test_ctrl_c_stops_a_download_at_once_and_leaves_no_partial_file(server, bucket, fs, tmp_path):
    server.generate(bucket, 2000, 20_000, prefix="ds/")
    server.configure(latency_ms=20, bandwidth_mbps=0.1)  # a 640 KB composite GET takes ~6 s
    server.reset_stats()
    out = tmp_path / "out"

    def reading() -> bool:  # composites are being read: the copy is under way
        return server.stats().get("requests", {}).get("compose", 0) >= 4

    code, err, took = _fluxfs(["cp", "-r", f"flux://{bucket}/ds", str(out)], reading, server)
    assert code == 130, err
    assert took < STOP_WITHIN, f"took {took:.1f} s to stop after Ctrl-C"
    m = re.search(r"fluxfs: interrupted: copied (\d+) of 2000 file\(s\)", err)
    assert m, err
    files = [p for p in out.rglob("*") if p.is_file()] if out.exists() else []
    assert len(files) == int(m.group(1)) < 2000
    assert not [p for p in files if "fluxfs-tmp" in p.name]  # no temporary download left
    for p in files:  # every file there is whole
        assert p.read_bytes() == synthetic_bytes(f"ds/{p.name}", 20_000, 0), p
    server.configure(profile="local")
    assert sorted(fs.find(bucket)) == [f"{bucket}/ds/{i:08d}" for i in range(2000)]  # composites deleted


def test_ctrl_c_stops_an_upload_and_leaves_no_partial_object(server, bucket, fs, tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    for i in range(40):
        (src / f"f{i:02d}").write_bytes(os.urandom(6 * 1024 * 1024))  # a multipart upload each
    server.configure(latency_ms=20, bandwidth_mbps=2)
    server.reset_stats()

    def writing() -> bool:
        return server.stats().get("requests", {}).get("write", 0) >= 8

    code, err, took = _fluxfs(["-o", "part_size=5242880", "cp", "-r", str(src), f"flux://{bucket}/up"], writing,
                              server)
    assert code == 130, err
    assert took < STOP_WITHIN, f"took {took:.1f} s to stop after Ctrl-C"
    m = re.search(r"fluxfs: interrupted: copied (\d+) of 40 file\(s\)", err)
    assert m, err
    server.configure(profile="local")
    fs.invalidate_cache()
    names = fs.find(bucket)
    assert len(names) == int(m.group(1)) < 40 and all(n.startswith(f"{bucket}/up/f") for n in names), names
    for n in names:
        assert fs.cat(n) == (src / n.rsplit("/", 1)[-1]).read_bytes()
    assert bridge.run(fs, list_incomplete_uploads, fs, bucket) == []  # every started upload aborted


def test_ctrl_c_stops_a_long_listing(server, bucket):
    server.generate(bucket, 20_000, 10, prefix="many/")
    server.configure(latency_ms=3000)  # each page takes 3 s

    started = time.monotonic()
    code, err, took = _fluxfs(["ls", "-r", f"flux://{bucket}/many/"], lambda: time.monotonic() - started > 4.0,
                              server)
    assert code == 130 and "interrupted" in err and "Traceback" not in err, err
    assert took < STOP_WITHIN, f"took {took:.1f} s to stop after Ctrl-C"
