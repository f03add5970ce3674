"""The file work of this process's range fills (reserve, write a part, commit) on non-daemon threads of its own.

A process that exits (a DataLoader worker after its last batch included) waits for these threads, so a
fill whose last part has arrived is completed, not lost. A `ThreadPoolExecutor` would not do: it refuses
new work once the interpreter starts to exit, and a fill's last steps are submitted from the event loop's
(daemon) thread as earlier ones end. A thread exits once no job has come for `IDLE` seconds (`LINGER`
while a fill is under way), so an exit waits at most that long for a fill that stopped making progress.
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import queue
import threading
from typing import Any, Callable

from ..gcs import fork

THREADS = 4      # at most, per process
IDLE = 0.05      # seconds a thread waits for a job when no fill is under way
LINGER = 5.0     # ... and at most while one is (its next part may still be arriving)



class _Threads:
    """This process's fill threads: their queue of jobs, the lock over it, how many run and how many wait idle."""

    def __init__(self) -> None:
        self._after_fork()

    def _after_fork(self) -> None:  # the parent's threads do not exist in a forked child (the one fork hook)
        self.jobs: "queue.SimpleQueue" = queue.SimpleQueue()
        self.guard = threading.Lock()
        self.threads = 0
        self.idle = 0


_THREADS = _Threads()
fork.reset_in_child(_THREADS)


def run(fn: Callable[..., Any], *args: Any, busy: Callable[[], bool] = lambda: False) -> "asyncio.Future":
    """`fn(*args)` on a fill thread, awaitable on the running loop. `busy()`: whether fills are under way."""
    fut: concurrent.futures.Future = concurrent.futures.Future()
    with _THREADS.guard:
        _THREADS.jobs.put((fut, fn, args))
        if not _THREADS.idle and _THREADS.threads < THREADS:
            _THREADS.threads += 1
            threading.Thread(target=_work, args=(busy,), name="fluxfs-cache-fill", daemon=False).start()
    return asyncio.wrap_future(fut)


def _work(busy: Callable[[], bool]) -> None:
    waited = 0.0
    while True:
        with _THREADS.guard:
            _THREADS.idle += 1
        try:
            fut, fn, args = _THREADS.jobs.get(timeout=IDLE)
        except queue.Empty:
            waited += IDLE
            with _THREADS.guard:
                _THREADS.idle -= 1
                if _THREADS.jobs.empty() and (waited >= LINGER or not busy()):
                    _THREADS.threads -= 1
                    return
            continue
        with _THREADS.guard:
            _THREADS.idle -= 1
        waited = 0.0
        if not fut.set_running_or_notify_cancel():
            continue
        try:
            fut.set_result(fn(*args))
        except BaseException as exc:  # handed to the awaiting coroutine
            fut.set_exception(exc)
