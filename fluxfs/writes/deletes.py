"""Deleting one object through fluxfs's HTTP layer, what `FluxFileSystem._rm_file` (so `rm`, `rm_file`, the
deletes of `mv`) sends: retried by the delete policy, a 403/404 naming the object, and a 404 to a DELETE sent
before (retried by the policy, or re-sent by aiohttp) taken as success: that send may have deleted the object
and lost its answer."""
from __future__ import annotations

from typing import TYPE_CHECKING, Optional

from ..gcs import http

if TYPE_CHECKING:  # pragma: no cover
    from ..gcs.client import Client


async def delete_object(client: "Client", bucket: str, key: str, generation: Optional[str] = None) -> None:
    """Delete "bucket/key" (that generation, when given); FileNotFoundError only when no send could have deleted it."""
    params = {"generation": generation} if generation else None
    url, what = client.json_url("b/{}/o/{}", bucket, key), f"{bucket}/{key}"

    async def attempt(n: int) -> None:
        sends: list = []
        try:
            await http.request_once(client, "DELETE", url, what=what, params=params, ok=(200, 204), sends=sends)
        except FileNotFoundError:
            if n == 0 and len(sends) == 1:
                raise

    await client.retry_policy("delete").run(attempt, what=f"delete {what}")
