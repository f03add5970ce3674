"""The XML API: object GET/HEAD/PUT/DELETE and XML multipart uploads (fluxfs server only;
fake-gcs-server implements neither). GCS docs: "XML API multipart uploads", "XML API: PUT Object"."""
from __future__ import annotations

import hashlib
import os
import xml.etree.ElementTree as ET

import pytest

from .wire import Reply, Wire, crc32c_b64, quote

MIB = 1024 * 1024
PART = 5 * MIB  # every part but the last must be at least 5 MiB


def xml(reply: Reply) -> ET.Element:
    """Parse an XML body with namespaces stripped, so tests can use bare tag names."""
    root = ET.fromstring(reply.body)
    for el in root.iter():
        el.tag = el.tag.rsplit("}", 1)[-1]
    return root


def xml_error_code(reply: Reply) -> str:
    root = xml(reply)
    assert root.tag == "Error", reply
    return root.findtext("Code")


def path(bucket: str, key: str) -> str:
    return f"/{bucket}/{quote(key).replace('%2F', '/')}"


def test_put_get_head_delete(fwire, bucket):
    data = os.urandom(4000)
    r = fwire.request("PUT", path(bucket, "x/obj"), body=data, headers={"Content-Type": "application/x-test"})
    assert r.status == 200, r
    assert r.header("etag") == f'"{hashlib.md5(data).hexdigest()}"'  # XML ETag: quoted hex MD5
    gen = r.header("x-goog-generation")
    assert gen and int(gen) > 0
    got = fwire.request("GET", path(bucket, "x/obj"))
    assert got.status == 200 and got.body == data
    assert f"crc32c={crc32c_b64(data)}" in got.header("x-goog-hash")
    assert got.header("x-goog-generation") == gen
    head = fwire.request("HEAD", path(bucket, "x/obj"))
    assert head.status == 200 and head.body == b""
    assert int(head.header("content-length")) == len(data)
    assert head.header("content-type") == "application/x-test"
    # The JSON API sees the same object.
    assert fwire.get_meta(bucket, "x/obj").json()["generation"] == gen
    assert fwire.request("DELETE", path(bucket, "x/obj")).status == 204
    missing = fwire.request("GET", path(bucket, "x/obj"))
    assert missing.status == 404 and xml_error_code(missing) == "NoSuchKey"


def test_get_range(fwire, bucket):
    data = os.urandom(1000)
    fwire.put(bucket, "r", data)
    r = fwire.request("GET", path(bucket, "r"), headers={"Range": "bytes=10-19"})
    assert r.status == 206 and r.body == data[10:20]
    assert r.header("content-range") == "bytes 10-19/1000"
    r = fwire.request("GET", path(bucket, "r"), headers={"Range": "bytes=-5"})
    assert r.status == 206 and r.body == data[-5:]
    assert fwire.request("GET", path(bucket, "r"), headers={"Range": "bytes=1000-"}).status == 416


def test_put_hash_mismatch_is_400_and_nothing_stored(fwire, bucket):
    r = fwire.request("PUT", path(bucket, "h"), body=b"data", headers={"x-goog-hash": f"crc32c={crc32c_b64(b'x')}"})
    assert r.status == 400, r
    assert fwire.get_meta(bucket, "h").status == 404


def test_put_if_generation_match_zero(fwire, bucket):
    hdr = {"x-goog-if-generation-match": "0"}
    assert fwire.request("PUT", path(bucket, "once"), body=b"1", headers=hdr).status == 200
    r = fwire.request("PUT", path(bucket, "once"), body=b"2", headers=hdr)
    assert r.status == 412 and xml_error_code(r) == "PreconditionFailed"
    assert fwire.get_media(bucket, "once").body == b"1"


def test_get_missing_bucket(fwire):
    r = fwire.request("GET", "/no-such-bucket-xyz/key")
    assert r.status == 404 and xml_error_code(r) == "NoSuchBucket"


# -- XML multipart upload -----------------------------------------------------------------


def initiate(w: Wire, bucket: str, key: str) -> str:
    r = w.request("POST", path(bucket, key) + "?uploads", headers={"Content-Type": "application/octet-stream"})
    assert r.status == 200, r
    root = xml(r)
    assert root.tag == "InitiateMultipartUploadResult"
    assert root.findtext("Bucket") == bucket and root.findtext("Key") == key
    upload_id = root.findtext("UploadId")
    assert upload_id
    return upload_id


def put_part(w: Wire, bucket: str, key: str, upload_id: str, number: int, data: bytes) -> str:
    r = w.request("PUT", path(bucket, key), params={"partNumber": number, "uploadId": upload_id}, body=data)
    assert r.status == 200, r
    etag = r.header("etag")
    assert etag
    return etag


def complete(w: Wire, bucket: str, key: str, upload_id: str, parts: list[tuple[int, str]]) -> Reply:
    body = "<CompleteMultipartUpload>" + "".join(
        f"<Part><PartNumber>{n}</PartNumber><ETag>{e}</ETag></Part>" for n, e in parts
    ) + "</CompleteMultipartUpload>"
    return w.request("POST", path(bucket, key), params={"uploadId": upload_id}, body=body.encode(),
                     headers={"Content-Type": "application/xml"})


@pytest.fixture(scope="module")
def big_parts():
    return [os.urandom(PART), os.urandom(PART), os.urandom(12345)]


def test_multipart_upload_round_trip(fwire, bucket, big_parts):
    key = "mpu/big.bin"
    uid = initiate(fwire, bucket, key)
    # Parts may arrive in any order; the object is their concatenation by part number.
    etags = {n: put_part(fwire, bucket, key, uid, n, big_parts[n - 1]) for n in (3, 1, 2)}
    listed = fwire.request("GET", path(bucket, key), params={"uploadId": uid})
    assert listed.status == 200, listed
    root = xml(listed)
    assert root.tag == "ListPartsResult"
    parts = [(int(p.findtext("PartNumber")), int(p.findtext("Size"))) for p in root.iter("Part")]
    assert parts == [(1, PART), (2, PART), (3, 12345)]
    assert fwire.get_meta(bucket, key).status == 404  # nothing visible before completion
    r = complete(fwire, bucket, key, uid, sorted(etags.items()))
    assert r.status == 200, r
    assert xml(r).tag == "CompleteMultipartUploadResult"
    whole = b"".join(big_parts)
    meta = fwire.get_meta(bucket, key).json()
    assert meta["size"] == str(len(whole)) and meta["crc32c"] == crc32c_b64(whole)
    assert fwire.get_media(bucket, key).body == whole
    # The upload is gone once completed.
    assert fwire.request("GET", path(bucket, key), params={"uploadId": uid}).status == 404


def test_single_small_part(fwire, bucket):
    """The last (here the only) part may be smaller than 5 MiB."""
    uid = initiate(fwire, bucket, "one")
    etag = put_part(fwire, bucket, "one", uid, 1, b"tiny")
    assert complete(fwire, bucket, "one", uid, [(1, etag)]).status == 200
    assert fwire.get_media(bucket, "one").body == b"tiny"


def test_part_reupload_replaces(fwire, bucket):
    uid = initiate(fwire, bucket, "re")
    put_part(fwire, bucket, "re", uid, 1, b"first")
    etag = put_part(fwire, bucket, "re", uid, 1, b"second")
    assert complete(fwire, bucket, "re", uid, [(1, etag)]).status == 200
    assert fwire.get_media(bucket, "re").body == b"second"


def test_abort(fwire, bucket):
    uid = initiate(fwire, bucket, "ab")
    put_part(fwire, bucket, "ab", uid, 1, b"data")
    r = fwire.request("DELETE", path(bucket, "ab"), params={"uploadId": uid})
    assert r.status == 204, r
    r = fwire.request("GET", path(bucket, "ab"), params={"uploadId": uid})
    assert r.status == 404 and xml_error_code(r) == "NoSuchUpload"
    assert fwire.get_meta(bucket, "ab").status == 404


def test_small_non_last_part_is_entity_too_small(fwire, bucket):
    uid = initiate(fwire, bucket, "small")
    e1 = put_part(fwire, bucket, "small", uid, 1, b"a" * 1000)
    e2 = put_part(fwire, bucket, "small", uid, 2, b"b")
    r = complete(fwire, bucket, "small", uid, [(1, e1), (2, e2)])
    assert r.status == 400 and xml_error_code(r) == "EntityTooSmall", r
    assert fwire.get_meta(bucket, "small").status == 404


def test_wrong_etag_is_invalid_part(fwire, bucket):
    uid = initiate(fwire, bucket, "bad")
    put_part(fwire, bucket, "bad", uid, 1, b"data")
    r = complete(fwire, bucket, "bad", uid, [(1, '"00000000000000000000000000000000"')])
    assert r.status == 400 and xml_error_code(r) == "InvalidPart", r
    r = complete(fwire, bucket, "bad", uid, [(2, '"00000000000000000000000000000000"')])
    assert r.status == 400 and xml_error_code(r) == "InvalidPart", r
    assert fwire.get_meta(bucket, "bad").status == 404


def test_parts_out_of_order_is_invalid_part_order(fwire, bucket, big_parts):
    uid = initiate(fwire, bucket, "order")
    e1 = put_part(fwire, bucket, "order", uid, 1, big_parts[0])
    e2 = put_part(fwire, bucket, "order", uid, 2, b"last")
    r = complete(fwire, bucket, "order", uid, [(2, e2), (1, e1)])
    assert r.status == 400 and xml_error_code(r) == "InvalidPartOrder", r
    assert fwire.get_meta(bucket, "order").status == 404
    # The upload survives a rejected completion and can still be completed properly.
    assert complete(fwire, bucket, "order", uid, [(1, e1), (2, e2)]).status == 200
    assert fwire.get_media(bucket, "order").body == big_parts[0] + b"last"


def test_unknown_upload_id(fwire, bucket):
    r = fwire.request("PUT", path(bucket, "k"), params={"partNumber": 1, "uploadId": "nope"}, body=b"x")
    assert r.status == 404 and xml_error_code(r) == "NoSuchUpload", r
