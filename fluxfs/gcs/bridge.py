"""The one bridge from blocking callers to the filesystem's event loop.

fsspec's `sync` leaves a coroutine running when its caller is interrupted; here Ctrl-C (or
any exception while waiting) cancels the coroutine and waits for its cleanup, so `finally`
blocks delete the temporary objects they made before the interrupt is re-raised.
Sync methods are one-liners made by `sync_method`, as fsspec's `sync_wrapper` makes them; `route_sync_methods`
puts them in place of every blocking method fsspec or gcsfs generated from an async one.
Ctrl-C reaches only the main thread: work on other threads is stopped through a `CancelScope`.
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import functools
import inspect
import re
import threading
import time
from typing import Any, AsyncIterator, Awaitable, Callable, Coroutine, Iterator, TypeVar

from fsspec.exceptions import FSTimeoutError

from . import fork
from .redact import get_logger

logger = get_logger(__name__)  # records redacted: no credentials in logs
T = TypeVar("T")
_current = threading.local()  # the CancelScope the calling thread works in, if any


def on_loop(loop: asyncio.AbstractEventLoop) -> bool:
    """True when called from the thread running `loop` (where blocking on it would deadlock)."""
    try:
        return asyncio.get_running_loop() is loop
    except RuntimeError:
        return False


def submit(fs: Any, coro: Coroutine[Any, Any, T], what: str = "this call") -> "concurrent.futures.Future[T]":
    """Start `coro` on `fs.loop` from another thread; refuses (closing it) on the loop's own thread."""
    loop = fs.loop
    if loop is None:  # an asynchronous instance: its caller's loop, which this thread cannot wait on
        coro.close()
        raise RuntimeError(f"{what} is blocking: an asynchronous filesystem has no loop of its own "
                           "(await its `_` methods)")
    if on_loop(loop):
        coro.close()
        raise RuntimeError(f"{what} is blocking: do not call it on the filesystem's event loop "
                           "(async code uses the filesystem's `_` methods)")
    return asyncio.run_coroutine_threadsafe(coro, loop)


class Pending:
    """A coroutine function started on the filesystem's loop from another thread.

    `result()` waits for it; Ctrl-C while waiting cancels it, waits for its cleanup and only
    then re-raises. The result is handed over through a box rather than returned from the task
    (returning a large object from a task costs CPU in Python 3.11).
    """

    def __init__(self, fs: Any, fn: Callable[..., Awaitable[Any]], *args: Any, **kwargs: Any):
        self._done = threading.Event()
        self._box: dict[str, Any] = {}

        async def runner() -> None:
            try:
                self._box["result"] = await fn(*args, **kwargs)
            except BaseException as exc:  # handed to the caller by result()
                self._box["error"] = exc
            finally:
                self._done.set()

        self._future = submit(fs, runner(), getattr(fn, "__name__", "call").lstrip("_"))
        if not getattr(_current, "cleanup", False):
            scope = getattr(_current, "scope", None)
            if scope is not None:
                scope._track(self)
            _PROCESS._track(self)

    def result(self, timeout: float | None = None) -> Any:
        """The coroutine's result; after `timeout` seconds it is cancelled and TimeoutError raised."""
        try:
            self._wait(timeout)
        except BaseException:
            self.cancel()
            self.wait_cleanup()
            raise
        if "error" in self._box:
            raise self._box.pop("error")
        return self._box.pop("result")

    def _wait(self, timeout: float | None) -> None:
        if timeout is not None:
            if not self._done.wait(timeout):  # fsspec's type, a TimeoutError, as its sync wrappers raise
                raise FSTimeoutError(f"no result within {timeout:g} s")
            return
        while not self._done.wait(1.0):  # short waits: the main thread sees Ctrl-C promptly
            pass

    def cancel(self) -> None:
        """Cancel without waiting (callable from the loop's own thread)."""
        self._future.cancel()

    def wait_cleanup(self, timeout: float = 60) -> None:
        """After `cancel`: wait until the coroutine has finished its cleanup."""
        if not self._done.wait(timeout):
            logger.warning("cleanup after interrupt did not finish within %g s; leftovers go at exit", timeout)


class CancelScope:
    """Blocking calls made on any thread inside `with scope.entered():`, cancelled together by `cancel()`.

    Only the main thread sees Ctrl-C; a command running work on worker threads calls `cancel()`
    from there, and every call then in flight stops as an interrupted one does (its cleanup runs,
    the waiting thread gets `asyncio.CancelledError`), and so does any call started after it, except
    the ones made inside `cleanup()` (an upload's abort: undoing work must still run).
    """

    def __init__(self) -> None:
        self.cancelled = threading.Event()
        self._lock = threading.Lock()
        self._live: set[Pending] = set()

    @contextlib.contextmanager
    def entered(self) -> Iterator["CancelScope"]:
        """Within this block the calling thread's blocking calls belong to the scope."""
        outer = getattr(_current, "scope", None)
        _current.scope = self
        try:
            yield self
        finally:
            _current.scope = outer

    def cancel(self) -> None:
        """Cancel every call of the scope in flight, without waiting (their threads wait for the cleanup)."""
        with self._lock:
            self.cancelled.set()
            live, self._live = list(self._live), set()
        for pending in live:
            pending.cancel()

    def _track(self, pending: Pending) -> None:
        with self._lock:
            if self.cancelled.is_set():  # new work after cancel(): stopped before it does anything
                pending.cancel()
                return
            self._live.add(pending)
        pending._future.add_done_callback(lambda _f: self._forget(pending))  # the runner never raises

    def _forget(self, pending: Pending) -> None:
        with self._lock:
            self._live.discard(pending)


class _ProcessCalls(CancelScope):
    """Every blocking call in flight in this process, on any thread: stopped together when it exits
    (`stop_all`), so each one's cleanup (deleting the composites of a batched read) runs before the
    temporaries still registered are deleted, and no new one starts meanwhile."""

    def __init__(self) -> None:
        self._after_fork()
        fork.reset_in_child(self)

    def _after_fork(self) -> None:
        """A forked child (a DataLoader worker) has none of its parent's calls."""
        CancelScope.__init__(self)
        self._lock = threading.RLock()  # re-entrant: `stop` may run in a signal handler on a thread holding it

    def stop(self, timeout: float) -> int:
        """Cancel every call in flight and refuse new ones; wait up to `timeout` s for their cleanup.
        Returns how many were still running after it."""
        with self._lock:
            live = list(self._live)
        self.cancel()
        deadline = time.monotonic() + timeout
        for pending in live:
            pending._done.wait(max(0.0, deadline - time.monotonic()))
        return sum(not p._done.is_set() for p in live)


_PROCESS = _ProcessCalls()


def stop_all(timeout: float) -> int:
    """At exit: cancel this process's blocking calls in flight and refuse new ones, waiting up to `timeout` s
    for their cleanup; returns how many did not finish it in time."""
    return _PROCESS.stop(timeout)


@contextlib.contextmanager
def cleanup() -> Iterator[None]:
    """Calls made inside this block undo work (abort an upload): a cancelled `CancelScope` lets them run."""
    outer = getattr(_current, "cleanup", False)
    _current.cleanup = True
    try:
        yield
    finally:
        _current.cleanup = outer


def run(fs: Any, fn: Callable[..., Awaitable[T]], *args: Any, timeout: float | None = None, **kwargs: Any) -> T:
    """Run `fn(*args, **kwargs)` on the filesystem's loop and wait; an interrupt cancels it and waits for cleanup.

    `timeout` (seconds; 0 or None: none, as in fsspec's `sync`) cancels it and raises FSTimeoutError.
    """
    return Pending(fs, fn, *args, **kwargs).result(timeout or None)


def sync_method(async_method: Callable[..., Awaitable[T]]) -> Callable[..., T]:
    """A blocking method that runs the instance's `async_method` (looked up by name, so a subclass's
    override runs) through `run`: fsspec's `sync_wrapper`, interruptible."""
    name = async_method.__name__

    @functools.wraps(async_method)
    def method(self: Any, *args: Any, **kwargs: Any) -> T:
        return run(self, getattr(self, name), *args, **kwargs)

    return _named(method, async_method, "Ctrl-C cancels it and its cleanup runs first")


def iterate_method(async_gen: Callable[..., AsyncIterator[T]]) -> Callable[..., Iterator[T]]:
    """A blocking generator method over the instance's async generator method, through `iterate`."""
    name = async_gen.__name__

    @functools.wraps(async_gen)
    def method(self: Any, *args: Any, **kwargs: Any) -> Iterator[T]:
        return iterate(self, getattr(self, name)(*args, **kwargs))

    return _named(method, async_gen, "closing it early or Ctrl-C cancels the work in flight")


def _named(method: Any, async_fn: Any, how: str) -> Any:
    method.__name__ = method.__qualname__ = async_fn.__name__.lstrip("_")
    method.__doc__ = f"Blocking `{async_fn.__name__}`; {how}.\n\n" + (async_fn.__doc__ or "")
    method.__fluxfs_bridge__ = True
    return method


def is_bridged(method: Any) -> bool:
    """True for a method made by `sync_method` or `iterate_method`."""
    return getattr(method, "__fluxfs_bridge__", False) is True


_PRIVATE = re.compile("_[^_]")  # fsspec's test for the async twin of a public method


def route_sync_methods(cls: type) -> list[str]:
    """Make every blocking twin of an async method of `cls` go through this bridge; returns their names.

    Replaced: the AbstractFileSystem defaults fsspec's `mirror_sync_methods` would wrap per instance with
    its `sync` (which leaves the coroutine running on Ctrl-C), and the base classes' `sync_wrapper`s
    (gcsfs's `rm`, `mv`, `call`, ...). Set on the class, so fsspec then mirrors nothing: every instance,
    cached or unpickled, has them. Hand-written blocking methods are left as they are.
    """
    from fsspec.spec import AbstractFileSystem

    routed = []
    for name in dir(cls):
        if not _PRIVATE.match(name):
            continue
        async_fn, current = getattr(cls, name, None), getattr(cls, name[1:], None)
        if current is None or is_bridged(current):
            continue
        generated = current is getattr(AbstractFileSystem, name[1:], None) or \
            inspect.iscoroutinefunction(getattr(current, "__wrapped__", None))
        if generated and inspect.iscoroutinefunction(async_fn):
            setattr(cls, name[1:], sync_method(async_fn))
        elif generated and inspect.isasyncgenfunction(async_fn):
            setattr(cls, name[1:], iterate_method(async_fn))
        else:
            continue
        routed.append(name[1:])
    return routed


def iterate(fs: Any, agen: AsyncIterator[T]) -> Iterator[T]:
    """A blocking generator over an async one running on the filesystem's loop.

    Closing the generator early (break, garbage collection) or Ctrl-C closes the async
    generator, which cancels its work.
    """
    try:
        while True:
            try:
                item = run(fs, agen.__anext__)
            except StopAsyncIteration:
                return
            yield item
    finally:
        if on_loop(fs.loop):
            # Collected on the loop's own thread: a blocking wait here would deadlock.
            fs.loop.create_task(agen.aclose())
        else:
            run(fs, agen.aclose)
