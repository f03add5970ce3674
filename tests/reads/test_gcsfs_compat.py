"""The read handle as a drop-in for gcsfs's GCSFile: fsspec's caching layers and cache types on top of
flux://, `url()`, wrong-mode calls, `_fetch_range`, `generation=` and `cat_file`'s gcsfs arguments."""
from __future__ import annotations

import concurrent.futures
import io
import random
import urllib.request
from urllib.parse import quote

import fsspec
import fsspec.caching
import pytest

from tests.conftest import make_fs

DATA = random.Random(17).randbytes(300_001)
LINES = b"a,b\n11,22\n3,4"


@pytest.fixture
def rfs(flux_server):
    return make_fs(flux_server, multipart="resumable")


@pytest.fixture
def blob(rfs, bucket) -> str:
    path = f"{bucket}/dir/blob.bin"
    rfs.pipe(path, DATA)
    return path


def _check_random_access(f, data: bytes) -> None:
    """Exact bytes through seeks and partial reads, as a user checks them."""
    assert f.read(10) == data[:10]
    assert f.read(5) == data[10:15]
    f.seek(1000)
    assert f.read(4096) == data[1000:5096]
    f.seek(-7, io.SEEK_END)
    assert f.read() == data[-7:]
    assert f.read(1) == b""
    f.seek(len(data) + 5)
    assert f.read(3) == b""
    f.seek(12_345)
    f.seek(100, io.SEEK_CUR)
    assert f.tell() == 12_445
    assert f.read(70_000) == data[12_445:82_445]
    f.seek(0)
    assert f.read() == data


# -- fsspec's caching layers on flux:// (URL chaining) ----------------------------------------

@pytest.mark.parametrize("layer", ["blockcache", "simplecache", "filecache"])
def test_caching_layers_read_the_exact_bytes(flux_server, blob, tmp_path, layer):
    url = f"{layer}::flux://{blob}"
    opts = {layer: {"cache_storage": str(tmp_path)}, "flux": {"endpoint_url": flux_server.url, "token": "anon"}}
    for _ in range(2):  # the second open is served (partly or wholly) from the local cache
        with fsspec.open(url, "rb", **opts) as f:
            _check_random_access(f, DATA)
    assert any(tmp_path.iterdir()), "nothing was cached locally"


def test_blockcache_reads_cached_blocks_locally(flux_server, blob, tmp_path):
    url = f"blockcache::flux://{blob}"
    opts = {"blockcache": {"cache_storage": str(tmp_path)},
            "flux": {"endpoint_url": flux_server.url, "token": "anon", "block_size": 65_536}}
    with fsspec.open(url, "rb", **opts) as f:
        assert f.read() == DATA
    flux_server.reset_stats()
    with fsspec.open(url, "rb", **opts) as f:
        f.seek(70_000)
        assert f.read(100_000) == DATA[70_000:170_000]
    # Every block was cached locally on the first pass: reopening fetches no bytes.
    assert flux_server.stats()["requests"].get("read", 0) <= 1


def test_text_mode_through_a_caching_layer(flux_server, rfs, bucket, tmp_path):
    rfs.pipe(f"{bucket}/t.csv", LINES)
    with fsspec.open(f"blockcache::flux://{bucket}/t.csv", "rt", blockcache={"cache_storage": str(tmp_path)},
                     flux={"endpoint_url": flux_server.url, "token": "anon"}) as f:
        assert f.readlines() == ["a,b\n", "11,22\n", "3,4"]


# -- fs.open(cache_type=...) -----------------------------------------------------------------

@pytest.mark.parametrize("cache_type", ["readahead", "bytes", "blockcache", "first", "all", "none", "mmap",
                                        "background"])
def test_cache_types_are_honoured(rfs, blob, cache_type):
    with rfs.open(blob, "rb", cache_type=cache_type, block_size=16_384) as f:
        assert isinstance(f.cache, fsspec.caching.caches[cache_type])
        _check_random_access(f, DATA)


@pytest.mark.parametrize("cache_type", [None, "adaptive"])
def test_default_cache_type_is_fluxfs_prefetching(rfs, blob, cache_type):
    with rfs.open(blob, "rb", cache_type=cache_type, block_size=16_384) as f:
        assert f.cache is None
        _check_random_access(f, DATA)


def test_unknown_cache_type_names_the_known_ones(rfs, blob):
    with pytest.raises(ValueError, match="unknown cache_type 'nope'.*readahead"):
        rfs.open(blob, "rb", cache_type="nope")


def test_small_reads_through_readahead_keep_one_block(rfs, bucket):
    """gcsfs's test_read_small: 3-byte reads with block_size=10 read the whole object, one block cached."""
    data = b"".join(b"%d,%d\n" % (i, i * i) for i in range(50))
    rfs.pipe(f"{bucket}/small.csv", data)
    with rfs.open(f"{bucket}/small.csv", "rb", block_size=10, cache_type="readahead") as f:
        out = list(iter(lambda: f.read(3), b""))
        assert b"".join(out) == data
        assert len(f.cache.cache) < len(out)


@pytest.mark.parametrize("cache_type", [None, "readahead"])
def test_readline_position_and_cache(rfs, bucket, cache_type):
    """gcsfs's test_readline_from_cache: readline moves `loc` past the newline; readahead caches the object."""
    rfs.pipe(f"{bucket}/lines", LINES)
    with rfs.open(f"{bucket}/lines", "rb", cache_type=cache_type) as f:
        for line, loc in [(b"a,b\n", 4), (b"11,22\n", 10), (b"3,4", 13)]:
            assert f.readline() == line
            assert f.loc == f.tell() == loc
            if cache_type:
                assert f.cache.cache == LINES
        assert f.readline() == b""


def test_readline_reads_more_than_a_byte_at_a_time(flux_server, rfs, bucket):
    data = b"".join(b"line %d\n" % i for i in range(20_000))
    rfs.pipe(f"{bucket}/many", data)
    with rfs.open(f"{bucket}/many", "rb", block_size=65_536) as f:
        assert f.readlines() == data.splitlines(keepends=True)


# -- url(), wrong-mode calls, closed handles ---------------------------------------------------

def test_url_points_at_the_bytes(rfs, bucket):
    path = f"{bucket}/nested/file 1"
    rfs.pipe(path, b"hello")
    with rfs.open(path) as f:
        url = f.url()
        assert url.startswith("http") and quote("nested/file 1", safe="") in url
        assert f"generation={f.generation}" in url
    with urllib.request.urlopen(url) as resp:
        assert resp.read() == b"hello"


def test_write_on_a_read_handle_is_unsupported(rfs, blob):
    with rfs.open(blob, "rb") as f:
        assert not f.writable()
        with pytest.raises(io.UnsupportedOperation):
            f.write(b"x")
        with pytest.raises(io.UnsupportedOperation):
            f.writelines([b"x"])
        with pytest.raises(io.UnsupportedOperation):
            f.truncate(0)
        f.flush(force=True)  # fsspec's signature: nothing to flush
        assert f.read(3) == DATA[:3]


def test_opening_what_cannot_be_read_raises_os_errors(rfs, bucket):
    """gcsfs's test_errors, read side: a missing object or a bare bucket cannot be opened for reading."""
    with pytest.raises(FileNotFoundError):
        rfs.open(f"{bucket}/tmp/test/shfoshf", "rb")
    for cache_type in (None, "readahead"):
        with pytest.raises(OSError):
            rfs.open(bucket, "rb", cache_type=cache_type)


@pytest.mark.parametrize("cache_type", [None, "readahead"])
def test_calls_on_a_closed_read_handle_raise_value_error(rfs, blob, cache_type):
    f = rfs.open(blob, "rb", cache_type=cache_type)
    f.close()
    assert f.closed
    for call in (lambda: f.read(), lambda: f.read(1), lambda: f.readinto(bytearray(2)), f.readline,
                 lambda: f.seek(0), f.tell, lambda: f.write(b"x"), f.peek, f.flush, lambda: next(iter(f))):
        with pytest.raises(ValueError):
            call()
    f.close()  # closing twice is fine


# -- _fetch_range (fsspec's fetcher), generation=, cat_file ---------------------------------------

def test_fetch_range_from_many_threads(rfs, bucket):
    data = random.Random(5).randbytes(15 * 2**20)
    rfs.pipe(f"{bucket}/mt", data)
    chunk = 3 * 2**20
    with rfs.open(f"{bucket}/mt", "rb", block_size=2 * 2**20) as f:
        with concurrent.futures.ThreadPoolExecutor(5) as pool:
            parts = list(pool.map(lambda i: f._fetch_range(i * chunk, (i + 1) * chunk), range(5)))
    assert b"".join(parts) == data


def test_fetch_range_past_the_end_is_empty(rfs, bucket):
    rfs.pipe(f"{bucket}/five", b"12345")
    with rfs.open(f"{bucket}/five", "rb") as f:
        assert f._fetch_range(100, 200) == b""
        assert f._fetch_range(3, 200) == b"45"
        assert f._fetch_range(None, None) == b"12345"


def test_open_with_generation_reads_that_generation(rfs, bucket):
    path = f"{bucket}/g"
    rfs.pipe(path, b"one")
    gen = rfs.info(path)["generation"]
    with rfs.open(path, "rb", generation=gen) as f:
        assert f.generation == gen and f.read() == b"one"
    with pytest.raises(FileNotFoundError):
        rfs.open(path, "rb", generation=str(int(gen) + 1))


def test_cat_file_takes_gcsfs_arguments(rfs, bucket):
    """gcsfs's test_cat_file_routing_and_thresholds, without its internals: `concurrency=` and ranges."""
    data = b"0123456789abcdefghijk"
    rfs.pipe(f"{bucket}/r.txt", data)
    for start, end, concurrency in [(0, 1024, 1), (0, 4, 4), (0, len(data), 4), (5, None, 2), (None, 7, 8)]:
        assert rfs.cat_file(f"{bucket}/r.txt", start=start, end=end, concurrency=concurrency) == data[start:end]
