"""The retry policy on the wire: transient answers are retried with backoff, bounded; others are not."""
from __future__ import annotations

import time

import pytest
from fsspec.asyn import sync

from fluxfs import RetryPolicy
from fluxfs.gcs import http
from fluxfs.errors import PreconditionFailed, RetryableError
from fluxfs.gcs.retry import resolve_policies
from tests.conftest import make_fs

FAST = {"initial": 0.001, "maximum": 0.01, "max_attempts": 40}


def _get_metadata(fs, bucket, key, **kw):
    """One object-metadata GET through fluxfs's HTTP layer (the path every acceleration uses)."""
    url = fs.client.json_url("b/{}/o/{}", bucket, key)
    return sync(fs.loop, http.request, fs, "GET", url, op="read", what=f"{bucket}/{key}", **kw)


def test_transient_503_and_429_are_retried_until_success(flux_server, bucket):
    fs = make_fs(flux_server, retry=FAST)
    fs.pipe(f"{bucket}/k", b"x")
    flux_server.reset_stats()
    flux_server.configure(fail_rate=0.5, fail_codes=(429, 503), fail_ops={"read"}, seed=7)
    for _ in range(10):
        assert _get_metadata(fs, bucket, "k").json()["name"] == "k"
    stats = flux_server.stats()
    assert stats["faults"].get("read", 0) > 0, "the server injected no faults: the test proves nothing"


def test_retries_are_bounded_by_max_attempts(flux_server, bucket):
    fs = make_fs(flux_server, retry={"read": {"initial": 0.001, "maximum": 0.01, "max_attempts": 3}})
    fs.pipe(f"{bucket}/k", b"x")
    flux_server.reset_stats()
    flux_server.configure(fail_rate=1.0, fail_codes=(503,), fail_ops={"read"})
    with pytest.raises(RetryableError, match="HTTP 503"):
        _get_metadata(fs, bucket, "k")
    assert flux_server.stats()["requests"]["read"] == 3


def test_retries_are_bounded_by_deadline(flux_server, bucket):
    policy = RetryPolicy(initial=0.05, maximum=0.05, deadline=0.3, max_attempts=1000)
    fs = make_fs(flux_server)
    fs.pipe(f"{bucket}/k", b"x")
    flux_server.reset_stats()
    flux_server.configure(fail_rate=1.0, fail_codes=(429,), fail_ops={"read"})
    start = time.monotonic()
    with pytest.raises(RetryableError, match="HTTP 429"):
        _get_metadata(fs, bucket, "k", retry=policy)
    assert time.monotonic() - start < 5
    assert 2 <= flux_server.stats()["requests"]["read"] < 1000


def test_permanent_errors_are_not_retried(flux_server, bucket):
    fs = make_fs(flux_server, retry=FAST)
    flux_server.reset_stats()
    with pytest.raises(FileNotFoundError, match=f"{bucket}/missing"):
        _get_metadata(fs, bucket, "missing")
    assert flux_server.stats()["requests"]["read"] == 1
    flux_server.configure(deny_ops={"read"})
    with pytest.raises(PermissionError, match="HTTP 403"):
        _get_metadata(fs, bucket, "missing")


def test_precondition_failure_maps_to_its_own_exception(flux_server, bucket):
    fs = make_fs(flux_server)
    fs.pipe(f"{bucket}/k", b"x")
    with pytest.raises(PreconditionFailed, match="HTTP 412"):
        _get_metadata(fs, bucket, "k", params={"ifGenerationMatch": "1"})


def test_per_operation_policies():
    policies = resolve_policies({"list": {"max_attempts": 2}, "default": RetryPolicy(max_attempts=5)})
    assert policies["list"].max_attempts == 2
    assert policies["read"].max_attempts == 5
    assert resolve_policies(RetryPolicy(deadline=1)).keys() == resolve_policies(None).keys()
