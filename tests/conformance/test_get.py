"""objects.get: metadata, alt=media downloads, Range, generation reads, hashes."""
from __future__ import annotations

import os

import pytest

from .wire import assert_gcs_error, crc32c_b64, md5_b64, quote

DATA = os.urandom(10_000)


@pytest.fixture
def obj(wire, any_bucket):
    meta = wire.put(any_bucket, "dir/obj name +%.bin", DATA)
    return any_bucket, "dir/obj name +%.bin", meta


def test_metadata(wire, obj):
    bucket, name, put_meta = obj
    r = wire.get_meta(bucket, name)
    assert r.status == 200, r
    meta = r.json()
    assert meta["kind"] == "storage#object"
    assert meta["name"] == name and meta["bucket"] == bucket
    assert meta["size"] == str(len(DATA))
    assert meta["generation"] == put_meta["generation"]
    assert meta["metageneration"] == "1"
    assert meta["crc32c"] == crc32c_b64(DATA)
    assert meta["md5Hash"] == md5_b64(DATA)


def test_media_download_with_hash_headers(wire, obj):
    bucket, name, meta = obj
    r = wire.get_media(bucket, name)
    assert r.status == 200
    assert r.body == DATA
    assert int(r.header("content-length")) == len(DATA)
    hashes = r.header("x-goog-hash")
    assert f"crc32c={crc32c_b64(DATA)}" in hashes and f"md5={md5_b64(DATA)}" in hashes
    assert r.header("x-goog-generation") == meta["generation"]


def test_download_path_serves_media(wire, obj):
    """The mediaLink form /download/storage/v1/... serves the same bytes."""
    bucket, name, _ = obj
    r = wire.request("GET", f"/download/storage/v1/b/{bucket}/o/{quote(name)}", params={"alt": "media"})
    assert r.status == 200 and r.body == DATA


@pytest.mark.parametrize("spec,start,end", [
    ("bytes=0-0", 0, 0),
    ("bytes=100-199", 100, 199),
    ("bytes=9000-", 9000, 9999),
    ("bytes=-10", 9990, 9999),
    ("bytes=9990-20000", 9990, 9999),  # end past the object is clipped
    ("bytes=-20000", 0, 9999),  # suffix longer than the object is the whole object
])
def test_range(wire, obj, spec, start, end):
    bucket, name, _ = obj
    r = wire.get_media(bucket, name, headers={"Range": spec})
    assert r.status == 206, r
    assert r.body == DATA[start:end + 1]
    assert r.header("content-range") == f"bytes {start}-{end}/{len(DATA)}"


def test_range_unsatisfiable_is_416(wire, obj):
    bucket, name, _ = obj
    r = wire.get_media(bucket, name, headers={"Range": f"bytes={len(DATA)}-"})
    assert r.status == 416, r


def test_generation_reads(wire, any_bucket):
    g1 = wire.put(any_bucket, "gen", b"first")["generation"]
    g2 = wire.put(any_bucket, "gen", b"second")["generation"]
    assert int(g2) > int(g1)  # generations increase with each write
    assert wire.get_media(any_bucket, "gen", generation=g2).body == b"second"
    assert wire.get_meta(any_bucket, "gen", generation=g2).json()["generation"] == g2
    # Without object versioning the overwritten generation is gone.
    assert wire.get_media(any_bucket, "gen", generation=g1).status == 404
    assert_gcs_error(wire.get_meta(any_bucket, "gen", generation=g1), 404)


def test_generation_and_range_together(wire, any_bucket):
    gen = wire.put(any_bucket, "gr", b"0123456789")["generation"]
    r = wire.get_media(any_bucket, "gr", headers={"Range": "bytes=2-4"}, generation=gen)
    assert r.status == 206 and r.body == b"234", r


def test_missing_object_is_404(wire, any_bucket):
    assert_gcs_error(wire.get_meta(any_bucket, "no/such/object"), 404)
    assert wire.get_media(any_bucket, "no/such/object").status == 404


def test_unicode_and_reserved_names_round_trip(wire, any_bucket):
    names = ["é/ü ß.txt", "a?b#c&d=e", "semi;colon", "slash/", "x%2Fy"]
    for n in names:
        wire.put(any_bucket, n, n.encode())
    for n in names:
        assert wire.get_media(any_bucket, n).body == n.encode()
    items, _ = wire.list_all(any_bucket)
    assert sorted(i["name"] for i in items) == sorted(names)


def test_missing_object_media_is_json_error(fwire, bucket):
    """"HTTP status and error codes" (JSON API): errors, alt=media downloads included, use the JSON error
    shape. fake-gcs-server answers a plain-text 404 here."""
    assert_gcs_error(fwire.get_media(bucket, "nope"), 404)


def test_empty_object(wire, any_bucket):
    meta = wire.put(any_bucket, "empty", b"")
    assert meta["size"] == "0"
    assert meta["crc32c"] == crc32c_b64(b"")
    r = wire.get_media(any_bucket, "empty")
    assert r.status == 200 and r.body == b""
