"""Reads over gRPC on the embedded server's one port, with google-cloud-storage's own AsyncMultiRangeDownloader:
many ranges on one stream, whole objects, the object's metadata, NOT_FOUND and OUT_OF_RANGE, and the profile
(latency, bandwidth cap, rate limit, a stream cut mid-body that the client resumes) counted in stats()."""
from __future__ import annotations

import io
import random
import time

import google_crc32c
import pytest
from google.api_core import exceptions
from google.cloud.storage.asyncio.async_multi_range_downloader import AsyncMultiRangeDownloader

from tests.server import raw
from tests.zonal.server.grpcutil import arun, storage, stored_object

SIZE = 5 * 1024 * 1024 + 123  # more than two 2 MiB pieces, not a multiple of them


@pytest.fixture(scope="module")
def stored(srv):
    """(bucket, name, bytes) of an object uploaded over HTTP to a zonal bucket."""
    return stored_object(srv.url, "dir/blob.bin", SIZE)


async def _ranges(url, bucket, name, ranges):
    async with storage(url) as client:
        mrd = await AsyncMultiRangeDownloader.create_mrd(client, bucket, name)
        try:
            bufs = [io.BytesIO() for _ in ranges]
            await mrd.download_ranges([(off, n, buf) for (off, n), buf in zip(ranges, bufs)])
            mrd.meta = mrd.object_metadata  # gone once closed
            return mrd, [b.getvalue() for b in bufs]
        finally:
            await mrd.close()


def test_many_ranges_on_one_stream_round_trip(srv, stored):
    bucket, name, data = stored
    rng = random.Random(7)
    ranges = [(0, 0), (0, 1), (SIZE - 1, 1), (SIZE, 0), (2 * 1024 * 1024 - 5, 10), (1000, 3 * 1024 * 1024)]
    ranges += [(o, rng.randrange(1, 300_000)) for o in (rng.randrange(SIZE - 300_000) for _ in range(40))]
    srv.reset_stats()
    _, got = arun(_ranges(srv.url, bucket, name, ranges))
    for (off, n), body in zip(ranges, got):
        assert body == (data[off:] if n == 0 else data[off:off + n]), (off, n)
    st = srv.stats()
    assert st["data_reads"] == len(ranges) and st["requests"]["read"] == len(ranges)
    assert st["requests"]["metadata"] == 1  # one stream opened for all of them
    assert st["bytes_out"] == sum(map(len, got))


def test_first_response_carries_the_objects_metadata(srv, stored):
    bucket, name, data = stored
    mrd, (whole,) = arun(_ranges(srv.url, bucket, name, [(0, 0)]))
    meta = mrd.meta
    assert whole == data
    assert (mrd.persisted_size, mrd.is_finalized) == (SIZE, True)
    assert meta.size == SIZE and meta.checksums.crc32c == google_crc32c.value(data)
    assert meta.storage_class == "RAPID" and meta.name == name
    assert mrd.generation == int(raw.request(srv.url, "GET", raw.obj_path(bucket, name)).json()["generation"])
    assert mrd.read_handle is not None


def test_missing_object_is_not_found_naming_it(srv, stored):
    bucket = stored[0]
    with pytest.raises(exceptions.NotFound, match=f"{bucket}/no-such-object"):
        arun(_ranges(srv.url, bucket, "no-such-object", [(0, 0)]))


def test_missing_bucket_is_not_found_naming_it(srv):
    with pytest.raises(exceptions.NotFound, match="bucket does not exist: no-such-bucket-x"):
        arun(_ranges(srv.url, "no-such-bucket-x", "k", [(0, 0)]))


def test_offset_past_the_end_is_out_of_range_naming_it(srv, stored):
    bucket, name, _ = stored
    with pytest.raises(exceptions.OutOfRange, match=f"read offset {SIZE + 1} is past the end of {bucket}/{name} "
                                                    f"\\({SIZE} bytes\\)"):
        arun(_ranges(srv.url, bucket, name, [(SIZE + 1, 10)]))


def test_stream_cut_mid_body_resumes_at_the_right_offset(srv, stored):
    bucket, name, data = stored
    srv.configure(cut_replies=2, fail_ops="read")
    srv.reset_stats()
    ranges = [(0, 0), (1_000_001, 3_000_000)]
    _, got = arun(_ranges(srv.url, bucket, name, ranges))
    assert got == [data, data[1_000_001:4_000_001]]
    st = srv.stats()
    assert st["faults"]["read"] == 2
    # each cut range was asked again from where its bytes stopped (2 ranges + 2 resumptions): no byte sent twice
    assert st["data_reads"] == 4
    assert st["bytes_out"] == SIZE + 3_000_000


def test_latency_and_bandwidth_cap_apply_per_range(srv, stored):
    bucket, name, data = stored
    srv.configure(latency_ms=150, bandwidth_mbps=20)
    t0 = time.monotonic()
    _, got = arun(_ranges(srv.url, bucket, name, [(0, 2_000_000)]))
    took = time.monotonic() - t0
    assert got == [data[:2_000_000]]
    assert took >= 0.15 * 2 + 2_000_000 / 20e6  # first byte of the stream and of the range, then 0.1 s of body


def test_ranges_sent_together_wait_one_latency_not_one_each(srv, stored):
    bucket, name, data = stored
    srv.configure(latency_ms=200)
    ranges = [(i * 1000, 100) for i in range(10)]
    t0 = time.monotonic()
    _, got = arun(_ranges(srv.url, bucket, name, ranges))
    took = time.monotonic() - t0
    assert got == [data[o:o + n] for o, n in ranges]
    assert 0.4 <= took < 1.5  # the stream's and the batch's first byte (one range after another: 2.2 s)


def test_ranges_in_the_opening_message_wait_one_latency(srv, stored):
    """A stream opened with its range (a one-shot read) gets the metadata and the bytes one latency after it opened,
    as a GET would: not one latency for the opening and another for the range."""
    from google.cloud import _storage_v2 as v2

    bucket, name, data = stored
    srv.configure(latency_ms=1000)

    async def one_shot() -> bytes:
        async with storage(srv.url) as client:
            spec = v2.BidiReadObjectSpec(bucket=f"projects/_/buckets/{bucket}", object_=name)
            request = v2.BidiReadObjectRequest(read_object_spec=spec,
                                               read_ranges=[v2.ReadRange(read_offset=10, read_length=1000, read_id=1)])

            async def requests():
                yield request

            stream = await client.grpc_client.bidi_read_object(
                requests=requests(), metadata=(("x-goog-request-params", f"bucket=projects/_/buckets/{bucket}"),))
            out, done = b"", False
            async for resp in stream:
                for part in resp.object_data_ranges:
                    out += part.checksummed_data.content
                    done = done or part.range_end
                if done:
                    break
            stream.cancel()
            return out

    t0 = time.monotonic()
    got = arun(one_shot())
    took = time.monotonic() - t0
    assert got == data[10:1010]
    assert 1.0 <= took < 1.8  # one latency; the opening's and the range's one after the other would be 2.0 s


def test_rate_limit_answers_resource_exhausted(srv, stored):
    bucket, name, _ = stored
    srv.configure(rate_limit=1)

    async def twice():
        async with storage(srv.url) as client:
            await client.get_object(bucket, name, retry=None)
            await client.get_object(bucket, name, retry=None)

    with pytest.raises(exceptions.TooManyRequests, match="rate of requests exceeds the limit"):
        arun(twice())
    assert srv.stats()["faults"]["metadata"] >= 1


def test_required_token_and_denied_ops_apply_to_grpc(srv, stored):
    bucket, name, _ = stored

    async def get(metadata=()):
        async with storage(srv.url) as client:
            return await client.get_object(bucket, name, retry=None, metadata=metadata)

    srv.configure(require_token="s3cret")
    with pytest.raises(exceptions.Unauthenticated, match="missing or wrong bearer token"):
        arun(get())
    assert arun(get((("authorization", "Bearer s3cret"),))).size == SIZE
    srv.configure(profile="local", deny_ops="metadata")
    with pytest.raises(exceptions.PermissionDenied, match="permission for 'metadata' operations"):
        arun(get())


def test_read_object_streams_one_range_with_the_objects_metadata(srv, stored):
    bucket, name, data = stored
    from google.cloud import _storage_v2 as v2

    async def go():
        async with storage(srv.url) as client:
            stream = await client.grpc_client.read_object(request=v2.ReadObjectRequest(
                bucket=f"projects/_/buckets/{bucket}", object_=name, read_offset=100, read_limit=3_000_000))
            return [r async for r in stream]

    parts = arun(go())
    assert b"".join(p.checksummed_data.content for p in parts) == data[100:3_000_100]
    assert all(p.checksummed_data.crc32c == google_crc32c.value(p.checksummed_data.content) for p in parts)
    first = parts[0]
    assert (first.metadata.size, first.content_range.start, first.content_range.end) == (SIZE, 100, 3_000_100)
    assert first.object_checksums.crc32c == google_crc32c.value(data)
