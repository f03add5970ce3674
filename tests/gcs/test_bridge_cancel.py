"""The sync bridge's CancelScope: stopping the calls that worker threads are waiting on, as `fluxfs cp`
does on Ctrl-C (which only the main thread sees)."""
from __future__ import annotations

import asyncio
import threading
import time

from fluxfs.gcs import bridge


async def _sleep_then(seconds: float, cleaned: list) -> str:
    try:
        await asyncio.sleep(seconds)
        return "finished"
    finally:
        cleaned.append(time.monotonic())


def test_cancel_scope_stops_the_calls_of_worker_threads_and_runs_their_cleanup(fs):
    scope = bridge.CancelScope()
    cleaned: list = []
    outcomes: list = []

    def worker() -> None:
        with scope.entered():
            try:
                outcomes.append(bridge.run(fs, _sleep_then, 30, cleaned))
            except asyncio.CancelledError:
                outcomes.append("cancelled")
            try:  # new work after cancel(): stopped at once
                outcomes.append(bridge.run(fs, _sleep_then, 30, cleaned))
            except asyncio.CancelledError:
                outcomes.append("refused")
            with bridge.cleanup():  # undoing work (an upload's abort) still runs
                outcomes.append(bridge.run(fs, _sleep_then, 0, cleaned))

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    time.sleep(0.3)
    t0 = time.monotonic()
    scope.cancel()
    for t in threads:
        t.join(timeout=5)
    assert time.monotonic() - t0 < 1 and not any(t.is_alive() for t in threads)
    assert sorted(outcomes) == ["cancelled"] * 4 + ["finished"] * 4 + ["refused"] * 4
    assert len(cleaned) >= 8  # every coroutine that started ran its finally
