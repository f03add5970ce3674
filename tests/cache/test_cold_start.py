"""One download per node on a cold start too: processes starting together on one empty `cache_dir` and reading the
same objects pull each object's bytes from storage once between them (the first to ask fills, the others wait for
its fill and read it from the cache). The server's byte counter is what a user's bill shows. On the embedded server."""
from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from tests.conftest import make_fs, reap, wait_for

N, SIZE, BATCH = 64, 32 * 1024, 16
PROCS = 2  # processes on the node, started together

READER = textwrap.dedent("""
    import json, os, sys, time
    from fluxfs import FluxFileSystem
    from fluxfs.cache import objects
    url, cache_dir, go, listing = sys.argv[1:5]
    infos = json.load(open(listing))
    fs = FluxFileSystem(endpoint_url=url, token="anon", cache_dir=cache_dir, skip_instance_cache=True)
    print("ready", flush=True)
    while not os.path.exists(go):
        time.sleep(0.002)
    got = {}
    for at in range(0, len(infos), int(sys.argv[5])):  # a loader's batches, in the same order in every process
        got.update(fs.cat_objects(infos[at:at + int(sys.argv[5])]))
    objects.flush()
    sys.stdout.write(json.dumps({k: v.hex() for k, v in got.items()}))
""")


def test_processes_starting_together_download_each_object_once(flux_server, bucket, tmp_path):
    fs = make_fs(flux_server)
    data = {f"{bucket}/o/{i:03d}": os.urandom(SIZE) for i in range(N)}
    fs.pipe(data)
    infos = [{k: v for k, v in info.items() if k in ("name", "size", "generation", "crc32c")}
             for info in sorted(fs.find(f"{bucket}/o/", detail=True).values(), key=lambda i: i["name"])]
    listing = tmp_path / "infos.json"
    listing.write_text(json.dumps(infos))
    go = tmp_path / "go"
    flux_server.configure(bandwidth_mbps=16.0)  # ~1 s for them all: the two processes' reads overlap
    procs = [subprocess.Popen([sys.executable, "-c", READER, flux_server.url, str(tmp_path / "cache"), str(go),
                               str(listing), str(BATCH)], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
             for _ in range(PROCS)]
    try:
        for p in procs:
            assert p.stdout.readline() == b"ready\n", p.stderr.read().decode()
        flux_server.reset_stats()
        go.touch()  # the barrier: both start at once
        outs = [p.communicate(timeout=120) for p in procs]
    finally:
        for p in procs:
            reap(p)
    assert [p.returncode for p in procs] == [0] * PROCS, [err.decode() for _, err in outs]
    for out, _ in outs:
        assert {k: bytes.fromhex(v) for k, v in json.loads(out).items()} == data
    sent = flux_server.stats()["bytes_out"]
    assert sent <= 1.15 * N * SIZE, f"{sent / (N * SIZE):.2f}x the objects' bytes sent for the node"


RANGES = textwrap.dedent("""
    import hashlib, os, sys, time
    from fluxfs import FluxFileSystem
    url, cache_dir, go, path, size, how = sys.argv[1:7]
    size = int(size)
    fs = FluxFileSystem(endpoint_url=url, token="anon", cache_dir=cache_dir, skip_instance_cache=True)
    generation = fs.info(path)["generation"]
    print("ready", flush=True)
    while not os.path.exists(go):
        time.sleep(0.002)
    if how == "ranges":  # a model's tensors: many ranges in one call, the live generation
        step = 2**20
        got = fs.read_ranges(path, [(at, min(at + step, size)) for at in range(0, size, step)])
    else:  # a shard stream: one span after another of the listed generation
        step = 8 * 2**20
        got = [fs.read_ranges(path, [(at, min(at + step, size))], generation=generation, max_gap=0)[0]
               for at in range(0, size, step)]
    sys.stdout.write(hashlib.sha256(b"".join(got)).hexdigest())
""")


@pytest.mark.parametrize("how", ["ranges", "spans"])
def test_processes_starting_together_download_a_shard_once(flux_server, bucket, tmp_path, how):
    """Byte ranges of one object (a shard, a model file) read by two processes started together: one download."""
    import hashlib

    size = 12 * 2**20 + 4321  # two fill parts of 8 MiB
    data = os.urandom(size)
    path = f"{bucket}/shard-0.tar"
    make_fs(flux_server).pipe(path, data)
    go = tmp_path / "go"
    flux_server.configure(bandwidth_mbps=64.0)  # ~1.5 s: the two processes' reads overlap
    procs = [subprocess.Popen([sys.executable, "-c", RANGES, flux_server.url, str(tmp_path / "cache"), str(go), path,
                               str(size), how], stdout=subprocess.PIPE, stderr=subprocess.PIPE) for _ in range(PROCS)]
    try:
        for p in procs:
            assert p.stdout.readline() == b"ready\n", p.stderr.read().decode()
        flux_server.reset_stats()
        go.touch()
        outs = [p.communicate(timeout=120) for p in procs]
    finally:
        for p in procs:
            reap(p)
    assert [p.returncode for p in procs] == [0] * PROCS, [err.decode() for _, err in outs]
    assert [out.decode() for out, _ in outs] == [hashlib.sha256(data).hexdigest()] * PROCS
    sent = flux_server.stats()["bytes_out"]
    assert sent <= 1.15 * size, f"{sent / size:.2f}x the object's bytes sent for the node"


CLAIMER = textwrap.dedent("""
    import json, sys
    from fluxfs import FluxFileSystem
    from fluxfs.cache import objects
    url, cache_dir, *listings = sys.argv[1:]
    fs = FluxFileSystem(endpoint_url=url, token="anon", cache_dir=cache_dir, skip_instance_cache=True)
    for listing in listings:  # each call's claims in the one pack this process holds for them
        fs.cat_objects(json.load(open(listing)))
        objects.flush()
""")


def _claimed(cache_dir) -> int:
    """Rows claimed and not complete yet (a process is reading those objects to fill them)."""
    try:
        db = sqlite3.connect(f"file:{cache_dir / '.fluxfs-cache.index'}?mode=ro", uri=True)
    except sqlite3.Error:
        return 0
    try:
        return db.execute("SELECT count(*) FROM objects WHERE complete = 0").fetchone()[0]
    except sqlite3.Error:
        return 0
    finally:
        db.close()


@pytest.mark.parametrize("how", ["stopped", "killed", "stopped, its pack read meanwhile"])
def test_objects_claimed_by_a_stopped_or_killed_process_are_read_from_storage(flux_server, bucket, tmp_path, how):
    """The wait for another process's claims is bounded: a claimer stopped mid-read (SIGSTOP) makes no progress
    for `read_timeout` and one killed lets go of its pack: the objects are read from storage, right. Also while
    others keep reading the entries its earlier call completed in the same pack (was: their reads touched the
    pack, which the wait took for the claimer's progress, and it waited for ever)."""
    fs = make_fs(flux_server, cache_dir=str(tmp_path / "cache"), read_timeout=1)
    data = {f"{bucket}/s/{i:02d}": os.urandom(64 * 1024) for i in range(8)}
    warm = {f"{bucket}/w/{i:02d}": os.urandom(1024) for i in range(2)}
    fs.pipe({**data, **warm})

    def listed(names) -> list:
        return [{k: v for k, v in fs.info(name).items() if k in ("name", "size", "generation", "crc32c")}
                for name in sorted(names)]

    infos, warm_infos = listed(data), listed(warm)
    listing, warm_listing = tmp_path / "infos.json", tmp_path / "warm.json"
    listing.write_text(json.dumps(infos))
    warm_listing.write_text(json.dumps(warm_infos))
    flux_server.configure(bandwidth_mbps=0.5)  # ~8 s to read them all: the claimer is caught mid-read
    first = [str(warm_listing)] if "read" in how else []
    claimer = subprocess.Popen([sys.executable, "-c", CLAIMER, flux_server.url, str(tmp_path / "cache"),
                                *first, str(listing)], stderr=subprocess.PIPE)
    try:
        wait_for(lambda: _claimed(tmp_path / "cache") == len(infos), "the claimer's claims")
        claimer.send_signal(signal.SIGKILL if how == "killed" else signal.SIGSTOP)
        flux_server.configure(profile="local")
        got = []
        reading = threading.Thread(target=lambda: got.append(fs.cat_objects(infos)), daemon=True)
        reading.start()
        if first:  # another reader of the claimer's pack meanwhile, for at most 20 times the bound
            assert fs.cat_objects(warm_infos) == warm
            until = time.monotonic() + 20
            while reading.is_alive() and time.monotonic() < until:
                assert fs.cat_objects(warm_infos) == warm
            assert not reading.is_alive(), "still waiting on a stopped claimer whose pack others read"
        reading.join(timeout=60)  # from storage once the claimer is dead, or 1 s after it stopped moving
        assert got == [data]
    finally:
        if how != "killed":
            claimer.send_signal(signal.SIGCONT)
        reap(claimer)


SLOW_READER = textwrap.dedent("""
    import hashlib, os, sys, time
    from fluxfs import FluxFileSystem
    from fluxfs.cache import lock
    url, cache_dir, go, holding, path, size = sys.argv[1:7]
    real = lock.FileLock.try_acquire

    def descheduled(self, shared=False):  # a loaded machine: this process stalls while it holds a shared lock
        got = real(self, shared)
        if got and shared and not os.path.exists(holding):
            open(holding, "w").close()
            time.sleep(1.0)
        return got

    lock.FileLock.try_acquire = descheduled
    fs = FluxFileSystem(endpoint_url=url, token="anon", cache_dir=cache_dir, skip_instance_cache=True)
    generation = fs.info(path)["generation"]
    print("ready", flush=True)
    while not os.path.exists(go):
        time.sleep(0.002)
    got = fs.read_ranges(path, [(0, int(size))], generation=generation, max_gap=0)[0]
    sys.stdout.write(hashlib.sha256(got).hexdigest())
""")


def test_a_reader_looking_for_an_entry_never_turns_its_filler_away(flux_server, bucket, tmp_path):
    """A process that looks for a missing entry takes no lock on it: the process that starts the fill meanwhile
    fills it (was: a shared lock held at that moment turned the filler away, and both downloaded the object)."""
    import hashlib

    size = 4 * 2**20
    data = os.urandom(size)
    path = f"{bucket}/shard-1.tar"
    make_fs(flux_server).pipe(path, data)
    go_a, go_b, holding = tmp_path / "go-a", tmp_path / "go-b", tmp_path / "holding"
    flux_server.configure(bandwidth_mbps=32.0)  # ~1 s: the two reads overlap
    args = [flux_server.url, str(tmp_path / "cache")]
    a = subprocess.Popen([sys.executable, "-c", RANGES, *args, str(go_a), path, str(size), "spans"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    b = subprocess.Popen([sys.executable, "-c", SLOW_READER, *args, str(go_b), str(holding), path, str(size)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        for p in (a, b):
            assert p.stdout.readline() == b"ready\n", p.stderr.read().decode()
        flux_server.reset_stats()
        go_b.touch()
        wait_for(lambda: holding.exists() or b.poll() is not None or _filling(tmp_path / "cache"),
                 "the slow reader's first look")
        go_a.touch()
        outs = [p.communicate(timeout=120) for p in (a, b)]
    finally:
        for p in (a, b):
            reap(p)
    assert [a.returncode, b.returncode] == [0, 0], [err.decode() for _, err in outs]
    assert [out.decode() for out, _ in outs] == [hashlib.sha256(data).hexdigest()] * 2
    sent = flux_server.stats()["bytes_out"]
    assert sent <= 1.15 * size, f"{sent / size:.2f}x the object's bytes sent for the node"


def _filling(cache_dir) -> bool:
    """Some process has started a fill (a temporary file exists)."""
    return cache_dir.exists() and any(p.suffix == ".part" for p in cache_dir.iterdir())


OPENERS = textwrap.dedent("""
    import os, sys, tempfile, time
    from fluxfs.cache import index
    failed = 0
    for trial in range(int(sys.argv[1])):
        d, t0 = tempfile.mkdtemp(dir=sys.argv[2]), time.time() + 0.1
        pids = []
        for _ in range(4):
            pid = os.fork()
            if pid == 0:
                while time.time() < t0:
                    pass
                try:
                    with index.write(index.connect(d)) as db:
                        db.execute("SELECT count(*) FROM objects")
                except Exception as exc:
                    print(exc, flush=True)
                    os._exit(1)
                os._exit(0)
            pids.append(pid)
        failed += sum(os.waitpid(pid, 0)[1] != 0 for pid in pids)
    print("failed", failed)
""")


def test_processes_opening_a_new_cache_together_all_open_its_index(tmp_path):
    """Four processes opening one new cache directory's index at the same moment (DataLoader workers on a fresh
    node): each opens it. SQLite answers "database is locked" at once, without its busy wait, to a process
    switching a new file to WAL while another connects: that was a warning and uncached reads in 1 trial in 4."""
    out = subprocess.run([sys.executable, "-c", OPENERS, "20", str(tmp_path)], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[-1] == "failed 0", out.stdout
