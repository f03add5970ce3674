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
import os
import signal
import threading
import urllib.error
import urllib.parse
import urllib.request
import weakref
from typing import TYPE_CHECKING, Any, Optional

from .gcs import bridge, fork, http
from .gcs.client import client_of

if TYPE_CHECKING:  # pragma: no cover
    from .gcs.client import Client

from .gcs.redact import get_logger

logger = get_logger(__name__)  # records redacted: no credentials in logs

_ALL: "weakref.WeakSet[TempRegistry]" = weakref.WeakSet()
_ALL_LOCK = threading.RLock()  # re-entrant: the SIGTERM handler may run while its thread holds it


class TempRegistry:
    """The live temporary objects of one filesystem in one process: path -> generation (or None)."""

    def __init__(self, client: "Client"):
        self._fs = weakref.ref(client)
        self.live: dict[str, Optional[str]] = {}
        self._lock = threading.RLock()  # re-entrant, as _ALL_LOCK
        with _ALL_LOCK:
            _ALL.add(self)
        fork.reset_in_child(self)

    def _after_fork(self) -> None:
        """A forked child starts empty: the parent's temporaries are the parent's to delete."""
        self._lock = threading.RLock()
        self.live = {}

    def add(self, path: str, generation: Optional[str] = None) -> None:
        if not _HOOKED.exit:
            _hook_exit()
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
    except Exception as exc:  # reported, object kept for a later attempt
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
    except Exception as exc:  # best effort at exit
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


# Seconds the calls in flight at exit get to clean up after themselves (a batched read waits for its
# composes to answer, then deletes them): a few round trips, longer only on a failing server.
EXIT_WAIT = 10.0


def delete_at_exit() -> int:
    """Stop this process's calls in flight (each deletes what it made), then delete what is still registered."""
    left = bridge.stop_all(EXIT_WAIT)
    if left:
        logger.warning("%d calls were still cleaning up after %g s at exit", left, EXIT_WAIT)
    return delete_all_blocking()


class _Hooked:
    """What this process has hooked: the exit cleanup (at its first temporary) and the SIGTERM handler. A forked
    child (a DataLoader worker) hooks its own (`gcs/fork.py` resets these in it)."""

    exit = False
    sigterm = False

    def _after_fork(self) -> None:
        self.exit = self.sigterm = False


_HOOKED = _Hooked()
fork.reset_in_child(_HOOKED)


def _hook_exit() -> None:
    """`delete_at_exit` at this process's exit, hooked once per process, at its first temporary: as the last
    atexit hook registered, so it runs first, while gcsfs's sessions (closed by an earlier hook) still work;
    in a multiprocessing child (a DataLoader worker), which ends with os._exit and runs no atexit hook, as a
    multiprocessing finalizer too."""
    _HOOKED.exit = True
    atexit.unregister(delete_at_exit)
    atexit.register(delete_at_exit)
    import multiprocessing
    import multiprocessing.util

    if multiprocessing.parent_process() is not None:
        multiprocessing.util.Finalize(None, delete_at_exit, exitpriority=100)


atexit.register(delete_at_exit)


def clean_up_on_sigterm() -> None:
    """Make SIGTERM delete this process's temporaries before it ends: the calls in flight are stopped and
    what is still registered is deleted (`delete_at_exit`), then the signal does what it did before.

    For DataLoader workers: at Ctrl-C, multiprocessing's exit in the main process terminates them
    (SIGTERM) while they may still be deleting the composites of their reads. Once per process, on its
    main thread only (where Python runs signal handlers; elsewhere it does nothing); fluxfs.pipes' datasets
    call it in each worker, a dataset of your own can from `worker_init_fn`. A handler set in Python is
    called after the cleanup; SIG_DFL then ends the process by SIGTERM; SIG_IGN is left alone; one set
    outside Python (PyTorch sets one in DataLoader workers, which exits quietly when the main process
    terminates them) is followed by exiting with status 0 in a multiprocessing child, as that one does.
    """
    if _HOOKED.sigterm or threading.current_thread() is not threading.main_thread():
        return
    _HOOKED.sigterm = True
    before = signal.getsignal(signal.SIGTERM)
    if before is signal.SIG_IGN:
        return

    def on_sigterm(signum: int, frame: Any) -> None:
        delete_at_exit()
        if callable(before):
            before(signum, frame)
            return
        if before is None:
            import multiprocessing

            if multiprocessing.parent_process() is not None:
                os._exit(0)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTERM)

    signal.signal(signal.SIGTERM, on_sigterm)

