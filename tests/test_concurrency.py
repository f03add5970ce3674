"""Concurrency: two processes composing (reads and compose-mode writes) in one bucket at once, a reader
racing a writer, 1,000 concurrent writes.

What a user checks: every process gets exactly the stored bytes, temporary names never collide
(and none is left), a read racing an overwrite returns one whole version (never a mix), and
every one of many concurrent writes lands with its own content.
"""
from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import os
import random
import subprocess
import sys
import threading

import pytest
from fsspec.asyn import sync

from fluxfs.errors import ObjectChanged
from fluxfs.server.synthetic import synthetic_bytes, synthetic_size
from fluxfs.gcs.tempnames import TEMP_PREFIX
from tests.conftest import make_fs

SIZES = (1, 4000)

# A reader process: lists the prefix, reads everything through compose three times, and prints
# one digest per object plus how much went through composites. Both processes say READY and wait for a
# go-file so their reads overlap.
READER = r"""
import hashlib, json, os, sys, time
from fluxfs import FluxFileSystem
url, bucket, go = sys.argv[1:4]
fs = FluxFileSystem(endpoint_url=url, token="anon", skip_instance_cache=True,
                    retry={"initial": 0.005, "maximum": 0.1, "max_attempts": 12})
infos = [i for b in fs.iter_objects(bucket + "/c") for i in b]
print("READY", flush=True)
while not os.path.exists(go):
    time.sleep(0.005)
digests = None
for _ in range(3):
    got = fs.cat_objects(infos)
    d = {k: hashlib.sha256(v).hexdigest() for k, v in got.items()}
    assert digests is None or d == digests, "two reads in one process differ"
    digests = d
print(json.dumps({"job": fs.job_id, "digests": digests}))
"""


@contextlib.contextmanager
def _stopped_at_exit(procs):
    """Whatever the test asserts, no process it started outlives it."""
    try:
        yield
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait(30)


def _wait_ready(procs) -> None:
    """Each process has started and said READY (then waits for the go-file): their work overlaps."""
    for p in procs:
        line = p.stdout.readline()
        if line.strip() != b"READY":
            p.kill()
            raise AssertionError(f"not READY but {line!r}: {p.communicate(timeout=30)[1].decode()[-3000:]}")


def _expected(key: str) -> bytes:
    return synthetic_bytes(key, synthetic_size(key, SIZES, 0), 0)


@pytest.mark.slow
def test_two_processes_compose_from_one_bucket(flux_server, bucket, tmp_path):
    flux_server.generate(bucket, 800, size=SIZES, prefix="c/", seed=0)
    go = tmp_path / "go"
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # this checkout's fluxfs
    env = dict(os.environ, PYTHONPATH=root + os.pathsep + os.environ.get("PYTHONPATH", ""))
    procs = [subprocess.Popen([sys.executable, "-c", READER, flux_server.url, bucket, str(go)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env) for _ in range(2)]
    outs = []
    with _stopped_at_exit(procs):
        _wait_ready(procs)
        flux_server.reset_stats()
        go.touch()
        for p in procs:
            out, err = p.communicate(timeout=120)
            assert p.returncode == 0, err.decode()[-3000:]
            outs.append(json.loads(out.decode().strip().splitlines()[-1]))
    assert outs[0]["job"] != outs[1]["job"]
    want = {f"{bucket}/{k}": hashlib.sha256(_expected(k)).hexdigest() for k in flux_server.list_names(bucket, "c/")}
    assert len(want) == 800
    for out in outs:
        assert out["digests"] == want
    # The batched reads did go through composites (2 processes x 3 rounds), and all are gone.
    assert flux_server.stats()["requests"].get("compose", 0) >= 6
    assert flux_server.list_names(bucket, TEMP_PREFIX) == []


WRITER = r"""
import os, random, sys, time
from fluxfs import FluxFileSystem
url, bucket, go, tag = sys.argv[1:5]
fs = FluxFileSystem(endpoint_url=url, token="anon", skip_instance_cache=True, multipart="compose",
                    part_size=64 * 1024, write_concurrency=8)
print("READY", flush=True)
while not os.path.exists(go):
    time.sleep(0.005)
for i in range(4):
    data = random.Random(f"{tag}-{i}").randbytes(40 * 64 * 1024 + i)  # 41 parts: two compose levels
    with fs.open(f"{bucket}/{tag}/{i}", "wb") as f:
        f.write(data)
print(fs.job_id)
"""


@pytest.mark.slow
def test_two_processes_writing_compose_uploads_at_once(flux_server, bucket, tmp_path):
    go = tmp_path / "go"
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, PYTHONPATH=root + os.pathsep + os.environ.get("PYTHONPATH", ""))
    procs = [subprocess.Popen([sys.executable, "-c", WRITER, flux_server.url, bucket, str(go), tag],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env) for tag in ("p", "q")]
    jobs = []
    with _stopped_at_exit(procs):
        _wait_ready(procs)
        go.touch()
        for p in procs:
            out, err = p.communicate(timeout=120)
            assert p.returncode == 0, err.decode()[-3000:]
            jobs.append(out.decode().strip())
    assert jobs[0] != jobs[1]
    fs = make_fs(flux_server)
    for tag in ("p", "q"):
        for i in range(4):
            assert fs.cat_file(f"{bucket}/{tag}/{i}") == random.Random(f"{tag}-{i}").randbytes(40 * 64 * 1024 + i)
    assert sorted(flux_server.list_names(bucket)) == sorted(f"{t}/{i}" for t in "pq" for i in range(4))


def test_reader_racing_a_writer_sees_whole_versions(flux_server, bucket):
    writer = make_fs(flux_server, multipart="resumable")
    reader = make_fs(flux_server)
    keys = [f"k{i:02d}" for i in range(40)]

    def version(key: str, v: int) -> bytes:
        # Sizes differ per version, so a slice boundary taken from a stale listing would misalign.
        return random.Random(f"{key}-{v}").randbytes(500 + 37 * v + (len(key) * v) % 101)

    big = "big"

    def big_version(v: int) -> bytes:
        return random.Random(f"big-{v}").randbytes(1_000_000 + 4099 * v)

    n_versions = 6
    allowed = {k: {version(k, v) for v in range(n_versions)} for k in keys}
    allowed_big = {big_version(v) for v in range(n_versions)}
    writer.pipe({f"{bucket}/{k}": version(k, 0) for k in keys})
    writer.pipe_file(f"{bucket}/{big}", big_version(0))
    infos = [i for b in reader.iter_objects(bucket) for i in b if not i["name"].endswith(big)]

    stop = threading.Event()
    errors: list[BaseException] = []

    def write_loop():
        try:
            for v in range(1, n_versions):
                for k in keys:
                    writer.pipe_file(f"{bucket}/{k}", version(k, v))
                writer.pipe_file(f"{bucket}/{big}", big_version(v))
        except BaseException as exc:  # reported by the main thread
            errors.append(exc)
        finally:
            stop.set()

    t = threading.Thread(target=write_loop)
    t.start()
    reads = big_reads = 0
    try:
        while not stop.is_set() or reads == 0:
            # Stale infos (listed before the writes): the listed generations, whole, or ObjectChanged once
            # overwritten; never misaligned slices.
            got = reader.cat_objects(infos, on_error="return")
            for name, data in got.items():
                if isinstance(data, ObjectChanged):
                    continue
                assert data in allowed[name.partition("/")[2]], f"{name}: {len(data)} bytes, not a version written"
            reads += len(got)
            # Parallel ranged reads (64 KiB ranges) of an object being replaced: one generation or an error.
            try:
                data = reader.cat_file(f"{bucket}/{big}", chunk=64 * 1024)
            except FileNotFoundError as exc:
                assert "big" in str(exc)
            else:
                assert data in allowed_big, f"big: {len(data)} bytes, not a version written"
                big_reads += 1
    finally:
        stop.set()
        t.join()
    assert not errors, errors
    assert reads >= len(keys) and big_reads >= 1
    final = reader.cat([f"{bucket}/{k}" for k in keys])
    assert all(final[f"{bucket}/{k}"] == version(k, n_versions - 1) for k in keys)
    assert flux_server.list_names(bucket, TEMP_PREFIX) == []


def test_a_thousand_concurrent_small_writes_all_land(flux_server, bucket):
    fs = make_fs(flux_server)
    data = {f"{bucket}/pipe/{i:04d}": f"object {i} ".encode() * (1 + i % 7) for i in range(1000)}
    fs.pipe(data)
    more = {f"{bucket}/gather/{i:04d}": hashlib.sha256(str(i).encode()).digest() * (1 + i % 5) for i in range(1000)}

    async def all_at_once():
        await asyncio.gather(*(fs._pipe_file(p, d) for p, d in more.items()))

    sync(fs.loop, all_at_once)
    names = flux_server.list_names(bucket)
    assert len(names) == 2000
    fs.invalidate_cache()
    got = fs.cat(sorted(data) + sorted(more))
    assert got == {**data, **more}
    assert flux_server.list_names(bucket, TEMP_PREFIX) == []
    assert flux_server.multipart_uploads(bucket) == []
