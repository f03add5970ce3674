"""HNS folders on the embedded server's JSON API: insert/get/list/delete, rename as a done long-running
operation moving every object below, operations.get, includeFoldersAsPrefixes, and the 400 of a flat bucket."""
from __future__ import annotations

import json
import uuid
from urllib.parse import quote

import pytest

from tests.server import raw

HNS = {"hierarchicalNamespace": {"enabled": True},
       "iamConfiguration": {"uniformBucketLevelAccess": {"enabled": True}}}
JSON = {"Content-Type": "application/json"}


def _bucket(url: str, hns: bool = True) -> str:
    name = f"h{uuid.uuid4().hex[:12]}"
    r = raw.request(url, "POST", "/storage/v1/b", json.dumps({"name": name, **(HNS if hns else {})}).encode(), JSON)
    assert r.status == 200, r
    return name


def _folders(url: str, bucket: str) -> str:
    return f"/storage/v1/b/{bucket}/folders"


def _insert(url: str, bucket: str, name: str, **params) -> raw.Resp:
    return raw.request(url, "POST", _folders(url, bucket), json.dumps({"name": name}).encode(), JSON, params=params)


def test_insert_get_list_delete(srv):
    b = _bucket(srv.url)
    made = _insert(srv.url, b, "a/")
    assert made.status == 200 and made.json()["name"] == "a/" and made.json()["kind"] == "storage#folder"
    assert _insert(srv.url, b, "a/").status == 409
    missing_parent = _insert(srv.url, b, "x/y/")
    assert missing_parent.status == 404 and "x/" in missing_parent.json()["error"]["message"]
    assert _insert(srv.url, b, "x/y/", recursive="true").status == 200
    raw.upload(srv.url, b, "a/b/obj", b"1")  # implies folder a/b/, as GCS does in an HNS bucket
    got = raw.request(srv.url, "GET", _folders(srv.url, b), params={"pageSize": 2})
    page = got.json()
    assert [f["name"] for f in page["items"]] == ["a/", "a/b/"] and page["nextPageToken"]
    rest = raw.request(srv.url, "GET", _folders(srv.url, b), params={"pageToken": page["nextPageToken"]}).json()
    assert [f["name"] for f in rest["items"]] == ["x/", "x/y/"] and "nextPageToken" not in rest
    assert raw.request(srv.url, "GET", _folders(srv.url, b) + "/" + quote("x/y/", safe="")).status == 200
    full = raw.request(srv.url, "DELETE", _folders(srv.url, b) + "/" + quote("a/b/", safe=""))
    assert full.status == 409
    assert full.json()["error"]["message"] == f"The folder you tried to delete is not empty: {b}/a/b/"
    assert raw.request(srv.url, "DELETE", _folders(srv.url, b) + "/" + quote("x/y/", safe="")).status == 204
    assert raw.request(srv.url, "GET", _folders(srv.url, b) + "/" + quote("x/y/", safe="")).status == 404


def test_objects_list_includes_empty_folders_as_prefixes(srv):
    b = _bucket(srv.url)
    _insert(srv.url, b, "d/empty/", recursive="true")
    raw.upload(srv.url, b, "d/f", b"1")
    _, plain, _ = raw.list_all(srv.url, b, delimiter="/", prefix="d/")
    _, folders, _ = raw.list_all(srv.url, b, delimiter="/", prefix="d/", includeFoldersAsPrefixes="true")
    assert plain == [] and folders == ["d/empty/"]


def test_rename_moves_everything_below_in_one_done_operation(srv):
    b = _bucket(srv.url)
    for i in range(10):
        raw.upload(srv.url, b, f"src/s{i % 2}/k{i}", b"v%d" % i)
    _insert(srv.url, b, "src/empty/")
    url = _folders(srv.url, b) + "/" + quote("src/", safe="") + "/renameTo/folders/" + quote("dst/", safe="")
    op = raw.request(srv.url, "POST", url)
    assert op.status == 200 and op.json()["done"] is True
    assert op.json()["metadata"]["destinationFolderId"] == "dst/"
    names, _, _ = raw.list_all(srv.url, b)
    assert sorted(names) == sorted(f"dst/s{i % 2}/k{i}" for i in range(10))
    for i in range(10):
        assert raw.request(srv.url, "GET", raw.obj_path(b, f"dst/s{i % 2}/k{i}"), params={"alt": "media"}).body \
            == b"v%d" % i
    listed = [f["name"] for f in raw.request(srv.url, "GET", _folders(srv.url, b)).json()["items"]]
    assert listed == ["dst/", "dst/empty/", "dst/s0/", "dst/s1/"]
    op_id = op.json()["name"].rsplit("/", 1)[1]
    again = raw.request(srv.url, "GET", f"/storage/v1/b/{b}/operations/{op_id}")
    assert again.status == 200 and again.json()["done"] is True
    into_itself = raw.request(srv.url, "POST", _folders(srv.url, b) + "/dst%2F/renameTo/folders/dst%2Fin%2F")
    assert into_itself.status == 400 and "into itself" in into_itself.json()["error"]["message"]


@pytest.mark.parametrize("method,path,body", [
    ("POST", "/folders", b'{"name": "a/"}'), ("GET", "/folders", None), ("GET", "/folders/a%2F", None),
    ("DELETE", "/folders/a%2F", None), ("POST", "/folders/a%2F/renameTo/folders/b%2F", None)])
def test_folder_calls_on_a_flat_bucket_answer_400(srv, method, path, body):
    b = _bucket(srv.url, hns=False)
    r = raw.request(srv.url, method, f"/storage/v1/b/{b}{path}", body, JSON if body else None)
    assert r.status == 400 and r.json()["error"]["message"] == \
        f"The bucket does not have hierarchical namespace enabled: {b}"
