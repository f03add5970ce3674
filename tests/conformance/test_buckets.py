"""buckets.insert / get / list / delete on the wire."""
from __future__ import annotations

from tests.conftest import new_bucket_name

from .wire import assert_gcs_error


def test_insert_get_list(wire):
    name = new_bucket_name()
    r = wire.request("POST", "/storage/v1/b", params={"project": "test"}, json={"name": name})
    assert r.status == 200, r
    assert r.json()["name"] == name
    got = wire.request("GET", f"/storage/v1/b/{name}")
    assert got.status == 200, got
    assert got.json()["name"] == name
    listed = wire.request("GET", "/storage/v1/b", params={"project": "test"})
    assert listed.status == 200, listed
    assert name in [b["name"] for b in listed.json().get("items", [])]


def test_insert_existing_is_409(wire, any_bucket):
    r = wire.request("POST", "/storage/v1/b", params={"project": "test"}, json={"name": any_bucket})
    assert_gcs_error(r, 409)


def test_get_missing_bucket_is_404(wire):
    assert_gcs_error(wire.request("GET", f"/storage/v1/b/{new_bucket_name()}"), 404)


def test_delete_empty_bucket(wire):
    name = new_bucket_name()
    assert wire.request("POST", "/storage/v1/b", params={"project": "test"}, json={"name": name}).status == 200
    r = wire.request("DELETE", f"/storage/v1/b/{name}")
    assert 200 <= r.status < 300, r
    assert_gcs_error(wire.request("GET", f"/storage/v1/b/{name}"), 404)


def test_delete_empty_bucket_is_204(fwire):
    """JSON API buckets: delete: success is an empty response (HTTP 204). fake-gcs-server answers 200 'null'."""
    name = new_bucket_name()
    assert fwire.request("POST", "/storage/v1/b", params={"project": "test"}, json={"name": name}).status == 200
    r = fwire.request("DELETE", f"/storage/v1/b/{name}")
    assert r.status == 204 and r.body == b"", r


def test_delete_non_empty_bucket_is_409(fwire, bucket):
    """GCS "HTTP status and error codes": deleting a bucket that is not empty is 409 Conflict.

    fake-gcs-server answers 412 instead, so this runs on the fluxfs server only.
    """
    fwire.put(bucket, "keep", b"x")
    assert_gcs_error(fwire.request("DELETE", f"/storage/v1/b/{bucket}"), 409)
    assert fwire.get_media(bucket, "keep").body == b"x"


def test_delete_missing_bucket_is_404(wire):
    assert_gcs_error(wire.request("DELETE", f"/storage/v1/b/{new_bucket_name()}"), 404)
