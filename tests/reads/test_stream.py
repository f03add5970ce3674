"""Streaming batched reads (`fs.iter_cat_objects`): exact bytes in input order, a bounded read-ahead, cleanup."""
from __future__ import annotations

import asyncio
import random

import pytest

from fluxfs.reads import stream
from fluxfs.server.synthetic import synthetic_bytes
from tests.reads.conftest import temp_names
from tests.reads.test_batched import _write


@pytest.fixture
def rfs(gcs_server, quick_retry):
    from tests.conftest import make_fs

    return make_fs(gcs_server, multipart="resumable", retry=quick_retry)


def _infos(fs, bucket: str, prefix: str = "d") -> list[dict]:
    return sorted(fs.find(f"{bucket}/{prefix}", detail=True).values(), key=lambda i: i["name"])


def test_streamed_batches_hold_every_object_once_in_input_order(rfs, gcs_server, any_bucket):
    sizes = [random.Random(i).choice([0, 1, 300, 5000, 40_000]) for i in range(400)]
    data = _write(rfs, any_bucket, sizes)
    infos = _infos(rfs, any_bucket)
    random.Random(0).shuffle(infos)
    # 64 KiB of read-ahead: slices of 16 KiB, so dozens of slices and many composites.
    batches = list(rfs.iter_cat_objects(infos, buffer_bytes=64 * 1024))
    assert len(batches) > 10
    seen = [name for b in batches for name in b]
    assert seen == [i["name"] for i in infos]
    assert {k: v for b in batches for k, v in b.items()} == data
    assert temp_names(gcs_server, rfs, any_bucket) == []


def test_read_ahead_stays_within_the_budget(flux_server, fs, bucket):
    _write(fs, bucket, [100_000] * 200)
    infos = _infos(fs, bucket)
    flux_server.configure(latency_ms=20)
    flux_server.reset_stats()
    budget = 2 * 2**20
    consumed = 0
    for batch in fs.iter_cat_objects(infos, buffer_bytes=budget):
        consumed += len(batch)
        if consumed < len(infos):
            # Requested = read or being read; anything past the budget (plus one slice being
            # handed over) would be memory the caller did not allow.
            out = flux_server.stats()["bytes_out"]
            assert out - consumed * 100_000 <= budget + budget // stream.PIPELINE + 100_000
    flux_server.configure(latency_ms=0)
    assert consumed == 200
    # Each 512 KiB slice is one composite of 5 objects: reads of several slices overlapped.
    assert flux_server.stats()["peak_in_flight"]["read"] >= 2


def _generated(server, bucket: str, count: int, size: int) -> dict[str, bytes]:
    """`count` objects d/00000000... made by the server itself (quicker than uploading them), and their bytes."""
    server.generate(bucket, count, size=size, prefix="d/")
    return {f"{bucket}/{n}": synthetic_bytes(n, size) for n in server.list_names(bucket, "d/")}


def test_stream_from_a_blocking_listing_stream(fs, flux_server, bucket):
    data = _generated(flux_server, bucket, 3000, 1000)
    listing = (info for batch in fs.iter_objects(f"{bucket}/d") for info in batch)
    got = {k: v for b in fs.iter_cat_objects(listing, buffer_bytes=512 * 1024) for k, v in b.items()}
    assert got == data
    assert flux_server.list_names(bucket, "_fluxfs-tmp/") == []


def test_async_stream_accepts_async_iterables(fs, bucket):
    data = _write(fs, bucket, [10, 20, 0, 7000] * 50)

    async def go() -> dict:
        async def infos():
            async for batch in fs._iter_objects(f"{bucket}/d"):
                for info in batch:
                    yield info

        out: dict = {}
        async for b in fs._iter_cat_objects(infos(), buffer_bytes=8192):
            out.update(b)
        return out

    assert asyncio.run_coroutine_threadsafe(go(), fs.loop).result(60) == data


@pytest.mark.parametrize("on_error", ["raise", "omit", "return"])
def test_missing_object_follows_on_error(fs, flux_server, bucket, on_error):
    data = _write(fs, bucket, [500] * 300)
    infos = _infos(fs, bucket)
    gone = infos[150]["name"]
    fs.rm(gone)
    it = fs.iter_cat_objects(infos, on_error=on_error, buffer_bytes=40_000)
    if on_error == "raise":
        with pytest.raises(FileNotFoundError, match=gone):
            list(it)
    else:
        got = {k: v for b in it for k, v in b.items()}
        expected = {k: v for k, v in data.items() if k != gone}
        if on_error == "omit":
            assert got == expected
        else:
            assert isinstance(got.pop(gone), FileNotFoundError)
            assert got == expected
    assert flux_server.list_names(bucket, "_fluxfs-tmp/") == []


def test_closing_early_cancels_reads_and_deletes_temporaries(fs, flux_server, bucket):
    assert len(_generated(flux_server, bucket, 2000, 100)) == 2000
    infos = _infos(fs, bucket)
    flux_server.configure(latency_ms=50)
    it = fs.iter_cat_objects(infos, buffer_bytes=64 * 1024)
    first = next(it)
    assert len(first) > 0
    it.close()  # the slices in flight are cancelled; their composites are deleted before close returns
    assert flux_server.list_names(bucket, "_fluxfs-tmp/") == []
    reads_after_close = flux_server.stats()["requests"].get("read", 0)
    flux_server.configure(latency_ms=0)
    assert flux_server.stats()["requests"].get("read", 0) == reads_after_close


def test_bad_arguments(fs):
    with pytest.raises(ValueError, match="on_error must be 'raise', 'omit' or 'return', not 'ignore'"):
        next(fs.iter_cat_objects([], on_error="ignore"))
    with pytest.raises(ValueError, match="buffer_bytes must be positive, got 0"):
        next(fs.iter_cat_objects([], buffer_bytes=0))
    assert list(fs.iter_cat_objects([])) == []
