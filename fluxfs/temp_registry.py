"""The live temporary objects of each filesystem, and deleting them (by generation) on every exit path.

Code that creates a temporary registers its "bucket/key" *before* the request that may create it and
deletes it when done (success, error or cancellation); whatever is still registered at interpreter
exit is deleted by an atexit hook. Deletes name the generation (looked up when unknown): in a bucket
with object versioning a plain delete would keep the object as a noncurrent version, billed forever.
`fluxfs.temporaries` is the public face of this module.
"""
from __future__ import annotations

import asyncio
import atexit
import json
import threading
import urllib.error
import urllib.parse
import urllib.request
import weakref
from typing import TYPE_CHECKING, Optional

from .gcs import fork, http
from .gcs.client import client_of

if TYPE_CHECKING:  # pragma: no cover
    from .gcs.client import Client

from .gcs.redact import get_logger

logger = get_logger(__name__)  # records redacted: no credentials in logs

_ALL: "weakref.WeakSet[TempRegistry]" = weakref.WeakSet()
_ALL_LOCK = threading.Lock()


class TempRegistry:
    """The live temporary objects of one filesystem in one process: path -> generation (or None)."""

    def __init__(self, client: "Client"):
        self._fs = weakref.ref(client)
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


def registry(client: "Client") -> TempRegistry:
    """The registry of `client` (or of a filesystem's) in this process."""
    return client_of(client).temporaries  # a filesystem is taken too: its client's


def register(client: "Client", path: str, generation: Optional[str] = None) -> None:
    """Record a temporary object ("bucket/key") before the request that may create it."""
    registry(client).add(path, generation)


def release(client: "Client", path: str) -> None:
    """Forget a temporary object without deleting it (it was deleted or turned into a real object)."""
    registry(client).discard(path)


def _delete_url(client: "Client", path: str) -> tuple[str, str, str]:
    bucket, _, key = path.partition("/")
    return bucket, key, client.json_url("b/{}/o/{}", bucket, key)


async def current_generation(client: "Client", path: str) -> Optional[str]:
    """The live generation of "bucket/key", or None when there is none."""
    bucket, key, url = _delete_url(client, path)
    try:
        resp = await http.request(client, "GET", url, op="metadata", what=path, params={"fields": "generation"})
    except FileNotFoundError:
        return None
    gen = resp.json().get("generation")
    return str(gen) if gen is not None else None


async def delete(client: "Client", path: str, generation: Optional[str] = None,
                 raise_denied: bool = False) -> bool:
    """Delete a temporary object (that generation: never left as a noncurrent version) and release it;
    True when gone (404 counts: already gone). An unknown generation is looked up first.

    Errors other than 404 are logged and the object stays registered, so the atexit hook
    (or `cleanup`) gets another chance. With `raise_denied`, a 403 is raised instead
    (PermissionError): compose reads stop making temporaries they cannot delete.
    """
    client = client_of(client)  # called with a filesystem too: its client
    bucket, key, url = _delete_url(client, path)
    try:
        if not generation:
            generation = await current_generation(client, path)
        if generation:
            await http.request(client, "DELETE", url, op="delete", what=path, params={"generation": str(generation)},
                               ok=(200, 204))
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
    release(client, path)
    return True


async def delete_many(client: "Client", paths: dict[str, Optional[str]], concurrency: int = 32) -> int:
    """Delete several temporary objects concurrently; returns how many are gone."""
    sem = asyncio.Semaphore(concurrency)

    async def one(p: str, g: Optional[str]) -> bool:
        async with sem:
            return await delete(client, p, g)

    results = await asyncio.gather(*(one(p, g) for p, g in paths.items()))
    return sum(results)


# -- interpreter exit ------------------------------------------------------------------------

def _blocking_call(client: "Client", method: str, path: str, params: dict) -> bytes:
    _, _, url = _delete_url(client, path)
    params = client.params(params)  # gcsfs's: adds userProject for requester pays
    if params:
        url += "?" + urllib.parse.urlencode(params)
    req = urllib.request.Request(url, method=method, headers=client.headers({}))
    with urllib.request.urlopen(req, timeout=10) as resp:
        return resp.read()


def _delete_blocking(client: "Client", path: str, generation: Optional[str]) -> bool:
    """Delete (that generation, looked up when unknown) with plain blocking HTTP calls: the event loop
    may be gone at interpreter exit."""
    try:
        if not generation:
            generation = json.loads(_blocking_call(client, "GET", path, {"fields": "generation"})).get("generation")
        _blocking_call(client, "DELETE", path, {"generation": str(generation)})
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
        client = reg._fs()
        if client is None:
            continue
        for path, gen in reg.snapshot().items():
            jobs.append((reg, client, path, gen))
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
            _, client, path, gen = jobs[i]
            ok[i] = _delete_blocking(client, path, gen)

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

