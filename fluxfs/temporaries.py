"""Every temporary object and unfinished upload fluxfs creates, from birth to deletion, in one place.

Each filesystem has a `TempRegistry` of live temporary objects ("bucket/key" under
`tempnames.TEMP_PREFIX`). Code that creates one registers the name *before* the request
that may create it, and deletes it when done (success, error or cancellation); whatever is
still registered at interpreter exit is deleted by an atexit hook. `cleanup()` removes
leftovers of crashed jobs; `abort_incomplete_uploads()` the XML multipart uploads a killed
writer never completed (their parts show in no listing).

API for other modules (composite reads, compose-mode upload parts)::

    temporaries.register(fs, "bucket/_fluxfs-tmp/...")        # before creating it
    await temporaries.delete(fs, "bucket/_fluxfs-tmp/...", generation=None)   # deletes + releases
    temporaries.release(fs, path)                             # forget without deleting (e.g. renamed)
"""
from __future__ import annotations

import asyncio
import atexit
import dataclasses
import re
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
import weakref
from typing import TYPE_CHECKING, Any, Optional, Union

from .gcs import bridge, fork, http, tempnames
from .gcs import xml as gcsxml
from .gcs.pager import list_pages
from .gcs.timestamps import parse_timestamp

if TYPE_CHECKING:  # pragma: no cover
    from .core import FluxFileSystem

from .gcs.redact import get_logger

logger = get_logger(__name__)  # records redacted: no credentials in logs

_ALL: "weakref.WeakSet[TempRegistry]" = weakref.WeakSet()
_ALL_LOCK = threading.Lock()


class TempRegistry:
    """The live temporary objects of one filesystem in one process: path -> generation (or None)."""

    def __init__(self, fs: "FluxFileSystem"):
        self._fs = weakref.ref(fs)
        self.live: dict[str, Optional[str]] = {}
        self._lock = threading.Lock()
        with _ALL_LOCK:
            _ALL.add(self)
        fork.reset_in_child(self)

    def _after_fork(self) -> None:
        """A forked child starts empty: the parent's temporaries are the parent's to delete."""
        self._lock = threading.Lock()
        self.live = {}

    def add(self, path: str, generation: Optional[str] = None) -> None:
        with self._lock:
            self.live[path] = generation

    def set_generation(self, path: str, generation: Optional[str]) -> None:
        with self._lock:
            if path in self.live:
                self.live[path] = generation

    def discard(self, path: str) -> None:
        with self._lock:
            self.live.pop(path, None)

    def snapshot(self) -> dict[str, Optional[str]]:
        with self._lock:
            return dict(self.live)

    def __len__(self) -> int:
        return len(self.live)


def registry(fs: "FluxFileSystem") -> TempRegistry:
    """The registry of `fs` in this process."""
    return fs._temporaries


def register(fs: "FluxFileSystem", path: str, generation: Optional[str] = None) -> None:
    """Record a temporary object ("bucket/key") before the request that may create it."""
    registry(fs).add(path, generation)


def release(fs: "FluxFileSystem", path: str) -> None:
    """Forget a temporary object without deleting it (it was deleted or turned into a real object)."""
    registry(fs).discard(path)


def _delete_url(fs: "FluxFileSystem", path: str) -> tuple[str, str, str]:
    bucket, _, key = path.partition("/")
    return bucket, key, fs.json_url("b/{}/o/{}", bucket, key)


async def delete(fs: "FluxFileSystem", path: str, generation: Optional[str] = None,
                 raise_denied: bool = False) -> bool:
    """Delete a temporary object and release it; True when gone (404 counts: already gone).

    Errors other than 404 are logged and the object stays registered, so the atexit hook
    (or `cleanup`) gets another chance. With `raise_denied`, a 403 is raised instead
    (PermissionError): compose reads stop making temporaries they cannot delete.
    """
    bucket, key, url = _delete_url(fs, path)
    params = {"generation": str(generation)} if generation else None
    try:
        await http.request(fs, "DELETE", url, op="delete", what=path, params=params, ok=(200, 204))
    except FileNotFoundError:
        pass
    except asyncio.CancelledError:
        raise
    except PermissionError:
        if raise_denied:
            raise
        logger.warning("could not delete temporary object %s: permission denied", path)
        return False
    except Exception as exc:  # noqa: BLE001 - reported, object kept for a later attempt
        logger.warning("could not delete temporary object %s: %s", path, exc)
        return False
    release(fs, path)
    return True


async def delete_many(fs: "FluxFileSystem", paths: dict[str, Optional[str]], concurrency: int = 32) -> int:
    """Delete several temporary objects concurrently; returns how many are gone."""
    sem = asyncio.Semaphore(concurrency)

    async def one(p: str, g: Optional[str]) -> bool:
        async with sem:
            return await delete(fs, p, g)

    results = await asyncio.gather(*(one(p, g) for p, g in paths.items()))
    return sum(results)


# -- interpreter exit ------------------------------------------------------------------------

def _delete_blocking(fs: "FluxFileSystem", path: str, generation: Optional[str]) -> bool:
    """Delete with a plain blocking HTTP call: the event loop may be gone at interpreter exit."""
    _, _, url = _delete_url(fs, path)
    params = fs._get_params({"generation": generation})  # gcsfs's: adds userProject for requester pays
    if params:
        url += "?" + urllib.parse.urlencode(params)
    try:
        headers = fs._get_headers({})
        req = urllib.request.Request(url, method="DELETE", headers=headers)
        urllib.request.urlopen(req, timeout=10).read()
        return True
    except urllib.error.HTTPError as exc:
        return exc.code == 404
    except Exception as exc:  # noqa: BLE001 - best effort at exit
        logger.warning("could not delete temporary object %s at exit: %s", path, exc)
        return False


def delete_all_blocking() -> int:
    """Delete every temporary object still registered in this process (the atexit hook)."""
    jobs = []
    with _ALL_LOCK:
        regs = list(_ALL)
    for reg in regs:
        fs = reg._fs()
        if fs is None:
            continue
        for path, gen in reg.snapshot().items():
            jobs.append((reg, fs, path, gen))
    if not jobs:
        return 0
    # Plain threads: concurrent.futures refuses new work once interpreter shutdown began.
    ok = [False] * len(jobs)
    todo = iter(range(len(jobs)))
    lock = threading.Lock()

    def work() -> None:
        while True:
            with lock:
                i = next(todo, None)
            if i is None:
                return
            _, fs, path, gen = jobs[i]
            ok[i] = _delete_blocking(fs, path, gen)

    threads = [threading.Thread(target=work, daemon=True) for _ in range(min(16, len(jobs)))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    for (reg, _, path, _), done in zip(jobs, ok):
        if done:
            reg.discard(path)
    return sum(ok)


atexit.register(delete_all_blocking)


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


def _created(item: dict) -> Optional[float]:
    ts = item.get("timeCreated") or item.get("updated")
    try:
        return parse_timestamp(ts).timestamp() if ts else None
    except ValueError:
        return None


async def _list_temp(fs: "FluxFileSystem", bucket: str) -> list[dict]:
    """Every object under the reserved prefix of `bucket`, with its custom metadata (a raw listing)."""
    items: list[dict] = []
    async for page in list_pages(fs, bucket, prefix=fs.options.temp_prefix,
                                 fields="items(name,generation,timeCreated,updated,metadata),nextPageToken"):
        items.extend(page.get("items", []))
    return items


@dataclasses.dataclass
class CleanupReport:
    """What `cleanup` did: how many temporaries it deleted, and the objects under the reserved prefix it
    left alone because fluxfs did not create them (no temporary's name, or no marker naming its job)."""

    removed: int = 0
    not_ours: list[str] = dataclasses.field(default_factory=list)


async def async_cleanup_report(fs: "FluxFileSystem", url: str,
                               older_than: Union[None, int, float, str] = None) -> CleanupReport:
    """Delete fluxfs's temporary objects left in `url`'s bucket; see `cleanup`."""
    age = parse_age(older_than)
    bucket = fs._strip_protocol(url).split("/", 1)[0]
    if not bucket:
        raise ValueError(f"cleanup needs a bucket URL such as flux://bucket, not {url!r}")
    prefix = fs.options.temp_prefix
    mine = set(registry(fs).snapshot())
    now = time.time()
    report = CleanupReport()
    victims: dict[str, Optional[str]] = {}
    for item in await _list_temp(fs, bucket):
        path = f"{bucket}/{item['name']}"
        if not tempnames.is_marked(item["name"], item.get("metadata"), prefix):
            report.not_ours.append(path)  # a user's object (or one named like ours without our marker)
            continue
        if path in mine:
            continue
        if age is not None:
            started = tempnames.job_started_at(item["name"], prefix)
            if started is None:
                started = _created(item)
            if started is None or now - started < age:
                continue
        victims[path] = None  # any generation: a leftover is a leftover
    for p in victims:
        register(fs, p)
    report.removed = await delete_many(fs, victims)
    return report


async def async_cleanup(fs: "FluxFileSystem", url: str,
                        older_than: Union[None, int, float, str] = None) -> int:
    """`async_cleanup_report`, returning how many temporaries were deleted."""
    return (await async_cleanup_report(fs, url, older_than)).removed


def cleanup(fs: "FluxFileSystem", url: str, older_than: Union[None, int, float, str] = None) -> int:
    """Delete fluxfs's temporary objects left in `url`'s bucket by crashed jobs; returns how many.

    Only objects fluxfs created are deleted: named like a temporary *and* carrying the marker of the
    job in their name (`tempnames.is_marked`); a user's objects under the prefix are left alone
    (`cleanup_report` lists them). With `older_than` (seconds or "1h"), only temporaries whose job
    started (or which were created) longer ago; without it, all of them except those this process
    still uses: running jobs elsewhere may lose theirs.
    """
    return bridge.run(fs, async_cleanup, fs, url, older_than)


def cleanup_report(fs: "FluxFileSystem", url: str, older_than: Union[None, int, float, str] = None) -> CleanupReport:
    """Blocking `async_cleanup_report`: `cleanup`, also naming the objects it left alone."""
    return bridge.run(fs, async_cleanup_report, fs, url, older_than)


# -- unfinished XML multipart uploads --------------------------------------------------------

async def list_incomplete_uploads(fs: "FluxFileSystem", bucket: str, prefix: str = "") -> list[dict[str, Any]]:
    """In-progress XML multipart uploads of a bucket: [{"key", "upload_id", "initiated" (unix s)}]."""
    params: dict[str, str] = {"uploads": ""}
    if prefix:
        params["prefix"] = prefix
    out: list[dict[str, Any]] = []
    while True:
        resp = await http.request(fs, "GET", fs.xml_url(bucket), op="list", what=bucket, params=params)
        root = gcsxml.children(resp.body)
        last_key = last_id = None
        for up in root:
            if gcsxml.local(up.tag) != "Upload":
                continue
            fields = gcsxml.fields(up)
            key, uid = fields.get("Key", ""), fields.get("UploadId", "")
            if key.startswith(prefix):
                out.append({"key": key, "upload_id": uid,
                            "initiated": parse_timestamp(fields["Initiated"]).timestamp()
                            if fields.get("Initiated") else None})
            last_key, last_id = key, uid
        truncated = any(gcsxml.local(e.tag) == "IsTruncated" and (e.text or "").strip() == "true" for e in root)
        if not truncated or last_key is None:
            return out
        params.update({"key-marker": last_key, "upload-id-marker": last_id})


async def abort_incomplete_uploads(fs: "FluxFileSystem", bucket: str, prefix: str = "",
                                   older_than: float = 0.0) -> list[str]:
    """Abort in-progress multipart uploads started more than `older_than` seconds ago (e.g. by a
    killed writer); returns the keys whose uploads were aborted."""
    now = time.time()
    aborted = []
    for up in await list_incomplete_uploads(fs, bucket, prefix):
        if up["initiated"] is not None and now - up["initiated"] < older_than:
            continue
        try:
            await http.request(fs, "DELETE", fs.xml_url(bucket, up["key"]), op="delete", what=f"{bucket}/{up['key']}",
                               params={"uploadId": up["upload_id"]}, ok=(200, 204))
        except FileNotFoundError:
            continue
        aborted.append(up["key"])
    return aborted
