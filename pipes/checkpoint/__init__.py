"""fluxfs.pipes.checkpoint: checkpoints to flux:// URLs.

`FluxCheckpoint` (torch.save / torch.load, background saves), `FluxStorageWriter` / `FluxStorageReader`
(torch.distributed.checkpoint storage) and, with the ``lightning`` extra, `lightning.FluxCheckpointIO`.
The DCP classes are imported on first use: they pull in torch.distributed.checkpoint.
"""
from __future__ import annotations

import importlib
from typing import Any

from .errors import CheckpointChangedError, CheckpointSaveError, IncompleteCheckpointError
from .snapshot import snapshot
from .torch_save import FluxCheckpoint

_LAZY = {
    "FluxStorageWriter": ".dcp_writer",
    "FluxStorageReader": ".dcp_reader",
}

__all__ = ["FluxCheckpoint", "CheckpointSaveError", "snapshot", "IncompleteCheckpointError",
           "CheckpointChangedError", *_LAZY]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name], __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
