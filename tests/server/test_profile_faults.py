"""Cloud profile and fault injection: per-op failures, resets mid-body, rate limit, deny, auth, delays."""
from __future__ import annotations

import http.client
import json
import time
from urllib.parse import urlsplit

import pytest

from .raw import obj_path, request, upload


def _error(r):
    body = r.json()["error"]
    assert body["code"] == r.status and body["message"] and body["errors"][0]["domain"] == "global"
    return body


def test_fail_rate_one_op_only(srv, bkt):
    upload(srv.url, bkt, "a", b"data")
    srv.reset_stats()
    srv.configure(fail_rate=1.0, fail_ops={"read"}, fail_codes=(503,))
    for _ in range(5):
        r = request(srv.url, "GET", obj_path(bkt, "a"), params={"alt": "media"})
        assert r.status == 503
        assert _error(r)["errors"][0]["reason"] == "backendError"
    # Other ops are untouched.
    assert request(srv.url, "GET", f"/storage/v1/b/{bkt}/o").status == 200
    assert upload(srv.url, bkt, "b", b"more").status == 200
    st = srv.stats()
    assert st["faults"] == {"read": 5} and st["requests"]["read"] == 5
    srv.configure(fail_rate=0)
    assert request(srv.url, "GET", obj_path(bkt, "a"), params={"alt": "media"}).body == b"data"


def test_fail_codes_are_seeded_and_mixed(srv, bkt):
    upload(srv.url, bkt, "a", b"x")

    def codes():
        return [request(srv.url, "GET", obj_path(bkt, "a")).status for _ in range(40)]

    srv.configure(fail_rate=0.5, fail_codes=(429, 503), seed=11)
    first = codes()
    srv.configure(seed=11)
    assert codes() == first  # same seed, same faults
    assert {429, 503, 200} == set(first)
    r = None
    while r is None or r.status != 429:
        r = request(srv.url, "GET", obj_path(bkt, "a"))
    assert _error(r)["errors"][0]["reason"] == "rateLimitExceeded"


def test_reset_mid_body_truncates_the_read(srv, bkt):
    upload(srv.url, bkt, "big", bytes(2_000_000))
    srv.configure(reset_rate=1.0, fail_ops=["read"])
    u = urlsplit(srv.url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=10)
    conn.request("GET", obj_path(bkt, "big") + "?alt=media")
    resp = conn.getresponse()
    assert resp.status == 200 and resp.getheader("Content-Length") == "2000000"
    with pytest.raises((http.client.IncompleteRead, ConnectionError)):
        resp.read()
    conn.close()
    assert srv.stats()["faults"].get("read", 0) >= 1
    # Listing is not a read: unaffected.
    assert request(srv.url, "GET", f"/storage/v1/b/{bkt}/o").status == 200


def test_rate_limit_answers_429(srv, bkt):
    srv.configure(rate_limit=5)
    statuses = [request(srv.url, "GET", f"/storage/v1/b/{bkt}/o").status for _ in range(30)]
    assert statuses.count(429) >= 15 and statuses.count(200) >= 5
    srv.configure(rate_limit=0)
    assert all(request(srv.url, "GET", f"/storage/v1/b/{bkt}/o").status == 200 for _ in range(20))


def test_deny_ops_answers_403(srv, bkt):
    upload(srv.url, bkt, "a", b"1")
    srv.configure(deny_ops={"compose"})
    body = json.dumps({"sourceObjects": [{"name": "a"}]}).encode()
    r = request(srv.url, "POST", obj_path(bkt, "c") + "/compose", body)
    assert r.status == 403 and "compose" in _error(r)["message"]
    assert request(srv.url, "GET", f"/storage/v1/b/{bkt}/o").json()["items"][0]["name"] == "a"
    assert srv.list_names(bkt) == ["a"]  # nothing composed
    srv.configure(deny_ops=[])
    assert request(srv.url, "POST", obj_path(bkt, "c") + "/compose", body).status == 200


def test_require_token(srv, bkt):
    srv.configure(require_token="s3cret")
    r = request(srv.url, "GET", f"/storage/v1/b/{bkt}/o")
    assert r.status == 401 and _error(r)["code"] == 401
    assert "s3cret" not in r.body.decode()
    assert request(srv.url, "GET", f"/storage/v1/b/{bkt}/o", headers={"Authorization": "Bearer nope"}).status == 401
    assert request(srv.url, "GET", f"/storage/v1/b/{bkt}/o",
                   headers={"Authorization": "Bearer s3cret"}).status == 200
    # XML API errors come in XML.
    x = request(srv.url, "GET", f"/{bkt}/a")
    assert x.status == 401 and b"<Error><Code>" in x.body
    # The control plane is exempt, and never reveals the token.
    assert srv.configure()["require_token"] is True
    assert srv.list_names(bkt) == []


def test_latency_and_bandwidth(srv, bkt):
    upload(srv.url, bkt, "m", bytes(1_000_000))
    srv.configure(latency_ms=150)
    t0 = time.perf_counter()
    assert request(srv.url, "GET", f"/storage/v1/b/{bkt}/o").status == 200
    assert time.perf_counter() - t0 >= 0.15
    srv.configure(latency_ms=0, bandwidth_mbps=4)  # 1 MB at 4 MB/s: at least 0.25 s
    t0 = time.perf_counter()
    r = request(srv.url, "GET", obj_path(bkt, "m"), params={"alt": "media"})
    assert r.body == bytes(1_000_000)
    assert time.perf_counter() - t0 >= 0.24
    s = srv.configure(profile="cloud")
    assert s["latency_ms"] == 30 and s["bandwidth_mbps"] == 100 and s["fail_rate"] == 0
    s = srv.configure(profile="local")
    assert s["latency_ms"] == 0 and s["bandwidth_mbps"] == 0


def test_link_cap_is_shared_by_concurrent_responses(srv, bkt):
    from concurrent.futures import ThreadPoolExecutor

    upload(srv.url, bkt, "m", bytes(range(256)) * 4000)  # 1,024,000 bytes
    srv.configure(link_mbps=8)  # every response together at 8 MB/s; none alone is capped

    def get(_):
        return request(srv.url, "GET", obj_path(bkt, "m"), params={"alt": "media"}).body

    t0 = time.perf_counter()
    with ThreadPoolExecutor(2) as pool:
        bodies = list(pool.map(get, range(2)))
    assert bodies == [bytes(range(256)) * 4000] * 2
    assert time.perf_counter() - t0 >= 0.25  # 2.048 MB through one 8 MB/s link
    t0 = time.perf_counter()
    assert get(0) == bodies[0]
    assert 0.12 <= time.perf_counter() - t0  # alone, the whole link: 1.024 MB at 8 MB/s
    assert srv.configure(link_mbps=0)["link_mbps"] == 0
    with pytest.raises(ValueError, match="link_mbps out of range"):
        srv.configure(link_mbps=-1)


def test_link_cap_paces_uploads_on_its_own_way_in(srv, bkt):
    srv.configure(link_mbps=4)  # 1 MB in at 4 MB/s: at least 0.25 s; answers going out do not slow it
    t0 = time.perf_counter()
    assert upload(srv.url, bkt, "up", bytes(1_000_000)).status == 200
    assert time.perf_counter() - t0 >= 0.95 * 1_000_000 / 4e6


def test_configure_rejects_bad_settings(srv):
    with pytest.raises(ValueError, match="unknown server setting"):
        srv.configure(latency=5)
    with pytest.raises(ValueError, match="unknown op"):
        srv.configure(fail_ops={"reed"})
    with pytest.raises(ValueError, match="out of range"):
        srv.configure(fail_rate=2)
    with pytest.raises(ValueError, match="unknown profile"):
        srv.configure(profile="mars")
    assert srv.configure()["fail_rate"] == 0  # nothing half-applied


def test_stats_count_ops_and_bytes(srv, bkt):
    srv.reset_stats()
    upload(srv.url, bkt, "a", b"12345")
    request(srv.url, "GET", obj_path(bkt, "a"), params={"alt": "media"})
    request(srv.url, "GET", f"/storage/v1/b/{bkt}/o")
    request(srv.url, "DELETE", obj_path(bkt, "a"))
    st = srv.stats()
    assert st["requests"] == {"write": 1, "read": 1, "list": 1, "delete": 1}
    assert st["bytes_in"] == 5 and st["bytes_out"] >= 5 and st["faults"] == {}


def test_stats_show_the_requests_being_served(srv, bkt):
    """`in_flight` counts a request from its start to its answer (what a test waits on instead of a sleep)."""
    import threading

    from tests.conftest import wait_for

    upload(srv.url, bkt, "a", b"12345")
    assert srv.stats()["in_flight"] == {}
    srv.configure(latency_ms=1000)  # the read is held on the server for a second: seen while served
    got: dict = {}
    t = threading.Thread(target=lambda: got.update(r=request(srv.url, "GET", obj_path(bkt, "a"),
                                                               params={"alt": "media"})))
    t.start()
    assert wait_for(lambda: srv.stats()["in_flight"], "the read to be served", timeout=30) == {"read": 1}
    t.join(30)
    assert got["r"].body == b"12345"
    assert srv.stats()["in_flight"] == {}
