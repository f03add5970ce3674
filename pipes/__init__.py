"""fluxfs.pipes: feed PyTorch from flux:// (torchdata Nodes, datasets) and checkpoint back to it.

`ListObjects` / `ReadObjects` are torchdata Nodes; `FluxMapDataset` / `FluxIterableDataset` are
datasets for `torch.utils.data.DataLoader` and `torchdata.stateful_dataloader.StatefulDataLoader`.
"""
from __future__ import annotations

import importlib
from typing import Any

from .datasets import FluxIterableDataset, FluxMapDataset
from .nodes import ListObjects, ReadObjects
from .readahead import FluxSampler
from .sources import ObjectMeta

# Checkpoint classes live in their own modules, imported on first use (they pull in
# torch.distributed.checkpoint, which a data pipeline does not need).
_LAZY = {
    "FluxCheckpoint": ".checkpoint",
    "FluxStorageWriter": ".dcp",
    "FluxStorageReader": ".dcp",
}

__all__ = ["ListObjects", "ReadObjects", "FluxMapDataset", "FluxIterableDataset", "FluxSampler", "ObjectMeta", *_LAZY]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name], __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
