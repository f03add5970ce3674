"""`--root`: request bodies go to disk as they arrive, so the server's memory stays bounded whatever
the upload's size (a 1.5 GB upload used to peak at 3 GB); hashes are computed on the way."""
from __future__ import annotations

import base64
import hashlib
import http.client
import json
import os
import re
import shutil
import tempfile
from urllib.parse import urlsplit

import google_crc32c

import pytest

from fluxfs.server import run

from .raw import obj_path, request, xml_path

MiB = 1 << 20
BLOCK = bytes(range(256)) * 4096  # 1 MiB


def _body(n_mib: int, seed: int):
    """n_mib MiB, each MiB different, made as it is sent (the test holds none of it whole)."""
    for i in range(n_mib):
        yield seed.to_bytes(4, "big") + i.to_bytes(4, "big") + BLOCK[8:]


def _hashes(n_mib: int, seed: int):
    md5, crc = hashlib.md5(), 0
    for piece in _body(n_mib, seed):
        md5.update(piece)
        crc = google_crc32c.extend(crc, piece)
    return base64.b64encode(md5.digest()).decode(), base64.b64encode(crc.to_bytes(4, "big")).decode()


def _send(url, method, path, pieces, size, headers=None):
    u = urlsplit(url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=120)
    try:
        conn.request(method, path, body=pieces, headers={"Content-Length": str(size), **(headers or {})})
        r = conn.getresponse()
        return r.status, dict(r.getheaders()), r.read()
    finally:
        conn.close()


def _peak_mib(proc) -> float:
    with open(f"/proc/{proc.pid}/status") as f:
        return int(re.search(r"VmHWM:\s+(\d+) kB", f.read()).group(1)) / 1024


def _meta(url, b, name):
    return request(url, "GET", obj_path(b, name)).json()


@pytest.fixture
def root(tmp_path):
    """A root in memory (/dev/shm) where there is one: fsyncs of a real disk would make this test slow.
    A tmpfs file's pages are not the server's RSS (it never maps them)."""
    if not os.access("/dev/shm", os.W_OK):
        yield str(tmp_path)
        return
    d = tempfile.mkdtemp(prefix="fluxfs-root-", dir="/dev/shm")
    try:
        yield d
    finally:
        shutil.rmtree(d)


@pytest.mark.slow
def test_big_uploads_to_a_root_server_keep_its_memory_bounded(root):
    with run(in_process=False, root=root) as srv:
        b, url = "big", srv.url
        srv.create_bucket(b)
        assert request(url, "POST", f"/upload/storage/v1/b/{b}/o", b"warm", params={"uploadType": "media",
                                                                                    "name": "w"}).status == 200
        base = _peak_mib(srv.process)
        limit = base + 16  # every body below is at least 31 MiB: holding one whole (or twice) would show

        # A media upload of 100 MiB.
        st, _, out = _send(url, "POST", f"/upload/storage/v1/b/{b}/o?uploadType=media&name=media", _body(100, 1),
                           100 * MiB)
        assert st == 200, out
        assert _peak_mib(srv.process) < limit, ("media upload", _peak_mib(srv.process) - base)
        md5, crc = _hashes(100, 1)
        m = _meta(url, b, "media")
        assert (m["size"], m["md5Hash"], m["crc32c"]) == (str(100 * MiB), md5, crc)

        # A resumable upload in two 16 MiB chunks, the second repeating the first's last MiB.
        r = request(url, "POST", f"/upload/storage/v1/b/{b}/o", b"{}", {"Content-Type": "application/json"},
                    params={"uploadType": "resumable", "name": "resumable"})
        session = r.headers["location"].split(url)[1]
        pieces = list(_body(31, 2))
        st, _, _ = _send(url, "PUT", session, iter(pieces[:16]), 16 * MiB,
                         {"Content-Range": f"bytes 0-{16 * MiB - 1}/*"})
        assert st == 308
        st, _, out = _send(url, "PUT", session, iter(pieces[15:]), 16 * MiB,
                           {"Content-Range": f"bytes {15 * MiB}-{31 * MiB - 1}/{31 * MiB}"})
        assert st == 200, out
        assert _peak_mib(srv.process) < limit, ("resumable upload", _peak_mib(srv.process) - base)
        md5, crc = _hashes(31, 2)
        m = _meta(url, b, "resumable")
        assert (m["size"], m["md5Hash"], m["crc32c"]) == (str(31 * MiB), md5, crc)
        del pieces

        # An XML PUT and an XML multipart upload of two 16 MiB parts.
        st, _, out = _send(url, "PUT", xml_path(b, "xmlput"), _body(32, 3), 32 * MiB)
        assert st == 200, out
        r = request(url, "POST", xml_path(b, "parts"), b"", params={"uploads": ""})
        uid = re.search(rb"<UploadId>([^<]+)</UploadId>", r.body).group(1).decode()
        etags = []
        for n in (1, 2):
            st, h, out = _send(url, "PUT", xml_path(b, "parts") + f"?partNumber={n}&uploadId={uid}",
                               _body(16, 3 + n), 16 * MiB)
            assert st == 200, out
            etags.append(h["ETag"])
        manifest = "<CompleteMultipartUpload>" + "".join(
            f"<Part><PartNumber>{n}</PartNumber><ETag>{e}</ETag></Part>" for n, e in enumerate(etags, 1)) + \
            "</CompleteMultipartUpload>"
        assert request(url, "POST", xml_path(b, "parts"), manifest.encode(), params={"uploadId": uid}).status == 200
        assert _peak_mib(srv.process) < limit, ("XML uploads", _peak_mib(srv.process) - base)
        crc = google_crc32c.Checksum()
        for piece in list(_body(16, 4)) + list(_body(16, 5)):
            crc.update(piece)
        assert _meta(url, b, "parts")["crc32c"] == base64.b64encode(crc.digest()).decode()
        assert _meta(url, b, "xmlput")["md5Hash"] == _hashes(32, 3)[0]

        # A 32 MiB multipart/related upload (bare LF, as gcsfs sends), then compose, copy and rewrite of it.
        head = b'--==z==\nContent-Type: application/json\n\n{"name": "related"}\n--==z==\nContent-Type: text/x\n\n'
        tail = b"\n--==z==--\n"
        st, _, out = _send(url, "POST", f"/upload/storage/v1/b/{b}/o?uploadType=multipart",
                           iter([head, *_body(32, 6), tail]), len(head) + 32 * MiB + len(tail),
                           {"Content-Type": 'multipart/related; boundary="==z=="'})
        assert st == 200, out
        md5, crc = _hashes(32, 6)
        m = json.loads(out)
        assert (m["size"], m["md5Hash"], m["crc32c"], m["contentType"]) == (str(32 * MiB), md5, crc, "text/x")
        compose = json.dumps({"sourceObjects": [{"name": "related"}, {"name": "w"}]}).encode()
        assert request(url, "POST", obj_path(b, "composed") + "/compose", compose,
                       {"Content-Type": "application/json"}).status == 200
        for verb in ("copyTo", "rewriteTo"):
            r = request(url, "POST", obj_path(b, "related") + f"/{verb}/b/{b}/o/{verb}", b"{}",
                        {"Content-Type": "application/json"})
            assert r.status == 200, r
            assert _meta(url, b, verb)["md5Hash"] == md5
        assert _peak_mib(srv.process) < limit, ("multipart, compose, copy", _peak_mib(srv.process) - base)
        # The bytes round-trip: ranges across the parts' and sources' seams.
        for name, at, want in [("parts", 16 * MiB - 4, BLOCK[-4:] + b"\0\0\0\x05"),
                               ("composed", 32 * MiB - 4, BLOCK[-4:] + b"warm"),
                               ("resumable", 15 * MiB, b"\0\0\0\x02\0\0\0\x0f")]:
            r = request(url, "GET", obj_path(b, name), headers={"Range": f"bytes={at}-{at + 7}"},
                        params={"alt": "media"})
            assert r.body == want, name


@pytest.mark.slow
def test_big_downloads_from_a_root_server_keep_its_memory_bounded(root):
    with run(in_process=False, root=root) as srv:
        srv.create_bucket("dlb")
        st, _, out = _send(srv.url, "POST", "/upload/storage/v1/b/dlb/o?uploadType=media&name=o", _body(64, 7),
                           64 * MiB)
        assert st == 200, out
    with run(in_process=False, root=root) as srv:  # a fresh process: its peak so far is its start's
        base = _peak_mib(srv.process)
        u = urlsplit(srv.url)
        for path in (obj_path("dlb", "o") + "?alt=media", xml_path("dlb", "o")):
            conn = http.client.HTTPConnection(u.hostname, u.port, timeout=120)
            conn.request("GET", path, headers={"Range": f"bytes={MiB - 8}-"})
            r = conn.getresponse()
            assert r.status == 206
            md5, n = hashlib.md5(), 0
            while True:
                piece = r.read(MiB)
                if not piece:
                    break
                md5.update(piece)
                n += len(piece)
            conn.close()
            want = hashlib.md5()
            for i, piece in enumerate(_body(64, 7)):
                want.update(piece[-8:] if i == 0 else piece)
            assert n == 63 * MiB + 8 and md5.digest() == want.digest()
        assert _peak_mib(srv.process) - base < 16  # read a MiB at a time, not the 63 MiB asked for


def test_large_multipart_related_uploads_split_from_the_file(tmp_path):
    """Bodies over 8 MiB are split on disk: CRLF as RFC 2046 says, a third part refused as in memory."""
    media = b"".join(_body(9, 8)) + b"\r"  # ends in '\r': only the boundary's own line ending goes
    with run(root=str(tmp_path)) as srv:
        srv.create_bucket("rel")
        head = b'--b\r\nContent-Type: application/json\r\n\r\n{"name": "crlf"}\r\n--b\r\nContent-Type: a/b\r\n\r\n'
        r = request(srv.url, "POST", "/upload/storage/v1/b/rel/o", head + media + b"\r\n--b--",
                    {"Content-Type": "multipart/related; boundary=b"}, params={"uploadType": "multipart"})
        assert r.status == 200, r
        assert (r.json()["size"], r.json()["contentType"]) == (str(len(media)), "a/b")
        assert request(srv.url, "GET", obj_path("rel", "crlf"), params={"alt": "media"}).body == media
        three = head + media + b"\r\n--b\r\nContent-Type: a/b\r\n\r\nmore\r\n--b--\r\n"
        r = request(srv.url, "POST", "/upload/storage/v1/b/rel/o", three.replace(b"crlf", b"three"),
                    {"Content-Type": "multipart/related; boundary=b"}, params={"uploadType": "multipart"})
        assert r.status == 400 and "more than 2 parts" in r.json()["error"]["message"], r
        assert request(srv.url, "GET", obj_path("rel", "three")).status == 404
    leftovers = [f for d, _, fs in os.walk(tmp_path) for f in fs if f.startswith(".tmp-")]
    assert leftovers == []
