"""Atomic parallel writes: the "wb"/"xb" handle, whole-object uploads, and the strategies beneath.

Calls go one way: `write_file` (the handle) and `uploads` (pipe_file / put_file) -> `parts`
(the pipeline) -> a strategy (`xml`, `compose`, `resumable`, chosen in `settings`) ->
`single` and `bodies` (one-request steps and request bodies, shared by pipeline and strategies).
"""
from __future__ import annotations

from .fields import ObjectFields, object_fields
from .uploads import upload_local_file, write_bytes
from .write_file import FluxWriteFile

__all__ = ["FluxWriteFile", "ObjectFields", "object_fields", "upload_local_file", "write_bytes"]
