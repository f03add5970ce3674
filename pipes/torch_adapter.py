"""The one module of pipes that reaches into torch's internals (as `fluxfs/gcsfs_adapter.py` does into gcsfs's):
its private modules, private names and the private fields of its objects, each with why. torchdata and lightning
are used through their public modules only (tests/test_architecture.py checks that pipes does so elsewhere).

Checked against torch 2.13.0, torchdata 0.11.0 and lightning 2.6.6 (the pins in constraints.txt); tests/checkpoint
exercises every name here, so a torch release that moves one fails there, not in a user's load.
"""
from __future__ import annotations

from typing import IO, Any, Optional

import torch

# DCP's fsspec reader and writer, and the storage layer under them, are not exported by
# `torch.distributed.checkpoint` (only from its private module): FluxStorageReader/Writer and
# ObjectStoreFileSystem build on them to keep DCP's file layout and planner hooks.
from torch.distributed.checkpoint._fsspec_filesystem import FileSystem as FsspecFileSystem
from torch.distributed.checkpoint._fsspec_filesystem import FsspecReader, FsspecWriter

# Where each item's bytes are in a DCP data file: the `storage_data` values of a checkpoint's metadata,
# named in its `.metadata` pickle (so allowed by the safe unpickler) and written by the writer.
from torch.distributed.checkpoint.filesystem import _StorageInfo as StorageInfo

# The slice of a saved tensor an item asks for, as DCP's own reader narrows it (no public equivalent).
from torch.distributed._shard._utils import narrow_tensor_by_index

CHECKED_AGAINST = {"torch": "2.13.0", "torchdata": "0.11.0", "lightning": "2.6.6"}

__all__ = ["CHECKED_AGAINST", "FsspecFileSystem", "FsspecReader", "FsspecWriter", "StorageInfo",
           "archive_reader", "checkpoint_offset", "layout_rebuilder", "metadata_path", "narrow_tensor_by_index"]


def archive_reader(file: IO[bytes]) -> Any:
    """torch.save's zip archive in `file`, record by record (`torch._C.PyTorchFileReader`, what torch.load reads
    with): a record such as "byteorder" is read without loading the tensors."""
    return torch._C.PyTorchFileReader(file)


def layout_rebuilder() -> Any:
    """`torch.serialization._get_layout`: the callable a pickled `torch.layout` names, so a DCP `.metadata`
    (tensor properties carry a layout) names it and the safe unpickler must allow it."""
    return torch.serialization._get_layout


def checkpoint_offset(storage: Any) -> Optional[int]:
    """Where a storage's bytes start in the archive torch.load read it from with map_location="meta" (torch
    records it as `_checkpoint_offset` on the storage), None where torch did not record it."""
    return getattr(storage, "_checkpoint_offset", None)


def metadata_path(storage: Any, rank: Optional[int] = None) -> Any:
    """The `.metadata` path of a DCP reader or writer (`__{rank}.metadata` for a rank saving without collectives),
    as torch's FileSystemReader/Writer name it (their private `_get_metadata_path`)."""
    return storage._get_metadata_path(rank)
