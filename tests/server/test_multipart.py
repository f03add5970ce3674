"""XML multipart upload lifecycle: initiate, parts, list, complete (atomic, checked), abort."""
from __future__ import annotations

import base64
import hashlib
import json
import os
import re

from .raw import obj_path, request, xml_path

MiB = 1024 * 1024


def _initiate(url, bucket, key, **headers):
    r = request(url, "POST", xml_path(bucket, key) + "?uploads", b"", headers)
    assert r.status == 200, r
    return re.search(rb"<UploadId>([^<]+)</UploadId>", r.body).group(1).decode()


def _part(url, bucket, key, uid, n, data, **headers):
    return request(url, "PUT", xml_path(bucket, key), data, headers, params={"partNumber": n, "uploadId": uid})


def _complete_body(parts):
    return ("<CompleteMultipartUpload>" + "".join(
        f"<Part><PartNumber>{n}</PartNumber><ETag>{e}</ETag></Part>" for n, e in parts)
        + "</CompleteMultipartUpload>").encode()


def _complete(url, bucket, key, uid, parts):
    return request(url, "POST", xml_path(bucket, key), _complete_body(parts), params={"uploadId": uid})


def test_lifecycle(srv, bkt):
    key = "ckpt/model weights.bin"
    p1, p2, p3 = os.urandom(5 * MiB), os.urandom(5 * MiB), os.urandom(1234)
    uid = _initiate(srv.url, bkt, key, **{"Content-Type": "application/x-test", "x-goog-meta-step": "7"})
    # Parts may arrive in any order and be re-sent.
    e3 = _part(srv.url, bkt, key, uid, 3, p3).headers["etag"]
    e1 = _part(srv.url, bkt, key, uid, 1, p1).headers["etag"]
    r2 = _part(srv.url, bkt, key, uid, 2, p2)
    assert r2.status == 200 and r2.headers["etag"] == f'"{hashlib.md5(p2).hexdigest()}"'
    e2 = r2.headers["etag"]
    assert srv.multipart_uploads(bkt) == [{"key": key, "upload_id": uid, "parts": [1, 2, 3]}]
    listed = request(srv.url, "GET", xml_path(bkt, key), params={"uploadId": uid})
    assert listed.status == 200 and listed.body.count(b"<Part>") == 3
    ups = request(srv.url, "GET", f"/{bkt}?uploads")
    assert uid.encode() in ups.body
    # Invisible until completed.
    assert request(srv.url, "GET", obj_path(bkt, key)).status == 404
    assert srv.list_names(bkt) == []
    # Wrong order -> 400 and the upload is still there.
    bad = _complete(srv.url, bkt, key, uid, [(2, e2), (1, e1), (3, e3)])
    assert bad.status == 400 and b"InvalidPartOrder" in bad.body
    wrong_etag = _complete(srv.url, bkt, key, uid, [(1, e1), (2, e1), (3, e3)])
    assert wrong_etag.status == 400 and b"InvalidPart" in wrong_etag.body
    assert srv.list_names(bkt) == []
    done = _complete(srv.url, bkt, key, uid, [(1, e1), (2, e2), (3, e3)])
    assert done.status == 200 and b"<CompleteMultipartUploadResult" in done.body
    got = request(srv.url, "GET", xml_path(bkt, key))
    assert got.status == 200 and got.body == p1 + p2 + p3
    meta = request(srv.url, "GET", obj_path(bkt, key)).json()
    assert meta["contentType"] == "application/x-test" and meta["metadata"] == {"step": "7"}
    assert srv.multipart_uploads(bkt) == []
    # The upload id is gone after completion.
    assert _part(srv.url, bkt, key, uid, 4, b"late").status == 404


def test_small_part_rejected_and_abort(srv, bkt):
    key = "k"
    uid = _initiate(srv.url, bkt, key)
    e1 = _part(srv.url, bkt, key, uid, 1, b"tiny").headers["etag"]
    e2 = _part(srv.url, bkt, key, uid, 2, b"last").headers["etag"]
    r = _complete(srv.url, bkt, key, uid, [(1, e1), (2, e2)])
    assert r.status == 400 and b"EntityTooSmall" in r.body
    assert srv.list_names(bkt) == []
    # A single small part is fine: the last part has no minimum.
    assert request(srv.url, "DELETE", xml_path(bkt, key), params={"uploadId": uid}).status == 204
    assert srv.multipart_uploads(bkt) == []
    assert request(srv.url, "DELETE", xml_path(bkt, key), params={"uploadId": uid}).status == 404
    uid2 = _initiate(srv.url, bkt, key)
    e = _part(srv.url, bkt, key, uid2, 1, b"only part").headers["etag"]
    assert _complete(srv.url, bkt, key, uid2, [(1, e)]).status == 200
    assert request(srv.url, "GET", xml_path(bkt, key)).body == b"only part"


def test_bad_part_requests(srv, bkt):
    uid = _initiate(srv.url, bkt, "k")
    assert _part(srv.url, bkt, "k", uid, 0, b"x").status == 400
    assert _part(srv.url, bkt, "k", uid, 10001, b"x").status == 400
    assert _part(srv.url, bkt, "k", "nope", 1, b"x").status == 404
    md5 = base64.b64encode(hashlib.md5(b"other").digest()).decode()
    r = _part(srv.url, bkt, "k", uid, 1, b"x", **{"Content-MD5": md5})
    assert r.status == 400 and b"BadDigest" in r.body
    assert srv.multipart_uploads(bkt)[0]["parts"] == []
    assert _complete(srv.url, bkt, "k", uid, [(1, '"abc"')]).status == 400
    r = request(srv.url, "POST", xml_path(bkt, "k"), b"<not xml", params={"uploadId": uid})
    assert r.status == 400 and b"MalformedXML" in r.body


def test_complete_honours_generation_precondition(srv, bkt):
    request(srv.url, "PUT", xml_path(bkt, "k"), b"existing")
    uid = _initiate(srv.url, bkt, "k")
    e = _part(srv.url, bkt, "k", uid, 1, b"new").headers["etag"]
    r = request(srv.url, "POST", xml_path(bkt, "k"), _complete_body([(1, e)]),
                {"x-goog-if-generation-match": "0"}, params={"uploadId": uid})
    assert r.status == 412 and b"PreconditionFailed" in r.body
    assert request(srv.url, "GET", xml_path(bkt, "k")).body == b"existing"


def test_completed_object_serves_ranges_across_parts_and_received_chunks(srv, bkt):
    """A completed upload keeps its parts as received (no join); every read still returns exact bytes."""
    import google_crc32c

    # A bandwidth cap makes the server take bodies off the socket in 256 KiB chunks.
    srv.configure(bandwidth_mbps=2000)
    key = "big.bin"
    parts = [os.urandom(5 * MiB + 17), os.urandom(5 * MiB), os.urandom(300_001)]
    whole = b"".join(parts)
    uid = _initiate(srv.url, bkt, key)
    etags = [(n, _part(srv.url, bkt, key, uid, n, p).headers["etag"]) for n, p in enumerate(parts, 1)]
    assert _complete(srv.url, bkt, key, uid, etags).status == 200
    meta = request(srv.url, "GET", obj_path(bkt, key)).json()
    crc = base64.b64encode(google_crc32c.value(whole).to_bytes(4, "big")).decode()
    assert int(meta["size"]) == len(whole) and meta["crc32c"] == crc
    media = obj_path(bkt, key).replace("/storage/", "/download/storage/")
    assert request(srv.url, "GET", media, params={"alt": "media"}).body == whole
    b = 5 * MiB + 17  # the first part boundary
    for lo, hi in [(0, 10), (b - 5, b + 5), (262_140, 262_150), (b - 1, len(whole)), (100, 2 * b),
                   (len(whole) - 1, len(whole))]:
        r = request(srv.url, "GET", media, headers={"Range": f"bytes={lo}-{hi - 1}"}, params={"alt": "media"})
        assert r.status == 206 and r.body == whole[lo:hi], (lo, hi)
    # As a compose source and a copy source its bytes come out whole too.
    body = json.dumps({"sourceObjects": [{"name": key}, {"name": key}]}).encode()
    r = request(srv.url, "POST", obj_path(bkt, "twice") + "/compose", body, {"Content-Type": "application/json"})
    assert r.status == 200, r.body
    assert request(srv.url, "GET", xml_path(bkt, "twice")).body == whole + whole
    r = request(srv.url, "POST", obj_path(bkt, key) + "/copyTo/b/" + bkt + "/o/copy", b"{}",
                {"Content-Type": "application/json"})
    assert r.status == 200, r.body
    assert request(srv.url, "GET", xml_path(bkt, "copy")).body == whole
