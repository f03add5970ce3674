"""fluxfs.pipes.checkpoint: checkpoints to flux:// URLs.

`FluxCheckpoint` (torch.save / torch.load, background saves), `FluxStorageWriter` / `FluxStorageReader`
(torch.distributed.checkpoint storage) and, with the ``lightning`` extra, `lightning.FluxCheckpointIO`.
The DCP classes are imported on first use: they pull in torch.distributed.checkpoint.
"""
from __future__ import annotations

from ..lazy import lazy_exports
from .errors import CheckpointChangedError, CheckpointSaveError, IncompleteCheckpointError
from .torch_save import FluxCheckpoint

_LAZY = {
    "FluxStorageWriter": ".dcp_writer",
    "FluxStorageReader": ".dcp_reader",
}

__all__ = ["FluxCheckpoint", "CheckpointSaveError", "IncompleteCheckpointError", "CheckpointChangedError", *_LAZY]

__getattr__, __dir__ = lazy_exports(__name__, _LAZY, globals())
