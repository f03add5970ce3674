"""`fluxfs cache ls|du|clear DIR`: what the cache holds, its size, emptying it (entries in use kept)."""
from __future__ import annotations

import fcntl
import glob
import os

import google_crc32c
import pytest

from fluxfs.cache import NodeCache
from fluxfs.cache.entry import entry_id
from tests.cache.conftest import write_pack
from tests.cli.test_cli import assert_clean_failure, cli  # noqa: F401 - the fixture


def fill(cache: NodeCache, key: str, data: bytes, gen: str = "7") -> None:
    cache.get("bkt", key, gen, len(data), google_crc32c.value(data), lambda: data)


def test_ls_du_clear(cli, tmp_path):  # noqa: F811
    cache = NodeCache(tmp_path)
    fill(cache, "a/0.tar", b"x" * 100)
    fill(cache, "b\x1b[2J", b"y" * 50)
    for when, key in enumerate(["a/0.tar", "b\x1b[2J"]):  # last used: a/0.tar first, whatever the mtime granularity
        os.utime(tmp_path / f"{entry_id('bkt', key, '7')}.data", (1e9 + when, 1e9 + when))
    mine = tmp_path / "notes.txt"
    mine.write_text("not the cache's")
    r = cli("cache", "ls", str(tmp_path))
    assert r.code == 0
    assert [line.split()[0] for line in r.lines] == ["100", "50"]
    assert [line.split()[2] for line in r.lines] == ["flux://bkt/a/0.tar#7", "flux://bkt/b\\x1b[2J#7"]
    r = cli("cache", "du", str(tmp_path))
    assert r.code == 0 and r.text.split("\t")[:2] == [str(cache.usage()), "2 entries"] and cache.usage() > 150
    a = b"z" * 10
    with cache.open("bkt", "held", "1", len(a), google_crc32c.value(a), lambda: a) as f:
        r = cli("cache", "clear", str(tmp_path))
        assert r.code == 0
        assert r.err.startswith("removed 2 entries (") and r.err.endswith("; 1 in use kept\n")
        assert f.read() == a
    assert [m.key for m, _ in cache.entries()] == ["held"]
    assert mine.read_text() == "not the cache's"  # never deleted: fluxfs did not make it
    assert cli("cache", "clear", str(tmp_path)).code == 0 and cache.entries() == []


def test_a_directory_that_is_not_a_cache_is_refused(cli, tmp_path):  # noqa: F811
    (tmp_path / "data.bin").write_bytes(b"keep")
    assert_clean_failure(cli("cache", "clear", str(tmp_path)), 2, "is not a fluxfs cache directory", str(tmp_path))
    assert (tmp_path / "data.bin").read_bytes() == b"keep"
    assert_clean_failure(cli("cache", "ls", str(tmp_path / "nope")), 3, "no cache directory", "nope")
    assert os.listdir(tmp_path) == ["data.bin"]


def pack(cache: NodeCache, keys: list[str], data: bytes) -> str:
    """Pack those objects (as `fs.cat_objects` fills do): the new pack file's path."""
    before = set(glob.glob(os.path.join(cache.directory, "*.pack")))
    write_pack(cache, [(("", "bkt", k, "7", len(data), google_crc32c.value(data)), data) for k in keys])
    (made,) = set(glob.glob(os.path.join(cache.directory, "*.pack"))) - before
    return made


def test_packed_entries_are_listed_counted_and_cleared_unless_in_use(cli, tmp_path):  # noqa: F811
    cache = NodeCache(tmp_path)
    fill(cache, "whole", b"w" * 100)
    os.utime(tmp_path / f"{entry_id('bkt', 'whole', '7')}.data", (1e9, 1e9))
    held = pack(cache, ["p/0", "p/1"], b"x" * 30)
    other = pack(cache, ["p/2"], b"y" * 40)
    os.utime(held, (1e9 + 1, 1e9 + 1))
    r = cli("cache", "ls", str(tmp_path))
    assert r.code == 0
    assert [line.split()[2] for line in r.lines] == ["flux://bkt/whole#7", "flux://bkt/p/0#7", "flux://bkt/p/1#7",
                                                     "flux://bkt/p/2#7"]
    assert [line.split()[0] for line in r.lines] == ["100", "30", "30", "40"]
    r = cli("cache", "du", str(tmp_path))
    assert r.text.split("\t")[:2] == [str(cache.usage()), "4 entries"] and cache.usage() >= 100 + 60 + 40
    fd = os.open(held, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH)  # being read
        r = cli("cache", "clear", str(tmp_path))
        assert r.code == 0 and r.err.startswith("removed 2 entries (") and r.err.endswith("; 2 in use kept\n")
    finally:
        os.close(fd)
    assert sorted(m.key for m, _ in cache.entries()) == ["p/0", "p/1"] and not os.path.exists(other)
    assert cache.get("bkt", "p/1", "7", 30, None, lambda: pytest.fail("refetched")) == b"x" * 30
    assert cli("cache", "clear", str(tmp_path)).code == 0 and cache.entries() == [] and cache.usage() == 0
