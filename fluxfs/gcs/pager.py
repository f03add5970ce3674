"""The one `objects.list` pager: pages of a bucket listing, one request each, followed by page token.

Every caller that pages a listing (the parallel range lister, compose reads' range
listings, cleanup's listing of temporary objects) goes through `list_pages`, so the query
parameters, the retry policy ("list") and the JSON parsing are written once.
"""
from __future__ import annotations

from typing import AsyncGenerator, Mapping

from . import http
from .client import Client, client_of


async def list_pages(
    client: Client,
    bucket: str,
    *,
    prefix: str | None = None,
    fields: str | None = None,
    page_size: int = 1000,
    start_offset: str | None = None,
    end_offset: str | None = None,
    page_token: str | None = None,
    max_pages: int | None = None,
    params: Mapping[str, str] | None = None,
    what: str | None = None,
) -> AsyncGenerator[dict, None]:
    """The parsed JSON pages of `objects.list` on `bucket`, in order, until one has no nextPageToken.

    Keys come in ``[start_offset, end_offset)`` (GCS: startOffset inclusive, endOffset
    exclusive) under `prefix`; None (and an empty prefix or start) is no bound. `fields` is a partial
    response selector and must keep ``nextPageToken`` to page on. `page_token` resumes a
    listing (with the same other arguments it was issued for); `max_pages` stops early.
    `params` adds other query parameters (``delimiter``, ``versions``, ...). Each page is
    yielded as GCS sent it (``items`` may be absent); breaking out of the loop, or
    `aclose()`, stops the paging: no request is made for a page not asked for.
    """
    client = client_of(client)  # a filesystem is taken too (tests, benchmarks): its client
    url = client.json_url("b/{}/o", bucket)
    if what is None:
        what = f"{bucket}/{prefix}" if prefix else bucket
    query: dict[str, str] = {"maxResults": str(page_size)}
    if fields:
        query["fields"] = fields
    if prefix:
        query["prefix"] = prefix
    if start_offset:
        query["startOffset"] = start_offset
    if end_offset is not None:
        query["endOffset"] = end_offset
    if params:
        query.update(params)
    token = page_token
    pages = 0
    while max_pages is None or pages < max_pages:
        if token:
            query["pageToken"] = token
        page = (await http.request(client, "GET", url, op="list", what=what, params=query)).json()
        pages += 1
        yield page
        token = page.get("nextPageToken")
        if not token:
            return
