"""JSON API batch requests: each embedded call runs and answers in its own part."""
from __future__ import annotations

import re

from .raw import request, upload


def _batch(calls):
    b = "===b0undary=="
    parts = "".join(f"--{b}\r\nContent-Type: application/http\r\nContent-ID: <c{i}>\r\n\r\n"
                    f"{m} {p} HTTP/1.1\r\ncontent-length: 0\r\n\r\n" for i, (m, p) in enumerate(calls))
    return (parts + f"--{b}--").encode(), {"Content-Type": f'multipart/mixed; boundary="{b}"'}


def test_batch_delete_and_errors(srv, bkt):
    for n in ("a", "b", "c"):
        upload(srv.url, bkt, n, n.encode())
    body, headers = _batch([("DELETE", f"/storage/v1/b/{bkt}/o/a"), ("DELETE", f"/storage/v1/b/{bkt}/o/missing"),
                            ("GET", f"/storage/v1/b/{bkt}/o/c")])
    r = request(srv.url, "POST", "/batch/storage/v1", body, headers)
    assert r.status == 200 and r.headers["content-type"].startswith("multipart/mixed")
    statuses = [int(s) for s in re.findall(rb"HTTP/1.1 (\d{3})", r.body)]
    assert statuses == [204, 404, 200]
    assert b'"name":"c"' in r.body and b"No such object" in r.body
    assert srv.list_names(bkt) == ["b", "c"]


def test_batch_respects_deny_ops(srv, bkt):
    upload(srv.url, bkt, "a", b"1")
    srv.configure(deny_ops={"delete"})
    body, headers = _batch([("DELETE", f"/storage/v1/b/{bkt}/o/a")])
    r = request(srv.url, "POST", "/batch/storage/v1", body, headers)
    assert re.findall(rb"HTTP/1.1 (\d{3})", r.body) == [b"403"]
    assert srv.list_names(bkt) == ["a"]
