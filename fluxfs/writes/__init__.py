"""Atomic parallel writes: the "wb"/"xb" handle, whole-object uploads, and the strategies beneath.

Calls go one way: `append` (the "ab" handle: a part composed onto the object by `append_commit`) ->
`write_file` (the "wb"/"xb" handle) and `uploads` (pipe_file / put_file) -> `parts`
(the pipeline) -> a strategy (`xml`, `compose`, `resumable`, `appendable_uploader` on zonal buckets over
gRPC, chosen in `settings`; "ab" there is `zonal_append`) ->
`single` and `bodies` (one-request steps and request bodies, shared by pipeline and strategies).
Exported: the "wb"/"xb" handle's type (`fs.open` returns it); our own code imports from the modules.
"""
from __future__ import annotations

from .write_file import FluxWriteFile

__all__ = ["FluxWriteFile"]
