"""Progress bounds for gRPC calls: a call fails with `RequestTimeout`, naming the object, once nothing moved for
the filesystem's `read_timeout` (a stalled server or proxy), however long a transfer that keeps moving takes;
as the HTTP requests are bounded (`gcs/progress.py`)."""
from __future__ import annotations

import asyncio
from typing import Any, Awaitable, Callable

from ..errors import RequestTimeout


def nothing() -> int:
    """The progress of a call that shows none until it ends (an opening, a flush): it has `limit` to finish."""
    return 0


def stalled(what: str, limit: float, received: int, call: str, writing: bool = False) -> RequestTimeout:
    """The error of a `call` on `what` that moved nothing for `limit` s after `received` bytes (`writing`: the
    server took none of what was sent)."""
    if writing:
        return RequestTimeout(f"{what}: timed out: the server took no bytes of the write for {limit:g} s "
                              f"(gRPC {call})")
    if received:
        return RequestTimeout(f"{what}: timed out: the answer stalled for {limit:g} s after {received} bytes "
                              f"(gRPC {call})")
    return RequestTimeout(f"{what}: timed out: no answer from the server within {limit:g} s (gRPC {call})")


async def bounded(aw: Awaitable[Any], moved: Callable[[], int], limit: float, what: str, call: str,
                  writing: bool = False) -> Any:
    """`await aw`, cancelled with `stalled(...)` once `moved()` (bytes or messages received) stayed the same for
    `limit` seconds (one timer, looked at four times per `limit`: nothing per message)."""
    loop = asyncio.get_running_loop()
    task = asyncio.ensure_future(aw)
    watch = {"last": moved(), "since": loop.time(), "expired": False, "timer": None}

    def check() -> None:
        now, n = loop.time(), moved()
        if n != watch["last"]:
            watch["last"], watch["since"] = n, now
        elif now - watch["since"] >= limit:
            watch["expired"] = True
            task.cancel()
            return
        watch["timer"] = loop.call_later(limit / 4, check)

    watch["timer"] = loop.call_later(limit / 4, check)
    try:
        return await task
    except asyncio.CancelledError:
        if watch["expired"] and task.cancelled():
            raise stalled(what, limit, watch["last"], call, writing) from None
        raise
    finally:
        watch["timer"].cancel()
        if not task.done():  # our caller was cancelled: so is the call
            task.cancel()
