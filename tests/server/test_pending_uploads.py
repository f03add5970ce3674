"""--root DIR: unfinished uploads survive a restart (XML multipart parts, resumable session bytes),
and resumable sessions expire as GCS's do (a week after they start; tests shorten it)."""
from __future__ import annotations

import os
import random
import re

from fluxfs.server import run

from .raw import obj_path, request, xml_path

MiB = 1024 * 1024


def _body(n: int, seed: int) -> bytes:
    return random.Random(seed).randbytes(n)


def _media(url: str, bucket: str, name: str) -> bytes:
    r = request(url, "GET", obj_path(bucket, name), params={"alt": "media"})
    assert r.status == 200, r
    return r.body


def test_multipart_upload_survives_a_restart(tmp_path):
    root = str(tmp_path / "store")
    parts = [_body(5 * MiB, 1), _body(5 * MiB, 2), _body(1234, 3)]
    with run(root=root) as srv:
        srv.create_bucket("mpu")
        r = request(srv.url, "POST", xml_path("mpu", "big"), b"", {"Content-Type": "text/plain"},
                    params={"uploads": ""})
        uid = re.search(rb"<UploadId>([^<]+)</UploadId>", r.body).group(1).decode()
        etags = []
        for n, data in enumerate(parts[:2], 1):
            r = request(srv.url, "PUT", xml_path("mpu", "big"), data, params={"partNumber": n, "uploadId": uid})
            assert r.status == 200, r
            etags.append(r.headers["etag"])
    with run(root=root) as srv:
        assert srv.multipart_uploads("mpu") == [{"key": "big", "upload_id": uid, "parts": [1, 2]}]
        r = request(srv.url, "PUT", xml_path("mpu", "big"), parts[2], params={"partNumber": 3, "uploadId": uid})
        assert r.status == 200, r
        etags.append(r.headers["etag"])
        manifest = "<CompleteMultipartUpload>" + "".join(
            f"<Part><PartNumber>{n}</PartNumber><ETag>{e}</ETag></Part>" for n, e in enumerate(etags, 1)
        ) + "</CompleteMultipartUpload>"
        r = request(srv.url, "POST", xml_path("mpu", "big"), manifest.encode(), params={"uploadId": uid})
        assert r.status == 200, r
        assert _media(srv.url, "mpu", "big") == b"".join(parts)
        meta = request(srv.url, "GET", obj_path("mpu", "big")).json()
        assert meta["contentType"] == "text/plain" and meta["size"] == str(sum(map(len, parts)))
        assert srv.multipart_uploads("mpu") == []
    assert os.listdir(os.path.join(root, "uploads", "multipart")) == []  # completed: nothing left on disk
    with run(root=root) as srv:
        assert _media(srv.url, "mpu", "big") == b"".join(parts)


def _start_session(url: str, bucket: str, name: str) -> str:
    r = request(url, "POST", f"/upload/storage/v1/b/{bucket}/o", b'{"contentType": "application/x-test"}',
                {"Content-Type": "application/json"}, params={"uploadType": "resumable", "name": name})
    assert r.status == 200, r
    return r.headers["location"].split("upload_id=")[1]


def _session(bucket: str, uid: str) -> str:
    return f"/upload/storage/v1/b/{bucket}/o?uploadType=resumable&upload_id={uid}"


def test_resumable_session_survives_a_restart(tmp_path):
    root = str(tmp_path / "store")
    data = _body(3 * 256 * 1024 + 99, 7)
    chunk = 256 * 1024
    with run(root=root) as srv:
        srv.create_bucket("rsu")
        uid = _start_session(srv.url, "rsu", "obj")
        for i in range(2):
            r = request(srv.url, "PUT", _session("rsu", uid), data[i * chunk:(i + 1) * chunk],
                        {"Content-Range": f"bytes {i * chunk}-{(i + 1) * chunk - 1}/*"})
            assert r.status == 308, r
    with run(root=root) as srv:
        r = request(srv.url, "PUT", _session("rsu", uid), b"", {"Content-Range": "bytes */*"})
        assert r.status == 308 and r.headers["range"] == f"bytes=0-{2 * chunk - 1}", r
        r = request(srv.url, "PUT", _session("rsu", uid), data[2 * chunk:],
                    {"Content-Range": f"bytes {2 * chunk}-{len(data) - 1}/{len(data)}"})
        assert r.status == 200, r
        assert r.json()["contentType"] == "application/x-test"
        assert _media(srv.url, "rsu", "obj") == data
    assert os.listdir(os.path.join(root, "uploads", "resumable")) == []


def test_resumable_sessions_expire(tmp_path):
    root = str(tmp_path / "store")
    with run(root=root) as srv:
        srv.create_bucket("rsu")
        uid = _start_session(srv.url, "rsu", "obj")
        assert request(srv.url, "PUT", _session("rsu", uid), b"x" * 262144,
                       {"Content-Range": "bytes 0-262143/*"}).status == 308
        live = _start_session(srv.url, "rsu", "other")
        srv.configure(resumable_ttl_s=0.0)  # every session is now older than the time a session lives
        r = request(srv.url, "PUT", _session("rsu", uid), b"", {"Content-Range": "bytes */*"})
        assert r.status == 404, r
    assert sorted(os.listdir(os.path.join(root, "uploads", "resumable"))) == [f"{live}.data", f"{live}.json"]
    with run(root=root, resumable_ttl_s=0.0) as srv:  # expired while the server was down: dropped on start
        assert request(srv.url, "PUT", _session("rsu", live), b"", {"Content-Range": "bytes */*"}).status == 404
    assert os.listdir(os.path.join(root, "uploads", "resumable")) == []


def test_acknowledged_parts_survive_a_killed_server(tmp_path):
    """SIGKILL, not a clean shutdown: every part and chunk answered before the kill is there after it."""
    root = str(tmp_path / "store")
    part = _body(5 * MiB, 11)
    srv = run(root=root, in_process=False)
    try:
        srv.create_bucket("kill")
        r = request(srv.url, "POST", xml_path("kill", "obj"), b"", params={"uploads": ""})
        uid = re.search(rb"<UploadId>([^<]+)</UploadId>", r.body).group(1).decode()
        etag = request(srv.url, "PUT", xml_path("kill", "obj"), part, params={"partNumber": 1, "uploadId": uid}
                       ).headers["etag"]
        sid = _start_session(srv.url, "kill", "res")
        assert request(srv.url, "PUT", _session("kill", sid), part[:262144],
                       {"Content-Range": "bytes 0-262143/*"}).status == 308
        srv.process.kill()
        srv.process.wait()
    finally:
        srv.close()
    with run(root=root) as srv:
        tail = _body(10, 12)
        etag2 = request(srv.url, "PUT", xml_path("kill", "obj"), tail, params={"partNumber": 2, "uploadId": uid}
                        ).headers["etag"]
        manifest = (f"<CompleteMultipartUpload><Part><PartNumber>1</PartNumber><ETag>{etag}</ETag></Part>"
                    f"<Part><PartNumber>2</PartNumber><ETag>{etag2}</ETag></Part></CompleteMultipartUpload>")
        r = request(srv.url, "POST", xml_path("kill", "obj"), manifest.encode(), params={"uploadId": uid})
        assert r.status == 200, r
        assert _media(srv.url, "kill", "obj") == part + tail
        r = request(srv.url, "PUT", _session("kill", sid), part[262144:262154],
                    {"Content-Range": "bytes 262144-262153/262154"})
        assert r.status == 200, r
        assert _media(srv.url, "kill", "res") == part[:262154]
