"""torch's fsspec adapter for DCP, as object storage needs it: storage options kept, no directories, upload errors
kept."""
from __future__ import annotations

import contextlib
import io
import os
from typing import Any, Iterator

from fluxfs.handle import FilesystemHandle

from ..torch_adapter import FsspecFileSystem
from ..urls import parse_url
from .errors import upload_errors

METADATA = ".metadata"


class ObjectStoreFileSystem(FsspecFileSystem):
    """torch's fsspec adapter, remembering the storage options (torch's `reset()` drops them)."""

    def __init__(self, storage_options: dict[str, Any]):
        super().__init__()
        self.storage_options = storage_options

    def init_path(self, path: str | os.PathLike, **kwargs: Any) -> str:
        # Through a handle, as every pipes class: a URL chain (``filecache::flux://``) takes per-protocol options.
        self.fs = FilesystemHandle.from_url(str(path), {**self.storage_options, **kwargs}, default="file").fs
        return str(path).rstrip("/")

    @contextlib.contextmanager
    def create_stream(self, path: str | os.PathLike, mode: str) -> Iterator[io.IOBase]:
        with super().create_stream(path, mode) as stream, upload_errors(stream):
            yield stream

    def mkdir(self, path: str | os.PathLike) -> None:
        # Object stores have no directories; gcsfs's makedirs would even try to create the bucket.
        pass

    def strip(self, path: str | os.PathLike) -> str:
        """`bucket/key` form of a URL, as the filesystem's own methods take it."""
        return parse_url(str(path)).path
