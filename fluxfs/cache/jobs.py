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
import os
import queue
import threading
from typing import Any, Callable

THREADS = 4      # at most, per process
IDLE = 0.05      # seconds a thread waits for a job when no fill is under way
LINGER = 5.0     # ... and at most while one is (its next part may still be arriving)

_jobs: "queue.SimpleQueue" = queue.SimpleQueue()
_guard = threading.Lock()
_state = {"threads": 0, "idle": 0}


def _after_fork() -> None:  # the parent's threads do not exist in a forked child
    global _jobs, _guard
    _jobs, _guard = queue.SimpleQueue(), threading.Lock()
    _state.update(threads=0, idle=0)


os.register_at_fork(after_in_child=_after_fork)


def run(fn: Callable[..., Any], *args: Any, busy: Callable[[], bool] = lambda: False) -> "asyncio.Future":
    """`fn(*args)` on a fill thread, awaitable on the running loop. `busy()`: whether fills are under way."""
    fut: concurrent.futures.Future = concurrent.futures.Future()
    with _guard:
        _jobs.put((fut, fn, args))
        if not _state["idle"] and _state["threads"] < THREADS:
            _state["threads"] += 1
            threading.Thread(target=_work, args=(busy,), name="fluxfs-cache-fill", daemon=False).start()
    return asyncio.wrap_future(fut)


def _work(busy: Callable[[], bool]) -> None:
    waited = 0.0
    while True:
        with _guard:
            _state["idle"] += 1
        try:
            fut, fn, args = _jobs.get(timeout=IDLE)
        except queue.Empty:
            waited += IDLE
            with _guard:
                _state["idle"] -= 1
                if _jobs.empty() and (waited >= LINGER or not busy()):
                    _state["threads"] -= 1
                    return
            continue
        with _guard:
            _state["idle"] -= 1
        waited = 0.0
        if not fut.set_running_or_notify_cancel():
            continue
        try:
            fut.set_result(fn(*args))
        except BaseException as exc:  # noqa: BLE001 - handed to the awaiting coroutine
            fut.set_exception(exc)
