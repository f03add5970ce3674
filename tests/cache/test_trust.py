"""The cache is invisible: with and without `cache_dir` every read returns the same bytes or the same error,
and nothing on disk is trusted more than storage would be (fluxfs issue "Trust at scale")."""
from __future__ import annotations

import textwrap
import threading
import time

import pytest

from fluxfs.cache.entry import crc_value
from fluxfs.support import cached_cat
from fluxfs.server import run
from tests.cache.conftest import write_pack
from tests.conftest import make_fs, new_bucket_name


@pytest.fixture(scope="module")
def other_server():
    """A second embedded server (another port): another store with the same bucket and key names."""
    with run() as srv:
        yield srv


def reads(server) -> int:
    return server.stats()["requests"].get("read", 0)


def _info(fs, path: str) -> dict:
    return {k: v for k, v in fs.info(path).items() if k in ("name", "size", "generation", "crc32c")}


def _outcome(call):
    try:
        return call()
    except Exception as exc:  # compared by type
        return type(exc)


def test_entries_are_keyed_by_the_store_they_came_from(flux_server, other_server, tmp_path):
    name = new_bucket_name()
    flux_server.create_bucket(name)
    other_server.create_bucket(name)
    a, b = make_fs(flux_server, cache_dir=str(tmp_path)), make_fs(other_server, cache_dir=str(tmp_path))
    a.pipe(f"{name}/k", b"A's bytes " * 1000)
    a.pipe(f"{name}/small", b"A small")
    b.pipe(f"{name}/k", b"B's bytes " * 1000)
    b.pipe(f"{name}/small", b"B small")
    info_k, info_small = _info(a, f"{name}/k"), _info(a, f"{name}/small")
    gen = info_k["generation"]
    # A's entries: whole (cached_cat, read_ranges) and packed (cat_objects)
    assert cached_cat(a, info_k) == b"A's bytes " * 1000
    assert a.read_ranges(f"{name}/k", [(0, 9)], generation=gen)[0] == b"A's bytes"
    assert a.cat_objects([info_small]) == {f"{name}/small": b"A small"}
    from fluxfs.cache import objects
    objects.flush()
    plain = make_fs(other_server)  # B without a cache: what B's reads must give with one too
    want_ranges = _outcome(lambda: plain.read_ranges(f"{name}/k", [(0, 9)], generation=gen))
    want_cat = _outcome(lambda: plain.cat_objects([info_small], on_error="return")[f"{name}/small"])
    want_cached = _outcome(lambda: cached_cat(plain, info_k))
    assert not isinstance(want_ranges, list) or want_ranges[0] != b"A's bytes"
    other_server.reset_stats()
    got_ranges = _outcome(lambda: b.read_ranges(f"{name}/k", [(0, 9)], generation=gen))
    assert got_ranges == want_ranges
    got_cat = _outcome(lambda: b.cat_objects([info_small], on_error="return")[f"{name}/small"])
    assert got_cat == want_cat or type(got_cat) is type(want_cat)
    assert got_cat != b"A small"
    assert _outcome(lambda: cached_cat(b, info_k)) == want_cached
    assert reads(other_server) > 0  # asked of B, not served from A's entries


def test_the_callers_crc32c_wins_over_an_entry_or_a_pack_row(flux_server, bucket, tmp_path):
    """Entries of the same store, bucket, key, generation and size whose bytes are another object's (a store
    reset since: an emulator restarted reuses generations) are misses when the caller knows the crc32c."""
    import google_crc32c

    from fluxfs.cache import objects

    fs = make_fs(flux_server, cache_dir=str(tmp_path))
    real, other = b"the real bytes" * 100, b"other's bytes!" * 100
    fs.pipe({f"{bucket}/whole": real, f"{bucket}/packed": real})
    whole, packed = _info(fs, f"{bucket}/whole"), _info(fs, f"{bucket}/packed")
    store, crc = fs.cache_fetcher.store, google_crc32c.value(other)
    fs.cache.get(bucket, "whole", whole["generation"], len(other), crc, lambda: other, store=store)
    write_pack(fs.cache, [((store, bucket, "packed", packed["generation"], len(other), crc), other)])
    assert fs.cat_objects([packed]) == {f"{bucket}/packed": real}
    assert cached_cat(fs, whole) == real
    assert fs.cat_file(f"{bucket}/whole") == real
    assert fs.read_ranges(f"{bucket}/whole", [(0, 14)])[0] == b"the real bytes"
    objects.flush()
    flux_server.reset_stats()  # refilled with the real bytes: served from the cache now
    assert fs.cat_objects([packed]) == {f"{bucket}/packed": real}
    assert cached_cat(fs, whole) == real
    assert reads(flux_server) == 0


def _entry(directory, timeout: float = 30.0):
    """The one whole entry's data file, once a fill (range fills complete after the read) has renamed it."""
    deadline = time.monotonic() + timeout
    while not list(directory.glob("*.data")) and time.monotonic() < deadline:
        time.sleep(0.02)
    (found,) = directory.glob("*.data")
    return found


def _flip(path, at=(10, 500, 4000, 9000)) -> None:
    with open(path, "r+b") as f:
        for i in at:
            f.seek(i)
            b = f.read(1)
            f.seek(i)
            f.write(bytes([b[0] ^ 0xFF]))


def test_bytes_changed_on_disk_are_never_served(flux_server, bucket, tmp_path, monkeypatch):
    """Four flipped bytes in a whole entry: every read path checks the entry's crc32c (on its first use in a
    process for ranged reads and `open`, on every whole read), drops it and reads storage again."""
    from fluxfs.cache import reader

    fs = make_fs(flux_server, cache_dir=str(tmp_path))
    data = bytes(range(256)) * 64
    fs.pipe(f"{bucket}/w", data)
    assert fs.cat_file(f"{bucket}/w") == data
    (entry,) = list(tmp_path.glob("*.data"))
    _flip(entry)
    assert fs.cat_file(f"{bucket}/w") == data  # in this very process: a whole read checks what it read
    _flip(next(tmp_path.glob("*.data")))
    monkeypatch.setattr(reader, "_CACHES", {})  # another process, or a restart
    fs = make_fs(flux_server, cache_dir=str(tmp_path))
    assert fs.read_ranges(f"{bucket}/w", [(0, 16), (8990, 9010)]) == [data[:16], data[8990:9010]]
    for _ in range(2):
        _flip(_entry(tmp_path))
        monkeypatch.setattr(reader, "_CACHES", {})
        fs = make_fs(flux_server, cache_dir=str(tmp_path))
        with fs.open(f"{bucket}/w", "rb") as f:
            assert f.read() == data
    monkeypatch.setattr(reader, "_CACHES", {})
    fs = make_fs(flux_server, cache_dir=str(tmp_path))
    flux_server.reset_stats()
    assert fs.read_ranges(f"{bucket}/w", [(0, 16)], generation=_info(fs, f"{bucket}/w")["generation"]) == [data[:16]]
    assert flux_server.stats()["data_reads"] == 0  # refilled with the right bytes



OTHER_UID = 54321  # another local user (the tests run as root: os.chown simulates one)


def test_a_directory_another_user_could_write_is_refused(flux_server, bucket, tmp_path):
    import os

    from fluxfs.cache import NodeCache

    fs = make_fs(flux_server)
    fs.pipe(f"{bucket}/model.bin", b"the real weights")
    info = _info(fs, f"{bucket}/model.bin")
    theirs = tmp_path / "theirs"
    theirs.mkdir(mode=0o755)
    # a planted pair: the entry's data and sidecar, with the right names, size and crc32c of other bytes
    planter = NodeCache(theirs)
    planter.get(bucket, "model.bin", info["generation"], 16, None, lambda: b"planted weights!",
                store=fs.cache_fetcher.store)
    os.chown(theirs, OTHER_UID, OTHER_UID)
    with pytest.raises(PermissionError, match=rf"cache_dir '{theirs}' is owned by uid {OTHER_UID} with mode "
                                              r"drwxr-xr-x \(0755\): another user owns it, .*chmod 700, "
                                              r"or name a new subdirectory: "
                                              r"it is made mode 0700\), or pass "
                                              r"cache_shared=True"):
        cached_cat(make_fs(flux_server, cache_dir=str(theirs)), info)
    open_to_all = tmp_path / "all"
    open_to_all.mkdir()
    os.chmod(open_to_all, 0o777)
    with pytest.raises(PermissionError, match=r"mode drwxrwxrwx \(0777\): its group or others may write it"):
        make_fs(flux_server, cache_dir=str(open_to_all)).cat_file(f"{bucket}/model.bin")
    assert not (open_to_all / "CACHEDIR.TAG").exists()  # nothing made in it
    assert make_fs(flux_server, cache_dir=str(open_to_all), cache_shared=True).cat_file(f"{bucket}/model.bin") \
        == b"the real weights"


def test_planted_links_in_a_shared_directory_are_never_followed(flux_server, bucket, tmp_path):
    import os

    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o1777)
    secret = tmp_path / "root-only"
    secret.write_bytes(b"root's own file, not to be overwritten")
    os.chmod(secret, 0o600)
    os.symlink(secret, shared / ".fluxfs-cache.usage")
    os.symlink(tmp_path / "their-db", shared / ".fluxfs-cache.index")
    fs = make_fs(flux_server, cache_dir=str(shared), cache_shared=True)
    fs.pipe({f"{bucket}/a": b"a" * 1000, f"{bucket}/b": b"b" * 1000})
    with pytest.warns(RuntimeWarning, match=r"fluxfs node-local cache .*shared.*: .*symbolic links"):
        assert fs.cat_file(f"{bucket}/a") == b"a" * 1000
    assert fs.cat_objects([_info(fs, f"{bucket}/b")]) == {f"{bucket}/b": b"b" * 1000}
    from fluxfs.cache import objects
    objects.flush()
    assert secret.read_bytes() == b"root's own file, not to be overwritten"
    assert not (tmp_path / "their-db").exists()


def test_clear_errors(flux_server, bucket, tmp_path):
    a_file = tmp_path / "file"
    a_file.write_bytes(b"not a directory")
    with pytest.raises(NotADirectoryError, match=rf"cache_dir '{a_file}' is a file, not a directory: name a "
                                                 r"directory \(it is made, mode 0700, if missing\)"):
        make_fs(flux_server, cache_dir=str(a_file))  # the filesystem's construction builds its cache
    assert a_file.read_bytes() == b"not a directory"


FILLER = textwrap.dedent("""
    import sys
    from fluxfs import FluxFileSystem
    from fluxfs.support import cached_cat
    fs = FluxFileSystem(endpoint_url=sys.argv[1], token="anon", cache_dir=sys.argv[2], skip_instance_cache=True)
    cached_cat(fs, eval(sys.argv[3]))
""")
READER = textwrap.dedent("""
    import sys
    from fluxfs import FluxFileSystem
    from fluxfs.support import cached_cat
    fs = FluxFileSystem(endpoint_url=sys.argv[1], token="anon", cache_dir=sys.argv[2], read_timeout=1,
                        skip_instance_cache=True)
    sys.stdout.buffer.write(cached_cat(fs, eval(sys.argv[3])))
""")


def test_a_reader_never_waits_without_bound_for_a_stopped_filler(flux_server, bucket, tmp_path):
    import os
    import signal
    import subprocess
    import sys

    from fluxfs.cache.entry import entry_id

    fs = make_fs(flux_server)
    data = os.urandom(2**20)
    fs.pipe(f"{bucket}/big", data)
    info = _info(fs, f"{bucket}/big")
    lock = tmp_path / f"{entry_id(bucket, 'big', info['generation'], fs.cache_fetcher.store)}.lock"
    flux_server.configure(bandwidth_mbps=2.0)  # ~4 s a download: the filler is stopped mid-fill
    filler = subprocess.Popen([sys.executable, "-c", FILLER, flux_server.url, str(tmp_path), repr(info)])
    try:
        deadline = time.monotonic() + 60
        while not (lock.exists() and lock.stat().st_size) and time.monotonic() < deadline:
            time.sleep(0.01)  # the filler marks the lock file once it fills
        os.kill(filler.pid, signal.SIGSTOP)
        flux_server.configure(profile="local")
        out = subprocess.run([sys.executable, "-c", READER, flux_server.url, str(tmp_path), repr(info)],
                             capture_output=True, timeout=45)
        assert out.returncode == 0, out.stderr[-2000:]
        assert out.stdout == data  # read from storage after 1 s without progress (was: blocked in flock)
        assert b"made no progress for 1 s; read from storage" in out.stderr
    finally:
        filler.kill()
        filler.wait()


def test_a_read_only_cache_serves_its_entries_and_reads_the_rest_from_storage(flux_server, bucket, tmp_path,
                                                                                 monkeypatch):
    """A cache baked into an image, mounted read-only: one warning, its entries served, the rest from storage."""
    import subprocess

    from fluxfs.cache import objects, reader
    from tests.conftest import mounted_tmpfs

    src, d = tmp_path / "src", tmp_path / "ro"
    d.mkdir()
    fs = make_fs(flux_server, cache_dir=str(src))
    data = bytes(range(256)) * 400
    fs.pipe({f"{bucket}/whole": data, f"{bucket}/small": b"small one", f"{bucket}/new": b"not cached"})
    small, new = _info(fs, f"{bucket}/small"), _info(fs, f"{bucket}/new")
    assert fs.cat_file(f"{bucket}/whole") == data
    assert fs.cat_objects([small]) == {f"{bucket}/small": b"small one"}
    objects.flush()
    from fluxfs.cache import index
    index.connect(str(src)).execute("PRAGMA wal_checkpoint(TRUNCATE)")  # as the last process to close it does
    with mounted_tmpfs(d, "16m"):
        subprocess.run(["cp", "-a", f"{src}/.", str(d)], check=True)
        d.chmod(0o700)
        assert subprocess.run(["mount", "-o", "remount,ro", str(d)], capture_output=True).returncode == 0
        monkeypatch.setattr(reader, "_CACHES", {})  # a process started on the image
        fs = make_fs(flux_server, cache_dir=str(d))
        flux_server.reset_stats()
        assert fs.cat_file(f"{bucket}/whole") == data
        assert fs.read_ranges(f"{bucket}/whole", [(5, 10)]) == [data[5:10]]
        with fs.open(f"{bucket}/whole", "rb") as f:
            assert f.read() == data
        assert fs.cat_objects([small]) == {f"{bucket}/small": b"small one"}
        assert flux_server.stats()["data_reads"] == 0  # every entry served from the read-only disk
        with pytest.warns(RuntimeWarning, match=r"Read-only file system; objects are read from storage without "
                                                r"caching meanwhile .*complete entries are still served"):
            assert fs.cat_file(f"{bucket}/new") == b"not cached"
            assert fs.read_ranges(f"{bucket}/new", [(0, 3)]) == [b"not"]
            assert fs.cat_objects([new]) == {f"{bucket}/new": b"not cached"}
            objects.flush()


@pytest.mark.parametrize("how", ["overwrite", "delete"])
def test_an_object_changed_during_a_fill_is_object_changed(flux_server, bucket, tmp_path, monkeypatch, how):
    import dataclasses

    from fluxfs.cache import reader
    from fluxfs.errors import ObjectChanged

    monkeypatch.setattr(reader, "FILL_PART", 4096)  # the fill reads 4 KiB parts: the change lands between two
    fs, other = make_fs(flux_server, cache_dir=str(tmp_path)), make_fs(flux_server)
    path = f"{bucket}/ckpt.bin"
    other.pipe(path, b"v1" * 8192)
    real = fs.cache_fetcher.cat_file  # what the cache reads a miss with
    calls = []

    async def change_after_the_first_part(*args, **kwargs):
        calls.append(kwargs.get("start"))
        if len(calls) == 2:  # a writer changes the object while the fill reads it
            await (other._pipe_file(path, b"v2") if how == "overwrite" else other._rm_file(path))
        return await real(*args, **kwargs)

    patched = dataclasses.replace(fs.cache_fetcher, cat_file=change_after_the_first_part)
    monkeypatch.setattr(fs, "cache_fetcher", patched)
    with pytest.raises(ObjectChanged, match=rf"{path}#\d+ changed while being read: generation \d+ no longer exists"):
        fs.open(path, "rb")
    assert not list(tmp_path.glob("*.data")) and not list(tmp_path.glob("*.part"))


def test_a_stale_listing_reads_the_same_with_and_without_the_cache(flux_server, bucket, tmp_path):
    """A listing, then objects overwritten or deleted: `cat_objects(old_infos)` and a dataset built before the
    change read the listed generations either way; one gone from storage fails alike unless the cache holds it."""
    from fluxfs.errors import ObjectChanged
    from fluxfs.pipes import FluxMapDataset

    plain, cached = make_fs(flux_server), make_fs(flux_server, cache_dir=str(tmp_path))
    plain.pipe({f"{bucket}/d/{i}": b"old %d" % i for i in range(4)})
    infos = [_info(plain, f"{bucket}/d/{i}") for i in range(4)]
    so = {"endpoint_url": flux_server.url, "token": "anon", "skip_instance_cache": True}
    datasets = [FluxMapDataset.from_prefix(f"flux://{bucket}/d/", storage_options=so),
                FluxMapDataset.from_prefix(f"flux://{bucket}/d/", storage_options={**so, "cache_dir": str(tmp_path)})]
    assert [ds[0][1] for ds in datasets] == [b"old 0", b"old 0"]  # listed now (a dataset lists on first use)
    assert cached.cat_objects(infos[:2]) == {f"{bucket}/d/{i}": b"old %d" % i for i in range(2)}  # 0, 1 cached
    from fluxfs.cache import objects
    objects.flush()
    plain.pipe(f"{bucket}/d/1", b"new 1")
    plain.pipe(f"{bucket}/d/2", b"new 2")
    plain.rm(f"{bucket}/d/3")
    want = plain.cat_objects(infos, on_error="return")
    got = cached.cat_objects(infos, on_error="return")
    assert want[f"{bucket}/d/0"] == got[f"{bucket}/d/0"] == b"old 0"
    assert got[f"{bucket}/d/1"] == b"old 1"  # the listed generation, held by the cache (storage no longer has it)
    for i in (1, 2, 3):
        assert isinstance(want[f"{bucket}/d/{i}"], ObjectChanged)  # never the live bytes
    for i in (2, 3):
        assert type(got[f"{bucket}/d/{i}"]) is type(want[f"{bucket}/d/{i}"])
        assert str(got[f"{bucket}/d/{i}"]) == str(want[f"{bucket}/d/{i}"])
    for i in (2, 3):  # the same error either way (the dataset's own: a listed object that is gone)
        errors = [_outcome_text(lambda: ds[i]) for ds in datasets]
        assert errors[0] == errors[1] and "FileNotFoundError" in errors[0] and f"{bucket}/d/{i}" in errors[0]
    assert [ds[0][1] for ds in datasets] == [b"old 0", b"old 0"]


def _outcome_text(call) -> str:
    try:
        return repr(call())
    except Exception as exc:  # compared as text
        return f"{type(exc).__name__}: {exc}"


RANGES = textwrap.dedent("""
    import os, sys, time
    from fluxfs import FluxFileSystem
    from fluxfs.cache import ranges
    ranges.PART = 64 * 1024
    url, d, go, path, gen, n = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5], int(sys.argv[6])
    fs = FluxFileSystem(endpoint_url=url, token="anon", cache_dir=d, skip_instance_cache=True)
    print("ready", flush=True)
    while not os.path.exists(go):
        time.sleep(0.005)
    step = 48 * 1024  # a shard stream's ranges, across parts
    out = b"".join(fs.read_ranges(path, [(at, min(at + step, n))], generation=gen)[0] for at in range(0, n, step))
    sys.stdout.buffer.write(out)
""")


def test_two_processes_starting_together_download_an_entry_once(flux_server, bucket, tmp_path):
    import os
    import subprocess
    import sys

    fs = make_fs(flux_server)
    data = os.urandom(1024 * 1024)
    fs.pipe(f"{bucket}/shard.tar", data)
    gen = _info(fs, f"{bucket}/shard.tar")["generation"]
    flux_server.configure(bandwidth_mbps=8.0)  # ~1 s to download: the two processes overlap
    go = tmp_path / "go"
    procs = [subprocess.Popen([sys.executable, "-c", RANGES, flux_server.url, str(tmp_path / "c"), str(go),
                               f"{bucket}/shard.tar", gen, str(len(data))], stdout=subprocess.PIPE)
             for _ in range(2)]
    for p in procs:
        assert p.stdout.readline() == b"ready\n"
    flux_server.reset_stats()
    go.touch()
    outs = [p.communicate(timeout=120)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0]
    assert outs == [data, data]
    sent = flux_server.stats()["bytes_out"]
    assert sent < 1.1 * len(data), sent / len(data)  # one download for the node (was ~2x)


HOLDER = textwrap.dedent("""
    import fcntl, sys, time
    f = open(sys.argv[1], "rb")
    fcntl.flock(f, fcntl.LOCK_EX)  # a pack's filler or evictor that stopped while holding it
    print("held", flush=True)
    time.sleep(120)
""")


def test_a_pack_held_by_a_stopped_process_is_read_from_storage(flux_server, bucket, tmp_path):
    import subprocess
    import sys

    fs = make_fs(flux_server, cache_dir=str(tmp_path), read_timeout=1)
    fs.pipe({f"{bucket}/p/{i}": b"object %d" % i for i in range(3)})
    infos = [_info(fs, f"{bucket}/p/{i}") for i in range(3)]
    want = {f"{bucket}/p/{i}": b"object %d" % i for i in range(3)}
    store = fs.cache_fetcher.store
    write_pack(fs.cache, [((store, bucket, f"p/{i}", info["generation"], info["size"], crc_value(info["crc32c"])),
                             want[f"{bucket}/p/{i}"]) for i, info in enumerate(infos)])  # a pack nobody fills now
    (pack,) = tmp_path.glob("*.pack")
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(pack)], stdout=subprocess.PIPE)
    try:
        assert holder.stdout.readline() == b"held\n"
        got = []
        reading = threading.Thread(target=lambda: got.append(fs.cat_objects(infos)), daemon=True)
        reading.start()
        reading.join(timeout=60)  # from storage after 1 s without progress (was: blocked in flock)
        assert got == [want]
    finally:
        holder.kill()
        holder.wait()
    flux_server.reset_stats()
    assert fs.cat_objects(infos) == want
    assert flux_server.stats()["data_reads"] == 0  # the pack's rows were kept: served from it again
