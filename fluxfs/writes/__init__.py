"""Atomic parallel writes: the "wb"/"xb" handle, whole-object uploads, and the strategies beneath.

Calls go one way: `append` (the "ab" handle: a part composed onto the object by `append_commit`) ->
`write_file` (the "wb"/"xb" handle) and `uploads` (pipe_file / put_file) -> `parts`
(the pipeline) -> a strategy (`xml`, `compose`, `resumable`, `appendable_uploader` on zonal buckets over
gRPC, chosen in `settings`; "ab" there is `zonal_append`) ->
`single` and `bodies` (one-request steps and request bodies, shared by pipeline and strategies).
"""
from __future__ import annotations

from .append import FluxAppendFile
from .copies import StreamedCopies
from .fields import ObjectFields, object_fields
from .uploads import upload_local_file, upload_stream, write_bytes
from .write_file import FluxWriteFile
from .zonal_append import open_append

__all__ = ["FluxAppendFile", "FluxWriteFile", "ObjectFields", "StreamedCopies", "object_fields", "open_append",
           "upload_local_file", "upload_stream", "write_bytes"]
