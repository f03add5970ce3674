"""What kind of bucket a path is in (standard, hierarchical namespace, zonal), learned once per bucket per process.

GCS documents the layout on the JSON API (`GET /storage/v1/b/BUCKET/storageLayout`: `locationType`
"zone" is a zonal, Rapid, bucket; `hierarchicalNamespace.enabled` an HNS one), needing only
`storage.objects.list`, which any reader holds. That is what gcsfs asks the storage-control gRPC API,
over the same HTTP session as every other request: no gRPC channel, no stall against emulators. A server
without the route (fake-gcs-server) is asked for the bucket resource instead (same fields). The lookup is
lazy (only where a zonal or HNS bucket behaves differently: compose, folders; what each layout means for reads and
writes is `transport.py`'s), bounded by `LOOKUP_DEADLINE`, and
`bucket_types` declares layouts so that no request is made at all.

A filesystem keeps what it learned for its life. What the server answered about a bucket is also shared by
every filesystem of the process on the same endpoint (each DataLoader worker's, `skip_instance_cache=True`
ones), for `SHARED_TTL`: a bucket's layout never changes after creation, but a bucket can be deleted and
made again under the same name, elsewhere, with another layout. A forked child keeps the parent's answers
(facts, not connections). A "denied" answer (these credentials) or an unanswered lookup is not shared.
"""
from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional

from ..errors import HttpError, RequestTimeout, RetryableError
from ..gcs import bridge, http
from ..gcs.redact import get_logger
from ..gcs.retry import RetryPolicy

if TYPE_CHECKING:  # pragma: no cover
    from ..gcs.client import Client

logger = get_logger(__name__)

STANDARD, HNS, ZONAL = "standard", "hns", "zonal"
# The whole lookup (both requests, retries included); a server that has not answered by then is taken
# as standard (and remembered as such): gcsfs's gRPC lookup waits 47-110 s for an emulator.
LOOKUP_DEADLINE = 2.0
_RETRY = RetryPolicy(deadline=LOOKUP_DEADLINE)
# How long an answer is shared with other filesystems of the process, and how many (endpoint, bucket) are kept.
SHARED_TTL = 3600.0
SHARED_MAX = 4096
_SHARED_SOURCES = frozenset({"storageLayout", "bucket"})  # the server's answer about the bucket itself
_shared: dict[tuple[str, str], tuple[float, "BucketLayout"]] = {}


@dataclass(frozen=True)
class BucketLayout:
    """A bucket's layout and where it was learned ("declared", "storageLayout", "bucket", "unanswered", "denied")."""

    bucket: str
    kind: str = STANDARD
    location: Optional[str] = None
    source: str = "declared"

    @property
    def zonal(self) -> bool:
        """Zonal (Rapid): objects are appendable, compose and rewrite do not exist."""
        return self.kind == ZONAL

    @property
    def hns(self) -> bool:
        """Hierarchical namespace (zonal buckets always have it)."""
        return self.kind in (HNS, ZONAL)


def declared(client: "Client", bucket: str) -> Optional[BucketLayout]:
    """The layout `bucket_types` gives `bucket` (its own entry, else "*"), or None."""
    types = client.options.bucket_types
    kind = types.get(bucket, types.get("*")) if types else None
    return None if kind is None else BucketLayout(bucket, kind)


def known(client: "Client", bucket: str) -> Optional[BucketLayout]:
    """The layout without a request: declared, learned before by this filesystem, or by another filesystem of
    the process on the same endpoint within `SHARED_TTL`; None if none."""
    found = declared(client, bucket) or _learned(client).get(bucket)
    if found is None:
        found = _shared_get(client, bucket)
        if found is not None:
            _learned(client)[bucket] = found
    return found


def forget(client: "Client", bucket: str) -> None:
    """Drop what this filesystem and the process learned of `bucket` (it was just deleted or made)."""
    _learned(client).pop(bucket, None)
    _shared.pop(_key(client, bucket), None)


async def layout(client: "Client", bucket: str) -> BucketLayout:
    """`bucket`'s layout: declared, learned before, or looked up now (one lookup at a time per bucket)."""
    found = known(client, bucket)
    if found is not None:
        return found
    loop = asyncio.get_running_loop()
    pending = client.layout_lookups
    task = pending.get((bucket, id(loop)))
    if task is None or task.get_loop() is not loop:
        task = pending[(bucket, id(loop))] = asyncio.ensure_future(_look_up(client, bucket))
        task.add_done_callback(lambda _t: pending.pop((bucket, id(loop)), None))
    got = await asyncio.shield(task)
    if got.source != "missing":  # a missing bucket may yet be created: asked again next time
        _learned(client)[bucket] = got
        _share(client, bucket, got)
    return got


def layout_sync(client: "Client", bucket: str) -> BucketLayout:
    """`layout` from blocking code (a handle being opened)."""
    return known(client, bucket) or bridge.run(client, layout, client, bucket)


def _learned(client: "Client") -> dict:
    return client.layouts


def _key(client: "Client", bucket: str) -> tuple[str, str]:
    return client.endpoints.location.rstrip("/"), bucket


def _shared_get(client: "Client", bucket: str) -> Optional[BucketLayout]:
    key = _key(client, bucket)
    got = _shared.get(key)
    if got is None:
        return None
    if time.monotonic() - got[0] > SHARED_TTL:
        _shared.pop(key, None)
        return None
    return got[1]


def _share(client: "Client", bucket: str, lay: BucketLayout) -> None:
    if lay.source not in _SHARED_SOURCES:
        return
    key = _key(client, bucket)
    _shared.pop(key, None)
    while len(_shared) >= SHARED_MAX:  # the oldest answer first (insertion order)
        _shared.pop(next(iter(_shared)), None)
    _shared[key] = (time.monotonic(), lay)


async def _look_up(client: "Client", bucket: str) -> BucketLayout:
    try:
        return await asyncio.wait_for(_ask(client, bucket), LOOKUP_DEADLINE)
    # A refused connection is not caught: ServerUnreachable names the endpoint, as every other request would.
    except (asyncio.TimeoutError, RetryableError, RequestTimeout) as exc:
        logger.info("bucket %s: no storage layout within %.0f s (%s); taken as standard", bucket,
                    LOOKUP_DEADLINE, type(exc).__name__)
        return BucketLayout(bucket, STANDARD, source="unanswered")


async def _ask(client: "Client", bucket: str) -> BucketLayout:
    """storageLayout, else the bucket resource; 403: standard (reads still work, compose finds out itself)."""
    for path, source, params in (("b/{}/storageLayout", "storageLayout", None),
                                 ("b/{}", "bucket", {"fields": "location,locationType,hierarchicalNamespace"})):
        try:
            resp = await http.request(client, "GET", client.json_url(path, bucket), op="metadata", what=bucket,
                                      retry=_RETRY, params=params)
        except FileNotFoundError:
            continue  # no such route (an emulator), or no such bucket: the next request tells
        except PermissionError:
            return BucketLayout(bucket, STANDARD, source="denied")
        except HttpError as exc:
            if isinstance(exc, RetryableError):
                raise
            continue  # a server that refuses the route otherwise (400, 405, 501)
        return from_resource(bucket, resp.json(), source)
    return BucketLayout(bucket, STANDARD, source="missing")


def from_resource(bucket: str, res: dict, source: str) -> BucketLayout:
    """A layout from a storageLayout or bucket resource (`locationType`, `hierarchicalNamespace`)."""
    if str(res.get("locationType", "")).lower() == "zone":
        kind = ZONAL
    elif (res.get("hierarchicalNamespace") or {}).get("enabled") is True:
        kind = HNS
    else:
        kind = STANDARD
    return BucketLayout(bucket, kind, res.get("location"), source)
