"""Malformed gRPC requests to the embedded server, sent as raw streams of the client library's own message types:
each ends its RPC with the status GCS uses and a message naming what was wrong, and changes nothing."""
from __future__ import annotations

import asyncio

import grpc
import pytest
from google.cloud import _storage_v2 as v2
from google.cloud.storage_control_v2 import types as ctl
from google.longrunning import operations_pb2

from tests.server import raw
from tests.zonal.server.grpcutil import (append_spec, arun, bidi_write, endpoint, make_bucket, stream_call, write_data,
                                         write_spec)


@pytest.fixture(scope="module")
def zbkt(srv) -> str:
    return make_bucket(srv.url)


def _stream(url, method, messages, req, resp, pause=0.1):
    """Send `messages` (pausing between them) on a stream-stream RPC; (responses, (code, details) or None)."""
    async def go():
        async with grpc.aio.insecure_channel(endpoint(url)) as ch:
            call = stream_call(ch, method, req, resp)

            async def feed():
                for m in messages:
                    yield m
                    await asyncio.sleep(pause)
            out = []
            try:
                async for r in call(feed()):
                    out.append(r)
            except grpc.aio.AioRpcError as e:
                return out, (e.code(), e.details())
            return out, None
    return arun(go())


def _write(url, messages):
    return _stream(url, "BidiWriteObject", messages, v2.BidiWriteObjectRequest, v2.BidiWriteObjectResponse)


def _read(url, messages):
    return _stream(url, "BidiReadObject", messages, v2.BidiReadObjectRequest, v2.BidiReadObjectResponse)


def _size(srv, bucket, name):
    return raw.request(srv.url, "GET", raw.obj_path(bucket, name)).json()["size"]


def test_read_stream_without_a_spec_is_invalid(srv):
    _, err = _read(srv.url, [v2.BidiReadObjectRequest(read_ranges=[v2.ReadRange(read_offset=0, read_id=1)])])
    assert err == (grpc.StatusCode.INVALID_ARGUMENT, "The first BidiReadObjectRequest must carry read_object_spec.")


def test_bucket_not_named_as_the_grpc_api_names_it_is_invalid(srv, zbkt):
    spec = v2.BidiReadObjectSpec(bucket=zbkt, object_="k")
    _, err = _read(srv.url, [v2.BidiReadObjectRequest(read_object_spec=spec)])
    assert err == (grpc.StatusCode.INVALID_ARGUMENT,
                   f"Invalid bucket name {zbkt!r}: expected projects/_/buckets/BUCKET.")


def test_negative_read_length_is_invalid_naming_the_read_id(srv, zbkt):
    assert raw.upload(srv.url, zbkt, "k", b"abc").status == 200
    spec = v2.BidiReadObjectSpec(bucket=f"projects/_/buckets/{zbkt}", object_="k")
    out, err = _read(srv.url, [v2.BidiReadObjectRequest(read_object_spec=spec, read_ranges=[
        v2.ReadRange(read_offset=0, read_length=-1, read_id=77)])])
    assert len(out) == 1 and out[0].metadata.size == 3
    assert err == (grpc.StatusCode.INVALID_ARGUMENT, "read_id 77: negative read length -1.")


def test_write_offset_not_at_the_end_is_out_of_range(srv, zbkt):
    out, err = _write(srv.url, [write_spec(zbkt, "off"), write_data(0, b"abc"), write_data(5, b"xyz")])
    assert [r.persisted_size for r in out[1:]] == [3]
    assert err == (grpc.StatusCode.OUT_OF_RANGE,
                   f"write_offset 5 of {zbkt}/off is not where its data ends (3 bytes received, 3 persisted).")
    assert _size(srv, zbkt, "off") == "3"


def test_data_with_a_wrong_crc32c_is_refused_and_not_kept(srv, zbkt):
    out, err = _write(srv.url, [write_spec(zbkt, "crc"), write_data(0, b"abc", crc32c=5)])
    assert err[0] == grpc.StatusCode.FAILED_PRECONDITION
    assert err[1].startswith(f"Provided CRC32C 5 of the data at offset 0 of {zbkt}/crc doesn't match")
    assert _size(srv, zbkt, "crc") == "0"


def test_write_stream_without_a_spec_is_invalid(srv):
    _, err = _write(srv.url, [write_data(0, b"abc")])
    assert err[0] == grpc.StatusCode.INVALID_ARGUMENT
    assert err[1].startswith("The first BidiWriteObjectRequest must carry write_object_spec or append_object_spec")


def test_one_shot_write_ended_without_finish_stores_nothing(srv, zbkt):
    _, err = _write(srv.url, [write_spec(zbkt, "oneshot", appendable=False), write_data(0, b"abc")])
    assert err == (grpc.StatusCode.INVALID_ARGUMENT,
                   f"The write of {zbkt}/oneshot ended without finish_write: nothing was stored.")
    assert raw.request(srv.url, "GET", raw.obj_path(zbkt, "oneshot")).status == 404


async def _taken_over(call, bucket, name, sent):
    """(first stream, second, the second's first answer): the first opens `bucket`/`name` and writes `sent` (its
    answer read when flushed, else 0.2 s given to the server), then the second takes the object over."""
    first = call()
    await first.write(write_spec(bucket, name))
    opened = await first.read()
    await first.write(sent)
    if sent.flush:
        await first.read()
    else:
        await asyncio.sleep(0.2)
    second = call()
    await second.write(append_spec(bucket, name, opened.resource.generation))
    return first, second, await second.read()


def test_writer_taken_over_is_aborted_and_its_bytes_not_kept(srv, zbkt):
    async def go():
        async with grpc.aio.insecure_channel(endpoint(srv.url)) as ch:
            first, second, taken = await _taken_over(bidi_write(ch), zbkt, "taken", write_data(0, b"mine"))
            await first.write(write_data(4, b"late"))
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await first.read()
            await second.done_writing()
            return taken.resource.size, err.value.code(), err.value.details()

    size, code, details = arun(go())
    assert (size, code) == (4, grpc.StatusCode.ABORTED)
    assert details == f"{zbkt}/taken was taken over by another writer (append_object_spec on a newer stream)."
    assert _size(srv, zbkt, "taken") == "4"


def _unary(url, service, method, request, resp):
    async def go():
        async with grpc.aio.insecure_channel(endpoint(url)) as ch:
            call = ch.unary_unary(f"/{service}/{method}", request_serializer=type(request).serialize
                                  if hasattr(type(request), "serialize") else type(request).SerializeToString,
                                  response_deserializer=resp)
            try:
                await call(request)
            except grpc.aio.AioRpcError as e:
                return e.code(), e.details()
    return arun(go())


def test_storage_layout_name_not_ending_in_storage_layout_is_invalid(srv, zbkt):
    got = _unary(srv.url, "google.storage.control.v2.StorageControl", "GetStorageLayout",
                 ctl.GetStorageLayoutRequest(name=f"projects/_/buckets/{zbkt}"), ctl.StorageLayout.deserialize)
    assert got == (grpc.StatusCode.INVALID_ARGUMENT, f"Invalid storage layout name 'projects/_/buckets/{zbkt}': "
                                                     "expected projects/_/buckets/BUCKET/storageLayout.")


def test_unknown_operation_is_not_found(srv, zbkt):
    name = f"projects/_/buckets/{zbkt}/operations/nope"
    got = _unary(srv.url, "google.longrunning.Operations", "GetOperation",
                 operations_pb2.GetOperationRequest(name=name), operations_pb2.Operation.FromString)
    assert got == (grpc.StatusCode.NOT_FOUND, f"No such operation: {name}")


def test_unflushed_bytes_of_a_writer_taken_over_are_dropped_when_it_closes(srv, zbkt):
    async def go():
        async with grpc.aio.insecure_channel(endpoint(srv.url)) as ch:
            # taken in by the server (not persisted: no flush) before the takeover
            first, second, _ = await _taken_over(bidi_write(ch), zbkt, "dropped", write_data(0, b"unflushed", False))
            await second.write(write_data(0, b"new"))
            await second.read()
            await first.done_writing()
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await first.read()
            await second.done_writing()
            return err.value.code()

    assert arun(go()) == grpc.StatusCode.ABORTED
    assert raw.request(srv.url, "GET", raw.obj_path(zbkt, "dropped"), params={"alt": "media"}).body == b"new"
