"""`FluxWriteFile`: the "wb"/"xb" handle that uploads parts in parallel while the caller keeps writing.

Atomic: the object appears only when the file closes cleanly. An exception inside ``with``,
a KeyboardInterrupt, a failed part or a crc32c mismatch aborts the upload and removes every
part and temporary. Memory is bounded by the ``write_memory`` option: `write` blocks while parts in flight
hold their share of it, and parts grow with the write to at most half of it (writes/schedule.py).
The strategy is the filesystem's ``multipart`` option: "xml", "compose" or "resumable".
"""
from __future__ import annotations

import atexit
import io
import weakref
from typing import TYPE_CHECKING, Any

from ..gcs import bridge
from ..gcs.checksums import crc32c
from ..gcs.limits import RESUMABLE_CHUNK_MULTIPLE
from .fields import ObjectFields, object_fields
from .lifecycle import AtomicWriter
from .parts import PartWriter
from .schedule import beyond_reach, max_part, reach
from .schedule import part_size as scheduled_part_size
from .settings import destination_sync, object_path, upload_settings
from .single import exists_error, get_resource

if TYPE_CHECKING:  # pragma: no cover
    from fsspec import AbstractFileSystem

from ..gcs.redact import get_logger

logger = get_logger(__name__)  # records redacted: no credentials in logs

# Handles not yet closed: aborted at interpreter exit, so an unclosed writer never leaves its
# multipart upload or temporaries behind (a killed process leaves them to `fluxfs cleanup`).
_OPEN: "weakref.WeakSet[FluxWriteFile]" = weakref.WeakSet()

# open() keywords fsspec or gcsfs callers pass that do not change how we upload ("consistency": every
# fluxfs write is checked by crc32c whatever gcsfs's check would have been).
_IGNORED_KWARGS = frozenset({"cache_options", "cache_type", "consistency", "timeout", "compression", "concurrency"})


class FluxWriteFile(AtomicWriter):
    """Binary write handle for one object; see the module docstring for the guarantees.

    gcsfs's write options are honoured on every strategy: ``content_type`` (guessed from the key when
    not given), ``metadata``, ``fixed_key_metadata`` (content_encoding, cache_control,
    content_disposition, content_language, custom_time) and ``kms_key_name``; the first three are
    also settable attributes, read when the upload starts (the first whole part) or, for a smaller
    file, at close. ``block_size`` is rounded up to the strategy's minimum part size (XML: 5 MiB).
    """

    def __init__(self, fs: "AbstractFileSystem", path: str, mode: str = "wb", block_size: int | None = None,
                 autocommit: bool = True, content_type: str | None = None, metadata: dict | None = None,
                 fixed_key_metadata: dict | None = None, kms_key_name: str | None = None, acl: str | None = None,
                 generation: Any = None, **kwargs: Any):
        if mode not in ("wb", "xb"):
            raise ValueError(f"FluxWriteFile mode must be 'wb' or 'xb', not {mode!r}")
        unknown = set(kwargs) - _IGNORED_KWARGS
        if unknown:
            raise TypeError(f"unexpected open() arguments for {path}: {sorted(unknown)}")
        if acl is not None:
            raise ValueError(f"open(acl={acl!r}) is not supported by fluxfs writes (gcsfs ignores it); "
                             "objects get the bucket's default object ACL")
        if generation is not None:
            raise ValueError(f"cannot write to a specific generation ({generation}): {path}")
        self.fs, self.mode, self.autocommit = fs, mode, autocommit
        self.client = fs.client  # what the upload pipeline takes
        self.bucket, self.key = object_path(self.client, path)
        self.path = f"{self.bucket}/{self.key}"
        self._content_type, self._metadata = content_type, metadata if metadata is not None else {}
        self._fixed_key_metadata = fixed_key_metadata if fixed_key_metadata is not None else {}
        self.kms_key_name = kms_key_name
        fields = self._fields()
        self._block_size = block_size
        self._chunks: list[bytes] = []
        self._buffered = 0
        self._configure(fields)
        if mode == "xb":  # fail at open, as fsspec expects; the commit keeps ifGenerationMatch=0 (the race)
            try:
                bridge.run(fs, get_resource, self.client, self.bucket, self.key)
            except FileNotFoundError:
                pass
            else:
                raise exists_error(self.bucket, self.key)
        self._loc = 0
        _OPEN.add(self)
        #: the written object's info dict (gcsfs shape, with generation and crc32c) once committed
        self.object_info: dict | None = None
        #: the written object's generation once committed (as gcsfs's GCSFile.generation)
        self.generation: str | None = None
        #: what made a write or close fail. Callers that write through another library (torch.save's
        #: zip writer replaces a failed write's exception with its own "unexpected pos") re-raise it.
        self.error: Exception | None = None
        self._opened()

    # -- what the object stores besides its bytes ---------------------------------------------

    @property
    def metadata(self) -> dict:
        """Custom metadata (x-goog-meta-*); settable, and changes to the dict itself count too."""
        return self._metadata

    @metadata.setter
    def metadata(self, value: dict | None) -> None:
        self._change("metadata", value if value is not None else {})

    @property
    def content_type(self) -> str:
        """The object's content type: as given, else guessed from the key, else application/octet-stream."""
        return self._fields().content_type

    @content_type.setter
    def content_type(self, value: str | None) -> None:
        self._change("content_type", value)

    @property
    def fixed_key_metadata(self) -> dict:
        """gcsfs's fixed-key metadata (content_encoding, cache_control, ...); settable like `metadata`."""
        return self._fixed_key_metadata

    @fixed_key_metadata.setter
    def fixed_key_metadata(self, value: dict | None) -> None:
        self._change("fixed_key_metadata", value if value is not None else {})

    def _fields(self, **override: Any) -> ObjectFields:
        args = {"content_type": self._content_type, "metadata": self._metadata,
                "fixed_key_metadata": self._fixed_key_metadata, **override}
        return object_fields(self.key, kms_key_name=self.kms_key_name, **args)

    def _change(self, name: str, value: Any) -> None:
        fields = self._fields(**{name: value})  # validated before anything changes
        if self._writer.started and not self._writer.fields_at_complete and fields != self._writer.fields:
            raise ValueError(f"{self.path}: {name} can no longer change, the upload started after "
                             f"{self._writer.size} bytes; set it before writing")
        setattr(self, f"_{name}", value)

    def _configure(self, fields: ObjectFields) -> None:
        """Part size and strategy for `fields` (XML headers cannot carry every field); before the upload starts."""
        dest = destination_sync(self.client, self.bucket, self.path)
        self.part_size, self.concurrency, uploader = upload_settings(self.client, self._block_size, fields, dest)
        uploader = getattr(self, "_appending", None) or uploader  # "ab" on zonal: onto the object taken over
        if self._buffered >= self.part_size:  # strategy changed under a fuller buffer: a part size above it
            self.part_size = -(-(self._buffered + 1) // RESUMABLE_CHUNK_MULTIPLE) * RESUMABLE_CHUNK_MULTIPLE
        self._uploader = uploader  # its max_parts (None: no cap) sets how part sizes grow (writes/schedule.py)
        self._writer = PartWriter(self.client, self.bucket, self.key, uploader, concurrency=self.concurrency,
                                  create_only=self.mode == "xb", fields=fields)

    def _settle_fields(self) -> None:
        """Hand the current fields to the pipeline before it sends them (attributes may have changed)."""
        fields = self._fields()
        if fields == self._writer.fields:
            return
        if not self._writer.started:
            if fields.xml_safe != self._writer.fields.xml_safe:
                self._configure(fields)
            self._writer.fields = fields
        elif self._writer.fields_at_complete:
            self._writer.fields = fields
        else:
            raise ValueError(f"{self.path}: metadata changed after the upload started; set it before writing")

    # -- io protocol (the rest, and close/commit/discard: AtomicWriter) ------------------------

    def tell(self) -> int:
        return self._loc

    def read(self, size: int = -1) -> bytes:
        raise io.UnsupportedOperation(f"read: {self.path} is open for writing ({self.mode!r})")

    def readinto(self, b: Any) -> int:
        raise io.UnsupportedOperation(f"readinto: {self.path} is open for writing ({self.mode!r})")

    def url(self) -> str:
        """HTTP link to the object's data (pinned to the written generation once closed)."""
        return self.fs.url(self.path, generation=self.generation)

    def write(self, data: Any) -> int:
        self._check_open()
        mv = memoryview(data)
        if mv.format != "B" or mv.ndim != 1:
            mv = mv.cast("B")
        n = mv.nbytes
        try:
            pos = 0
            while pos < n:
                take = min(self._part_limit() - self._buffered, n - pos)
                if pos == 0 and take == n and type(data) is bytes:
                    self._chunks.append(data)  # immutable: keep it without a copy
                else:
                    self._chunks.append(bytes(mv[pos:pos + take]))  # the caller may reuse its buffer
                self._buffered += take
                pos += take
                if self._buffered >= self._part_limit() and not self._writer.started:
                    self._settle_fields()  # may pick another strategy, with a part size above the buffer
                if self._buffered >= self._part_limit():
                    self._check_reach(self._writer.size + self._buffered + (n - pos))
                    part = self._take_buffer()
                    bridge.run(self.fs, self._writer.add_part, part, crc32c(part))
        except BaseException as exc:
            self._failed(exc)
            raise
        self._loc += n
        return n

    # -- internals ----------------------------------------------------------------------------

    def _record(self, info: dict) -> None:
        self.object_info = info
        self.generation = info.get("generation")
        _OPEN.discard(self)

    def _part_limit(self) -> int:
        """Size of the next part: growing with the part number so a 5 TiB write stays under the cap."""
        cap = self._writer.max_parts
        if cap is None:
            first = getattr(self._uploader, "first_part", 0)  # a smaller first part opens the stream early
            return min(first, self.part_size) if first and not self._writer.parts else self.part_size
        return scheduled_part_size(self._writer.parts + 1, self.part_size, cap, self._uploader.max_object_size,
                                   max_part(self.client))

    def _check_reach(self, size: int) -> None:
        """Refuse a part past the cap when write_memory, not GCS's object limit, is what stops the write."""
        cap = self._writer.max_parts
        if cap is None or self._writer.parts < cap:
            return
        limit = self._uploader.max_object_size
        if reach(self.part_size, cap, limit, max_part(self.client)) < limit:
            raise ValueError(beyond_reach(self.path, size, cap, max_part(self.client), self.client.options.write_memory,
                                          self._writer.cap_setting))

    def _take_buffer(self) -> bytes:
        chunks, self._chunks, self._buffered = self._chunks, [], 0
        return chunks[0] if len(chunks) == 1 else b"".join(chunks)

    def _finish(self) -> None:
        try:
            self._settle_fields()
        except BaseException as exc:
            self._failed(exc)
            raise
        tail = self._take_buffer() if self._chunks else b""
        try:
            if tail:
                self._check_reach(self._writer.size + len(tail))
            info = bridge.run(self.fs, self._writer.finish, tail, crc32c(tail), commit=self.autocommit)
        except BaseException as exc:
            self._failed(exc)
            raise
        if self.autocommit:
            self._committed(info)
        else:
            self._state = "uploaded"

    def _commit_uploaded(self) -> dict:
        return bridge.run(self.fs, self._writer.commit)

    def _failed(self, exc: BaseException) -> None:
        if isinstance(exc, Exception) and self.error is None:
            self.error = exc
        self._abort_now()

    def _drop(self, timeout: float | None) -> None:
        _OPEN.discard(self)
        self._chunks, self._buffered = [], 0
        try:
            with bridge.cleanup():  # runs even when the caller's work was cancelled (CLI Ctrl-C)
                bridge.run(self.fs, self._writer.abort, timeout=timeout)
        except Exception as exc:
            logger.warning("aborting the upload of %s failed: %s", self.path, exc)


def _abort_unclosed() -> None:
    for f in list(_OPEN):
        f._abort_now(timeout=30)


class _Anchor:
    pass


# gcsfs closes its HTTP sessions through weakref.finalize, whose exit hook is registered with atexit
# when the first finalizer is created. Creating one now puts that hook before ours, and atexit runs
# hooks last-in first-out: unclosed writers are aborted while their sessions still work.
_anchor = _Anchor()
weakref.finalize(_anchor, lambda: None)
atexit.register(_abort_unclosed)
