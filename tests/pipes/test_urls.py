"""`fluxfs.pipes.urls`: the one URL parser every pipes module uses."""
from __future__ import annotations

import pytest

from fluxfs.pipes.urls import ObjectURL, parse_url, url_protocol


@pytest.mark.parametrize("url,expected", [
    ("flux://bucket/images/cat.jpg", ("flux", "bucket", "images/cat.jpg")),
    ("gs://bucket/prefix/", ("gs", "bucket", "prefix/")),        # a prefix keeps its trailing '/'
    ("flux://bucket", ("flux", "bucket", "")),                   # a bucket alone
    ("flux:///images/", ("flux", "", "images/")),                # no bucket: callers refuse it
    ("bucket/key", ("flux", "bucket", "key")),                   # a bare path, as info dicts name objects
    ("bucket/odd://key", ("flux", "bucket", "odd://key")),       # "://" inside a key is no protocol
])
def test_parse_url(url, expected):
    parsed = parse_url(url)
    assert parsed == ObjectURL(*expected)
    assert parsed.path == f"{expected[1]}/{expected[2]}"


def test_default_protocol_applies_to_bare_paths_only():
    assert parse_url("bucket/key", default_protocol="gs").protocol == "gs"
    assert parse_url("flux://bucket/key", default_protocol="gs").protocol == "flux"


@pytest.mark.parametrize("url,protocol", [
    ("flux://b/k", "flux"), ("file:///tmp/list.txt", "file"), ("b/k", None), ("b/k://x", None), ("list.txt", None),
])
def test_url_protocol(url, protocol):
    assert url_protocol(url) == protocol
