"""The "ab" handle of a zonal (Rapid) bucket over gRPC: a native append (`ZonalAppendFile`), and `open_append`,
which picks it or the compose append (`append.py`) by the bucket's layout."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..gcs import bridge
from ..zonal import grpc_writes, transport
from .appendable_uploader import AppendableUploader
from .single import get_resource
from .write_file import FluxWriteFile

if TYPE_CHECKING:  # pragma: no cover
    from fsspec import AbstractFileSystem


class ZonalAppendFile(FluxWriteFile):
    """The "ab" handle on a zonal bucket over gRPC: a native append to the unfinalized object (created when
    missing), left appendable on close; a finalized object is refused at open, naming it."""

    def __init__(self, fs: "AbstractFileSystem", path: str, mode: str = "ab", block_size: int | None = None,
                 **kwargs: Any):
        if mode != "ab":
            raise ValueError(f"ZonalAppendFile mode must be 'ab', not {mode!r}")
        client = fs.client
        bucket, key, _ = client.split_path(path)
        try:
            base = bridge.run(fs, get_resource, client, bucket, key)
        except FileNotFoundError:
            base = None
        # Taken over now (GCS refuses a finalized object here, named): the handle appends at its end.
        writer = bridge.run(fs, grpc_writes.open_writer, client, bucket, key,
                            int(base["generation"]) if base else 0, None)
        self._appending = AppendableUploader.onto(writer)
        super().__init__(fs, path, "wb", block_size=block_size, **kwargs)
        self.mode = "ab"


def open_append(fs: "AbstractFileSystem", path: str, mode: str = "ab", block_size: int | None = None,
                **kwargs: Any) -> Any:
    """The "ab" handle: a native append on a zonal bucket read over gRPC, else the compose append."""
    from .append import FluxAppendFile

    bucket = fs.client.split_path(path)[0]
    if transport.of_sync(fs.client, bucket).grpc:
        return ZonalAppendFile(fs, path, mode, block_size=block_size, **kwargs)
    return FluxAppendFile(fs, path, mode, block_size=block_size, **kwargs)
