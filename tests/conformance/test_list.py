"""objects.list: paging, prefix, offsets, delimiter, fields, maxResults cap."""
from __future__ import annotations

import pytest

from tests.conftest import new_bucket_name

from .wire import assert_gcs_error

NAMES = sorted(["a/1", "a/2", "a/b/3", "a/b/4", "b/1", "b/2/x", "c", "d/", "e~", "z\u00e9", "\u00e9a"],
               key=lambda s: s.encode())


@pytest.fixture
def filled(wire, any_bucket):
    for n in NAMES:
        wire.put(any_bucket, n, n.encode())
    return any_bucket


def names(items):
    return [i["name"] for i in items]


def test_paging_returns_every_object_once_in_utf8_order(wire, filled):
    items, pages = wire.list_all(filled, maxResults=3)
    assert names(items) == NAMES  # sorted by UTF-8 bytes, nothing repeated or missing
    assert len(pages) >= -(-len(NAMES) // 3)
    assert all(len(p.get("items", [])) <= 3 for p in pages)


def test_item_fields(wire, filled):
    """JSON API objects resource: size and generation are int64 formatted as strings."""
    page = wire.list(filled, prefix="c").json()
    assert page["kind"] == "storage#objects"
    (item,) = page["items"]
    assert item["name"] == "c" and item["bucket"] == filled
    assert item["size"] == "1"
    assert isinstance(item["generation"], str) and int(item["generation"]) > 0
    assert "nextPageToken" not in page


def test_prefix(wire, filled):
    items, _ = wire.list_all(filled, prefix="a/", maxResults=2)
    assert names(items) == ["a/1", "a/2", "a/b/3", "a/b/4"]


def test_empty_result_has_no_items(wire, filled):
    page = wire.list(filled, prefix="nothing-here").json()
    assert page.get("items", []) == [] and "nextPageToken" not in page


def test_start_offset_inclusive_end_offset_exclusive(wire, filled):
    items, _ = wire.list_all(filled, startOffset="a/2", endOffset="c", maxResults=2)
    assert names(items) == ["a/2", "a/b/3", "a/b/4", "b/1", "b/2/x"]


def test_offsets_compare_utf8_bytes(wire, filled):
    # "é" is 0xC3 0xA9 in UTF-8, so both names starting with it sort after "z" (0x7A).
    items, _ = wire.list_all(filled, startOffset="z")
    assert names(items) == ["z\u00e9", "\u00e9a"]


def test_delimiter_single_page(wire, filled):
    page = wire.list(filled, delimiter="/").json()
    assert names(page["items"]) == ["c", "e~", "z\u00e9", "\u00e9a"]
    assert page["prefixes"] == ["a/", "b/", "d/"]


def test_delimiter_with_prefix(wire, filled):
    page = wire.list(filled, delimiter="/", prefix="a/").json()
    assert names(page["items"]) == ["a/1", "a/2"]
    assert page["prefixes"] == ["a/b/"]


def test_list_missing_bucket_is_404(wire):
    assert_gcs_error(wire.list(new_bucket_name()), 404)


def test_include_trailing_delimiter(wire, any_bucket):
    """JSON API objects: list: includeTrailingDelimiter also returns objects whose names end in the delimiter."""
    for n in ["d/", "d/x", "e"]:
        wire.put(any_bucket, n, b"x")
    page = wire.list(any_bucket, delimiter="/", includeTrailingDelimiter="true").json()
    assert page["prefixes"] == ["d/"]
    assert names(page["items"]) == ["d/", "e"]
    page = wire.list(any_bucket, delimiter="/").json()
    assert names(page["items"]) == ["e"]


def test_versions_false_lists_live_objects_only(wire, any_bucket):
    wire.put(any_bucket, "v", b"1")
    wire.put(any_bucket, "v", b"22")
    page = wire.list(any_bucket, versions="false").json()
    assert [(i["name"], i["size"]) for i in page["items"]] == [("v", "2")]


# -- fluxfs server only: fake-gcs-server repeats prefixes, ignores `fields` and maxResults' cap ---


def test_delimiter_paging_never_repeats_prefixes(fwire, bucket):
    """JSON API objects: list: prefixes are counted against maxResults and each appears once.

    fake-gcs-server repeats prefixes on every page.
    """
    for n in ["a/1", "a/2", "a/3", "b/1", "b/2", "c", "d/1", "e", "f/1", "f/2", "g"]:
        fwire.put(bucket, n, b"x")
    items, pages = fwire.list_all(bucket, delimiter="/", maxResults=2)
    flat = [p for page in pages for p in page.get("prefixes", [])]
    assert flat == ["a/", "b/", "d/", "f/"]
    assert names(items) == ["c", "e", "g"]
    # maxResults bounds items and prefixes together.
    assert all(len(p.get("items", [])) + len(p.get("prefixes", [])) <= 2 for p in pages)
    assert len(pages) >= 4


def test_fields_partial_response(fwire, bucket):
    """Performance tips / partial responses: `fields` keeps only the named fields."""
    for n in ["p1", "p2", "p3"]:
        fwire.put(bucket, n, b"abc")
    page = fwire.list(bucket, maxResults=2, fields="items(name,size),nextPageToken").json()
    assert set(page) == {"items", "nextPageToken"}
    assert page["items"] == [{"name": "p1", "size": "3"}, {"name": "p2", "size": "3"}]


def test_fields_for_fast_listing(fwire, bucket):
    """The partial response fluxfs's lister asks for: exactly these fields, values as in the full resource."""
    data = {"f/a": b"alpha", "f/b": b"beta", "f/c": b"gamma"}
    full = {n: fwire.put(bucket, n, d) for n, d in data.items()}
    page = fwire.list(bucket, maxResults=2, fields="items(name,size,generation,crc32c),nextPageToken").json()
    rest = fwire.list(bucket, maxResults=2, pageToken=page["nextPageToken"],
                      fields="items(name,size,generation,crc32c),nextPageToken").json()
    assert set(rest) == {"items"}
    items = page["items"] + rest["items"]
    assert items == [{k: full[n][k] for k in ("name", "size", "generation", "crc32c")} for n in sorted(data)]


def test_max_results_capped_at_1000(flux_server, fwire, bucket):
    """JSON API objects: list: maxResults is at most 1000 (larger values are treated as 1000)."""
    flux_server.generate(bucket, 1005, 1, prefix="g/", seed=1)
    page = fwire.list(bucket, maxResults=5000, fields="items(name),nextPageToken").json()
    assert len(page["items"]) == 1000
    assert page["nextPageToken"]
    rest = fwire.list(bucket, maxResults=5000, pageToken=page["nextPageToken"]).json()
    assert len(rest["items"]) == 5 and "nextPageToken" not in rest


@pytest.mark.parametrize("asked", [1001, 1_000_000_000, 2**63 - 1])
def test_any_max_results_above_1000_is_capped(flux_server, fwire, bucket, asked):
    """JSON API objects: list: a page never holds more than 1,000 items, however many are asked for."""
    flux_server.generate(bucket, 3000, 1, prefix="g/", seed=1)
    items, pages = fwire.list_all(bucket, maxResults=asked, fields="items(name),nextPageToken")
    assert [len(p["items"]) for p in pages] == [1000, 1000, 1000]
    assert len({i["name"] for i in items}) == 3000
