"""Requests a web page could make to the embedded server from the user's browser (docs/bad-inputs.md,
"Requests from a web page"): each is refused with a status and message naming why, and changes nothing."""
from __future__ import annotations

import json

import pytest

from fluxfs.server import run
from fluxfs.server.cli import banner
from tests.server.raw import request, upload


def _control(url, method, cmd, body=None, headers=None, params=None):
    hdrs = {"Content-Type": "application/json", **(headers or {})}
    return request(url, method, f"/_fluxfs/{cmd}", None if body is None else json.dumps(body).encode(),
                   headers=hdrs, params=params)


def test_control_endpoints_need_the_token(flux_server, bucket):
    flux_server.configure(require_token="s3cret")
    turned_off = _control(flux_server.url, "POST", "configure", {"require_token": None})
    assert turned_off.status == 401, turned_off
    assert "Control endpoints need the server's bearer token" in turned_off.json()["error"]["message"]
    names = _control(flux_server.url, "GET", "names", params={"bucket": bucket})
    assert names.status == 401, names
    # Still required: a data-plane call without the token is refused.
    assert upload(flux_server.url, bucket, "x", b"1").status == 401
    # With the token (ServerHandle sends the one it configured) everything works.
    assert flux_server.list_names(bucket) == []
    ok = _control(flux_server.url, "GET", "names", headers={"Authorization": "Bearer s3cret"},
                  params={"bucket": bucket})
    assert ok.status == 200 and ok.json() == []


def test_cross_origin_request_refused(flux_server, bucket):
    evil = {"Origin": "http://evil.example"}
    r = _control(flux_server.url, "POST", "configure", {"deny_ops": ["read"]}, headers=evil)
    assert r.status == 403, r
    assert r.json()["error"]["message"] == ("Cross-origin request from 'http://evil.example' refused: this "
                                            "server only answers requests from its own origin.")
    assert flux_server.configure()["deny_ops"] == []
    up = request(flux_server.url, "POST", f"/upload/storage/v1/b/{bucket}/o", b"payload",
                 headers={**evil, "Content-Type": "text/plain"}, params={"uploadType": "media", "name": "x"})
    assert up.status == 403 and "Cross-origin request" in up.json()["error"]["message"]
    assert flux_server.list_names(bucket) == []
    # The server's own origin is fine.
    same = request(flux_server.url, "GET", f"/storage/v1/b/{bucket}/o",
                   headers={"Origin": flux_server.url})
    assert same.status == 200, same


@pytest.mark.parametrize("ctype", ["text/plain", "application/x-www-form-urlencoded", "multipart/form-data; b=1"])
def test_simple_content_type_post_refused(flux_server, bucket, ctype):
    body = json.dumps({"deny_ops": ["read"]}).encode()
    r = request(flux_server.url, "POST", "/_fluxfs/configure", body, headers={"Content-Type": ctype})
    assert r.status == 415, r
    assert r.json()["error"]["message"] == ("POST /_fluxfs/configure expects a JSON body (Content-Type: "
                                            f"application/json), got Content-Type {ctype.split(';')[0]!r}.")
    assert flux_server.configure()["deny_ops"] == []
    # A JSON API call that expects JSON (compose) refuses it too, and creates nothing.
    upload(flux_server.url, bucket, "a", b"A")
    compose = json.dumps({"sourceObjects": [{"name": "a"}, {"name": "a"}]}).encode()
    r = request(flux_server.url, "POST", f"/storage/v1/b/{bucket}/o/aa/compose", compose,
                headers={"Content-Type": ctype})
    assert r.status == 415 and "expects a JSON body" in r.json()["error"]["message"], r
    assert flux_server.list_names(bucket) == ["a"]


def test_foreign_host_refused(flux_server, bucket):
    # A DNS-rebinding page reaches 127.0.0.1 under its own name.
    r = request(flux_server.url, "GET", f"/storage/v1/b/{bucket}/o", headers={"Host": "evil.example:80"})
    assert r.status == 403, r
    assert r.json()["error"]["message"].startswith("Host 'evil.example:80' is not this server's address")
    xml = request(flux_server.url, "GET", f"/{bucket}", headers={"Host": "evil.example"})
    assert xml.status == 403 and b"AccessDenied" in xml.body
    ctl = _control(flux_server.url, "GET", "names", headers={"Host": "rebind.example"}, params={"bucket": bucket})
    assert ctl.status == 403
    for host in ("localhost", "127.0.0.1:1", "[::1]:9", "localhost:80", "app.localhost"):
        assert request(flux_server.url, "GET", f"/storage/v1/b/{bucket}/o", headers={"Host": host}).status == 200


def test_allowed_host_accepted():
    with run(allowed_hosts=["gcs"]) as srv:
        srv.create_bucket("bkt")
        assert request(srv.url, "GET", "/storage/v1/b/bkt/o", headers={"Host": "gcs:4443"}).status == 200
        assert request(srv.url, "GET", "/storage/v1/b/bkt/o", headers={"Host": "other:4443"}).status == 403


def test_generate_capped(flux_server, bucket):
    with pytest.raises(ValueError, match=r"generate: count 1000000000 is over the limit of 10,000,000 objects"):
        flux_server.generate(bucket, 10**9)
    with pytest.raises(ValueError, match=r"generate: size 6597069766656 is over GCS's largest object"):
        flux_server.generate(bucket, 1, size=6 * 2**40)
    assert flux_server.list_names(bucket) == []


def test_serve_on_all_interfaces_warns():
    text = banner("http://0.0.0.0:9023", "0.0.0.0", None)
    assert "WARNING: listening on 0.0.0.0 (every interface of this machine) with no authentication: anyone " \
           "who can reach this machine can read, change and delete every object" in text
    assert "WARNING" not in banner("http://127.0.0.1:9023", "127.0.0.1", None)
