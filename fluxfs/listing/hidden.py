"""Which listed objects are fluxfs's temporaries, to leave out of listings: only those *marked* as one.

A name of a temporary's shape (`tempnames.is_temporary_name`) is not enough: a user may have an object
named so. Listings do not fetch metadata (pages would grow), so a page holding such names is followed by
one listing of just their span under the reserved prefix with the `metadata` field; what it shows
without the marker is the user's and stays listed. Pages without such names cost nothing extra.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from ..gcs import tempnames
from ..gcs.pager import list_pages

if TYPE_CHECKING:  # pragma: no cover
    from ..gcs.client import Client

_FIELDS = "items(name,generation,metadata),nextPageToken"


async def drop_temporaries(client: "Client", bucket: str, items: list[dict], temp_prefix: str,
                           versions: bool = False) -> list[dict]:
    """`items` (raw listing items, keys without the bucket) less fluxfs's marked temporaries."""
    shaped = sorted(it["name"] for it in items if tempnames.is_temporary_name(it["name"], temp_prefix))
    if not shaped:
        return items
    user: set[tuple[str, str]] = set()  # (name, generation) found without the marker: a user's object
    last = shaped[-1]
    async for page in list_pages(client, bucket, prefix=temp_prefix, fields=_FIELDS, start_offset=shaped[0],
                                 params={"versions": "true"} if versions else None, what=f"{bucket}/{temp_prefix}"):
        got = page.get("items") or []
        for it in got:
            if tempnames.is_temporary_name(it["name"], temp_prefix) and \
                    not tempnames.is_marked(it["name"], it.get("metadata"), temp_prefix):
                user.add((it["name"], str(it.get("generation"))))
        if not got or got[-1]["name"] > last:
            break
    # A name gone meanwhile (a temporary deleted since the page was listed) is left out with the marked.
    return [it for it in items if not tempnames.is_temporary_name(it["name"], temp_prefix)
            or (it["name"], str(it.get("generation"))) in user]
