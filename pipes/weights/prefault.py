"""Fresh tensors' pages mapped ahead of their bytes, on another thread (Linux `MADV_POPULATE_WRITE`).

A new tensor's memory is mapped page by page on first write: one fault per 4 KiB, ~0.4 s of kernel time
per GB, paid by the thread that writes first. Received straight into tensors, that is the event loop's
thread: it then drains its sockets late and holds the server's sends back. Asking the kernel to map the
pages first, from a worker thread, takes that work off the loop (the same work: a page is faulted once).
"""
from __future__ import annotations

import ctypes
import mmap
import queue
import sys
import threading
from concurrent.futures import Future
from typing import Any, Callable, Optional, Sequence

from fluxfs.support import reset_in_child

MADV_POPULATE_WRITE = 23  # Linux 5.14+; older kernels answer EINVAL and prefaulting is given up
STEP = 2 << 20            # mapped per call (the address space's lock held meanwhile); a stop waits one step
MIN = 1 << 20             # smaller buffers are left to fault as they are written

_madvise: Optional[Callable[..., int]] = None
if sys.platform.startswith("linux"):
    try:
        _madvise = ctypes.CDLL(None, use_errno=True).madvise
        _madvise.argtypes, _madvise.restype = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int], ctypes.c_int
    except (OSError, AttributeError):  # pragma: no cover - a libc without madvise
        _madvise = None


def _spans(views: Sequence[memoryview]) -> list[tuple[int, int]]:
    """(page-aligned address, length) of the whole pages inside each writable view of MIN bytes or more."""
    out = []
    for mv in views:
        if mv.nbytes < MIN:
            continue
        start = ctypes.addressof(ctypes.c_char.from_buffer(mv))
        lo, hi = -(-start // mmap.PAGESIZE) * mmap.PAGESIZE, (start + mv.nbytes) // mmap.PAGESIZE * mmap.PAGESIZE
        if hi > lo:
            out.append((lo, hi - lo))
    return out


def _populate(spans: list[tuple[int, int]], stop: threading.Event) -> None:
    global _madvise
    for at, n in spans:
        for off in range(0, n, STEP):
            if stop.is_set() or _madvise is None:
                return
            if _madvise(at + off, min(STEP, n - off), MADV_POPULATE_WRITE) != 0 and ctypes.get_errno() == 22:
                _madvise = None  # EINVAL: a kernel without it (other errors, e.g. ENOMEM: only this span)


class _Lane:
    """One thread mapping pages, jobs in the order given (a process's loads share it): one thread at a time
    holds the address space's lock, for one STEP, so allocations elsewhere wait little. A forked child (which
    has not the parent's thread) starts its own on first use (the one fork hook: `reset_in_child`)."""

    def __init__(self) -> None:
        self.jobs: Optional[queue.SimpleQueue] = None  # each queue made here has a thread serving it
        reset_in_child(self)

    def _after_fork(self) -> None:
        self.jobs = None

    def submit(self, spans: list[tuple[int, int]], stop: threading.Event) -> Future:
        done: Future = Future()
        jobs = self.jobs
        if jobs is None:  # two first uses at once start a thread each, each serving the jobs given to it
            jobs = self.jobs = queue.SimpleQueue()
            threading.Thread(target=self._run, args=(jobs,), name="fluxfs-prefault", daemon=True).start()
        jobs.put((spans, stop, done))
        return done

    @staticmethod
    def _run(jobs: queue.SimpleQueue) -> None:
        while True:
            spans, stop, done = jobs.get()
            try:
                _populate(spans, stop)
            finally:
                done.set_result(None)


_LANE = _Lane()


def ahead(views: Sequence[Any], stop: threading.Event) -> Optional[Future]:
    """Start mapping the pages of `views` (writable buffers about to be filled, in the order they will be)
    on the prefault thread, until `stop` is set; the future of that work (None: nothing to do)."""
    try:
        spans = _spans([memoryview(v).cast("B") for v in views]) if _madvise is not None else []
    except (TypeError, ValueError):  # a read-only or exotic buffer: left to fault as it is written
        spans = []
    return _LANE.submit(spans, stop) if spans else None
