"""fluxfs.pipes: feed PyTorch from flux:// (torchdata Nodes, datasets) and checkpoint back to it.

Three subpackages, one job each: `fluxfs.pipes.data` (Nodes, datasets, sharding, read-ahead) and
`fluxfs.pipes.checkpoint` (torch.save checkpoints, torch.distributed.checkpoint storage, Lightning);
`fluxfs.pipes.weights` (safetensors model weights, also as `fluxfs.pipes.safetensors`).
Their public names are re-exported here.
"""
from __future__ import annotations

from .data import FluxIterableDataset, FluxMapDataset, FluxSampler, ListObjects, ObjectMeta, ReadObjects
from .lazy import lazy_exports

# Checkpoint classes are imported on first use (they pull in torch.distributed.checkpoint, which a
# data pipeline does not need).
_LAZY = {
    "FluxCheckpoint": ".checkpoint",
    "FluxStorageWriter": ".checkpoint",
    "FluxStorageReader": ".checkpoint",
    "load_model_dir": ".weights",
}

__all__ = ["ListObjects", "ReadObjects", "FluxMapDataset", "FluxIterableDataset", "FluxSampler", "ObjectMeta", *_LAZY]

__getattr__, __dir__ = lazy_exports(__name__, _LAZY, globals())
