"""Timestamps as GCS writes them: RFC 3339 in resources and XML listings, HTTP dates in Last-Modified."""
from __future__ import annotations

import time
from functools import lru_cache


@lru_cache(maxsize=4096)
def rfc3339(ts: float) -> str:
    """``ts`` (seconds since the epoch) as 2024-01-02T03:04:05.678Z (milliseconds, UTC)."""
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ts)) + ".%03dZ" % int((ts % 1) * 1000)


def http_date(ts: float) -> str:
    """``ts`` as an HTTP date (RFC 7231), e.g. Tue, 02 Jan 2024 03:04:05 GMT."""
    return time.strftime("%a, %d %b %Y %H:%M:%S GMT", time.gmtime(ts))
