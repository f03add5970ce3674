"""Appendable objects over gRPC (google-cloud-storage's own AsyncAppendableObjectWriter): visible at their persisted
size before they are finalized (JSON, media and gRPC reads), a normal object after; taken over by generation;
refused appends leave the object as it was."""
from __future__ import annotations

import io
import os

import google_crc32c
import pytest
from google.api_core import exceptions
from google.cloud.storage.asyncio.async_appendable_object_writer import AsyncAppendableObjectWriter
from google.cloud.storage.asyncio.async_multi_range_downloader import AsyncMultiRangeDownloader

from fluxfs.zonal.grpc_pool import finalized_crc
from tests.server import raw
from tests.zonal.server.grpcutil import arun, make_bucket, storage


@pytest.fixture(scope="module")
def zbkt(srv) -> str:
    return make_bucket(srv.url)


def _json(srv, bucket, name):
    r = raw.request(srv.url, "GET", raw.obj_path(bucket, name))
    assert r.status == 200, r
    return r.json()


def _media(srv, bucket, name) -> bytes:
    r = raw.request(srv.url, "GET", raw.obj_path(bucket, name), params={"alt": "media"})
    assert r.status == 200, r
    return r.body


async def _read_all(client, bucket, name):
    mrd = await AsyncMultiRangeDownloader.create_mrd(client, bucket, name)
    try:
        buf = io.BytesIO()
        await mrd.download_ranges([(0, 0, buf)])
        return buf.getvalue(), mrd.persisted_size, finalized_crc(mrd)[0]  # not mrd.is_finalized: False at :00
    finally:
        await mrd.close()


async def _appended(client, bucket, name, data):
    """A new appendable object `bucket`/`name` holding `data`: its writer, still open."""
    w = AsyncAppendableObjectWriter(client, bucket, name)
    await w.open()
    await w.append(data)
    return w


def test_appended_bytes_are_readable_before_finalize_then_a_normal_object(srv, zbkt):
    first, second = os.urandom(3 * 1024 * 1024 + 7), os.urandom(1000)
    seen = {}

    async def go():
        async with storage(srv.url) as client:
            w = AsyncAppendableObjectWriter(client, zbkt, "log/app.bin")
            await w.open()
            seen["empty"] = _json(srv, zbkt, "log/app.bin")["size"]
            await w.append(first)
            seen["flushed"] = await w.flush()
            seen["json"] = _json(srv, zbkt, "log/app.bin")
            seen["media"] = _media(srv, zbkt, "log/app.bin")
            seen["grpc"] = await _read_all(client, zbkt, "log/app.bin")
            await w.append(second)
            final = await w.close(finalize_on_close=True, full_object_checksum=google_crc32c.value(first + second))
            seen["final"] = (final.size, bool(final.finalize_time), final.generation, w.generation)
            seen["grpc_after"] = await _read_all(client, zbkt, "log/app.bin")

    arun(go())
    assert seen["empty"] == "0"
    assert seen["flushed"] == len(first)
    assert seen["json"]["size"] == str(len(first))
    assert seen["media"] == first
    assert seen["grpc"] == (first, len(first), False)
    size, finalized, gen, writer_gen = seen["final"]
    assert (size, finalized, gen) == (len(first) + len(second), True, writer_gen)
    assert seen["grpc_after"] == (first + second, size, True)
    res = _json(srv, zbkt, "log/app.bin")
    assert res["size"] == str(size) and res["generation"] == str(gen)
    assert _media(srv, zbkt, "log/app.bin") == first + second
    assert res["crc32c"] == raw.request(srv.url, "GET", raw.obj_path(zbkt, "log/app.bin"),
                                        params={"fields": "crc32c"}).json()["crc32c"]


def test_unfinalized_object_is_taken_over_by_generation(srv, zbkt):
    out = {}

    async def go():
        async with storage(srv.url) as client:
            w = await _appended(client, zbkt, "take", b"hello ")
            await w.close()  # not finalized: appendable later; what was sent is kept
            out["closed"] = _json(srv, zbkt, "take")["size"]
            w2 = AsyncAppendableObjectWriter(client, zbkt, "take", generation=w.generation,
                                             write_handle=w.write_handle)
            await w2.open()
            out["resumed_at"] = w2.persisted_size
            await w2.append(b"world")
            obj = await w2.close(finalize_on_close=True)
            out["final"] = (obj.size, obj.generation == w.generation)

    arun(go())
    assert out == {"closed": "6", "resumed_at": 6, "final": (11, True)}
    assert _media(srv, zbkt, "take") == b"hello world"


def _open(srv, bucket, name, generation):
    async def go():
        async with storage(srv.url) as client:
            w = AsyncAppendableObjectWriter(client, bucket, name, generation=generation)
            await w.open(retry_policy=None)
    arun(go())


def test_appending_to_a_finalized_object_is_refused_naming_it(srv, zbkt):
    assert raw.upload(srv.url, zbkt, "done", b"final bytes").status == 200
    gen = int(_json(srv, zbkt, "done")["generation"])
    with pytest.raises(exceptions.FailedPrecondition, match=f"{zbkt}/done generation {gen} is finalized"):
        _open(srv, zbkt, "done", gen)
    assert _media(srv, zbkt, "done") == b"final bytes"


def test_taking_over_a_generation_that_is_not_live_is_not_found(srv, zbkt):
    assert raw.upload(srv.url, zbkt, "old", b"x").status == 200
    gen = int(_json(srv, zbkt, "old")["generation"])
    with pytest.raises(exceptions.NotFound, match=f"No live generation {gen + 1} of {zbkt}/old"):
        _open(srv, zbkt, "old", gen + 1)
    assert _media(srv, zbkt, "old") == b"x"


def test_if_generation_match_zero_on_an_existing_object_is_refused(srv, zbkt):
    assert raw.upload(srv.url, zbkt, "exists", b"keep me").status == 200
    with pytest.raises(exceptions.FailedPrecondition, match="ifGenerationMatch=0: object already exists"):
        _open(srv, zbkt, "exists", 0)
    assert _media(srv, zbkt, "exists") == b"keep me"


def test_wrong_full_object_checksum_keeps_the_object_appendable(srv, zbkt):
    out = {}

    async def go():
        async with storage(srv.url) as client:
            w = await _appended(client, zbkt, "crc", b"abc")
            with pytest.raises(exceptions.InvalidArgument, match=f"CRC32C 123 of {zbkt}/crc doesn't match"):
                await w.close(finalize_on_close=True, full_object_checksum=123)
            out["after"] = await _read_all(client, zbkt, "crc")

    arun(go())
    assert out["after"] == (b"abc", 3, False)
