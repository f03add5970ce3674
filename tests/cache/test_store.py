"""NodeCache on its own: fills checked and renamed into place, one fill per entry, LRU under the limit,
entries in use never evicted, a killed filler's leftovers removed, a full disk read through."""
from __future__ import annotations

import errno
import os
import random
import subprocess
import sys
import textwrap
import time
import warnings

import google_crc32c
import pytest

from fluxfs.cache import NodeCache
from fluxfs.cache.entry import parse_name
from fluxfs.errors import ChecksumMismatch


def body(i: int, n: int = 10_000) -> bytes:
    return random.Random(i).randbytes(n)


class Fetcher:
    """A fetch that counts its calls (what a storage GET would be)."""

    def __init__(self, data: bytes):
        self.data, self.calls = data, 0

    def __call__(self) -> bytes:
        self.calls += 1
        return self.data


def get(cache: NodeCache, i: int, data: bytes, fetch=None, gen: str = "1") -> bytes:
    return cache.get("bkt", f"k{i}", gen, len(data), google_crc32c.value(data), fetch or Fetcher(data))


def files(d, kind: str) -> list[str]:
    return [n for n in os.listdir(d) if (parse_name(n) or ("", ""))[1] == kind]


def test_filled_once_then_served_from_disk(tmp_path):
    cache, data = NodeCache(tmp_path), body(1)
    fetch = Fetcher(data)
    assert get(cache, 1, data, fetch) == data
    assert get(NodeCache(tmp_path), 1, data, fetch) == data  # a restart reuses the complete entry
    assert fetch.calls == 1
    (meta, _), = cache.entries()
    assert (meta.bucket, meta.key, meta.generation, meta.size) == ("bkt", "k1", "1", len(data))


def test_a_new_generation_is_a_new_entry(tmp_path):
    cache = NodeCache(tmp_path)
    assert get(cache, 1, b"old", gen="1") == b"old"
    assert get(cache, 1, b"new!", gen="2") == b"new!"
    assert get(cache, 1, b"old", fetch=lambda: pytest.fail("refetched"), gen="1") == b"old"


def test_a_corrupted_fill_is_refused_and_not_cached(tmp_path):
    cache, data = NodeCache(tmp_path), body(2)
    bad = bytearray(data)
    bad[5] ^= 1
    with pytest.raises(ChecksumMismatch, match="crc32c mismatch filling bkt/k2#1: not cached"):
        get(cache, 2, data, fetch=lambda: bytes(bad))
    with pytest.raises(ChecksumMismatch, match="read 3 bytes of bkt/k2#1"):
        get(cache, 2, data, fetch=lambda: b"abc")
    assert cache.entries() == [] and files(tmp_path, "part") == [] and files(tmp_path, "lock") == []
    assert get(cache, 2, data) == data and len(cache.entries()) == 1


def test_limit_below_the_working_set(tmp_path):
    """Ten 10 KB objects under a 35 KB limit, two shuffled epochs: every read right, never over the limit."""
    limit = 35_000
    cache = NodeCache(tmp_path, limit=limit)
    objs = {i: body(i) for i in range(10)}
    for epoch in range(2):
        order = list(objs)
        random.Random(epoch).shuffle(order)
        for i in order:
            assert get(cache, i, objs[i]) == objs[i]
            assert cache.usage() <= limit
            assert cache.usage() <= int((tmp_path / ".fluxfs-cache.usage").read_text()) <= limit  # never below
    assert 1 <= len(cache.entries()) <= 3


def test_an_entry_larger_than_the_limit_is_streamed_through(tmp_path):
    cache, data = NodeCache(tmp_path, limit="5KB"), body(3)
    fetch = Fetcher(data)
    assert get(cache, 3, data, fetch) == data and get(cache, 3, data, fetch) == data
    assert fetch.calls == 2 and cache.entries() == [] and cache.usage() == 0


def test_eviction_never_removes_an_entry_in_use(tmp_path):
    cache = NodeCache(tmp_path, limit=25_000)
    held = body(0)
    with cache.open("bkt", "k0", "1", len(held), google_crc32c.value(held), Fetcher(held)) as f:
        for i in range(1, 8):  # past the limit many times over
            assert get(cache, i, body(i)) == body(i)
            assert cache.usage() <= 25_000
        assert f.read() == held
        assert ("bkt", "k0") in {(m.bucket, m.key) for m, _ in cache.entries()}
    # Released: now it is the least recently used and goes first.
    get(cache, 8, body(8))
    get(cache, 9, body(9))
    assert "k0" not in {m.key for m, _ in cache.entries()}


def test_everything_in_use_streams_new_objects_without_waiting(tmp_path):
    cache = NodeCache(tmp_path, limit=12_000)
    a = body(0)
    with cache.open("bkt", "k0", "1", len(a), google_crc32c.value(a), Fetcher(a)) as f:
        fetch = Fetcher(body(1))
        assert get(cache, 1, body(1), fetch) == body(1) and get(cache, 1, body(1), fetch) == body(1)
        assert fetch.calls == 2 and f.read() == a


FILLER = textwrap.dedent("""
    import sys, time, google_crc32c
    from fluxfs.cache import NodeCache
    data = bytes(range(256)) * 400
    def fetch():
        print("fetching", flush=True)
        time.sleep(60)
        return data
    NodeCache(sys.argv[1]).get("bkt", "k", "1", len(data), google_crc32c.value(data), fetch)
""")


def test_a_filler_killed_mid_fill_leaves_nothing_complete_and_the_next_one_fills(tmp_path):
    import threading

    data = bytes(range(256)) * 400
    proc = subprocess.Popen([sys.executable, "-c", FILLER, str(tmp_path)], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline() == "fetching\n"
        assert files(tmp_path, "part")  # its reserved temporary
        cache = NodeCache(tmp_path)
        assert cache.lookup("bkt", "k", "1") is None and cache.entries() == []  # nothing looks complete
        fetch, got = Fetcher(data), []
        waiter = threading.Thread(target=lambda: got.append(
            cache.get("bkt", "k", "1", len(data), google_crc32c.value(data), fetch)))
        waiter.start()  # waits for the filler's lock
        time.sleep(0.3)
        assert got == [] and fetch.calls == 0
        proc.kill()
        proc.wait(10)
    finally:
        proc.kill()
    t0 = time.monotonic()
    waiter.join(10)
    assert got == [data] and time.monotonic() - t0 < 5 and fetch.calls == 1  # not blocked by the dead filler
    assert files(tmp_path, "part") == []
    assert NodeCache(tmp_path).get("bkt", "k", "1", len(data), None, lambda: pytest.fail("refetched")) == data


def test_a_full_disk_warns_once_and_reads_from_storage(small_disk):
    cache = NodeCache(small_disk / "cache")  # no limit: only the disk's 1 MiB
    small = body(1, 300_000)
    assert get(cache, 1, small) == small
    big, bigger = body(2, 900_000), body(3, 800_000)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert get(cache, 2, big) == big
        assert get(cache, 3, bigger) == bigger
    assert [str(w.message) for w in caught] == [
        f"fluxfs node-local cache {cache.directory}: No space left on device; objects that do not fit are read "
        "from storage without caching"]
    assert [m.key for m, _ in cache.entries()] == ["k1"] and files(cache.directory, "part") == []
    assert get(cache, 1, small, fetch=lambda: pytest.fail("refetched")) == small


def test_a_fill_from_chunks_is_written_as_they_come_and_checked(tmp_path):
    cache, data = NodeCache(tmp_path), body(4, 50_000)
    seen = []

    def chunks():
        for a in range(0, len(data), 8000):
            seen.append(files(tmp_path, "part"))  # the fill's temporary exists while chunks arrive
            yield data[a:a + 8000]

    assert cache.get("bkt", "k4", "1", len(data), google_crc32c.value(data), chunks) == data
    assert all(seen) and len(seen) == 7 and files(tmp_path, "part") == []

    def short():
        yield data[:100]

    with pytest.raises(ChecksumMismatch, match="read 100 bytes of bkt/k5#1, which has 50000: not cached"):
        cache.get("bkt", "k5", "1", len(data), google_crc32c.value(data), short)
    assert [m.key for m, _ in cache.entries()] == ["k4"] and files(tmp_path, "part") == []


def test_aget_takes_an_async_fetch_of_bytes_or_chunks(tmp_path):
    import asyncio

    cache, data = NodeCache(tmp_path), body(6, 30_000)
    crc = google_crc32c.value(data)

    async def whole():
        return data

    async def parts():
        for a in range(0, len(data), 7000):
            await asyncio.sleep(0)
            yield data[a:a + 7000]

    async def main():
        return (await cache.aget("bkt", "w", "1", len(data), crc, whole),
                await cache.aget("bkt", "p", "1", len(data), crc, parts))

    assert asyncio.run(main()) == (data, data)
    assert sorted(m.key for m, _ in cache.entries()) == ["p", "w"]


def test_a_disk_filling_up_mid_write_reads_on_from_storage(small_disk, monkeypatch):
    """A filesystem without fallocate (as some network filesystems): the space runs out while writing."""
    def no_fallocate(fd, offset, length):
        raise OSError(errno.EOPNOTSUPP, "Operation not supported")

    monkeypatch.setattr(os, "posix_fallocate", no_fallocate)
    cache, data = NodeCache(small_disk / "cache"), body(7, 1_500_000)

    def chunks():
        for a in range(0, len(data), 100_000):
            yield data[a:a + 100_000]

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert cache.get("bkt", "big", "1", len(data), google_crc32c.value(data), chunks) == data
    assert len(caught) == 1 and "No space left on device" in str(caught[0].message)
    assert cache.entries() == [] and files(cache.directory, "part") == [] and cache.usage() == 0


def test_a_read_without_a_generation_or_with_a_garbage_crc_is_refused(tmp_path):
    cache = NodeCache(tmp_path)
    with pytest.raises(ValueError, match="the node-local cache needs the generation of bkt/k: the bytes of an "
                                         "object overwritten since would otherwise be served"):
        cache.get("bkt", "k", None, 3, None, lambda: b"abc")
    with pytest.raises(ValueError, match="crc32c must be an int or GCS's base64 text, not 'not base64!'"):
        cache.get("bkt", "k", "1", 3, "not base64!", lambda: b"abc")
    with pytest.raises(ValueError, match="cache_limit must not be negative, not -5"):
        NodeCache(tmp_path, limit=-5)
    assert cache.entries() == []


WORKER = textwrap.dedent("""
    import random, sys, google_crc32c
    from fluxfs.cache import NodeCache
    cache, rng = NodeCache(sys.argv[1], limit=45_000), random.Random(int(sys.argv[2]))
    for _ in range(40):
        i = rng.randrange(12)
        data = random.Random(i).randbytes(10_000)
        assert cache.get("bkt", f"k{i}", "1", len(data), google_crc32c.value(data), lambda: data) == data
        assert cache.usage() <= 45_000, cache.usage()
""")


def test_processes_sharing_a_cache_below_their_working_set(tmp_path):
    """Four processes reading twelve objects at random under a limit of four: right bytes, never over."""
    procs = [subprocess.Popen([sys.executable, "-c", WORKER, str(tmp_path), str(seed)], stderr=subprocess.PIPE)
             for seed in range(4)]
    errors = [p.communicate(timeout=60)[1].decode() for p in procs]
    assert [p.returncode for p in procs] == [0] * 4, errors
    assert NodeCache(tmp_path).usage() <= 45_000 and files(tmp_path, "part") == []
