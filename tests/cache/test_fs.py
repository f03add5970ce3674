"""The node-local cache behind a FluxFileSystem on the embedded server: one download per node, fresh
bytes after an overwrite, `cat_file` / `open` / `cached_cat` served from disk, the options."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time

import fsspec
import pytest

from fluxfs.cache import NodeCache
from fluxfs.support import cached_cat
from tests.conftest import make_fs

READER = textwrap.dedent("""
    import os, sys, time
    from fluxfs import FluxFileSystem
    from fluxfs.support import cached_cat
    url, d, go, info = sys.argv[1], sys.argv[2], sys.argv[3], eval(sys.argv[4])
    fs = FluxFileSystem(endpoint_url=url, token="anon", cache_dir=d)
    print("ready", flush=True)
    while not os.path.exists(go):
        time.sleep(0.005)
    sys.stdout.buffer.write(cached_cat(fs, info))
""")


def reads(server) -> int:
    return server.stats()["requests"].get("read", 0)


def test_two_processes_download_an_entry_once(flux_server, bucket, tmp_path):
    data = os.urandom(2 * 2**20)
    fs = make_fs(flux_server)
    fs.pipe(f"{bucket}/shard-0.tar", data)
    info = {k: v for k, v in fs.info(f"{bucket}/shard-0.tar").items() if k in ("name", "size", "generation", "crc32c")}
    flux_server.configure(bandwidth_mbps=4.0)  # ~0.5 s per download: the two reads overlap
    go = tmp_path / "go"
    procs = [subprocess.Popen([sys.executable, "-c", READER, flux_server.url, str(tmp_path / "cache"), str(go),
                               repr(info)], stdout=subprocess.PIPE) for _ in range(2)]
    for p in procs:
        assert p.stdout.readline() == b"ready\n"
    flux_server.reset_stats()
    go.touch()
    outs = [p.communicate(timeout=60)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0]
    assert outs == [data, data]
    assert reads(flux_server) == 1  # one GET for the node


def test_cat_file_and_open_served_from_the_cache(flux_server, bucket, tmp_path):
    fs = make_fs(flux_server, cache_dir=str(tmp_path), cache_limit="1MiB")
    data = os.urandom(300_000)
    fs.pipe(f"{bucket}/a", data)
    assert fs.cat_file(f"{bucket}/a") == data
    flux_server.reset_stats()
    assert fs.cat_file(f"flux://{bucket}/a") == data
    with fs.open(f"{bucket}/a", "rb") as f:
        assert f.read() == data
    assert reads(flux_server) == 2  # a metadata GET each (the live generation), no download
    with fs.open(f"{bucket}/a", "rb", cache=False) as f:
        assert f.read() == data and type(f).__name__ == "FluxReadFile"
    assert fs.cat_file(f"{bucket}/a", cache=False) == data
    assert reads(flux_server) > 3
    assert fs.cat_file(f"{bucket}/a", start=10, end=20) == data[10:20]  # ranges: straight from storage
    assert isinstance(fs.cache, NodeCache) and fs.cache.directory == str(tmp_path)
    assert make_fs(flux_server).cache is None  # off by default


def test_an_overwritten_object_is_read_anew(flux_server, bucket, tmp_path):
    fs = make_fs(flux_server, cache_dir=str(tmp_path))
    other = make_fs(flux_server)
    path = f"{bucket}/model.bin"
    fs.pipe(path, b"version 1")
    old = fs.info(path)
    assert fs.cat_file(path) == b"version 1"
    other.pipe(path, b"version two")
    assert fs.cat_file(path) == b"version two"
    with fs.open(path, "rb") as f:
        assert f.read() == b"version two"
    new = fs.info(path)
    assert cached_cat(fs, new) == b"version two"
    assert cached_cat(fs, old) == b"version 1"  # the generation named is the one read: from its entry


def test_cached_cat_reads_without_metadata_requests(flux_server, bucket, tmp_path):
    fs = make_fs(flux_server, cache_dir=str(tmp_path))
    fs.pipe({f"{bucket}/s{i}": bytes([i]) * 1000 for i in range(3)})
    infos = fs.find(bucket, detail=True).values()
    flux_server.reset_stats()
    for _ in range(2):
        assert [cached_cat(fs, i) for i in infos] == [bytes([i]) * 1000 for i in range(3)]
    assert reads(flux_server) == 3
    assert cached_cat(make_fs(flux_server), next(iter(infos))) == b"\0" * 1000  # no cache: from storage


def test_cache_options_from_the_environment(flux_server, tmp_path, monkeypatch):
    conf: dict = {}
    fsspec.config.set_conf_env(conf, {"FSSPEC_FLUX_CACHE_DIR": str(tmp_path), "FSSPEC_FLUX_CACHE_LIMIT": "200GiB"})
    monkeypatch.setitem(fsspec.config.conf, "flux", conf["flux"])
    fs = fsspec.filesystem("flux", endpoint_url=flux_server.url, token="anon", skip_instance_cache=True)
    assert (fs.options.cache_dir, fs.options.cache_limit) == (str(tmp_path), 200 * 2**30)
    assert fs.cache.limit == 200 * 2**30


@pytest.mark.parametrize("given,message", [
    pytest.param({"cache_dir": "x", "cache_limit": "lots"}, "cache_limit must be a size in bytes", id="not-a-size"),
    pytest.param({"cache_dir": "x", "cache_limit": -1}, "cache_limit must not be negative, not -1", id="negative"),
    pytest.param({"cache_limit": "1GiB"}, "cache_limit=1073741824 needs cache_dir", id="limit-without-dir"),
    pytest.param({"cache_dir": ""}, "cache_dir must be a directory path, not ''", id="empty-dir"),
    pytest.param({"cache_dir": 5}, "cache_dir must be a directory path, not 5", id="dir-not-a-path"),
])
def test_bad_cache_options_are_refused_naming_them(flux_server, given, message):
    with pytest.raises(ValueError, match=message):
        make_fs(flux_server, **given)


def test_a_slow_fill_is_waited_for_not_repeated(flux_server, bucket, tmp_path):
    """A second reader in this process while the first fills: it waits and reads the entry."""
    import threading

    fs = make_fs(flux_server, cache_dir=str(tmp_path))
    data = os.urandom(1_000_000)
    fs.pipe(f"{bucket}/x", data)
    info = fs.info(f"{bucket}/x")
    flux_server.configure(bandwidth_mbps=4.0)
    flux_server.reset_stats()
    got = []
    threads = [threading.Thread(target=lambda: got.append(cached_cat(fs, info))) for _ in range(3)]
    t0 = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert got == [data] * 3 and reads(flux_server) == 1 and time.monotonic() - t0 < 10


def test_a_large_object_opened_through_the_cache_is_fetched_in_parts(flux_server, bucket, tmp_path, monkeypatch):
    from fluxfs.cache import reader

    monkeypatch.setattr(reader, "FILL_PART", 100_000)
    fs = make_fs(flux_server, cache_dir=str(tmp_path))
    data = os.urandom(350_000)
    fs.pipe(f"{bucket}/ckpt.pt", data)
    flux_server.reset_stats()
    with fs.open(f"{bucket}/ckpt.pt", "rb") as f:
        assert f.read() == data and f.size == len(data)
    assert reads(flux_server) == 1 + 4  # the live generation, then four parts
    with fs.open(f"{bucket}/ckpt.pt", "rb") as f:
        f.seek(349_990)
        assert f.read() == data[-10:]
    with pytest.raises(FileNotFoundError, match=f"{bucket}/missing"):
        fs.open(f"{bucket}/missing", "rb")
