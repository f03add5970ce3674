"""Cross-process coordination by `fcntl.flock` on lock files: readers share, a filler or evictor excludes.

flock locks belong to the open file and the kernel drops them when the holder dies (SIGKILL included),
so a crashed filler never blocks anyone. A lock file may be removed by whoever holds it exclusively
(eviction); every locker checks after locking that the file it locked is still the one at the path,
and otherwise locks the new one, so two holders can never sit on two different files of the same name.
"""
from __future__ import annotations

import errno
import fcntl
import os
import time
from typing import Any, Callable, Optional

POLL_MAX = 0.02  # seconds between two tries of a bounded wait, at most
_UNSEEN = object()


class Stall:
    """The one bound on a wait for another process (`wait_while_moving` here, `progress.read` on an event loop):
    `stalled(mark)` is True once `mark` (the holder's progress: its lock file's `stamp`) stayed the same for `stall`
    seconds; `pause()` is the wait before the next look, doubling from `first` up to `most`."""

    def __init__(self, stall: float, first: float = 0.0005, most: float = POLL_MAX):
        self.stall, self._pause, self._most = stall, first, most
        self._seen: Any = _UNSEEN
        self._since = time.monotonic()

    def stalled(self, mark: Any) -> bool:
        now = time.monotonic()
        if mark != self._seen:
            self._seen, self._since = mark, now
            return False
        return now - self._since >= self.stall

    def pause(self) -> float:
        pause, self._pause = self._pause, min(self._pause * 2, self._most)
        return pause


def stamp(fd: int) -> tuple[int, int]:
    """A file's size and mtime: what a holder changes as it makes progress (a filler marks parts, touches it)."""
    st = os.fstat(fd)
    return st.st_size, st.st_mtime_ns


def wait_while_moving(attempt: Callable[[], bool], progress: Callable[[], Any], stall: float) -> bool:
    """Call `attempt()` until it succeeds (True), backing off; False once `progress()` stayed the same for
    `stall` seconds: a holder that stopped (SIGSTOP, a hung disk) never blocks anyone without bound."""
    bound = Stall(stall)
    bound.stalled(progress())
    while not attempt():
        if bound.stalled(progress()):
            return False
        time.sleep(bound.pause())
    return True


def lock_free(fd: int) -> bool:
    """Nobody holds `fd`'s file exclusively: a shared flock taken without waiting, and let go at once."""
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    fcntl.flock(fd, fcntl.LOCK_UN)
    return True


def flock_within(fd: int, op: int, stall: float) -> bool:
    """`fcntl.flock(fd, op)`, waiting while the holder makes progress (the file's size and mtime change) and
    False once it made none for `stall` seconds."""
    def attempt() -> bool:
        try:
            fcntl.flock(fd, op | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            return False

    return wait_while_moving(attempt, lambda: stamp(fd), stall)


class FileLock:
    """One flock on `path` (created if missing): `acquire(shared)` blocks, `try_acquire` does not."""

    def __init__(self, path: str):
        self.path = path
        self._fd: Optional[int] = None
        self.shared: Optional[bool] = None   # None: not held

    def _open(self) -> int:
        if self._fd is None:
            flags = os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
            try:
                self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT | flags, 0o644)
            except OSError as exc:  # a read-only disk (a cache baked into an image): an existing lock file
                if exc.errno not in (errno.EROFS, errno.EACCES, errno.EPERM):
                    raise
                try:
                    self._fd = os.open(self.path, os.O_RDONLY | flags)
                except FileNotFoundError:
                    raise exc from None
        return self._fd

    def _still_ours(self) -> bool:
        try:
            return os.fstat(self._fd).st_ino == os.stat(self.path).st_ino
        except FileNotFoundError:
            return False

    def _lock(self, shared: bool, blocking: bool) -> bool:
        while True:
            fd = self._open()
            flags = (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | (0 if blocking else fcntl.LOCK_NB)
            try:
                fcntl.flock(fd, flags)
            except BlockingIOError:
                return False
            if self._still_ours():
                self.shared = shared
                return True
            self._close()  # removed (or replaced) while we waited: lock the file now at the path

    def acquire(self, shared: bool, stall: Optional[float] = None,
                progress: Optional[Callable[[], Any]] = None) -> bool:
        """Wait for the lock (shared: readers; exclusive: a filler or evictor). Also converts a held lock.
        With `stall`: False once the holder made no progress for `stall` seconds (`progress()` unchanged: by
        default the lock file's size and mtime, which a filler touches as it writes), never waiting without bound
        on a holder that stopped (SIGSTOP, a hung disk) instead of dying."""
        if stall is None:
            return self._lock(shared, blocking=True)
        return wait_while_moving(lambda: self._lock(shared, blocking=False), progress or self.stamp, stall)

    def stamp(self) -> Any:
        """The lock file's size and mtime (a filler marks and touches it): what a bounded wait watches."""
        try:
            st = os.fstat(self._open())
        except OSError:
            return None
        return st.st_size, st.st_mtime_ns

    def touch(self) -> None:
        """A filler's sign of progress to those waiting (the lock file's mtime). No-op when not held."""
        if self._fd is not None:
            try:
                os.utime(self._fd)
            except OSError:
                pass

    def try_acquire(self, shared: bool = False) -> bool:
        """Take the lock if nobody conflicting holds it; False at once otherwise."""
        return self._lock(shared, blocking=False)

    def downgrade(self) -> None:
        """Exclusive to shared, without letting an evictor in between (flock converts in place)."""
        fcntl.flock(self._fd, fcntl.LOCK_SH)
        self.shared = True

    def mark_filling(self, on: bool) -> None:
        """A byte in the lock file while a fill is under way, none once it ended: only an entry whose filler was
        killed still has it, so only then are its leftovers looked for (a directory scan). No-op when not held."""
        if self._fd is not None:
            try:
                os.ftruncate(self._fd, 1 if on else 0)
            except OSError:
                pass  # a lock file opened read-only (a read-only disk): a hint only

    def publish(self, data: bytes, at: int = 0) -> None:
        """Write `data` into the lock file at `at` (a fill's progress: `progress.py`); no-op when not held."""
        if self._fd is not None:
            try:
                os.pwrite(self._fd, data, at)
            except OSError:
                pass  # a hint for other processes only

    def was_filling(self) -> bool:
        """A fill of this entry started and never ended (its filler was killed): leftovers may lie about."""
        return self._fd is not None and os.fstat(self._fd).st_size > 0

    def remove(self) -> None:
        """Unlink the lock file; only while holding it exclusively (the next locker makes a new one)."""
        assert self.shared is False, "remove() needs the exclusive lock"
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass

    def _close(self) -> None:
        if self._fd is not None:
            fd, self._fd = self._fd, None
            os.close(fd)  # closing the only descriptor drops the lock
        self.shared = None

    def release(self) -> None:
        if self.shared is False:
            self.mark_filling(False)  # a filler letting go: its fill ended (done, streamed through or failed)
        self._close()

    def __enter__(self) -> "FileLock":
        return self

    def __exit__(self, *exc) -> None:
        self.release()

    def __del__(self) -> None:
        self._close()
