"""Checksums the server derives instead of re-reading bytes: composites, completed multipart
uploads and synthetic objects served as views of a shared pool."""
from __future__ import annotations

import base64
import json
import os

import google_crc32c
from hypothesis import given, settings
from hypothesis import strategies as st

from fluxfs.server import synthetic_bytes
from fluxfs.gcs.checksums import crc32c_combine
from fluxfs.server.synthetic import _POOL_SIZE, _offset, synthetic_range

from .raw import obj_path, request, upload


def _b64(data: bytes) -> str:
    return base64.b64encode(google_crc32c.value(data).to_bytes(4, "big")).decode()


@settings(max_examples=200, deadline=None)
@given(st.lists(st.binary(max_size=600), max_size=8))
def test_concat_equals_crc32c_of_the_joined_bytes(pieces):
    crc = 0
    for p in pieces:
        crc = crc32c_combine(crc, google_crc32c.value(p), len(p))
    assert crc == google_crc32c.value(b"".join(pieces))


def test_concat_over_long_pieces():
    a, b = os.urandom(3), os.urandom(5 * 2**20 + 7)
    assert crc32c_combine(google_crc32c.value(a), google_crc32c.value(b), len(b)) == google_crc32c.value(a + b)


def _wrapping_name(size: int, seed: int) -> str:
    """The name `generate` gives its first object under some prefix, such that the object's window
    runs past the pool's end (its bytes are then joined)."""
    for i in range(100_000):
        name = f"wrap{i}/00000000"
        if _offset(name, seed) + size > _POOL_SIZE:
            return name
    raise AssertionError("no wrapping name found")


def test_synthetic_ranges_agree_across_the_pool_end():
    size, seed = 200_000, 4
    name = _wrapping_name(size, seed)
    whole = synthetic_bytes(name, size, seed)
    assert len(whole) == size
    for start, end in [(0, size), (1, size - 1), (size - 5000, size), (0, 17), (123_456, 150_000)]:
        assert bytes(synthetic_range(name, size, seed, start, end)) == whole[start:end]


def test_composite_of_synthetic_uploaded_and_composite_sources(srv, bkt):
    seed = 4
    wrap = _wrapping_name(200_000, seed)
    srv.generate(bkt, 3, size=100_000, prefix="s/", seed=seed)
    srv.generate(bkt, 1, size=200_000, prefix=wrap.split("/")[0] + "/", seed=seed)
    real = os.urandom(70_001)
    assert upload(srv.url, bkt, "real", real).status == 200
    empty_ok = upload(srv.url, bkt, "empty", b"").status == 200

    def compose(dest, sources):
        body = json.dumps({"sourceObjects": [{"name": s} for s in sources]}).encode()
        r = request(srv.url, "POST", obj_path(bkt, dest) + "/compose", body, {"Content-Type": "application/json"})
        assert r.status == 200, r.body
        return r.json()

    first = ["s/00000000", "real", "empty", "s/00000002"]
    compose("c1", first)
    sources = ["c1", wrap, "s/00000001", "c1"]
    meta = compose("c2", sources)

    def body(name):
        r = request(srv.url, "GET", obj_path(bkt, name), params={"alt": "media"})
        assert r.status == 200
        return r.body

    expected_c1 = synthetic_bytes("s/00000000", 100_000, seed) + real + synthetic_bytes("s/00000002", 100_000, seed)
    expected = (expected_c1 + synthetic_bytes(wrap, 200_000, seed)
                + synthetic_bytes("s/00000001", 100_000, seed) + expected_c1)
    assert empty_ok and body("c1") == expected_c1
    got = body("c2")
    assert len(got) == int(meta["size"]) == len(expected) and got == expected
    assert meta["crc32c"] == _b64(expected)
    # A range across source boundaries, and the checksum the GET reports.
    r = request(srv.url, "GET", obj_path(bkt, "c2"), params={"alt": "media"}, headers={"Range": "bytes=99990-170010"})
    assert r.status == 206 and r.body == expected[99990:170011]
    assert f"crc32c={_b64(expected)}" in request(srv.url, "GET", obj_path(bkt, "c2"),
                                                 params={"alt": "media"}).headers["x-goog-hash"]
