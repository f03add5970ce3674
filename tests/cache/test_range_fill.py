"""A node-local cache entry filled alongside ranged reads (`fluxfs/cache/ranges.py`, `fill.py`): the reads of
one process in flight at once share one download of each part (as a shard stream's 4 ranges in flight do),
a read cancelled does not break the others waiting for its part, the entry completes, checked, with the
object's bytes, and a filler killed mid-fill leaves nothing that looks complete. On the embedded server."""
from __future__ import annotations

import asyncio
import json
import multiprocessing
import os
import signal
import subprocess
import sys
import textwrap
import time

import google_crc32c
import pytest

from fluxfs.cache import NodeCache, fill
from fluxfs.gcs.checksums import crc32c_combine as combine
from tests.cache.conftest import PART
from tests.conftest import make_fs

PARTS = 6


def put(fs, path: str, n: int) -> bytes:
    data = os.urandom(n)
    fs.pipe_file(path, data)
    return data


def complete(cache_dir, key: str) -> bool:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:  # the rename happens on the cache's threads after the last part
        if any(m.key == key for m, _ in NodeCache(cache_dir).entries()):
            return True
        time.sleep(0.02)
    return False


def filled_entry(flux_server, bucket: str, d, n: int):
    """(path, bytes, generation, entry file) of an object of `n` bytes whose entry a ranged read filled in `d`."""
    fs = make_fs(flux_server, cache_dir=str(d))
    path = f"{bucket}/obj"
    data = put(fs, path, n)
    gen = fs.info(path)["generation"]
    assert fs.read_ranges(path, [(0, len(data))], generation=gen) == [data]
    assert complete(d, "obj")
    (entry,) = d.glob("*.data")
    return path, data, gen, entry


def run(fs, coro):
    return asyncio.run_coroutine_threadsafe(coro, fs.loop).result(30)


def test_reads_in_flight_together_download_each_part_once(flux_server, bucket, tmp_path, part_size):
    fs = make_fs(flux_server, cache_dir=str(tmp_path / "c"))
    path = f"{bucket}/obj"
    data = put(fs, path, PARTS * PART - 100)  # the last part short
    gen = fs.info(path)["generation"]
    spans = [(i * PART, min((i + 1) * PART, len(data))) for i in range(4)]  # 4 in flight, as a shard stream
    flux_server.reset_stats()

    async def together():
        return await asyncio.gather(*(fs._read_ranges(path, [s], generation=gen, max_gap=0) for s in spans))

    got = run(fs, together())
    assert [g[0] for g in got] == [data[s:e] for s, e in spans]
    assert complete(tmp_path / "c", "obj")
    stats = flux_server.stats()
    assert stats["data_reads"] == PARTS  # each part once: none read again around the fill
    assert stats["bytes_out"] <= len(data) + 4096
    flux_server.reset_stats()
    assert fs.read_ranges(path, [(5, PARTS * PART)], generation=gen) == [data[5:]]
    assert flux_server.stats()["data_reads"] == 0


def test_a_span_across_parts_and_a_read_into_buffers(flux_server, bucket, tmp_path, part_size):
    fs = make_fs(flux_server, cache_dir=str(tmp_path / "c"))
    path = f"{bucket}/obj"
    data = put(fs, path, 3 * PART + 7)
    gen = fs.info(path)["generation"]
    with pytest.raises(ValueError, match=f"range {4 * PART}-.* not satisfiable for {path}"):
        fs.read_ranges(path, [(4 * PART, 4 * PART + 5)], generation=gen)  # the first read: a fill of unknown size
    assert fs.read_ranges(path, [(PART - 10, 2 * PART + 10), (3 * PART, 4 * PART)], generation=gen) == [
        data[PART - 10:2 * PART + 10], data[3 * PART:]]  # the second comes back short, as from storage
    buf = bytearray(PART + 3)
    fs.read_ranges(path, [(10, PART + 13)], generation=gen, into=[buf])
    assert bytes(buf) == data[10:PART + 13]
    assert complete(tmp_path / "c", "obj")
    with pytest.raises(ValueError, match="not satisfiable"):  # from storage, as without a cache
        fs.read_ranges(path, [(4 * PART, 4 * PART + 5)], generation=gen)
    assert fs.read_ranges(path, [(0, 4 * PART)], generation=gen) == [data]


def test_a_cancelled_read_leaves_the_others_waiting_for_its_part_served(flux_server, bucket, tmp_path, part_size):
    fs = make_fs(flux_server, cache_dir=str(tmp_path / "c"))
    path = f"{bucket}/obj"
    data = put(fs, path, 2 * PART)
    gen = fs.info(path)["generation"]
    flux_server.configure(latency_ms=300)
    try:
        async def one_cancelled():
            first = asyncio.ensure_future(fs._read_ranges(path, [(0, 100)], generation=gen))
            second = asyncio.ensure_future(fs._read_ranges(path, [(50, 150)], generation=gen))
            await asyncio.sleep(0.1)  # both wait for part 0
            first.cancel()
            return await second, first.cancelled()

        got, cancelled = run(fs, one_cancelled())
    finally:
        flux_server.configure(latency_ms=0)
    assert cancelled and got == [data[50:150]]
    assert complete(tmp_path / "c", "obj")
    assert fs.read_ranges(path, [(0, 2 * PART)], generation=gen) == [data]


def test_crc32c_combined_from_parts_is_the_whole_objects():
    for a, b in [(0, 5), (5, 0), (1, 1), (100, PART), (PART, 12345), (8 * 2**20, 3)]:
        x, y = os.urandom(a), os.urandom(b)
        assert combine(google_crc32c.value(x), google_crc32c.value(y), b) == google_crc32c.value(x + y)


KILLED = textwrap.dedent("""
    import sys, time
    from fluxfs import FluxFileSystem
    from fluxfs.cache import ranges
    ranges.PART = int(sys.argv[4])
    fs = FluxFileSystem(endpoint_url=sys.argv[1], token="anon", cache_dir=sys.argv[2])
    data = fs.read_ranges(sys.argv[3], [(0, 10)], generation=sys.argv[5])[0]
    print(data.hex(), flush=True)  # part 0 in; the others still coming (slowly) in the background
    time.sleep(60)
""")


def test_a_range_filler_killed_mid_fill_leaves_nothing_complete_and_the_next_one_fills(flux_server, bucket,
                                                                                     tmp_path, part_size):
    fs = make_fs(flux_server, cache_dir=str(tmp_path / "c"))
    path = f"{bucket}/obj"
    data = put(fs, path, PARTS * PART)
    gen = fs.info(path)["generation"]
    flux_server.configure(latency_ms=400)
    try:
        proc = subprocess.Popen([sys.executable, "-c", KILLED, flux_server.url, str(tmp_path / "c"), path, str(PART),
                                 gen], stdout=subprocess.PIPE)
        assert proc.stdout.readline().strip() == data[:10].hex().encode()
        for _ in range(200):  # its temporary reserved (on the fill's thread), parts still coming
            if [f for f in os.listdir(tmp_path / "c") if f.endswith(".part")]:
                break
            time.sleep(0.01)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)
    finally:
        flux_server.configure(latency_ms=0)
    assert [f for f in os.listdir(tmp_path / "c") if f.endswith(".part")]  # killed mid-fill: its temporary is left
    assert NodeCache(tmp_path / "c").entries() == []  # and nothing looks complete
    assert fs.read_ranges(path, [(0, PARTS * PART)], generation=gen) == [data]  # the next filler starts anew
    assert complete(tmp_path / "c", "obj")
    assert not [f for f in os.listdir(tmp_path / "c") if f.endswith(".part")]  # the killed fill's leftovers gone
    flux_server.reset_stats()
    assert fs.read_ranges(path, [(PART, 2 * PART)], generation=gen) == [data[PART:2 * PART]]
    assert flux_server.stats()["data_reads"] == 0


def _read_in_child(fs, path: str, gen: str, span: tuple[int, int]) -> bytes:
    return fs.read_ranges(path, [span], generation=gen)[0]


def test_a_worker_forked_during_a_fill_reads_through_the_cache_on_its_own(flux_server, bucket, tmp_path, part_size):
    """A worker forked (a DataLoader's, a fork Pool's) while its parent fills an entry does not take the parent's fill
    for its own (it downloaded parts the parent was downloading, into the parent's file): it reads them from the
    parent's fill as they come, and that fill completes."""
    fs = make_fs(flux_server, cache_dir=str(tmp_path / "c"))
    path = f"{bucket}/obj"
    data = put(fs, path, PARTS * PART)
    gen = fs.info(path)["generation"]
    flux_server.reset_stats()
    flux_server.configure(latency_ms=300)  # the parent's fill is under way at the fork
    try:
        first = asyncio.run_coroutine_threadsafe(fs._read_ranges(path, [(0, PART)], generation=gen, max_gap=0),
                                                 fs.loop)
        deadline = time.monotonic() + 10
        while not fill.FILLS and time.monotonic() < deadline:
            time.sleep(0.01)
        assert fill.FILLS
        with multiprocessing.get_context("fork").Pool(1) as pool:
            got = pool.apply_async(_read_in_child, (fs, path, gen, (PART, 3 * PART))).get(60)
        assert got == data[PART:3 * PART]
        assert first.result(30) == [data[:PART]]
    finally:
        flux_server.configure(latency_ms=0)
    assert complete(tmp_path / "c", "obj")
    assert flux_server.stats()["data_reads"] == PARTS  # the worker read the parent's parts as they came: none twice


def test_a_full_disk_warns_once_and_ranges_are_read_from_storage(flux_server, bucket, small_disk, part_size):
    fs = make_fs(flux_server, cache_dir=str(small_disk / "cache"))
    blobs = {f"{bucket}/big{i}": put(fs, f"{bucket}/big{i}", 2 * 2**20 + i) for i in range(2)}  # over the disk
    with pytest.warns(RuntimeWarning, match="No space left on device") as caught:
        for path, data in blobs.items():
            gen = fs.info(path)["generation"]
            for _ in range(2):
                assert fs.read_ranges(path, [(0, 10), (PART - 5, 3 * PART)], generation=gen) == [
                    data[:10], data[PART - 5:3 * PART]]
        for _ in range(200):  # the reads did not wait for the fills' reservations, made on their threads
            if not fill.FILLS and len(caught):
                break
            time.sleep(0.02)
    assert len([w for w in caught if issubclass(w.category, RuntimeWarning)]) == 1  # once per cache
    assert NodeCache(small_disk / "cache").entries() == []
    assert not [f for f in os.listdir(small_disk / "cache") if f.endswith(".part")]


def test_an_object_larger_than_the_limit_is_read_as_asked_after_the_first_read(flux_server, bucket, tmp_path,
                                                                                part_size):
    fs = make_fs(flux_server, cache_dir=str(tmp_path / "c"), cache_limit=2 * PART)
    path = f"{bucket}/big"
    data = put(fs, path, 4 * PART)
    gen = fs.info(path)["generation"]
    assert fs.read_ranges(path, [(0, 10)], generation=gen) == [data[:10]]  # its size learnt: it never fits
    flux_server.reset_stats()
    for _ in range(3):
        assert fs.read_ranges(path, [(PART + 1, PART + 101)], generation=gen) == [data[PART + 1:PART + 101]]
    stats = flux_server.stats()
    assert stats["data_reads"] == 3 and stats["bytes_out"] < 3 * 100 + 4096  # the 100 bytes asked, not parts
    assert NodeCache(tmp_path / "c").entries() == []
    assert not [f for f in os.listdir(tmp_path / "c") if f.endswith((".part", ".lock"))]


EXITS = textwrap.dedent("""
    import sys
    from fluxfs import FluxFileSystem
    from fluxfs.cache import ranges
    ranges.PART = int(sys.argv[4])
    fs = FluxFileSystem(endpoint_url=sys.argv[1], token="anon", cache_dir=sys.argv[2])
    n = fs.info(sys.argv[3])["size"]
    assert len(fs.read_ranges(sys.argv[3], [(0, n)])[0]) == n  # then exits at once: the fill's last steps pending
""")


def test_a_process_exiting_right_after_its_reads_completes_its_fill(flux_server, bucket, tmp_path):
    fs = make_fs(flux_server, cache_dir=str(tmp_path / "c"))
    part, paths = 4 * 2**20, []  # parts whose writes take a while: the exit begins before the fill's last steps
    for i in range(3):
        paths.append(f"{bucket}/obj{i}")
        put(fs, paths[-1], 3 * part + i)
    for path in paths:
        subprocess.run([sys.executable, "-c", EXITS, flux_server.url, str(tmp_path / "c"), path, str(part)],
                       check=True, timeout=60)
    assert sorted(m.key for m, _ in NodeCache(tmp_path / "c").entries()) == ["obj0", "obj1", "obj2"]
    want = fs.cat_file(paths[1], cache=False)
    flux_server.reset_stats()
    assert fs.read_ranges(paths[1], [(0, 3 * part + 1)]) == [want]
    assert flux_server.stats()["data_reads"] == 0


def test_a_ranged_read_checks_the_parts_it_reads_not_the_whole_entry(flux_server, bucket, tmp_path, part_size,
                                                                     monkeypatch):
    """An entry another process filled (a fresh cache object here) with one byte of its third part changed on
    disk: a ranged read of the intact first parts is served from it (no GET: their crc32c, in the sidecar, pass;
    the rest is not read); the changed part is never served (read from storage) and the entry is filled again."""
    from fluxfs.cache import reader

    d = tmp_path / "c"
    path, data, gen, entry = filled_entry(flux_server, bucket, d, 3 * PART + 7)
    with open(entry, "r+b") as f:
        f.seek(2 * PART + 5)
        byte = f.read(1)
        f.seek(2 * PART + 5)
        f.write(bytes([byte[0] ^ 0xFF]))
    for _ in range(2):  # the second time: the entry filled again, every part intact
        monkeypatch.setattr(reader, "_CACHES", {})  # another process
        fs = make_fs(flux_server, cache_dir=str(d))
        flux_server.reset_stats()
        assert fs.read_ranges(path, [(10, PART + 13)], generation=gen) == [data[10:PART + 13]]
        buf = bytearray(PART)
        fs.read_ranges(path, [(PART // 2, PART // 2 + PART)], generation=gen, into=[buf])
        assert bytes(buf) == data[PART // 2:PART // 2 + PART]
        assert flux_server.stats()["data_reads"] == 0
        assert fs.read_ranges(path, [(2 * PART, len(data))], generation=gen) == [data[2 * PART:]]
        assert complete(d, "obj")
    assert flux_server.stats()["data_reads"] == 0


def test_part_crc32c_that_do_not_make_up_the_entrys_are_not_trusted(flux_server, bucket, tmp_path, part_size,
                                                                    monkeypatch):
    """An entry's first part changed on disk together with its part crc32c in the sidecar (so the part checks
    against it): the parts no longer combine to the entry's crc32c, so none of them is trusted; the whole entry
    is checked, fails, and the bytes come from storage, right."""
    import google_crc32c

    from fluxfs.cache import reader

    d = tmp_path / "c"
    path, data, gen, entry = filled_entry(flux_server, bucket, d, 2 * PART + 7)
    (sidecar,) = d.glob("*.meta")
    forged = bytes(PART)
    with open(entry, "r+b") as f:
        f.write(forged)
    meta = json.loads(sidecar.read_bytes())
    assert len(meta["parts"]["crc32c"]) == 3
    meta["parts"]["crc32c"][0] = google_crc32c.value(forged)
    sidecar.write_bytes(json.dumps(meta).encode())
    monkeypatch.setattr(reader, "_CACHES", {})  # another process
    fs = make_fs(flux_server, cache_dir=str(d))
    assert fs.read_ranges(path, [(10, 100)], generation=gen) == [data[10:100]]
