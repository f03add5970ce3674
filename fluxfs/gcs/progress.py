"""Timeouts that measure progress: a request fails after `read_timeout` seconds in which no byte moved,
in either direction, however long the whole transfer takes.

aiohttp's `sock_read` only starts once the request body is handed to the kernel, and nothing bounds
the sending itself: a server that stops reading mid-body blocks the writer forever, while on a slow
uplink the megabytes still queued in socket buffers when `sock_read` starts make a live transfer fail.
`Watchdog` counts body bytes handed over (`SlicedBytes`, through a context variable, because aiohttp
writes bodies in a task of its own), watches the socket's send queue shrink as the server takes them
(Linux `SIOCOUTQ`), counts answer bytes received, and cancels the request once none of these moved
for `limit` seconds. Its clock, `ProgressClock`, bounds the gRPC calls too (`zonal/stalls.py`).
"""
from __future__ import annotations

import asyncio
import contextvars
import fcntl
import struct
import termios
from typing import Any, Awaitable, Callable, Optional

import aiohttp.payload

from ..errors import RequestTimeout

SEND_SLICE = 1 << 20
_OUTQ = getattr(termios, "TIOCOUTQ", None)  # the same ioctl as SIOCOUTQ: bytes the peer has not acked

_current: contextvars.ContextVar[Optional["Watchdog"]] = contextvars.ContextVar("fluxfs_watchdog", default=None)


def _unacked(transport: Any) -> Optional[int]:
    """Bytes given to this connection that the server has not taken yet (asyncio's buffer plus the
    kernel's send queue), or None where the kernel does not tell."""
    if transport is None or _OUTQ is None:
        return None
    sock = transport.get_extra_info("socket")
    try:
        queued = struct.unpack("i", fcntl.ioctl(sock.fileno(), _OUTQ, b"\0\0\0\0"))[0]
    except (OSError, AttributeError, ValueError):
        return None
    return queued + transport.get_write_buffer_size()


class ProgressClock:
    """The one stall bound (HTTP bodies here, gRPC calls in `zonal/stalls.py`): `expire()` is called once
    `limit` seconds passed without progress. Progress is reported with `moved(n)` (a time stamp and a count:
    nothing else per chunk), or found by `poll()` at a check (True when something moved unreported, such as a
    send queue shrinking). One timer, due when the limit runs out (every limit/4 as well when there is a poll)."""

    def __init__(self, limit: float, poll: Optional[Callable[[], bool]] = None):
        self.limit, self._poll = limit, poll
        self.loop = asyncio.get_running_loop()
        self.last = self.loop.time()
        self.count: Optional[int] = None  # what `moved` reported (bytes); None until it first did
        self.expired = False
        self._expire: Optional[Callable[[], Any]] = None
        self._timer: Optional[asyncio.TimerHandle] = None

    def moved(self, n: int = 0) -> None:
        self.last = self.loop.time()
        self.count = (self.count or 0) + n

    def start(self, expire: Callable[[], Any]) -> None:
        """Start timing from now; `expire` is called (once) when nothing moved for `limit` seconds."""
        self._expire, self.last = expire, self.loop.time()
        self._schedule(self.last)

    def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()

    async def guard(self, aw: Awaitable[Any], error: Callable[[], Exception]) -> Any:
        """`await aw` in this task, timed from now: once nothing moved for `limit` seconds the task is cancelled
        and `error()` raised instead (a cancellation from anywhere else stays one). The one way a stall is bounded:
        HTTP requests with a body (`Watchdog.run`) and gRPC calls (`zonal/stalls.py`)."""
        task = asyncio.current_task()
        assert task is not None, "guard() runs in a task"
        self.start(task.cancel)
        try:
            return await aw
        except asyncio.CancelledError:
            # Python 3.11 counts cancellations (ours is taken back; another's stays); 3.10 has no count to keep
            if self.expired and (task.uncancel() if hasattr(task, "uncancel") else 0) == 0:
                raise error() from None
            raise
        finally:
            self.stop()

    def _schedule(self, now: float) -> None:
        due = self.last + self.limit
        if self._poll is not None:
            due = min(due, now + self.limit / 4)
        self._timer = self.loop.call_at(due, self._check)

    def _check(self) -> None:
        now = self.loop.time()
        if self._poll is not None and self._poll():
            self.last = now
        if now - self.last >= self.limit:
            self.expired, self._timer = True, None
            self._expire()
            return
        self._schedule(now)


class Watchdog:
    """Cancels the task it guards once no byte moved for `limit` seconds (a `ProgressClock`: body bytes handed
    over and answer bytes reported, the socket's send queue polled)."""

    def __init__(self, limit: float, what: str, method: str):
        self.limit, self.what, self.method = limit, what, method
        self.clock = ProgressClock(limit, poll=self._taken)
        self.sent = 0              # body bytes handed to the connection
        self.received: Optional[int] = None  # answer bytes; None until the headers arrived
        self._transport: Any = None
        self._backlog: Optional[int] = None

    @property
    def expired(self) -> bool:
        return self.clock.expired

    # -- progress, reported by the body and the answer --
    def on_sent(self, n: int, transport: Any) -> None:
        self.sent += n
        self._transport = transport
        self._backlog = _unacked(transport)
        self.clock.moved(n)

    def on_answer(self) -> None:
        self.received = 0
        self.clock.moved()

    def on_received(self, n: int) -> None:
        self.received = (self.received or 0) + n
        self.clock.moved(n)

    def _taken(self) -> bool:
        """Whether the server took queued bytes since the last look."""
        backlog = _unacked(self._transport)
        if backlog is not None and backlog != self._backlog:
            self._backlog = backlog
            return True
        return False

    def message(self) -> str:
        n = f"{self.limit:g} s"
        if self.received is not None:
            return f"{self.what}: timed out: the answer stalled for {n} after {self.received} bytes ({self.method})"
        if self._backlog:
            return (f"{self.what}: timed out: the server took no bytes of the request body for {n} "
                    f"({self.sent - self._backlog} bytes sent; {self.method})")
        return f"{self.what}: timed out: no answer from the server within {n} ({self.method})"

    async def run(self, coro: Any) -> Any:
        """Await `coro` in this task under the guard; a stall raises RequestTimeout naming the stage."""
        token = _current.set(self)
        try:
            return await self.clock.guard(coro, lambda: RequestTimeout(self.message()))
        finally:
            _current.reset(token)


def current() -> Optional[Watchdog]:
    """The watchdog guarding the request being sent in this context, if any."""
    return _current.get()


class SlicedBytes(aiohttp.payload.BytesPayload):
    """A request body sent in 1 MiB slices (reusable across retries), reporting each to the watchdog.

    Handing aiohttp a 16 MiB bytes object makes Python 3.11's asyncio join it with the headers and
    then copy whatever the socket does not take at once into the transport's buffer: two extra
    copies of every part, held in memory while in flight. Slices go out under aiohttp's drain()
    back-pressure instead, so no part is ever copied.
    """

    async def write(self, writer: Any) -> None:
        await self.write_with_length(writer, None)

    async def write_with_length(self, writer: Any, content_length: Optional[int]) -> None:
        view = memoryview(self._value)
        if content_length is not None:
            view = view[:content_length]
        watch = _current.get()
        for i in range(0, len(view), SEND_SLICE):
            piece = view[i:i + SEND_SLICE]
            await writer.write(piece)
            if watch is not None:
                watch.on_sent(len(piece), writer.transport)
