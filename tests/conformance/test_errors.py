"""Errors in GCS's JSON shape with the right codes, including injected 429/503 and connection resets."""
from __future__ import annotations

import http.client

import pytest

from tests.conftest import new_bucket_name

from .wire import assert_gcs_error


def test_error_shapes_for_common_codes(wire, any_bucket):
    assert_gcs_error(wire.get_meta(any_bucket, "missing"), 404)
    assert_gcs_error(wire.list(new_bucket_name()), 404)
    assert_gcs_error(wire.request("POST", "/storage/v1/b", params={"project": "t"}, json={"name": any_bucket}), 409)
    wire.put(any_bucket, "p", b"x")
    assert_gcs_error(wire.compose(any_bucket, "c", ["p"] * 33), 400)


def test_bad_requests_are_400(wire, any_bucket):
    assert_gcs_error(wire.request("POST", f"/storage/v1/b/{any_bucket}/o/x/compose", body=b"{not json",
                                   headers={"Content-Type": "application/json"}), 400)
    assert_gcs_error(wire.list(any_bucket, maxResults="many"), 400)
    assert_gcs_error(wire.request("POST", f"/upload/storage/v1/b/{any_bucket}/o", params={"uploadType": "media"},
                                   body=b"no name"), 400)
    assert_gcs_error(wire.request("POST", f"/upload/storage/v1/b/{any_bucket}/o",
                                   params={"uploadType": "bogus", "name": "x"}, body=b"x"), 400)


def test_precondition_error_shape(fwire, bucket):
    """"HTTP status and error codes": 412 with reason conditionNotMet (fake-gcs-server ignores the precondition)."""
    fwire.put(bucket, "o", b"x")
    err = assert_gcs_error(fwire.upload_media(bucket, "o", b"y", ifGenerationMatch="0"), 412)
    assert err["errors"][0]["reason"] == "conditionNotMet"


@pytest.mark.parametrize("code", [429, 503])
def test_injected_faults_use_gcs_error_shape(flux_server, fwire, bucket, code):
    fwire.put(bucket, "o", b"x")
    flux_server.configure(fail_rate=1.0, fail_codes=[code], fail_ops=["read"], seed=1)
    assert_gcs_error(fwire.get_media(bucket, "o"), code)
    assert fwire.list(bucket).status == 200  # other operations are unaffected
    flux_server.configure(profile="local")
    assert fwire.get_media(bucket, "o").body == b"x"


def test_injected_faults_on_writes_store_nothing(flux_server, fwire, bucket):
    flux_server.configure(fail_rate=1.0, fail_codes=[503], fail_ops=["write"], seed=1)
    assert_gcs_error(fwire.upload_media(bucket, "w", b"x"), 503)
    flux_server.configure(profile="local")
    assert fwire.get_meta(bucket, "w").status == 404


def test_connection_reset_mid_body(flux_server, fwire, bucket):
    data = b"z" * 200_000
    fwire.put(bucket, "big", data)
    flux_server.configure(reset_rate=1.0, fail_ops=["read"], seed=1)
    with pytest.raises((http.client.IncompleteRead, ConnectionError, http.client.RemoteDisconnected)):
        r = fwire.get_media(bucket, "big")
        # A reset may also surface as a short body when the server closes without a Content-Length.
        if len(r.body) < len(data):
            raise http.client.IncompleteRead(r.body, len(data) - len(r.body))
    flux_server.configure(profile="local")
    assert fwire.get_media(bucket, "big").body == data


def test_unsatisfiable_range_error_shape(fwire, bucket):
    """"HTTP status and error codes": 416 Requested range not satisfiable, with the JSON error body
    (fake-gcs-server sends an empty body)."""
    fwire.put(bucket, "o", b"abc")
    assert_gcs_error(fwire.get_media(bucket, "o", headers={"Range": "bytes=3-"}), 416)


def test_rate_limit_answers_429(flux_server, fwire, bucket):
    fwire.put(bucket, "o", b"x")
    # 2 requests/s with a 1 s burst: of 40 back-to-back requests most must be refused, not queued.
    flux_server.configure(rate_limit=2)
    replies = [fwire.get_meta(bucket, "o") for _ in range(40)]
    ok = [r for r in replies if r.status == 200]
    limited = [r for r in replies if r.status == 429]
    assert len(ok) + len(limited) == 40
    assert ok and len(limited) >= 10
    assert_gcs_error(limited[0], 429)
    flux_server.configure(profile="local")
    assert all(fwire.get_meta(bucket, "o").status == 200 for _ in range(20))


def test_denied_operation_is_403_and_changes_nothing(flux_server, fwire, bucket):
    fwire.put(bucket, "o", b"x")
    flux_server.configure(deny_ops=["delete"])
    assert_gcs_error(fwire.delete(bucket, "o"), 403)
    assert fwire.get_media(bucket, "o").body == b"x"  # reads are still allowed
    flux_server.configure(profile="local")
    assert fwire.delete(bucket, "o").status == 204
