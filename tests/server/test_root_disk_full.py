"""`--root` on a full disk: every write path answers 507 naming the full disk (not a retried 500) and
keeps nothing half-written. The root is a real 4 MiB tmpfs (mounting needs root: skipped otherwise)."""
from __future__ import annotations

import errno
import json
import os
import re
import subprocess
import time

import pytest

from fluxfs.server import run

from ..conftest import make_fs, mounted_tmpfs
from .raw import obj_path, request, upload, xml_path

KEEP = os.urandom(3000)
FULL = "The server's disk is full"


@pytest.fixture
def tmpfs(tmp_path):
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    with mounted_tmpfs(mnt, "4m"):
        yield str(mnt)


def _fill(mnt: str) -> str:
    """Take every free byte of the file system; the filler's path (remove it to free the space)."""
    path = os.path.join(mnt, "filler")
    with open(path, "wb", buffering=0) as f:
        for size in (1 << 20, 4096, 1):
            while True:
                try:
                    f.write(b"\0" * size)
                except OSError as e:
                    assert e.errno == errno.ENOSPC
                    break
    return path


def _files(mnt: str) -> set:
    return {os.path.relpath(os.path.join(d, f), mnt) for d, _, fs in os.walk(mnt) for f in fs} - {"filler"}


def _xml_initiate(url, b, key):
    r = request(url, "POST", xml_path(b, key), b"", params={"uploads": ""})
    assert r.status == 200, r
    return re.search(rb"<UploadId>([^<]+)</UploadId>", r.body).group(1).decode()


def _check_full(r, *names):
    assert r.status == 507, r
    msg = r.body.decode()
    assert FULL in msg, msg
    for n in names:
        assert n in msg, msg


def test_every_write_path_on_a_full_disk_answers_507_and_keeps_nothing(tmpfs):
    with run(root=tmpfs) as srv:
        b, url = "full", srv.url
        srv.create_bucket(b)
        assert upload(url, b, "keep", KEEP).status == 200
        r = request(url, "POST", f"/upload/storage/v1/b/{b}/o", b"{}", {"Content-Type": "application/json"},
                    params={"uploadType": "resumable", "name": "resum"})
        session = r.headers["location"].split(url)[1]
        mpu = _xml_initiate(url, b, "parts")
        before = _files(tmpfs)
        filler = _fill(tmpfs)
        body = os.urandom(100_000)
        _check_full(upload(url, b, "keep", body), f"{b}/keep")
        multipart = (b"--z\r\nContent-Type: application/json\r\n\r\n{\"name\": \"keep\"}\r\n--z\r\n"
                     b"Content-Type: text/plain\r\n\r\n" + body + b"\r\n--z--\r\n")
        _check_full(request(url, "POST", f"/upload/storage/v1/b/{b}/o", multipart,
                            {"Content-Type": "multipart/related; boundary=z"}, params={"uploadType": "multipart"}))
        _check_full(request(url, "PUT", session, body, {"Content-Range": f"bytes 0-{len(body) - 1}/*"}), "resum")
        _check_full(request(url, "PUT", xml_path(b, "keep"), body))
        _check_full(request(url, "PUT", xml_path(b, "parts"), body, params={"partNumber": 1, "uploadId": mpu}),
                    "part 1")
        _check_full(request(url, "PUT", xml_path(b, "copied"), b"", {"x-goog-copy-source": f"/{b}/keep"}))
        compose = json.dumps({"sourceObjects": [{"name": "keep"}, {"name": "keep"}]}).encode()
        _check_full(request(url, "POST", obj_path(b, "keep") + "/compose", compose,
                            {"Content-Type": "application/json"}))
        for verb in ("copyTo", "rewriteTo"):
            _check_full(request(url, "POST", obj_path(b, "keep") + f"/{verb}/b/{b}/o/copied", b"{}",
                                {"Content-Type": "application/json"}))
        _check_full(request(url, "PATCH", obj_path(b, "keep"), b'{"metadata": {"k": "v"}}',
                            {"Content-Type": "application/json"}))
        r = request(url, "POST", "/storage/v1/b", b'{"name": "another"}', {"Content-Type": "application/json"})
        _check_full(r, "another")
        # Nothing half-written: no new file, the old object whole and unchanged, its metadata too.
        assert _files(tmpfs) == before
        r = request(url, "GET", obj_path(b, "keep"), params={"alt": "media"})
        assert r.status == 200 and r.body == KEEP
        meta = request(url, "GET", obj_path(b, "keep")).json()
        assert meta["size"] == str(len(KEEP)) and "metadata" not in meta
        names = [i["name"] for i in request(url, "GET", f"/storage/v1/b/{b}/o").json()["items"]]
        assert names == ["keep"]
        assert request(url, "GET", "/storage/v1/b/another").status == 404
        # With space again, the resumable session and the multipart upload go on from where they were.
        os.unlink(filler)
        r = request(url, "PUT", session, body, {"Content-Range": f"bytes 0-{len(body) - 1}/{len(body)}"})
        assert r.status == 200, r
        assert request(url, "GET", obj_path(b, "resum"), params={"alt": "media"}).body == body
        assert request(url, "PUT", xml_path(b, "parts"), body, params={"partNumber": 1, "uploadId": mpu}).status == 200


def test_client_gets_the_full_disk_error_at_once(tmpfs):
    with run(root=tmpfs) as srv:
        srv.create_bucket("full")
        fs = make_fs(srv)
        fs.pipe_file("full/keep", KEEP)
        _fill(tmpfs)
        srv.reset_stats()
        t0 = time.monotonic()
        with pytest.raises(OSError, match="full/keep: The server.s disk is full: cannot store "):
            fs.pipe_file("full/keep", os.urandom(200_000))
        assert time.monotonic() - t0 < 5
        assert sum(srv.stats()["requests"].values()) == 1  # not retried
        assert fs.cat_file("full/keep") == KEEP
        fs.rm("full/keep")  # deleting still works on a full disk (and frees space)
        assert not fs.exists("full/keep")


def test_google_cloud_storage_does_not_retry_it_either(tmpfs):
    """(gcsfs retries 408, 429 and 500-504 only: gcsfs.retry.errs.)"""
    from google.cloud import storage

    from ..clients.conftest import storage_client

    with run(root=tmpfs) as srv:
        srv.create_bucket("full")
        _fill(tmpfs)
        srv.reset_stats()
        with pytest.raises(Exception, match=FULL) as got:
            storage_client(srv).bucket("full").blob("c").upload_from_string(b"x" * 1000,
                                                                            retry=storage.retry.DEFAULT_RETRY)
        assert got.value.code == 507
        assert srv.stats()["requests"]["write"] == 1  # not retried


def test_a_read_only_root_answers_507_saying_so(tmpfs):
    with run(root=tmpfs) as srv:
        srv.create_bucket("rofs")
        assert upload(srv.url, "rofs", "keep", KEEP).status == 200
        subprocess.run(["mount", "-o", "remount,ro", tmpfs], check=True)
        r = upload(srv.url, "rofs", "keep", b"new")
        assert r.status == 507 and "The server's --root is on a read-only file system: cannot store rofs/keep" in \
            r.json()["error"]["message"], r
        r = request(srv.url, "PUT", xml_path("rofs", "keep"), b"new")
        assert r.status == 507 and b"<Code>InsufficientStorage</Code>" in r.body and b"read-only" in r.body, r
        assert request(srv.url, "GET", obj_path("rofs", "keep"), params={"alt": "media"}).body == KEEP
