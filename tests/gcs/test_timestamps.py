"""`fluxfs.gcs.timestamps`: the client's one RFC 3339 parser gives what gcsfs's gives."""
from __future__ import annotations

import datetime

import gcsfs.core
import pytest

from fluxfs.gcs.timestamps import UTC, TimestampCache, parse_timestamp


@pytest.mark.parametrize("ts", ["2024-01-02T03:04:05Z", "2024-01-02T03:04:05.1Z", "2024-01-02T03:04:05.123Z",
                                "2024-01-02T03:04:05.123456Z"])
def test_same_as_gcsfs(ts):
    ref = gcsfs.core.GCSFileSystem._parse_timestamp(None, ts)
    got = parse_timestamp(ts)
    assert got == ref and got.tzinfo is UTC and got.utcoffset() == ref.utcoffset()


def test_offsets_and_naive():
    assert parse_timestamp("2024-01-02T05:04:05+02:00") == datetime.datetime(2024, 1, 2, 3, 4, 5, tzinfo=UTC)
    assert parse_timestamp("2024-01-02T05:04:05+02:00").tzinfo is UTC
    with pytest.raises(ValueError):
        parse_timestamp("2024-01-02T03:04:05")
    with pytest.raises(ValueError):
        parse_timestamp("yesterday")


def test_cache_parses_each_string_once():
    cache = TimestampCache()
    a = cache["2024-01-02T03:04:05.123Z"]
    assert cache["2024-01-02T03:04:05.123Z"] is a and cache[None] is None and len(cache) == 2
