"""`fluxfs.gcs.pager.list_pages`: the one objects.list pager, against a plain sequential listing."""
from __future__ import annotations

from fsspec.asyn import sync

from fluxfs.gcs.pager import list_pages

from tests.listing.helpers import put_keys, sequential_names

KEYS = [f"a/{i:03d}" for i in range(25)] + [f"b/{i:03d}" for i in range(5)] + ["c"]


def _collect(fs, bucket, **kwargs) -> tuple[list[str], int]:
    async def go():
        names, pages = [], 0
        async for page in list_pages(fs, bucket, **kwargs):
            pages += 1
            names += [it["name"] for it in page.get("items") or []]
        return names, pages

    return sync(fs.loop, go)


def test_pages_through_everything(fs, flux_server, bucket):
    put_keys(fs, bucket, KEYS)
    names, pages = _collect(fs, bucket, page_size=7, fields="items(name),nextPageToken")
    assert names == sequential_names(flux_server.url, bucket) == sorted(KEYS)
    assert pages == 5


def test_prefix_and_offsets(fs, bucket):
    put_keys(fs, bucket, KEYS)
    assert _collect(fs, bucket, prefix="a/", start_offset="a/010", end_offset="a/020", page_size=3)[0] == \
        [f"a/{i:03d}" for i in range(10, 20)]
    assert _collect(fs, bucket, prefix="b/")[0] == [f"b/{i:03d}" for i in range(5)]
    assert _collect(fs, bucket, prefix="nothing/") == ([], 1)


def test_max_pages_token_and_params(fs, bucket):
    put_keys(fs, bucket, KEYS)
    names, pages = _collect(fs, bucket, page_size=4, max_pages=2)
    assert (names, pages) == (sorted(KEYS)[:8], 2)

    async def token_after_first():
        async for page in list_pages(fs, bucket, page_size=4):
            return page["nextPageToken"]

    token = sync(fs.loop, token_after_first)
    assert _collect(fs, bucket, page_size=4, page_token=token)[0] == sorted(KEYS)[4:]

    async def prefixes():
        out = []
        async for page in list_pages(fs, bucket, params={"delimiter": "/"}):
            out += page.get("prefixes") or []
        return out

    assert sync(fs.loop, prefixes) == ["a/", "b/"]


def test_breaking_out_stops_requests(fs, flux_server, bucket):
    put_keys(fs, bucket, KEYS)
    flux_server.reset_stats()

    async def first_only():
        pages = list_pages(fs, bucket, page_size=2)
        async for _page in pages:
            break
        await pages.aclose()

    sync(fs.loop, first_only)
    assert flux_server.stats()["requests"]["list"] == 1
