"""Bucket layouts on the embedded server: zonal (RAPID in one zone) and HNS buckets as GCS takes them at creation,
`GET /storage/v1/b/B/storageLayout`, compose refused on a zonal bucket, the layout kept across a restart."""
from __future__ import annotations

import json
import uuid

import pytest

from fluxfs.server import run
from tests.server import raw

ZONAL = {"location": "us-central1", "storageClass": "RAPID",
         "customPlacementConfig": {"dataLocations": ["us-central1-a"]},
         "hierarchicalNamespace": {"enabled": True},
         "iamConfiguration": {"uniformBucketLevelAccess": {"enabled": True}}}


def _insert(url: str, **body) -> raw.Resp:
    name = f"z{uuid.uuid4().hex[:12]}"
    return raw.request(url, "POST", "/storage/v1/b", body=json.dumps({"name": name, **body}).encode(),
                       headers={"Content-Type": "application/json"})


def test_zonal_bucket_resource_and_storage_layout(srv):
    made = _insert(srv.url, **ZONAL)
    assert made.status == 200, made
    name = made.json()["name"]
    res = raw.request(srv.url, "GET", f"/storage/v1/b/{name}").json()
    assert (res["location"], res["locationType"], res["storageClass"]) == ("US-CENTRAL1", "zone", "RAPID")
    lay = raw.request(srv.url, "GET", f"/storage/v1/b/{name}/storageLayout").json()
    assert lay == {"kind": "storage#storageLayout", "bucket": name, "location": "US-CENTRAL1",
                   "locationType": "zone", "hierarchicalNamespace": {"enabled": True}}


def test_plain_bucket_layout_unchanged(srv, bkt):
    res = raw.request(srv.url, "GET", f"/storage/v1/b/{bkt}").json()
    assert (res["location"], res["locationType"], res["storageClass"]) == ("US", "multi-region", "STANDARD")
    lay = raw.request(srv.url, "GET", f"/storage/v1/b/{bkt}/storageLayout").json()
    assert lay["locationType"] == "multi-region" and lay["hierarchicalNamespace"] == {"enabled": False}
    assert raw.request(srv.url, "GET", "/storage/v1/b/no-such-bucket-here/storageLayout").status == 404


@pytest.mark.parametrize("change, message", [
    ({"customPlacementConfig": None}, "RAPID storage class needs a zonal bucket"),
    ({"customPlacementConfig": {"dataLocations": ["us-central1-a", "us-central1-b"]}}, "naming one zone"),
    ({"hierarchicalNamespace": None}, "needs hierarchicalNamespace.enabled"),
    ({"iamConfiguration": None}, "needs iamConfiguration.uniformBucketLevelAccess.enabled"),
    ({"customPlacementConfig": {"dataLocations": "us-central1-a"}}, "must be a list"),
])
def test_bad_zonal_bucket_is_refused(srv, change, message):
    resp = _insert(srv.url, **{**ZONAL, **change})
    assert resp.status == 400 and message in resp.json()["error"]["message"], resp


def test_compose_refused_on_zonal_bucket(srv):
    name = _insert(srv.url, **ZONAL).json()["name"]
    for key in ("a", "b"):
        assert raw.request(srv.url, "POST", f"/upload/storage/v1/b/{name}/o", body=b"x",
                           params={"uploadType": "media", "name": key}).status == 200
    body = json.dumps({"sourceObjects": [{"name": "a"}, {"name": "b"}]}).encode()
    resp = raw.request(srv.url, "POST", raw.obj_path(name, "ab") + "/compose", body=body,
                       headers={"Content-Type": "application/json"})
    assert resp.status == 400 and "not supported for objects in zonal buckets" in resp.json()["error"]["message"]
    assert raw.request(srv.url, "GET", raw.obj_path(name, "ab")).status == 404


def test_layout_survives_restart(tmp_path):
    root = str(tmp_path / "store")
    with run(root=root) as srv:
        name = _insert(srv.url, **ZONAL).json()["name"]
    with run(root=root) as srv:
        lay = raw.request(srv.url, "GET", f"/storage/v1/b/{name}/storageLayout").json()
        assert lay["locationType"] == "zone"
