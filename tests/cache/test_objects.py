"""The node-local cache behind the object datasets (`cache_dir=`): epoch 1 fills it, epoch 2 makes no data GET
with the same samples; an overwritten object is read anew; a limit below one epoch still yields every
sample once; two DataLoader workers download each object once. On the embedded server."""
from __future__ import annotations

import fcntl
import glob
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import threading
import warnings

import pytest
from torch.utils.data import DataLoader

from fluxfs.cache import NodeCache, objects as cache_objects
from fluxfs.pipes import FluxIterableDataset, FluxMapDataset
from tests.conftest import make_fs

N = 120


def body(i: int) -> bytes:
    return f"object {i} ".encode() * (50 + i % 40)


EXPECTED = sorted((f"o/{i:04d}", body(i)) for i in range(N))


@pytest.fixture
def objects(flux_server, bucket) -> str:
    fs = make_fs(flux_server)
    fs.pipe({f"{bucket}/o/{i:04d}": body(i) for i in range(N)})
    return f"flux://{bucket}/o/"


def key_and_bytes(data: bytes, meta) -> tuple[str, bytes]:
    return meta.key, data


def opts(server, tmp_path, **more) -> dict:
    return {"endpoint_url": server.url, "token": "anon", "cache_dir": str(tmp_path / "cache"), **more}


def epoch(ds, workers: int = 0) -> list:
    loader = DataLoader(ds, batch_size=16, num_workers=workers, collate_fn=lambda b: b)
    return sorted(s for batch in loader for s in batch)


@pytest.mark.parametrize("kind", ["iterable", "map"])
def test_second_epoch_makes_no_data_get(flux_server, objects, tmp_path, kind):
    cls = FluxIterableDataset if kind == "iterable" else FluxMapDataset
    ds = cls.from_prefix(objects, storage_options=opts(flux_server, tmp_path), transform=key_and_bytes)
    flux_server.reset_stats()
    assert epoch(ds) == EXPECTED
    assert flux_server.stats()["data_reads"] > 0
    flux_server.reset_stats()
    assert epoch(ds) == EXPECTED
    assert flux_server.stats()["data_reads"] == 0 and flux_server.stats()["requests"].get("compose", 0) == 0
    assert len(NodeCache(tmp_path / "cache").entries()) == N


def test_an_overwritten_object_is_read_anew(flux_server, bucket, objects, tmp_path):
    so = opts(flux_server, tmp_path)
    assert epoch(FluxMapDataset.from_prefix(objects, storage_options=so, transform=key_and_bytes)) == EXPECTED
    make_fs(flux_server).pipe(f"{bucket}/o/0007", b"new bytes")
    got = dict(epoch(FluxMapDataset.from_prefix(objects, storage_options=so, transform=key_and_bytes)))
    assert got["o/0007"] == b"new bytes" and got["o/0008"] == body(8)


def test_a_limit_below_one_epoch_still_yields_every_sample_once(flux_server, objects, tmp_path):
    total = sum(len(body(i)) for i in range(N))
    so = opts(flux_server, tmp_path, cache_limit=total // 3)
    ds = FluxIterableDataset.from_prefix(objects, storage_options=so, transform=key_and_bytes)
    for _ in range(2):
        assert epoch(ds) == EXPECTED
        cache_objects.flush()
        assert NodeCache(tmp_path / "cache").usage() <= total // 3
        assert 0 < len(NodeCache(tmp_path / "cache").entries()) < N  # whole packs evicted, the latest kept


def test_two_workers_download_each_object_once(flux_server, objects, tmp_path):
    ds = FluxMapDataset.from_prefix(objects, storage_options=opts(flux_server, tmp_path), transform=key_and_bytes)
    flux_server.reset_stats()
    assert epoch(ds, workers=2) == EXPECTED
    assert flux_server.stats()["data_reads"] == N  # batches of 16 are direct GETs: one per object, none twice
    assert len(NodeCache(tmp_path / "cache").entries()) == N  # the workers finished their fills on exit
    flux_server.reset_stats()
    assert epoch(ds, workers=2) == EXPECTED
    assert flux_server.stats()["data_reads"] == 0


def packed(cache_dir) -> dict[str, tuple[str, int, int]]:
    """{key: (pack file, offset, size)} of the complete packed entries, as the index says."""
    db = sqlite3.connect(os.path.join(cache_dir, ".fluxfs-cache.index"))
    try:
        return {key: (os.path.join(cache_dir, f"{pack}.pack"), offset, size) for key, pack, offset, size in
                db.execute("SELECT key, pack, offset, size FROM objects WHERE complete = 1")}
    finally:
        db.close()


def tear(cache_dir, keys) -> None:
    """What a power loss before the data reached the disk leaves of those entries: their size, zeros."""
    where = packed(cache_dir)
    for key in keys:
        path, offset, size = where[key]
        with open(path, "r+b") as f:
            f.seek(offset)
            f.write(b"\0" * size)


def filled(flux_server, objects, tmp_path) -> FluxMapDataset:
    """A map dataset whose epoch filled the cache (its fills done)."""
    ds = FluxMapDataset.from_prefix(objects, storage_options=opts(flux_server, tmp_path), transform=key_and_bytes)
    assert epoch(ds) == EXPECTED
    cache_objects.flush()
    assert len(NodeCache(tmp_path / "cache").entries()) == N
    return ds


def test_a_torn_entry_is_read_from_storage_not_returned(flux_server, objects, tmp_path):
    ds = filled(flux_server, objects, tmp_path)
    tear(tmp_path / "cache", ["o/0003", "o/0050", "o/0111"])
    flux_server.reset_stats()
    assert epoch(ds) == EXPECTED
    assert flux_server.stats()["data_reads"] == 3  # the torn ones, from storage; never the zeros
    cache_objects.flush()
    flux_server.reset_stats()
    assert epoch(ds) == EXPECTED
    assert flux_server.stats()["data_reads"] == 0  # filled again
    assert len(NodeCache(tmp_path / "cache").entries()) == N


def test_a_torn_object_entry_is_not_served_by_the_other_read_paths(flux_server, objects, tmp_path):
    """Packed entries are never fsynced: cat_file of a packed object checks its crc32c and reads storage when
    torn; a ranged read does not use packed entries. Untorn, cat_file is served from the pack (no data GET)."""
    filled(flux_server, objects, tmp_path)
    tear(tmp_path / "cache", [f"o/{i:04d}" for i in range(N) if i != 9])
    fs = make_fs(flux_server, cache_dir=str(tmp_path / "cache"))
    path = objects.removeprefix("flux://") + "0007"
    assert fs.read_ranges(path, [(0, 10), (20, 40)]) == [body(7)[0:10], body(7)[20:40]]
    flux_server.reset_stats()
    assert fs.cat_file(objects.removeprefix("flux://") + "0008") == body(8)
    assert flux_server.stats()["data_reads"] == 1
    flux_server.reset_stats()
    assert fs.cat_file(objects.removeprefix("flux://") + "0009") == body(9)
    assert flux_server.stats()["data_reads"] == 0


def test_read_objects_node_second_pass_makes_no_data_get(flux_server, objects, tmp_path):
    from torchdata.nodes import Loader

    from fluxfs.pipes import ListObjects, ReadObjects

    so = opts(flux_server, tmp_path)

    def one_pass() -> list:
        return sorted(Loader(ReadObjects(ListObjects(objects, storage_options=so), storage_options=so)))

    flux_server.reset_stats()
    assert one_pass() == EXPECTED
    assert flux_server.stats()["data_reads"] > 0
    flux_server.reset_stats()  # (no waiting: a read waits for this process's own fills of what it asks)
    assert one_pass() == EXPECTED
    assert flux_server.stats()["data_reads"] == 0


def test_a_miss_makes_no_file_in_the_cache_directory(flux_server, objects, tmp_path, monkeypatch):
    """Looking an object up makes no lock file when it has no entry (a file creation costs ~1 ms on a busy
    disk, on the read's path): with nothing cached (no room in the backlog), the directory stays empty."""
    monkeypatch.setattr(cache_objects, "BACKLOG", 0)
    ds = FluxMapDataset.from_prefix(objects, storage_options=opts(flux_server, tmp_path), transform=key_and_bytes)
    assert epoch(ds) == EXPECTED
    left = [n for n in os.listdir(tmp_path / "cache") if not n.startswith((".", "CACHEDIR"))]
    assert left == []


def test_an_epoch_of_small_calls_fills_one_pack_not_one_per_call(flux_server, objects, tmp_path):
    """A loader's batches each claim their misses; one process's claims share its open pack (a file per call would
    make an epoch of millions of objects millions of files), and a read of one batch already written is served
    from it while later batches are still claimed in it."""
    fs = make_fs(flux_server, cache_dir=str(tmp_path / "cache"))
    infos = sorted(fs.find(objects, detail=True).values(), key=lambda i: i["name"])
    for at in range(0, N, 8):
        got = fs.cat_objects(infos[at:at + 8])
        assert [got[i["name"]] for i in infos[at:at + 8]] == [body(j) for j in range(at, min(N, at + 8))]
        if at == 64:
            cache_objects.flush()
            flux_server.reset_stats()
            assert list(fs.cat_objects(infos[:8]).values()) == [body(j) for j in range(8)]
            assert flux_server.stats()["data_reads"] == 0
    cache_objects.flush()
    assert len(glob.glob(os.path.join(str(tmp_path / "cache"), "*.pack"))) == 1
    assert len(NodeCache(tmp_path / "cache").entries()) == N
    assert NodeCache(tmp_path / "cache").usage() == sum(len(body(i)) for i in range(N))


def test_the_filler_writes_many_calls_claims_in_one_transaction(flux_server, objects, tmp_path, monkeypatch):
    """Claims queue while the filler lingers (until `FILL` bytes are queued): one "complete" transaction (and one
    run of pack writes) for many calls, not one per call, and every entry is complete after `flush`."""
    from fluxfs.cache import index
    total = sum(len(body(i)) for i in range(N))
    monkeypatch.setattr(cache_objects, "FILL", total // 2, raising=False)
    monkeypatch.setattr(cache_objects, "LINGER", 60.0, raising=False)
    commits = []
    complete = index.complete
    monkeypatch.setattr(index, "complete", lambda db, done, *a: commits.append(len(done)) or complete(db, done, *a))
    fs = make_fs(flux_server, cache_dir=str(tmp_path / "cache"))
    infos = sorted(fs.find(objects, detail=True).values(), key=lambda i: i["name"])
    for at in range(0, N, 8):  # 15 calls
        assert list(fs.cat_objects(infos[at:at + 8]).values()) == [body(j) for j in range(at, min(N, at + 8))]
    cache_objects.flush()
    assert sum(commits) == N and len(commits) <= 3
    assert len(NodeCache(tmp_path / "cache").entries()) == N


KILLED_FILLER = textwrap.dedent("""
    import os, sys, time
    from fluxfs import FluxFileSystem
    from fluxfs.cache import objects, packs
    url, cache_dir, bucket = sys.argv[1:4]
    fs = FluxFileSystem(endpoint_url=url, token="anon", cache_dir=cache_dir, skip_instance_cache=True)
    infos = sorted(fs.find(f"{bucket}/o/", detail=True).values(), key=lambda i: i["name"])
    fs.cat_objects(infos[:60])
    objects.flush()  # the first half: complete entries

    def stalled(self, parts, at=0):  # the second claim: half written, then killed
        os.pwrite(self.fd, b"".join(parts[:len(parts) // 2]), at)
        print("writing", flush=True)
        time.sleep(60)

    packs.NewPack.write = stalled
    fs.cat_objects(infos[60:])
    objects.flush()
""")


def test_a_filler_killed_mid_pack_leaves_nothing_complete_and_the_next_run_reuses_the_rest(
        flux_server, bucket, objects, tmp_path):
    """A real SIGKILL while a claim is half written: its objects do not look cached, the first half's entries are
    reused (no GET for them), the dead claims are removed by the fill that meets them."""
    cache_dir = str(tmp_path / "cache")
    proc = subprocess.Popen([sys.executable, "-c", KILLED_FILLER, flux_server.url, cache_dir, bucket],
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline() == "writing\n"
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
    finally:
        proc.kill()
    cache = NodeCache(cache_dir)
    assert sorted(m.key for m, _ in cache.entries()) == [f"o/{i:04d}" for i in range(60)]
    assert len(glob.glob(os.path.join(cache_dir, "*.pack"))) == 1  # one pack took both calls' claims
    ds = FluxMapDataset.from_prefix(objects, storage_options=opts(flux_server, tmp_path), transform=key_and_bytes)
    flux_server.reset_stats()
    assert epoch(ds) == EXPECTED
    assert flux_server.stats()["data_reads"] == N - 60
    cache_objects.flush()
    assert len(cache.entries()) == N
    assert sorted(packed(cache_dir).values()) == sorted(packed(cache_dir).values())
    assert {p for p, _, _ in packed(cache_dir).values()} == set(glob.glob(os.path.join(cache_dir, "*.pack")))
    dead = sum(len(body(i)) for i in range(60, N))  # the killed claim's room: freed with its pack (evicted whole)
    assert cache.usage() == sum(len(body(i)) for i in range(N)) + dead


TWO_FILLERS = textwrap.dedent("""
    import sys
    from fluxfs import FluxFileSystem
    from fluxfs.cache import objects
    url, cache_dir, bucket = sys.argv[1:4]
    fs = FluxFileSystem(endpoint_url=url, token="anon", cache_dir=cache_dir, skip_instance_cache=True)
    plain = FluxFileSystem(endpoint_url=url, token="anon", skip_instance_cache=True)
    infos = sorted(fs.find(f"{bucket}/o/", detail=True).values(), key=lambda i: i["name"])
    for at in range(0, len(infos), 8):
        got = fs.cat_objects(infos[at:at + 8])
        assert [got[i["name"]] for i in infos[at:at + 8]] == [plain.cat_file(i["name"]) for i in infos[at:at + 8]]
    objects.flush()
""")


def test_two_processes_filling_the_same_objects_write_each_once(flux_server, bucket, objects, tmp_path):
    """Two processes reading the same objects at once: each object is one entry, its bytes in one pack once
    (the first to claim it writes it, the other skips it); the next read makes no data GET."""
    cache_dir = str(tmp_path / "cache")
    procs = [subprocess.Popen([sys.executable, "-c", TWO_FILLERS, flux_server.url, cache_dir, bucket],
                              stderr=subprocess.PIPE) for _ in range(2)]
    errors = [p.communicate(timeout=120)[1].decode() for p in procs]
    assert [p.returncode for p in procs] == [0, 0], errors
    cache = NodeCache(cache_dir)
    assert sorted(m.key for m, _ in cache.entries()) == [f"o/{i:04d}" for i in range(N)]
    assert cache.usage() == sum(len(body(i)) for i in range(N))  # no object written twice
    flux_server.reset_stats()
    ds = FluxMapDataset.from_prefix(objects, storage_options=opts(flux_server, tmp_path), transform=key_and_bytes)
    assert epoch(ds) == EXPECTED and flux_server.stats()["data_reads"] == 0


def test_eviction_never_removes_a_pack_in_use(flux_server, bucket, objects, tmp_path):
    """A pack being read (its shared lock, as a reader holds it) survives fills far past the limit, which stays
    kept; released, it is the least recently used and goes."""
    fs = make_fs(flux_server, cache_dir=str(tmp_path / "cache"), cache_limit=8_000)
    infos = sorted(fs.find(objects, detail=True).values(), key=lambda i: i["name"])
    fs.cat_objects(infos[:8])
    cache_objects.flush()
    held = packed(tmp_path / "cache")["o/0000"][0]  # (packs are at most a tenth of the limit: one object here)
    fd = os.open(held, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH)
        for at in range(8, 64, 8):
            assert fs.cat_objects(infos[at:at + 8]) == {i["name"]: body(int(i["name"][-4:])) for i in
                                                       infos[at:at + 8]}
            cache_objects.flush()
            assert fs.cache.usage() <= 8_000 + os.path.getsize(held)
        assert os.path.exists(held)
        flux_server.reset_stats()
        assert fs.cat_objects(infos[:1]) == {infos[0]["name"]: body(0)}
        assert flux_server.stats()["data_reads"] == 0  # still served from it
    finally:
        os.close(fd)
    for at in range(64, 96, 8):
        fs.cat_objects(infos[at:at + 8])
        cache_objects.flush()
        assert fs.cache.usage() <= 8_000
    assert not os.path.exists(held)


def test_the_pack_a_process_holds_open_for_its_claims_is_evicted_once_idle(flux_server, bucket, tmp_path):
    """The pack a process appends its claims to is evicted as any other once nothing is pending in it (was: its
    filler held it for the process's life, eviction skipped it, and the next call that needed its room cached
    nothing)."""
    fs = make_fs(flux_server, cache_dir=str(tmp_path / "cache"), cache_limit=100_000)  # packs of 10 kB at most
    first = {f"{bucket}/first": os.urandom(1_500)}
    more = {f"{bucket}/more/{i:02d}": os.urandom(9_000) for i in range(11)}  # with the first: past the limit
    fs.pipe({**first, **more})
    infos = [fs.info(name) for name in [*first, *sorted(more)]]
    assert fs.cat_objects(infos[:1]) == first
    cache_objects.flush()
    assert fs.cat_objects(infos[1:]) == more
    cache_objects.flush()
    assert fs.cache.usage() <= 100_000
    flux_server.reset_stats()
    assert fs.cat_objects(infos[1:]) == more
    assert flux_server.stats()["data_reads"] == 0  # all cached: the first's pack made room


def test_a_full_disk_warns_once_and_reads_from_storage(flux_server, bucket, small_disk):
    """A 1 MiB disk and 3 MB of objects: one warning, every object's bytes right, what fits still served."""
    fs = make_fs(flux_server)
    big = {f"{bucket}/big/{i:02d}": bytes([i]) * 100_000 for i in range(30)}
    fs.pipe(big)
    cached = make_fs(flux_server, cache_dir=str(small_disk / "cache"))
    infos = sorted(cached.find(f"{bucket}/big/", detail=True).values(), key=lambda i: i["name"])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(2):
            for at in range(0, 30, 5):
                assert cached.cat_objects(infos[at:at + 5]) == {i["name"]: big[i["name"]] for i in infos[at:at + 5]}
                cache_objects.flush()
    assert [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)] == [
        f"fluxfs node-local cache {small_disk / 'cache'}: No space left on device; objects that do not fit are read "
        "from storage without caching"]
    kept = NodeCache(small_disk / "cache").entries()
    assert 0 < len(kept) < 30
    flux_server.reset_stats()
    assert cached.cat_objects(infos) == big
    assert flux_server.stats()["data_reads"] < 30  # the ones that fit, from the disk


def test_a_damaged_index_warns_once_and_reads_from_storage_until_cleared(flux_server, objects, tmp_path):
    cache = NodeCache(tmp_path / "cache")
    index = tmp_path / "cache" / ".fluxfs-cache.index"
    index.write_bytes(b"not a database " * 100)
    ds = FluxMapDataset.from_prefix(objects, storage_options=opts(flux_server, tmp_path), transform=key_and_bytes)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(2):
            flux_server.reset_stats()
            assert epoch(ds) == EXPECTED
            cache_objects.flush()
            assert flux_server.stats()["data_reads"] == N
    assert [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)] == [
        f"fluxfs node-local cache {cache.directory}: its index .fluxfs-cache.index cannot be read (file is not a "
        "database); small objects are read from storage without caching until `fluxfs cache clear` removes it"]
    assert index.read_bytes() == b"not a database " * 100 and cache.entries() == []  # nothing lost meanwhile
    assert cache.clear() == (0, 0, 0)
    assert epoch(ds) == EXPECTED
    cache_objects.flush()
    flux_server.reset_stats()
    assert epoch(ds) == EXPECTED and flux_server.stats()["data_reads"] == 0


SHM_LOCK = textwrap.dedent("""
    import fcntl, sys
    with open(sys.argv[1], "r+b") as f:
        try:
            fcntl.lockf(f, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, 128)  # SQLite's "first one here" byte of the -shm
        except OSError:
            print("held")
        else:
            print("free")
""")


def test_a_second_threads_connection_leaves_the_first_ones_index_locks_held(tmp_path):
    """Each thread connects to the index; one connecting must not drop the POSIX locks the other's SQLite holds
    on the -shm (closing any descriptor of a file drops them all): another process would then take itself for
    the first, reset the -shm, and this one die of SIGBUS (seen as a filler killed by signal 7)."""
    from fluxfs.cache import index

    index.connect(str(tmp_path)).execute("SELECT count(*) FROM objects").fetchone()
    other = threading.Thread(target=lambda: index.connect(str(tmp_path)).execute("SELECT 1").fetchone())
    other.start()
    other.join()
    out = subprocess.run([sys.executable, "-c", SHM_LOCK, index.path_of(str(tmp_path)) + "-shm"],
                         capture_output=True, text=True, timeout=60)
    assert out.stdout == "held\n", out.stderr
