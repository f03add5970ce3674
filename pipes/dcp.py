"""``fluxfs.pipes.dcp``: the torch.distributed.checkpoint storage classes, where users import them from.

They live in `fluxfs.pipes.checkpoint` (`dcp_writer.py`, `dcp_reader.py`).
"""
from __future__ import annotations

from .checkpoint.dcp_reader import FluxStorageReader
from .checkpoint.dcp_writer import FluxStorageWriter
from .checkpoint.errors import CheckpointChangedError, IncompleteCheckpointError, UnsafeCheckpointError

__all__ = ["FluxStorageWriter", "FluxStorageReader", "IncompleteCheckpointError", "CheckpointChangedError",
           "UnsafeCheckpointError"]
