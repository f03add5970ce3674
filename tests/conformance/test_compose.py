"""objects.compose: concatenation, limits, checksums, componentCount, missing sources."""
from __future__ import annotations

import os

from .wire import assert_gcs_error, crc32c_b64, md5_b64


def test_compose_concatenates(wire, any_bucket):
    parts = [os.urandom(n) for n in (1, 1000, 0, 4096)]
    for i, p in enumerate(parts):
        wire.put(any_bucket, f"src/{i}", p)
    r = wire.compose(any_bucket, "out", [f"src/{i}" for i in range(len(parts))])
    assert r.status == 200, r
    whole = b"".join(parts)
    meta = r.json()
    assert meta["name"] == "out" and meta["size"] == str(len(whole))
    assert meta["crc32c"] == crc32c_b64(whole)  # combined crc32c equals the crc32c of the bytes
    assert wire.get_media(any_bucket, "out").body == whole


def test_compose_same_source_repeated_and_onto_itself(wire, any_bucket):
    wire.put(any_bucket, "a", b"ab")
    assert wire.compose(any_bucket, "a", ["a", "a", "a"]).status == 200
    assert wire.get_media(any_bucket, "a").body == b"ababab"


def test_compose_32_ok_33_rejected(wire, any_bucket):
    wire.put(any_bucket, "p", b"x")
    r = wire.compose(any_bucket, "ok", ["p"] * 32)
    assert r.status == 200, r
    assert wire.get_media(any_bucket, "ok").body == b"x" * 32
    assert_gcs_error(wire.compose(any_bucket, "too-many", ["p"] * 33), 400)
    assert wire.get_meta(any_bucket, "too-many").status == 404


def test_compose_keeps_sources(wire, any_bucket):
    wire.put(any_bucket, "a", b"1")
    wire.put(any_bucket, "b", b"2")
    assert wire.compose(any_bucket, "ab", ["a", "b"]).status == 200
    assert wire.get_media(any_bucket, "a").body == b"1"
    assert wire.get_media(any_bucket, "b").body == b"2"


def test_compose_destination_content_type(wire, any_bucket):
    wire.put(any_bucket, "a", b"1")
    r = wire.compose(any_bucket, "out", ["a"], destination={"contentType": "text/plain"})
    assert r.status == 200 and r.json()["contentType"] == "text/plain", r


# -- fluxfs server only -------------------------------------------------------------------


def test_component_count_and_no_md5(fwire, bucket):
    """JSON API objects: componentCount is set on composite objects (sum over sources; 1 for a plain object),
    and composite objects have a crc32c but no md5Hash. fake-gcs-server sets neither rule."""
    for n in "abc":
        fwire.put(bucket, n, n.encode() * 10)
    first = fwire.compose(bucket, "ab", ["a", "b"]).json()
    assert first["componentCount"] == 2
    assert "md5Hash" not in first
    second = fwire.compose(bucket, "abc", ["ab", "c"]).json()
    assert second["componentCount"] == 3
    meta = fwire.get_meta(bucket, "abc").json()
    assert meta["componentCount"] == 3 and "md5Hash" not in meta
    assert meta["crc32c"] == crc32c_b64(b"a" * 10 + b"b" * 10 + b"c" * 10)
    r = fwire.get_media(bucket, "abc")
    assert "md5=" not in r.header("x-goog-hash", "") and "crc32c=" in r.header("x-goog-hash", "")
    plain = fwire.get_meta(bucket, "a").json()
    assert plain.get("componentCount", 1) == 1 and plain["md5Hash"] == md5_b64(b"a" * 10)


def test_missing_source_is_404(fwire, bucket):
    """JSON API objects: compose with a source that does not exist is 404 (fake-gcs-server: 500)."""
    fwire.put(bucket, "a", b"1")
    assert_gcs_error(fwire.compose(bucket, "out", ["a", "missing"]), 404)
    assert fwire.get_meta(bucket, "out").status == 404


def test_source_generation_pins_version(fwire, bucket):
    """sourceObjects[].generation selects the version; a generation that is not live fails, nothing written.

    GCS documents the field but not the status for a non-live generation: 404 (version not found) and
    412 are both accepted here.
    """
    old = fwire.put(bucket, "a", b"old")["generation"]
    new = fwire.put(bucket, "a", b"new")["generation"]
    r = fwire.compose(bucket, "out", [{"name": "a", "generation": new}])
    assert r.status == 200 and fwire.get_media(bucket, "out").body == b"new"
    r = fwire.compose(bucket, "out2", [{"name": "a", "generation": old}])
    assert r.status in (404, 412), r
    assert_gcs_error(r, r.status)
    assert fwire.get_meta(bucket, "out2").status == 404


def test_zero_sources_is_400(fwire, bucket):
    """"JSON API objects: compose": sourceObjects needs 1..32 entries (fake-gcs-server composes an empty object)."""
    assert_gcs_error(fwire.compose(bucket, "out", []), 400)
