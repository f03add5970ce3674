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
from typing import TYPE_CHECKING, Any

from .. import temporaries
from ..gcs import bridge, tempnames
from ..zonal import transport
from .append_commit import commit_append, current_resource, destination_fields, new_temp
from .lifecycle import AtomicWriter
from .settings import object_path
from .single import object_info, upload_single
from .write_file import FluxWriteFile

if TYPE_CHECKING:  # pragma: no cover
    from fsspec import AbstractFileSystem

    from ..gcs.client import Client


class FluxAppendFile(AtomicWriter):
    """Binary append handle for one object; see the module docstring for the guarantees.

    `tell()` counts the bytes written through this handle (as fsspec's buffered files do in "ab").
    With ``autocommit=False`` (fsspec transactions) close uploads the bytes and `commit()` appends them.
    """

    def __init__(self, fs: "AbstractFileSystem", path: str, mode: str = "ab", block_size: int | None = None,
                 autocommit: bool = True, content_type: str | None = None, metadata: dict | None = None,
                 fixed_key_metadata: dict | None = None, kms_key_name: str | None = None, **kwargs: Any):
        if mode != "ab":
            raise ValueError(f"FluxAppendFile mode must be 'ab', not {mode!r}")
        self.fs, self.mode, self.autocommit = fs, mode, autocommit
        self.client = client = fs.client  # what the upload pipeline takes
        self.bucket, self.key = object_path(client, path)
        self.path = f"{self.bucket}/{self.key}"
        transport.of_sync(client, self.bucket).refuse_compose(f"append to {self.path}")  # the commit composes
        self._given = {"content_type": content_type, "metadata": metadata,
                       "fixed_key_metadata": fixed_key_metadata, "kms_key_name": kms_key_name}
        destination_fields(self.key, None, self._given)  # a bad option fails now, naming itself
        #: the object's JSON resource when opened (None: it did not exist); the append is pinned to it
        self.base: dict | None = bridge.run(fs, current_resource, client, self.bucket, self.key)
        self._temp = new_temp(client, self.bucket)
        try:
            # The part is a temporary: marked as this job's, so cleanup may delete it and nothing else.
            self._part = FluxWriteFile(fs, self._temp, "wb", block_size=block_size,
                                       metadata=tempnames.marker(client.job_id), **kwargs)
        except BaseException:
            temporaries.release(client, self._temp)  # nothing was created
            raise
        #: the object's info dict (gcsfs shape) after the append; its generation, as gcsfs's files have
        self.object_info: dict | None = None
        self.generation: str | None = None
        self._opened()

    # -- io protocol (the rest, and close/commit/discard: AtomicWriter) ------------------------

    def tell(self) -> int:
        return self._part.tell()

    def read(self, size: int = -1) -> bytes:
        raise io.UnsupportedOperation(f"read: {self.path} is open for appending ('ab')")

    def write(self, data: Any) -> int:
        self._check_open()
        try:
            return self._part.write(data)
        except BaseException as exc:
            self._abort_now()
            self._named(exc)  # renames the temporary in its message, in place
            raise

    # -- internals ----------------------------------------------------------------------------

    def _finish(self) -> None:
        try:
            self._part.__exit__(None, None, None)  # uploads the part (crc32c-checked), visible only as a temporary
        except BaseException as exc:
            self._abort_now()
            self._named(exc)  # renames the temporary in its message, in place
            raise
        self._state = "uploaded"
        if self.autocommit:
            self.commit()

    def _commit_uploaded(self) -> dict:
        return bridge.run(self.fs, self._commit)

    def _record(self, resource: dict) -> None:
        self.object_info = object_info(self.client, self.bucket, resource)
        self.generation = self.object_info.get("generation")

    async def _commit(self) -> dict:
        if self._part.object_info["size"] == 0:  # nothing appended: only a missing object is created
            await _release_part(self.client, self._temp)
            if self.base is not None:
                return self.base
            try:
                return await upload_single(self.client, self.bucket, self.key, b"", 0, create_only=True,
                                           fields=destination_fields(self.key, None, self._given))
            except FileExistsError:  # created meanwhile by someone else: appending nothing to it is done
                return await current_resource(self.client, self.bucket, self.key) or {}
        part = {**self._part.object_info, "name": self._temp.split("/", 1)[1]}
        return await commit_append(self.client, self.bucket, self.key, self.base, part, self._given)

    def _drop(self, timeout: float | None) -> None:
        self._part.discard()  # aborts an upload in flight (nothing committed)
        bridge.run(self.fs, _release_part, self.client, self._temp, timeout=timeout)

    def _named(self, exc: BaseException) -> BaseException:
        """The part's error naming the object appended to, never the internal temporary (a missing bucket, a 403)."""
        if isinstance(exc, OSError) and exc.args and isinstance(exc.args[0], str) and self._temp in exc.args[0]:
            exc.args = (exc.args[0].replace(self._temp, self.path), *exc.args[1:])
        return exc


async def _release_part(fs: "Client", path: str) -> None:
    """Delete the temporary part (any generation); a part never created is simply forgotten."""
    await temporaries.delete(fs, path)
