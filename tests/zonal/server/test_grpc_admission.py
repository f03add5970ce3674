"""The profile reaches gRPC through the same admission path as HTTP: the link every answer shares (`link_mbps`) paces
gRPC reads and is shared with HTTP answers, uploads share the inbound link, a lost answer (`lose_replies`) is a
stream cut after the server carried the request out, and the read-only token refuses gRPC writes."""
from __future__ import annotations

import asyncio
import time

import grpc
import pytest
from google.cloud import _storage_v2 as v2

from tests.server import raw
from tests.zonal.server.grpcutil import (arun, bidi_write, endpoint, make_bucket, storage, stored_object, write_data,
                                         write_spec)

SIZE = 2_000_000


@pytest.fixture(scope="module")
def stored(srv):
    return stored_object(srv.url, "blob", SIZE)


async def _read_object(url: str, bucket: str, name: str, metadata=()) -> bytes:
    async with storage(url) as client:
        stream = await client.grpc_client.read_object(request=v2.ReadObjectRequest(
            bucket=f"projects/_/buckets/{bucket}", object_=name), metadata=metadata)
        return b"".join([r.checksummed_data.content async for r in stream])


def test_grpc_read_is_paced_by_the_shared_link(srv, stored):
    bucket, name, data = stored
    srv.configure(link_mbps=8)  # 2 MB through an 8 MB/s link: at least 0.25 s, whatever the machine
    t0 = time.monotonic()
    assert arun(_read_object(srv.url, bucket, name)) == data
    assert time.monotonic() - t0 >= 0.95 * SIZE / 8e6

    async def both():  # a gRPC read and an HTTP GET at once: the one link carries 4 MB
        http = asyncio.get_running_loop().run_in_executor(None, lambda: raw.request(
            srv.url, "GET", raw.obj_path(bucket, name), params={"alt": "media"}).body)
        return await asyncio.gather(_read_object(srv.url, bucket, name), http)

    t0 = time.monotonic()
    assert arun(both()) == [data, data]
    assert time.monotonic() - t0 >= 0.95 * 2 * SIZE / 8e6


async def _one_shot(url: str, bucket: str, name: str, content: bytes, metadata=()):
    """A one-shot BidiWriteObject of `content`: (answers, (code, details) or None)."""
    async with grpc.aio.insecure_channel(endpoint(url)) as ch:
        async def messages():
            yield write_spec(bucket, name, appendable=False)
            yield write_data(0, content, flush=False)
            yield v2.BidiWriteObjectRequest(write_offset=len(content), finish_write=True)
        out = []
        try:
            async for r in bidi_write(ch)(messages(), metadata=metadata):
                out.append(r)
        except grpc.aio.AioRpcError as e:
            return out, (e.code(), e.details())
        return out, None


async def _opened(url: str, bucket: str, name: str, metadata=()):
    """(code, details) of a write stream that only opens `bucket`/`name` (the client writes nothing after a refusal
    it has not read yet: grpc's client may report a write racing the server's status as INTERNAL)."""
    async with grpc.aio.insecure_channel(endpoint(url)) as ch:
        call = bidi_write(ch)(metadata=metadata)
        await call.write(write_spec(bucket, name, appendable=False))
        await call.done_writing()
        return await call.code(), await call.details()


def test_grpc_upload_is_paced_by_the_inbound_link(srv):
    bucket = make_bucket(srv.url)
    srv.configure(link_mbps=4)  # 1 MB in at 4 MB/s: at least 0.25 s
    t0 = time.monotonic()
    out, err = arun(_one_shot(srv.url, bucket, "up", bytes(1_000_000)))
    assert err is None and out[0].resource.size == 1_000_000
    assert time.monotonic() - t0 >= 0.95 * 1_000_000 / 4e6


def test_lost_answer_of_a_grpc_write_is_a_cut_stream_after_the_object_is_written(srv):
    bucket = make_bucket(srv.url)
    srv.configure(lose_replies=1, fail_ops="write")
    out, err = arun(_one_shot(srv.url, bucket, "lost", b"carried out"))
    assert out == [] and err[0] == grpc.StatusCode.UNAVAILABLE and "cut before its answer" in err[1]
    got = raw.request(srv.url, "GET", raw.obj_path(bucket, "lost"), params={"alt": "media"})
    assert got.status == 200 and got.body == b"carried out"
    assert srv.stats()["faults"]["write"] == 1 and srv.configure()["lose_replies"] == 0
    out, err = arun(_one_shot(srv.url, bucket, "lost", b"answered"))  # the next one is answered
    assert err is None and out[0].resource.size == len(b"answered")


def test_lost_answer_of_an_appendable_finish_is_a_cut_stream_after_it_is_finalized(srv):
    bucket = make_bucket(srv.url)
    srv.configure(lose_replies=1, fail_ops="write")  # the stream opened next loses its final answer

    async def write():
        async with grpc.aio.insecure_channel(endpoint(srv.url)) as ch:
            call = bidi_write(ch)()
            await call.write(write_spec(bucket, "app"))
            opened = await call.read()  # a stream's answers before its end still come
            await call.write(write_data(0, b"appended"))
            assert (await call.read()).persisted_size == 8
            await call.write(v2.BidiWriteObjectRequest(write_offset=8, finish_write=True))
            await call.done_writing()
            with pytest.raises(grpc.aio.AioRpcError) as cut:
                await call.read()
            # Finalized all the same: taking the generation over is refused.
            again = bidi_write(ch)()
            await again.write(v2.BidiWriteObjectRequest(append_object_spec=v2.AppendObjectSpec(
                bucket=f"projects/_/buckets/{bucket}", object_="app", generation=opened.resource.generation)))
            await again.done_writing()
            return cut.value, await again.code(), await again.details()

    cut, code, details = arun(write())
    assert cut.code() == grpc.StatusCode.UNAVAILABLE and "cut before its answer" in cut.details()
    assert code == grpc.StatusCode.FAILED_PRECONDITION and "is finalized" in details
    got = raw.request(srv.url, "GET", raw.obj_path(bucket, "app"), params={"alt": "media"})
    assert got.body == b"appended"


def test_lost_answer_of_grpc_reads_and_deletes(srv, stored):
    bucket, name, data = stored
    srv.configure(lose_replies=1, fail_ops="read")
    with pytest.raises(Exception, match="cut before its answer"):
        arun(_read_object(srv.url, bucket, name))
    assert arun(_read_object(srv.url, bucket, name)) == data
    assert raw.upload(srv.url, bucket, "gone", b"x").status == 200
    srv.configure(lose_replies=1, fail_ops="delete")

    async def delete():
        async with storage(srv.url) as client:
            await client.grpc_client.delete_object(request=v2.DeleteObjectRequest(
                bucket=f"projects/_/buckets/{bucket}", object_="gone"), retry=None)

    with pytest.raises(Exception, match="cut before its answer"):
        arun(delete())
    assert raw.request(srv.url, "GET", raw.obj_path(bucket, "gone")).status == 404  # carried out all the same


def test_read_only_token_reads_over_grpc_and_is_refused_writes(srv, stored):
    bucket, name, data = stored
    srv.configure(require_token="writer", read_only_token="viewer")
    viewer = (("authorization", "Bearer viewer"),)
    assert arun(_read_object(srv.url, bucket, name, viewer)) == data
    err = arun(_opened(srv.url, bucket, "ro", viewer))
    assert err[0] == grpc.StatusCode.PERMISSION_DENIED
    assert "does not have storage.objects.create access to the Google Cloud Storage object" in err[1]
    assert raw.request(srv.url, "GET", raw.obj_path(bucket, "ro"), headers={"Authorization": "Bearer writer"}).status \
        == 404
    out, err = arun(_one_shot(srv.url, bucket, "ro", b"yes", (("authorization", "Bearer writer"),)))
    assert err is None
