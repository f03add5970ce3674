"""`FluxAppendFile`: the "ab" handle. Bytes written go to a temporary object through the ordinary write
pipeline (parallel parts for a large append); close composes it onto the object (`append_commit`).

Like "wb" it is atomic: the appended bytes appear all at once on a clean close, and an exception inside
``with`` (or a failed upload) appends nothing. Concurrent appenders never lose each other's bytes: each
commit is pinned to the generation it composes onto and retried against the new one when another
writer got there first. The object keeps its content type, metadata and fixed-key metadata unless
open() is given new ones; a missing object is created (an "ab" open that writes nothing creates it empty).
"""
from __future__ import annotations

import io
import sys
from typing import TYPE_CHECKING, Any

from .. import temporaries
from ..gcs import bridge, tempnames
from .append_commit import commit_append, current_resource, destination_fields, new_temp
from .settings import object_path
from .single import object_info, upload_single
from .write_file import FluxWriteFile

if TYPE_CHECKING:  # pragma: no cover
    from ..core import FluxFileSystem


class FluxAppendFile(io.IOBase):
    """Binary append handle for one object; see the module docstring for the guarantees.

    `tell()` counts the bytes written through this handle (as fsspec's buffered files do in "ab").
    With ``autocommit=False`` (fsspec transactions) close uploads the bytes and `commit()` appends them.
    """

    def __init__(self, fs: "FluxFileSystem", path: str, mode: str = "ab", block_size: int | None = None,
                 autocommit: bool = True, content_type: str | None = None, metadata: dict | None = None,
                 fixed_key_metadata: dict | None = None, kms_key_name: str | None = None, **kwargs: Any):
        if mode != "ab":
            raise ValueError(f"FluxAppendFile mode must be 'ab', not {mode!r}")
        self.fs, self.mode, self.autocommit = fs, mode, autocommit
        self.bucket, self.key = object_path(fs, path)
        self.path = f"{self.bucket}/{self.key}"
        self._given = {"content_type": content_type, "metadata": metadata,
                       "fixed_key_metadata": fixed_key_metadata, "kms_key_name": kms_key_name}
        destination_fields(self.key, None, self._given)  # a bad option fails now, naming itself
        #: the object's JSON resource when opened (None: it did not exist); the append is pinned to it
        self.base: dict | None = bridge.run(fs, current_resource, fs, self.bucket, self.key)
        self._temp = new_temp(fs, self.bucket)
        try:
            # The part is a temporary: marked as this job's, so cleanup may delete it and nothing else.
            self._part = FluxWriteFile(fs, self._temp, "wb", block_size=block_size,
                                       metadata=tempnames.marker(fs.job_id), **kwargs)
        except BaseException:
            temporaries.release(fs, self._temp)  # nothing was created
            raise
        self._state = "open"  # -> "uploaded" (autocommit=False) -> "committed" | "aborted"
        self._exc_at_open = sys.exc_info()[1]
        #: the object's info dict (gcsfs shape) after the append; its generation, as gcsfs's files have
        self.object_info: dict | None = None
        self.generation: str | None = None

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

    def tell(self) -> int:
        return self._part.tell()

    def flush(self, force: bool = False) -> None:
        """Nothing to do: appended bytes become visible together, at close."""
        if self._state != "open":
            raise ValueError(f"I/O operation on closed file {self.path}")

    def read(self, size: int = -1) -> bytes:
        raise io.UnsupportedOperation(f"read: {self.path} is open for appending ('ab')")

    def write(self, data: Any) -> int:
        if self._state != "open":
            raise ValueError(f"I/O operation on closed file {self.path}")
        try:
            return self._part.write(data)
        except BaseException as exc:
            self._abort()
            raise self._named(exc)

    def close(self) -> None:
        """Append the bytes written, unless an exception is propagating through this close."""
        if self._state != "open":
            return
        exc = sys.exc_info()[1]
        self._end(abort=exc is not None and exc is not self._exc_at_open)

    def __enter__(self) -> "FluxAppendFile":
        if self._state != "open":
            raise ValueError(f"I/O operation on closed file {self.path}")
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if self._state == "open":
            self._end(abort=exc_type is not None)

    def __del__(self) -> None:
        # Dropped without close(): append nothing; the part's own handle aborts its upload.
        if getattr(self, "_state", None) in ("open", "uploaded") and not sys.is_finalizing():
            try:
                self._abort(timeout=30)
            except Exception:  # the loop is gone: the atexit hook or `fluxfs cleanup` deletes the part
                pass

    # -- fsspec transactions (autocommit=False) -------------------------------------------

    def commit(self) -> None:
        """Append the uploaded bytes of a closed (autocommit=False) handle."""
        if self._state != "uploaded":
            raise ValueError(f"nothing to commit for {self.path} (state {self._state})")
        try:
            resource = bridge.run(self.fs, self._commit)
        except BaseException:
            self._abort()
            raise
        self.object_info = object_info(self.fs, self.bucket, resource)
        self.generation = self.object_info.get("generation")
        self._state = "committed"
        self.fs.invalidate_cache(self.path)

    def discard(self) -> None:
        """Drop the appended bytes (uploaded or not)."""
        self._abort()

    # -- internals ----------------------------------------------------------------------------

    def _end(self, abort: bool) -> None:
        if abort:
            self._abort()
            return
        try:
            self._part.__exit__(None, None, None)  # uploads the part (crc32c-checked), visible only as a temporary
        except BaseException as exc:
            self._abort()
            raise self._named(exc)
        self._state = "uploaded"
        if self.autocommit:
            self.commit()

    async def _commit(self) -> dict:
        if self._part.object_info["size"] == 0:  # nothing appended: only a missing object is created
            await _release_part(self.fs, self._temp)
            if self.base is not None:
                return self.base
            try:
                return await upload_single(self.fs, self.bucket, self.key, b"", 0, create_only=True,
                                           fields=destination_fields(self.key, None, self._given))
            except FileExistsError:  # created meanwhile by someone else: appending nothing to it is done
                return await current_resource(self.fs, self.bucket, self.key) or {}
        part = {**self._part.object_info, "name": self._temp.split("/", 1)[1]}
        return await commit_append(self.fs, self.bucket, self.key, self.base, part, self._given)

    def _abort(self, timeout: float | None = None) -> None:
        if self._state in ("aborted", "committed"):
            return
        self._state = "aborted"
        self._part.discard()  # aborts an upload in flight (nothing committed)
        bridge.run(self.fs, _release_part, self.fs, self._temp, timeout=timeout)

    def _named(self, exc: BaseException) -> BaseException:
        """The part's error naming the object appended to, never the internal temporary (a missing bucket, a 403)."""
        if isinstance(exc, OSError) and exc.args and isinstance(exc.args[0], str) and self._temp in exc.args[0]:
            exc.args = (exc.args[0].replace(self._temp, self.path), *exc.args[1:])
        return exc

    def __repr__(self) -> str:
        return f"<FluxAppendFile ab flux://{self.path} ({self._state})>"


async def _release_part(fs: "FluxFileSystem", path: str) -> None:
    """Delete the temporary part (any generation); a part never created is simply forgotten."""
    await temporaries.delete(fs, path)
