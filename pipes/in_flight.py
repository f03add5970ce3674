"""`InFlight`: up to `depth` calls running on threads, their results taken in the order they were started.

The one "keep N batched reads in flight" loop of pipes: `ReadObjects`, the iterable dataset and the DCP
reader all keep their reads going through it, so the next batch downloads while this one is consumed.
"""
from __future__ import annotations

from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Callable, Generic, Iterable, Iterator, Optional, TypeVar

T = TypeVar("T")
R = TypeVar("R")

_END = object()


class InFlight(Generic[R]):
    """A FIFO of calls running on at most `depth` threads, each with a tag the caller gets back with its result."""

    def __init__(self, depth: int, thread_name_prefix: str):
        if depth < 1:
            raise ValueError(f"depth must be >= 1, not {depth}")
        self.depth = depth
        self._pool: Optional[ThreadPoolExecutor] = ThreadPoolExecutor(depth, thread_name_prefix=thread_name_prefix)
        self._queue: deque[tuple[Any, Future]] = deque()

    def __len__(self) -> int:
        return len(self._queue)

    @property
    def full(self) -> bool:
        return len(self._queue) >= self.depth

    @property
    def closed(self) -> bool:
        return self._pool is None

    def submit(self, tag: Any, fn: Callable[..., R], *args: Any) -> None:
        """Start ``fn(*args)`` on a thread (the caller keeps at most `depth` in flight: see `full`)."""
        if self._pool is None:
            raise RuntimeError("these reads were shut down")
        self._queue.append((tag, self._pool.submit(fn, *args)))

    def first_tag(self) -> Any:
        """The tag of the oldest call in flight."""
        return self._queue[0][0]

    def pop(self) -> tuple[Any, R]:
        """(tag, result) of the oldest call, waiting for it; its exception is raised here."""
        tag, future = self._queue.popleft()
        return tag, future.result()

    def shutdown(self, wait: bool = False) -> None:
        """Cancel the calls not started yet and let the threads exit (`wait`: until they have); idempotent.

        The calls stay queued with their tags (`first_tag` still answers); popping a cancelled one raises.
        """
        pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=wait, cancel_futures=True)

    def __del__(self) -> None:
        self.shutdown()


def in_order(items: Iterable[T], work: Callable[[T], R], depth: int, thread_name_prefix: str,
             wait_on_close: bool = False) -> Iterator[tuple[T, R]]:
    """``(item, work(item))`` for each item in order, with `work` running up to `depth` items ahead of the consumer.

    The threads stop when the iteration ends or the generator is closed (`wait_on_close`: and are waited for).
    """
    reads: InFlight[R] = InFlight(depth, thread_name_prefix)
    items = iter(items)

    def fill() -> None:
        while not reads.full:
            item = next(items, _END)
            if item is _END:
                return
            reads.submit(item, work, item)

    try:
        while True:
            fill()
            if not reads:
                return
            done = reads.pop()
            fill()  # keep `depth` going while the consumer works on this one
            yield done
            del done  # hold no result while waiting for the next
    finally:
        reads.shutdown(wait=wait_on_close)
