"""Bulk generation and listing: counts, bytes, pagination, delimiters, stable page tokens, flat page cost."""
from __future__ import annotations

from fluxfs.server import synthetic_bytes

from .raw import list_all, obj_path, request, upload


def test_generate_counts_names_and_bytes(srv, bkt):
    assert srv.generate(bkt, 2500, size=(0, 3000), prefix="g/", seed=7) == 2500
    names, prefixes, pages = list_all(srv.url, bkt, prefix="g/")
    assert names == [f"g/{i:08d}" for i in range(2500)] == srv.list_names(bkt, "g/")
    assert prefixes == [] and pages == 3  # maxResults is capped at 1000
    r = request(srv.url, "GET", obj_path(bkt, "g/00000042"))
    size = int(r.json()["size"])
    assert 0 <= size <= 3000
    media = request(srv.url, "GET", obj_path(bkt, "g/00000042"), params={"alt": "media"})
    assert media.status == 200 and media.body == synthetic_bytes("g/00000042", size, 7)
    assert f"crc32c={r.json()['crc32c']}" in media.headers["x-goog-hash"]
    # A range of a synthetic object is the same slice of its full content.
    part = request(srv.url, "GET", obj_path(bkt, "g/00000042"), params={"alt": "media"},
                   headers={"Range": "bytes=5-"})
    if size > 5:
        assert part.status == 206 and part.body == synthetic_bytes("g/00000042", size, 7)[5:]


def test_generate_fixed_size_and_overwrite(srv, bkt):
    upload(srv.url, bkt, "00000001", b"real object")
    srv.generate(bkt, 3, size=4096, seed=1)
    media = request(srv.url, "GET", obj_path(bkt, "00000001"), params={"alt": "media"})
    assert media.body == synthetic_bytes("00000001", 4096, 1)


def test_synthetic_bytes_deterministic_and_distinct():
    a = synthetic_bytes("x", 10_000, 0)
    assert a == synthetic_bytes("x", 10_000, 0) and len(a) == 10_000
    assert a != synthetic_bytes("y", 10_000, 0) and a != synthetic_bytes("x", 10_000, 1)
    assert synthetic_bytes("x", 10_000, 0)[:100] == synthetic_bytes("x", 100, 0)
    assert a[:4093] != a[1:4094]  # no short period an off-by-some slice would hide behind


def test_delimiter_prefixes_never_repeat_across_pages(srv, bkt):
    for d in range(5):
        srv.generate(bkt, 7, size=1, prefix=f"dir{d}/")
    upload(srv.url, bkt, "top-a", b"1")
    upload(srv.url, bkt, "top-b", b"2")
    names, prefixes, pages = list_all(srv.url, bkt, delimiter="/", maxResults=2)
    assert prefixes == [f"dir{d}/" for d in range(5)]
    assert names == ["top-a", "top-b"]
    assert pages == 4  # 7 entries, 2 per page


def test_page_token_stable_under_concurrent_changes(srv, bkt):
    srv.generate(bkt, 30, size=1, prefix="k")
    r = request(srv.url, "GET", f"/storage/v1/b/{bkt}/o", params={"maxResults": 10}).json()
    first = [i["name"] for i in r["items"]]
    # Inserts before the cursor, deletes behind and ahead of it: the rest of the listing is unaffected.
    upload(srv.url, bkt, "k00000000a", b"x")
    assert request(srv.url, "DELETE", obj_path(bkt, "k00000003")).status == 204
    assert request(srv.url, "DELETE", obj_path(bkt, "k00000020")).status == 204
    rest, _, _ = list_all(srv.url, bkt, pageToken=r["nextPageToken"])
    assert rest == [f"k{i:08d}" for i in range(10, 30) if i != 20]
    assert not set(first) & set(rest)


def test_list_page_cost_does_not_grow_with_bucket(srv, bkt):
    """A page deep inside a 200k-object bucket visits ~one page of index entries, not the bucket."""
    srv.generate(bkt, 200_000, size=16, prefix="o/")
    srv.reset_stats()
    r = request(srv.url, "GET", f"/storage/v1/b/{bkt}/o",
                params={"startOffset": "o/00150000", "maxResults": 1000, "fields": "items(name),nextPageToken"})
    page = r.json()
    assert [i["name"] for i in page["items"]] == [f"o/{i:08d}" for i in range(150_000, 151_000)]
    assert set(page["items"][0]) == {"name"}
    assert srv.stats()["keys_scanned"] <= 1001
    # Following the token costs the same.
    srv.reset_stats()
    nxt = request(srv.url, "GET", f"/storage/v1/b/{bkt}/o",
                  params={"pageToken": page["nextPageToken"], "maxResults": 1000, "fields": "items(name)"}).json()
    assert nxt["items"][0]["name"] == "o/00151000"
    assert srv.stats()["keys_scanned"] <= 1001


def test_delimiter_page_skips_whole_directories(srv, bkt):
    """Listing 50 directories of 2,000 objects each with a delimiter visits one entry per directory."""
    for d in range(50):
        srv.generate(bkt, 2000, size=1, prefix=f"d{d:02d}/")
    srv.reset_stats()
    names, prefixes, _ = list_all(srv.url, bkt, delimiter="/")
    assert names == [] and prefixes == [f"d{d:02d}/" for d in range(50)]
    assert srv.stats()["keys_scanned"] <= 60


def test_start_end_offsets_and_trailing_delimiter(srv, bkt):
    for n in ["a/", "a/x", "b", "c/d", "e"]:
        upload(srv.url, bkt, n, b"1")
    names, _, _ = list_all(srv.url, bkt, startOffset="a/x", endOffset="e")
    assert names == ["a/x", "b", "c/d"]
    names, prefixes, _ = list_all(srv.url, bkt, delimiter="/", includeTrailingDelimiter="true")
    assert prefixes == ["a/", "c/"] and names == ["a/", "b", "e"]
