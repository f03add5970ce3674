"""Progress bounds for gRPC calls: a call fails with `RequestTimeout`, naming the object, once nothing moved for
the filesystem's `read_timeout` (a stalled server or proxy), however long a transfer that keeps moving takes;
timed by the clock that bounds the HTTP requests (`gcs/progress.py`), the read retry policy deciding the attempts."""
from __future__ import annotations

from typing import Any, Awaitable, Optional

from ..errors import RequestTimeout
from ..gcs.progress import ProgressClock


def stalled(what: str, limit: float, received: Optional[int], call: str, writing: bool = False) -> RequestTimeout:
    """The error of a `call` on `what` that moved nothing for `limit` s after `received` bytes (None: no answer
    at all; `writing`: the server took none of what was sent)."""
    if writing:
        return RequestTimeout(f"{what}: timed out: the server took no bytes of the write for {limit:g} s "
                              f"(gRPC {call})")
    if received is not None:
        return RequestTimeout(f"{what}: timed out: the answer stalled for {limit:g} s after {received} bytes "
                              f"(gRPC {call})")
    return RequestTimeout(f"{what}: timed out: no answer from the server within {limit:g} s (gRPC {call})")


async def bounded(aw: Awaitable[Any], limit: float, what: str, call: str, writing: bool = False,
                  clock: Optional[ProgressClock] = None) -> Any:
    """`await aw` under the one stall bound (`ProgressClock.guard`), failing with `stalled(...)` once nothing
    moved for `limit` seconds: `clock` is what `aw` reports its progress to (`clock.moved(n)` per message), none
    for a call that shows none until it ends (an opening, a flush), which then has `limit` to finish."""
    clock = clock or ProgressClock(limit)
    return await clock.guard(aw, lambda: stalled(what, limit, clock.count, call, writing))
