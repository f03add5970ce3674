"""A read-only caller (`read_only_token`, `fluxfs serve --read-only-token`): as a role with objectViewer only, it
reads and lists, and every write it sends over JSON, XML or a batch is answered 403 in GCS's words, changing
nothing; other callers keep writing."""
from __future__ import annotations

import json
import re

from tests.server.raw import obj_path, request, upload
from tests.server.test_batch import _batch

VIEWER = {"Authorization": "Bearer viewer"}
JSON = {"Content-Type": "application/json"}


def _as_viewer(srv, method, path, body=None, headers=None, params=None):
    return request(srv.url, method, path, body, {**VIEWER, **(headers or {})}, params)


def test_every_write_is_refused_in_gcs_words_and_reads_work(srv, bkt):
    assert upload(srv.url, bkt, "a", b"alpha").status == 200
    assert upload(srv.url, bkt, "b", b"beta").status == 200
    srv.configure(read_only_token="viewer")
    assert srv.configure()["read_only_token"] is True  # never the token itself
    writes = [
        ("POST", f"/upload/storage/v1/b/{bkt}/o", b"new", None, {"uploadType": "media", "name": "n"}),
        ("POST", f"/upload/storage/v1/b/{bkt}/o", b"{}", JSON, {"uploadType": "resumable", "name": "n"}),
        ("POST", obj_path(bkt, "c") + "/compose",
         json.dumps({"sourceObjects": [{"name": "a"}, {"name": "b"}]}).encode(), JSON, None),
        ("DELETE", obj_path(bkt, "a"), None, None, None),
        ("POST", obj_path(bkt, "a") + f"/rewriteTo/b/{bkt}/o/r", b"{}", JSON, None),
        ("POST", obj_path(bkt, "a") + f"/copyTo/b/{bkt}/o/r", b"{}", JSON, None),
        ("PATCH", obj_path(bkt, "a"), json.dumps({"metadata": {"k": "v"}}).encode(), JSON, None),
        ("PUT", f"/{bkt}/x", b"xml", None, None),
        ("POST", f"/{bkt}/x", b"", None, {"uploads": ""}),
        ("DELETE", f"/{bkt}/a", None, None, None),
    ]
    for method, path, body, headers, params in writes:
        r = _as_viewer(srv, method, path, body, headers, params)
        assert r.status == 403, (method, path, r.status)
        if not path.startswith(f"/{bkt}/"):  # the JSON API's error body, as GCS sends it
            err = r.json()["error"]
            assert err["code"] == 403 and err["errors"][0]["reason"] == "forbidden"
            assert re.search(r" does not have storage\.objects\.\w+ access to the Google Cloud Storage object\.",
                             err["message"]), err["message"]
        else:
            assert b"<Code>AccessDenied</Code>" in r.body
    body, headers = _batch([("DELETE", f"/storage/v1/b/{bkt}/o/a"), ("GET", f"/storage/v1/b/{bkt}/o/b")])
    r = _as_viewer(srv, "POST", "/batch/storage/v1", body, headers)
    assert re.findall(rb"HTTP/1.1 (\d{3})", r.body) == [b"403", b"200"]
    assert srv.list_names(bkt) == ["a", "b"]  # nothing written, nothing deleted
    # Reads: media and metadata over JSON, a listing, an XML GET.
    assert _as_viewer(srv, "GET", obj_path(bkt, "a"), params={"alt": "media"}).body == b"alpha"
    assert _as_viewer(srv, "GET", obj_path(bkt, "b")).json()["size"] == "4"
    assert [i["name"] for i in _as_viewer(srv, "GET", f"/storage/v1/b/{bkt}/o").json()["items"]] == ["a", "b"]
    assert _as_viewer(srv, "GET", f"/{bkt}/b").body == b"beta"
    # Anyone else (here: anonymous, no token required) still writes.
    assert upload(srv.url, bkt, "c", b"gamma").status == 200


def test_with_a_required_token_the_read_only_one_reads_and_a_wrong_one_is_401(srv, bkt):
    assert upload(srv.url, bkt, "a", b"alpha").status == 200
    srv.configure(require_token="writer", read_only_token="viewer")
    assert _as_viewer(srv, "GET", obj_path(bkt, "a"), params={"alt": "media"}).body == b"alpha"
    assert _as_viewer(srv, "DELETE", obj_path(bkt, "a")).status == 403
    assert request(srv.url, "GET", obj_path(bkt, "a"), headers={"Authorization": "Bearer other"}).status == 401
    assert request(srv.url, "DELETE", obj_path(bkt, "a"), headers={"Authorization": "Bearer writer"}).status == 204


def test_test_iam_permissions_grants_the_read_only_token_only_reading(srv, bkt):
    srv.configure(read_only_token="viewer")
    asked = ["storage.objects.get", "storage.objects.list", "storage.objects.create", "storage.objects.delete"]
    path = f"/storage/v1/b/{bkt}/iam/testPermissions?" + "&".join(f"permissions={p}" for p in asked)
    assert _as_viewer(srv, "GET", path).json()["permissions"] == asked[:2]
    assert request(srv.url, "GET", path).json()["permissions"] == asked  # anyone else: all of them
