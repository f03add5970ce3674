"""objects.insert: media, multipart/related and resumable uploads, checksum validation."""
from __future__ import annotations

import os
import urllib.parse

from .wire import Wire, assert_gcs_error, crc32c_b64, md5_b64

CHUNK = 256 * 1024  # resumable chunks other than the last must be multiples of 256 KiB


def test_media_upload(wire, any_bucket):
    data = os.urandom(5000)
    r = wire.upload_media(any_bucket, "m/obj", data)
    assert r.status == 200, r
    meta = r.json()
    assert meta["name"] == "m/obj" and meta["bucket"] == any_bucket
    assert meta["size"] == "5000"
    assert meta["crc32c"] == crc32c_b64(data) and meta["md5Hash"] == md5_b64(data)
    assert wire.get_media(any_bucket, "m/obj").body == data


def test_overwrite_increases_generation(wire, any_bucket):
    gens = [int(wire.put(any_bucket, "o", bytes([i]) * (i + 1))["generation"]) for i in range(3)]
    assert gens == sorted(gens) and len(set(gens)) == 3
    assert wire.get_media(any_bucket, "o").body == b"\x02\x02\x02"


def test_multipart_related_upload_with_metadata(wire, any_bucket):
    data = os.urandom(3000) + b"\r\n--not-a-boundary\r\n"
    r = wire.upload_multipart(any_bucket, {"name": "mp/obj", "metadata": {"k": "v"}}, data)
    assert r.status == 200, r
    meta = r.json()
    assert meta["name"] == "mp/obj" and meta["size"] == str(len(data))
    assert meta["metadata"] == {"k": "v"}
    assert meta["crc32c"] == crc32c_b64(data)
    assert wire.get_media(any_bucket, "mp/obj").body == data


def start_resumable(w: Wire, bucket: str, name: str, **params) -> str:
    r = w.request("POST", f"/upload/storage/v1/b/{bucket}/o",
                  params={"uploadType": "resumable", "name": name, **params},
                  json={"contentType": "application/octet-stream"})
    assert r.status == 200, r
    loc = urllib.parse.urlsplit(r.header("location"))
    assert "upload_id=" in loc.query
    return f"{loc.path}?{loc.query}"


def test_resumable_upload_in_chunks(wire, any_bucket):
    data = os.urandom(2 * CHUNK + 1234)
    session = start_resumable(wire, any_bucket, "res/obj")
    r = wire.request("PUT", session, headers={"Content-Range": f"bytes 0-{CHUNK - 1}/*"}, body=data[:CHUNK])
    assert r.status == 308, r
    assert r.header("range") == f"bytes=0-{CHUNK - 1}"
    r = wire.request("PUT", session, headers={"Content-Range": f"bytes {CHUNK}-{2 * CHUNK - 1}/*"},
                     body=data[CHUNK:2 * CHUNK])
    assert r.status == 308 and r.header("range") == f"bytes=0-{2 * CHUNK - 1}", r
    r = wire.request("PUT", session,
                     headers={"Content-Range": f"bytes {2 * CHUNK}-{len(data) - 1}/{len(data)}"},
                     body=data[2 * CHUNK:])
    assert r.status in (200, 201), r
    meta = r.json()
    assert meta["size"] == str(len(data)) and meta["crc32c"] == crc32c_b64(data)
    assert wire.get_media(any_bucket, "res/obj").body == data


def test_resumable_single_request(wire, any_bucket):
    data = os.urandom(777)
    session = start_resumable(wire, any_bucket, "res/one")
    r = wire.request("PUT", session, body=data)
    assert r.status in (200, 201), r
    assert wire.get_media(any_bucket, "res/one").body == data


def test_multipart_content_type_from_metadata(wire, any_bucket):
    r = wire.upload_multipart(any_bucket, {"name": "t.txt", "contentType": "text/plain"}, b"hi",
                               content_type="text/plain")
    assert r.status == 200, r
    assert r.json()["contentType"] == "text/plain"
    assert wire.get_meta(any_bucket, "t.txt").json()["contentType"] == "text/plain"


def test_matching_checksums_accepted(wire, any_bucket):
    data = b"checked bytes"
    r = wire.upload_multipart(any_bucket, {"name": "good", "crc32c": crc32c_b64(data), "md5Hash": md5_b64(data)},
                               data)
    assert r.status == 200, r
    assert wire.get_media(any_bucket, "good").body == data


def test_upload_to_missing_bucket_is_404(wire):
    assert_gcs_error(wire.upload_media("no-such-bucket-xyz", "o", b"x"), 404)


# -- fluxfs server only -------------------------------------------------------------------


def test_resumable_status_query_does_not_finalize(fwire, bucket):
    """Perform resumable uploads: "checking the status": an empty PUT with `bytes */*` answers 308 and the
    persisted Range, and never completes the object. fake-gcs-server finalizes the object instead.
    """
    data = os.urandom(CHUNK + 10)
    session = start_resumable(fwire, bucket, "res/q")
    r = fwire.request("PUT", session, headers={"Content-Range": "bytes */*"})
    assert r.status == 308 and r.header("range") is None, r  # nothing persisted yet: no Range header
    r = fwire.request("PUT", session, headers={"Content-Range": f"bytes 0-{CHUNK - 1}/*"}, body=data[:CHUNK])
    assert r.status == 308, r
    r = fwire.request("PUT", session, headers={"Content-Range": "bytes */*"})
    assert r.status == 308 and r.header("range") == f"bytes=0-{CHUNK - 1}", r
    assert fwire.get_meta(bucket, "res/q").status == 404  # not visible until the last chunk
    r = fwire.request("PUT", session, headers={"Content-Range": f"bytes {CHUNK}-{len(data) - 1}/{len(data)}"},
                      body=data[CHUNK:])
    assert r.status in (200, 201), r
    assert fwire.get_media(bucket, "res/q").body == data


def test_resumable_chunk_past_committed_offset_is_rejected(fwire, bucket):
    """"Perform resumable uploads": chunks continue from the persisted offset; one that leaves a gap is a 400
    (google-cloud-java's resumable logic treats it as non-retryable). The session keeps its committed range
    and can still complete. fake-gcs-server accepts the gap and answers 308."""
    data = os.urandom(3 * CHUNK)
    session = start_resumable(fwire, bucket, "res/gap")
    assert fwire.request("PUT", session, headers={"Content-Range": f"bytes 0-{CHUNK - 1}/*"},
                         body=data[:CHUNK]).status == 308
    r = fwire.request("PUT", session, headers={"Content-Range": f"bytes {2 * CHUNK}-{3 * CHUNK - 1}/*"},
                      body=data[2 * CHUNK:])
    assert r.status == 400, r
    r = fwire.request("PUT", session, headers={"Content-Range": "bytes */*"})
    assert r.status == 308 and r.header("range") == f"bytes=0-{CHUNK - 1}", r
    assert fwire.get_meta(bucket, "res/gap").status == 404
    r = fwire.request("PUT", session, headers={"Content-Range": f"bytes {CHUNK}-{3 * CHUNK - 1}/{3 * CHUNK}"},
                      body=data[CHUNK:])
    assert r.status in (200, 201), r
    assert fwire.get_media(bucket, "res/gap").body == data


def test_crc32c_mismatch_is_400_and_nothing_stored(fwire, bucket):
    """Data validation and change detection: a supplied checksum that does not match the bytes is rejected
    with 400 and no object is written. fake-gcs-server stores the object anyway."""
    r = fwire.upload_multipart(bucket, {"name": "bad-crc", "crc32c": crc32c_b64(b"other")}, b"data")
    assert_gcs_error(r, 400)
    assert fwire.get_meta(bucket, "bad-crc").status == 404


def test_md5_mismatch_is_400_and_nothing_stored(fwire, bucket):
    """"Data validation and change detection", md5Hash variant (fake-gcs-server stores the object)."""
    r = fwire.upload_multipart(bucket, {"name": "bad-md5", "md5Hash": md5_b64(b"other")}, b"data")
    assert_gcs_error(r, 400)
    assert fwire.get_meta(bucket, "bad-md5").status == 404


def test_crc32c_mismatch_keeps_previous_version(fwire, bucket):
    """A rejected upload leaves the live version untouched ("Data validation and change detection")."""
    fwire.put(bucket, "keep", b"original")
    r = fwire.upload_multipart(bucket, {"name": "keep", "crc32c": crc32c_b64(b"x")}, b"replacement")
    assert_gcs_error(r, 400)
    assert fwire.get_media(bucket, "keep").body == b"original"


def test_resumable_checksum_from_initiation_metadata(fwire, bucket):
    """Data validation: a crc32c given in the resumable session's metadata is checked when the upload
    completes; a mismatch is 400 and no object appears."""
    r = fwire.request("POST", f"/upload/storage/v1/b/{bucket}/o", params={"uploadType": "resumable", "name": "rc"},
                      json={"crc32c": crc32c_b64(b"something else")})
    assert r.status == 200, r
    loc = urllib.parse.urlsplit(r.header("location"))
    r = fwire.request("PUT", f"{loc.path}?{loc.query}", body=b"actual bytes")
    assert_gcs_error(r, 400)
    assert fwire.get_meta(bucket, "rc").status == 404
