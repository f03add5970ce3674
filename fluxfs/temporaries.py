"""Every temporary object and unfinished upload fluxfs creates, from birth to deletion, in one place.

The public face of `temp_registry` (each filesystem's live temporaries, deleted by generation on every
exit path and at interpreter exit) and `temp_uploads` (unfinished XML multipart uploads, fluxfs's told
from others' by a marked record); here, `cleanup()` of what crashed jobs left: marked temporaries
(noncurrent versions of a versioned bucket too) and fluxfs's own unfinished uploads.

API for other modules (composite reads, compose-mode upload parts)::

    temporaries.register(fs, "bucket/_fluxfs-tmp/...")        # before creating it
    await temporaries.delete(fs, "bucket/_fluxfs-tmp/...", generation=None)   # deletes + releases
    temporaries.release(fs, path)                             # forget without deleting (e.g. renamed)
"""
from __future__ import annotations

import asyncio
import dataclasses
import re
import time
from typing import TYPE_CHECKING, Optional, Union

from .errors import HttpError
from .gcs import bridge, tempnames
from .gcs.client import client_of
from .gcs.pager import list_pages
from .gcs.timestamps import parse_timestamp
from .temp_registry import (TempRegistry, clean_up_on_sigterm, current_generation, delete, delete_all_blocking,
                            delete_at_exit, delete_many, register, registry, release)
from .temp_uploads import abort_incomplete_uploads, abort_upload, is_stale, list_incomplete_uploads

if TYPE_CHECKING:  # pragma: no cover
    from .gcs.client import Client

__all__ = ["TempRegistry", "register", "registry", "release", "delete", "delete_many", "delete_all_blocking",
           "delete_at_exit", "clean_up_on_sigterm",
           "current_generation", "list_incomplete_uploads", "abort_incomplete_uploads", "parse_age",
           "CleanupReport", "cleanup", "cleanup_report", "async_cleanup", "async_cleanup_report"]


# -- leftovers of crashed jobs ---------------------------------------------------------------

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def parse_age(value: Union[None, int, float, str]) -> Optional[float]:
    """Seconds from 3600, "90s", "30m", "1h", "2d" or "1w" (None stays None)."""
    if value is None or isinstance(value, (int, float)):
        return None if value is None else float(value)
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhdw]?)\s*", str(value).lower())
    if not m:
        raise ValueError(f"cannot read age {value!r}: use e.g. 3600, '90s', '30m', '1h', '2d'")
    return float(m.group(1)) * _UNITS[m.group(2) or "s"]


def _written_at(item: dict) -> Optional[float]:
    """When an object was last written, by its own times (the later of `timeCreated` and `updated`, which the
    server sets), not its job's start: a job running for days makes fresh temporaries all along."""
    times = []
    for ts in (item.get("timeCreated"), item.get("updated")):
        try:
            times.append(parse_timestamp(ts).timestamp() if ts else None)
        except ValueError:
            pass
    known = [t for t in times if t is not None]
    return max(known) if known else None


async def _list_temp(client: "Client", bucket: str, versions: bool = False) -> list[dict]:
    """Every object under the reserved prefix of `bucket`, with its custom metadata (a raw listing);
    with `versions`, noncurrent generations too (a versioned bucket keeps deleted ones)."""
    items: list[dict] = []
    async for page in list_pages(client, bucket, prefix=client.options.temp_prefix,
                                 fields="items(name,generation,timeCreated,updated,metadata),nextPageToken",
                                 params={"versions": "true"} if versions else None):
        items.extend(page.get("items", []))
    return items


@dataclasses.dataclass
class CleanupReport:
    """What `cleanup` did: how many temporaries it deleted, the objects under the reserved prefix it left
    alone because fluxfs did not create them (no temporary's name, or no marker naming its job), the
    unfinished uploads it aborted and those it left because fluxfs did not start them ("bucket/key")."""

    removed: int = 0
    not_ours: list[str] = dataclasses.field(default_factory=list)
    aborted: list[str] = dataclasses.field(default_factory=list)
    foreign_uploads: list[str] = dataclasses.field(default_factory=list)


async def _cleanup_uploads(client: "Client", bucket: str, prefix: str, age: float, abort_foreign: bool,
                           report: CleanupReport) -> set[str]:
    """Abort fluxfs's stale unfinished uploads (others' only with `abort_foreign`), report the others;
    returns the records dealt with here (of uploads still open, or deleted with their upload)."""
    now = time.time()
    keep: set[str] = set()
    try:
        uploads = await list_incomplete_uploads(client, bucket)  # all: records of uploads outside `prefix` stay too
    except (FileNotFoundError, HttpError) as exc:
        # The bucket is there (its listing answered): this server has no XML multipart uploads to list.
        if not isinstance(exc, FileNotFoundError) and exc.status not in (400, 405, 501):
            raise
        return keep
    for up in uploads:
        if up["record"]:
            keep.add(up["record"][0])
        if not up["key"].startswith(prefix) or not is_stale(up, age, now):
            continue
        if up["fluxfs"] or abort_foreign:
            if await abort_upload(client, bucket, up):
                report.aborted.append(f"{bucket}/{up['key']}")
        else:
            report.foreign_uploads.append(f"{bucket}/{up['key']}")
    return keep


async def async_cleanup_report(client: "Client", url: str, older_than: Union[None, int, float, str] = None,
                               abort_foreign_uploads: bool = False) -> CleanupReport:
    """Delete fluxfs's temporary objects and abort its unfinished uploads left in `url`'s bucket; see `cleanup`."""
    client = client_of(client)  # called with a filesystem (the CLI, users): its client
    age = parse_age(older_than)
    bucket, _, key_prefix = client.strip_protocol(url).partition("/")
    if not bucket:
        raise ValueError(f"cleanup needs a bucket URL such as flux://bucket, not {url!r}")
    prefix = client.options.temp_prefix
    mine = registry(client).snapshot()
    now = time.time()
    report = CleanupReport()
    items = await _list_temp(client, bucket, versions=True)  # first: a missing bucket is named here
    records = await _cleanup_uploads(client, bucket, key_prefix, age or 0.0, abort_foreign_uploads, report)
    victims: list[tuple[str, str]] = []
    for item in items:
        path = f"{bucket}/{item['name']}"
        if not tempnames.is_marked(item["name"], item.get("metadata"), prefix):
            if path not in report.not_ours:  # a user's object (or one named like ours without our marker)
                report.not_ours.append(path)
            continue
        gen = str(item.get("generation"))
        if (path in mine and mine[path] in (None, gen)) or path in records:
            continue  # still in use here, or an upload's record (open upload, or deleted with it)
        if age is not None:
            written = _written_at(item)
            if written is None or now - written < age:
                continue  # written less than `age` ago (or when is unknown): maybe a running job's
        victims.append((path, gen))  # that generation: a noncurrent one is removed for good
    sem = asyncio.Semaphore(32)

    async def one(path: str, gen: str) -> bool:
        async with sem:
            return await delete(client, path, gen)

    report.removed = sum(await asyncio.gather(*(one(p, g) for p, g in victims)))
    return report


async def async_cleanup(client: "Client", url: str, older_than: Union[None, int, float, str] = None,
                        abort_foreign_uploads: bool = False) -> int:
    """`async_cleanup_report`, returning how many temporaries were deleted."""
    return (await async_cleanup_report(client, url, older_than, abort_foreign_uploads)).removed


def cleanup(client: "Client", url: str, older_than: Union[None, int, float, str] = None,
            abort_foreign_uploads: bool = False) -> int:
    """Delete fluxfs's temporary objects left in `url`'s bucket by crashed jobs, and abort their unfinished
    XML multipart uploads (under `url`'s key prefix); returns how many temporaries were deleted.

    Only what fluxfs created is deleted: objects named like a temporary *and* carrying the marker of the
    job in their name (`tempnames.is_marked`), every generation of them (a versioned bucket keeps deleted
    ones as noncurrent versions); a user's objects under the prefix are left alone (`cleanup_report`
    lists them). Only uploads fluxfs started (they have a marked record, `temp_uploads`) are aborted;
    another tool's are listed, and aborted only with `abort_foreign_uploads`. With `older_than` (seconds
    or "1h"), only temporaries written longer ago (each judged by its own `timeCreated`/`updated`, never
    by when its job started: a long-running job's fresh temporaries stay), and uploads started longer
    ago; without it, all of them except those this process still uses: running jobs elsewhere may lose
    theirs.
    """
    return bridge.run(client, async_cleanup, client, url, older_than, abort_foreign_uploads)


def cleanup_report(client: "Client", url: str, older_than: Union[None, int, float, str] = None,
                   abort_foreign_uploads: bool = False) -> CleanupReport:
    """Blocking `async_cleanup_report`: `cleanup`, also naming what it left alone and the uploads it aborted."""
    return bridge.run(client, async_cleanup_report, client, url, older_than, abort_foreign_uploads)
