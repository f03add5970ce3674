"""fluxfs.pipes: feed PyTorch from flux:// (torchdata Nodes, datasets) and checkpoint back to it.

Two subpackages, one job each: `fluxfs.pipes.data` (Nodes, datasets, sharding, read-ahead) and
`fluxfs.pipes.checkpoint` (torch.save checkpoints, torch.distributed.checkpoint storage, Lightning).
Their public names are re-exported here.
"""
from __future__ import annotations

import importlib
from typing import Any

from .data import FluxIterableDataset, FluxMapDataset, FluxSampler, ListObjects, ObjectMeta, ReadObjects

# Checkpoint classes are imported on first use (they pull in torch.distributed.checkpoint, which a
# data pipeline does not need).
_LAZY = {
    "FluxCheckpoint": ".checkpoint",
    "FluxStorageWriter": ".checkpoint",
    "FluxStorageReader": ".checkpoint",
}

__all__ = ["ListObjects", "ReadObjects", "FluxMapDataset", "FluxIterableDataset", "FluxSampler", "ObjectMeta", *_LAZY]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name], __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
