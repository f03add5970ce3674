"""Ctrl-C stops a long `fluxfs` command within about a second, leaving nothing half-done.

Each test runs the installed `fluxfs` script as a subprocess against the embedded server slowed
down (latency and per-request bandwidth) so the command is still busy when SIGINT arrives. The
server runs in a process of its own, so its work after the interrupt (the deletes of composites)
does not wait for the test's own thread.
"""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fluxfs.gcs import bridge
from fluxfs.server.synthetic import synthetic_bytes
from fluxfs.temporaries import list_incomplete_uploads
from tests.conftest import make_fs, new_bucket_name

FLUXFS = str(Path(sys.executable).parent / "fluxfs")
STOP_WITHIN = 2.0  # seconds from SIGINT to exit


@pytest.fixture(scope="module")
def server():
    from fluxfs.server import run

    with run(in_process=False) as srv:
        yield srv


@pytest.fixture
def bucket(server):
    name = new_bucket_name()
    server.create_bucket(name)
    yield name
    server.configure(profile="local")


@pytest.fixture
def fs(server):
    return make_fs(server)


def interrupt_when(cmd: list[str], ready, env_url: str, timeout: float = 30.0) -> tuple[int, str, float]:
    """Start `cmd`, send SIGINT once `ready()` is true, return (exit code, stderr, seconds to exit)."""
    env = dict(os.environ, STORAGE_EMULATOR_HOST=env_url)
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + timeout
        while not ready():
            assert proc.poll() is None, f"the command ended before it could be interrupted: {proc.stderr.read()}"
            assert time.monotonic() < deadline, "the command never got going"
            time.sleep(0.05)
        sent = time.monotonic()
        proc.send_signal(signal.SIGINT)
        try:
            code = proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            raise AssertionError("fluxfs did not stop within 30 s of Ctrl-C") from None
        return code, proc.stderr.read(), time.monotonic() - sent
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stderr.close()


def test_ctrl_c_stops_a_download_at_once_and_leaves_no_partial_file(server, bucket, fs, tmp_path):
    server.generate(bucket, 2000, 20_000, prefix="ds/")
    server.configure(latency_ms=20, bandwidth_mbps=0.1)  # a 640 KB composite GET takes ~6 s
    server.reset_stats()
    out = tmp_path / "out"

    def reading() -> bool:  # composites are being read: the copy is under way
        return server.stats().get("requests", {}).get("compose", 0) >= 4

    code, err, took = interrupt_when([FLUXFS, "cp", "-r", f"flux://{bucket}/ds", str(out)], reading, server.url)
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

    code, err, took = interrupt_when([FLUXFS, "-o", "part_size=5242880", "cp", "-r", str(src), f"flux://{bucket}/up"],
                                     writing, server.url)
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
    code, err, took = interrupt_when([FLUXFS, "ls", "-r", f"flux://{bucket}/many/"],
                                     lambda: time.monotonic() - started > 4.0, server.url)
    assert code == 130 and "interrupted" in err and "Traceback" not in err, err
    assert took < STOP_WITHIN, f"took {took:.1f} s to stop after Ctrl-C"
