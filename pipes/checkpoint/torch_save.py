"""`FluxCheckpoint`: torch.save/torch.load to ``flux://`` URLs, synchronously or in the background.

Writes go through the filesystem's atomic parallel multipart writer (the object appears only
when the whole checkpoint is uploaded), reads through its parallel ranged reader. Loading
defaults to ``weights_only=True``: unpickling arbitrary objects needs an explicit opt-in.
"""
from __future__ import annotations

import concurrent.futures
import pickle
import threading
from typing import IO, Any

import torch

from fluxfs import FluxFileSystem
from fluxfs.handle import FilesystemHandle

from ..options import merge_storage_options
from ..urls import parse_url, url_protocol
from .errors import CheckpointSaveError, upload_errors
from .snapshot import snapshot

from fluxfs.support import get_logger

logger = get_logger(__name__)  # records redacted: no credentials in logs

__all__ = ["FluxCheckpoint"]


_ZIP_MAGIC = b"PK\x03\x04"  # torch.save has written zip archives since torch 1.6
_PICKLE_PROTO = b"\x80"  # the legacy format: a pickle stream, protocol 2+


class FluxCheckpoint:
    """Checkpoint reader/writer for ``flux://bucket/key`` URLs, with bounded background saves.

    ``FluxCheckpoint(endpoint_url=..., token=..., part_size=..., retry=...)`` or
    ``FluxCheckpoint(storage_options={...})`` (or both, merged): options other than `max_in_flight`
    are FluxFileSystem storage options (FSSPEC_FLUX_* environment variables fill in the rest).
    """

    def __init__(self, *, max_in_flight: int = 2, storage_options: dict[str, Any] | None = None, **options: Any):
        if max_in_flight < 1:
            raise ValueError(f"max_in_flight must be at least 1, not {max_in_flight}")
        storage_options = merge_storage_options("FluxCheckpoint", storage_options, options)
        self.storage_options = storage_options
        # Through the handle (fsspec.filesystem), so FSSPEC_FLUX_* variables and fsspec's config apply, as for
        # URLs; built now, so bad options fail here rather than at the first save.
        self.handle = FilesystemHandle("flux", storage_options)
        self.handle.fs  # noqa: B018
        self.max_in_flight = max_in_flight
        self._slots = threading.BoundedSemaphore(max_in_flight)
        self._lock = threading.Lock()
        self._last_by_url: dict[str, concurrent.futures.Future] = {}
        self._pending: set[concurrent.futures.Future] = set()
        self._failures: list[BaseException] = []  # reported again by wait(), for fire-and-forget callers
        self._executor: concurrent.futures.ThreadPoolExecutor | None = None

    @property
    def fs(self) -> FluxFileSystem:
        """This process's filesystem (rebuilt after a fork, through the handle)."""
        return self.handle.fs

    # -- handles ----------------------------------------------------------------------------

    def object_path(self, url: str) -> str:
        """`bucket/key` for a ``flux://bucket/key`` URL (or a bare `bucket/key`); other schemes are refused."""
        url = str(url)
        if url_protocol(url) not in (None, "flux"):
            raise ValueError(f"FluxCheckpoint handles flux://bucket/key URLs, not {url!r}")
        parsed = parse_url(url)
        if not parsed.bucket or not parsed.key:
            raise ValueError(f"checkpoint URL needs a bucket and an object name: {url!r}")
        return parsed.path

    def writer(self, url: str) -> IO[bytes]:
        """A binary write handle for `url`: the object appears only when the handle closes without error."""
        return self.fs.open(self.object_path(url), "wb")

    def reader(self, url: str) -> IO[bytes]:
        """A seekable binary read handle for `url` (parallel ranged reads)."""
        return self.fs.open(self.object_path(url), "rb")

    # -- synchronous ------------------------------------------------------------------------

    def save(self, obj: Any, url: str) -> None:
        """torch.save `obj` to `url`, atomically: on failure no object (and no partial one) is left."""
        with self.writer(url) as f, upload_errors(f):
            torch.save(obj, f)

    def load(self, url: str, map_location: Any = None, weights_only: bool = True) -> Any:
        """torch.load from `url`. `weights_only=False` unpickles arbitrary objects: only for trusted checkpoints."""
        with self.reader(url) as f:
            # torch.load of other bytes fails with KeyError/EOFError from deep in pickle: say what it is.
            head = f.read(4)
            f.seek(0)
            if not (head.startswith(_ZIP_MAGIC) or head[:1] == _PICKLE_PROTO):
                raise pickle.UnpicklingError(
                    f"{url} is not a torch checkpoint: it starts with {head!r}, neither a zip archive "
                    "(torch.save's format) nor a pickle"
                )
            try:
                return torch.load(f, map_location=map_location, weights_only=weights_only)
            except pickle.UnpicklingError as exc:
                if not weights_only:
                    raise
                raise pickle.UnpicklingError(
                    f"{url} holds objects other than tensors and plain containers, and load() refuses to "
                    "unpickle them by default (weights_only=True). If you trust this checkpoint, pass "
                    f"weights_only=False. torch.load said: {exc}"
                ) from exc

    # -- asynchronous -----------------------------------------------------------------------

    def save_async(self, obj: Any, url: str) -> concurrent.futures.Future:
        """Snapshot `obj` to CPU now, upload it in the background; returns a Future of None.

        Blocks while `max_in_flight` saves are pending. Saves to the same URL complete in the
        order they were submitted. A failure is logged and raised from the Future as
        `CheckpointSaveError` naming the URL.
        """
        path = self.object_path(url)
        self._slots.acquire()  # back-pressure: bounds memory held by snapshots, too
        try:
            state = snapshot(obj)
            with self._lock:
                if self._executor is None:
                    self._executor = concurrent.futures.ThreadPoolExecutor(
                        max_workers=self.max_in_flight, thread_name_prefix="fluxfs-ckpt"
                    )
                previous = self._last_by_url.get(path)
                future = self._executor.submit(self._save_after, previous, state, url)
                self._last_by_url[path] = future
                self._pending.add(future)
        except BaseException:
            self._slots.release()
            raise
        future.add_done_callback(lambda f: self._finished(f, path))
        return future

    def _save_after(self, previous: concurrent.futures.Future | None, state: Any, url: str) -> None:
        # `previous` was submitted earlier to the same FIFO pool, so it is already running or
        # done: waiting here cannot deadlock. Its outcome is its own Future's business.
        if previous is not None:
            concurrent.futures.wait([previous])
        try:
            self.save(state, url)
        except BaseException as exc:
            logger.error("background checkpoint save to %s failed: %s", url, exc)
            raise CheckpointSaveError(f"background checkpoint save to {url} failed: {exc}") from exc

    def _finished(self, future: concurrent.futures.Future, path: str) -> None:
        with self._lock:
            self._pending.discard(future)
            if self._last_by_url.get(path) is future:
                del self._last_by_url[path]
            if not future.cancelled() and future.exception() is not None:
                self._failures.append(future.exception())
        self._slots.release()

    def wait(self, timeout: float | None = None) -> None:
        """Wait for every pending background save; raise the first failure since the last wait(), if any."""
        with self._lock:
            pending = list(self._pending)
        _, not_done = concurrent.futures.wait(pending, timeout=timeout)
        if not_done:
            raise TimeoutError(f"{len(not_done)} checkpoint saves still running after {timeout}s")
        with self._lock:
            failures, self._failures = self._failures, []
        if failures:
            raise failures[0]

    def close(self) -> None:
        """Wait for pending saves (failures stay on their Futures) and stop the worker threads."""
        with self._lock:
            executor, self._executor = self._executor, None
        if executor is not None:
            executor.shutdown(wait=True)

    def __enter__(self) -> "FluxCheckpoint":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
