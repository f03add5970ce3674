"""`AtomicWriter`: the lifecycle shared by the write handles ("wb"/"xb" and "ab"): nothing is visible until a
clean close (or, with ``autocommit=False``, until fsspec's transaction commits), and every other way out aborts.

States: "open" -> "uploaded" (autocommit=False only) -> "committed" | "aborted". A subclass supplies the
strategy-specific steps as hooks: `_finish` (upload on a clean close), `_commit_uploaded` (make it visible),
`_record` (keep what the commit returned) and `_drop` (remove what was uploaded or is in flight).
"""
from __future__ import annotations

import io
import sys
from typing import Any, TypeVar

_W = TypeVar("_W", bound="AtomicWriter")


class AtomicWriter(io.IOBase):
    """Binary write-only handle whose object appears at once on a clean close, else not at all."""

    fs: Any
    path: str
    mode: str
    autocommit: bool

    def _opened(self) -> None:
        """Mark the handle open; call last in __init__ (an exception already propagating then is not ours)."""
        self._state = "open"
        self._exc_at_open = sys.exc_info()[1]

    # -- io protocol ------------------------------------------------------------------------

    @property
    def closed(self) -> bool:  # type: ignore[override]
        return self._state != "open"

    def readable(self) -> bool:
        return False

    def writable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return False

    def flush(self, force: bool = False) -> None:
        """Nothing to do: only `close` may make the bytes visible (`force` is fsspec's signature)."""
        self._check_open()

    def _check_open(self) -> None:
        if self._state != "open":
            raise ValueError(f"I/O operation on closed file {self.path}")

    def close(self) -> None:
        """Commit the bytes written, unless an exception is propagating through this close (for example
        from fsspec's ``OpenFile.__exit__``), in which case the write is aborted instead."""
        if self._state != "open":
            return
        exc = sys.exc_info()[1]
        self._end(abort=exc is not None and exc is not self._exc_at_open)

    def __enter__(self: _W) -> _W:
        self._check_open()
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if self._state == "open":
            self._end(abort=exc_type is not None)

    def __del__(self) -> None:
        # Dropped without close(): never commit half a write; abort while the event loop still runs.
        if getattr(self, "_state", None) in ("open", "uploaded") and not sys.is_finalizing():
            try:
                self._abort_now(timeout=30)
            except Exception:  # the loop is gone: the atexit hook or `fluxfs cleanup` collects the leftovers
                pass

    # -- fsspec transactions (autocommit=False) -------------------------------------------

    def commit(self) -> None:
        """Make the uploaded bytes of a closed (autocommit=False) handle visible."""
        if self._state != "uploaded":
            raise ValueError(f"nothing to commit for {self.path} (state {self._state})")
        try:
            result = self._commit_uploaded()
        except BaseException:
            self._abort_now()
            raise
        self._committed(result)

    def discard(self) -> None:
        """Drop the uploaded but uncommitted bytes (or abort an open handle)."""
        self._abort_now()

    # -- the lifecycle ------------------------------------------------------------------------

    def _end(self, abort: bool) -> None:
        if abort:
            self._abort_now()
            return
        self._finish()

    def _committed(self, result: Any) -> None:
        self._record(result)
        self._state = "committed"
        self.fs.invalidate_cache(self.path)

    def _abort_now(self, timeout: float | None = None) -> None:
        if self._state in ("aborted", "committed"):
            return
        self._state = "aborted"
        self._drop(timeout)

    # -- hooks --------------------------------------------------------------------------------

    def _finish(self) -> None:
        """Upload what is left on a clean close; commit it (`_committed`) if autocommit, else go "uploaded"."""
        raise NotImplementedError

    def _commit_uploaded(self) -> Any:
        """Make the uploaded bytes visible; what it returns goes to `_record`."""
        raise NotImplementedError

    def _record(self, result: Any) -> None:
        """Keep what the commit returned (object_info, generation)."""
        raise NotImplementedError

    def _drop(self, timeout: float | None) -> None:
        """Remove what was uploaded or is in flight; the state is already "aborted"."""
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.mode} flux://{self.path} ({self._state})>"
