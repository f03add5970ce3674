"""Bad-input catalogue: a server slower than `read_timeout` on every attempt (docs/bad-inputs.md).

After the retries give up, the user gets `fluxfs.errors.RequestTimeout` (an OSError) saying what
timed out (the object or bucket), not a bare, empty timeout. (It is deliberately not a
TimeoutError: fsspec's sync wrappers re-raise any TimeoutError as an empty FSTimeoutError.)
"""
from __future__ import annotations

import re

import pytest

from fluxfs.errors import RequestTimeout
from tests.conftest import make_fs

from .conftest import assert_nothing_left


@pytest.fixture
def slow_fs(flux_server, bucket):
    fs = make_fs(flux_server, read_timeout=0.1, retry={"max_attempts": 2, "initial": 0.01, "maximum": 0.02})
    fs.pipe({f"{bucket}/a": b"a", f"{bucket}/b": b"b"})
    flux_server.configure(latency_ms=400)  # every answer starts after 0.4 s: each attempt times out
    return fs


def _assert_says_timeout_for(exc: BaseException, what: str) -> None:
    assert re.match(rf"{re.escape(what)}\S*: timed out: no answer from the server within 0.1 s", str(exc)), repr(exc)


def test_read_slower_than_read_timeout(slow_fs, bucket):
    with pytest.raises(RequestTimeout) as info:
        slow_fs.cat_file(f"{bucket}/a")
    _assert_says_timeout_for(info.value, f"{bucket}/a")


def test_listing_slower_than_read_timeout(slow_fs, bucket):
    with pytest.raises(RequestTimeout) as info:
        slow_fs.find(bucket)
    _assert_says_timeout_for(info.value, bucket)


def test_write_slower_than_read_timeout(slow_fs, flux_server, bucket):
    with pytest.raises(RequestTimeout) as info:
        slow_fs.pipe_file(f"{bucket}/c", b"c")
    _assert_says_timeout_for(info.value, f"{bucket}/c")
    flux_server.configure(latency_ms=0)
    # (Whether "c" exists is the ambiguous outcome of a timed-out write, as on GCS; debris is not.)
    assert_nothing_left(flux_server, bucket)
