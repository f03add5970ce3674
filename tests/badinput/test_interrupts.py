"""Bad-input catalogue: Ctrl-C (KeyboardInterrupt) in a long listing leaves nothing running (docs/bad-inputs.md).

Ctrl-C is simulated with `_thread.interrupt_main()` from a timer thread, which raises
KeyboardInterrupt in the main thread exactly as the terminal's SIGINT does.
"""
from __future__ import annotations

import _thread
import asyncio
import threading
import time

import pytest

from tests.conftest import make_fs

N = 20_000


def _tasks_of(fs) -> list[asyncio.Task]:
    """Unfinished tasks on the (process-wide) fsspec event loop that belong to `fs`'s parallel lister."""
    def mine(task: asyncio.Task) -> bool:
        frame = getattr(task.get_coro(), "cr_frame", None)
        owner = frame.f_locals.get("self") if frame is not None else None
        return type(owner).__name__ == "Lister" and owner.fs is fs

    async def collect():
        return [t for t in asyncio.all_tasks() if not t.done() and mine(t)]

    return asyncio.run_coroutine_threadsafe(collect(), fs.loop).result(10)


def _listing_tasks(fs) -> list[str]:
    return [t.get_coro().__qualname__ for t in _tasks_of(fs)]


def _ctrl_c_after(seconds: float, still_running: threading.Event) -> threading.Thread:
    def fire():
        time.sleep(seconds)
        if still_running.is_set():
            _thread.interrupt_main()

    t = threading.Thread(target=fire, daemon=True)
    t.start()
    return t


def _assert_listing_stopped(fs, flux_server):
    time.sleep(0.3)  # cancellation has had time to reach every worker
    assert _listing_tasks(fs) == []
    flux_server.reset_stats()
    time.sleep(0.5)
    assert flux_server.stats()["requests"].get("list", 0) == 0, "list requests still arriving after Ctrl-C"


@pytest.fixture
def slow_listing(flux_server, bucket):
    """20,000 objects listed 50 per page at 40 ms a page by 4 workers: about 4 s to list."""
    flux_server.generate(bucket, N, size=1, prefix="many/")
    flux_server.configure(latency_ms=40)
    fs = make_fs(flux_server, list_page_size=50, list_concurrency=4)
    yield fs
    # Whatever a failing test leaked must not run on into the next tests (the loop and server are shared).
    for task in _tasks_of(fs):
        fs.loop.call_soon_threadsafe(task.cancel)


def test_ctrl_c_during_find(slow_listing, flux_server, bucket):
    fs = slow_listing
    running = threading.Event()
    running.set()
    timer = _ctrl_c_after(0.4, running)
    start = time.monotonic()
    try:
        with pytest.raises(KeyboardInterrupt):
            fs.find(f"{bucket}/many")
    finally:
        running.clear()
        timer.join()
    assert time.monotonic() - start < 2.0, "Ctrl-C took too long to interrupt the listing"
    _assert_listing_stopped(fs, flux_server)


def test_ctrl_c_while_consuming_iter_objects(slow_listing, flux_server, bucket):
    fs = slow_listing
    seen = 0
    running = threading.Event()
    running.set()
    timer = _ctrl_c_after(0.4, running)
    try:
        with pytest.raises(KeyboardInterrupt):
            for batch in fs.iter_objects(f"{bucket}/many"):
                seen += len(batch)
                time.sleep(0.01)  # the consumer works on each batch
    finally:
        running.clear()
        timer.join()
    assert 0 < seen < N
    _assert_listing_stopped(fs, flux_server)
