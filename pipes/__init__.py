"""fluxfs.pipes: feed PyTorch from flux:// (torchdata Nodes, datasets) and checkpoint back to it.

Four subpackages, one job each: `fluxfs.pipes.data` (Nodes, datasets, splits, resume states, read-ahead),
`fluxfs.pipes.shards` (tar shards: format, index, `FluxShardDataset`, `ReadShards`),
`fluxfs.pipes.checkpoint` (torch.save checkpoints, torch.distributed.checkpoint storage, Lightning) and
`fluxfs.pipes.weights` (safetensors model weights, also as `fluxfs.pipes.safetensors`).
Their public names are re-exported here.
"""
from __future__ import annotations

from .requirements import require_torch

require_torch()  # before anything below imports torch: a missing one is named with the command that installs it

from .data import (FluxIterableDataset, FluxMapDataset, FluxSampler, ListObjects, ObjectMeta, RankSplit,
                   ReadObjects, ResumeStateError, reader_states)
from .errors import PipesError
from .lazy import lazy_exports
from .shards import FluxShardDataset, ReadShards, ShardPieces

# Checkpoint classes are imported on first use (they pull in torch.distributed.checkpoint, which a
# data pipeline does not need), and so are the shard classes (fluxfs.pipes.shards).
_LAZY = {
    "FluxCheckpoint": ".checkpoint",
    "FluxStorageWriter": ".checkpoint",
    "FluxStorageReader": ".checkpoint",
    "ShardWriter": ".shards",
    "FluxShardMapDataset": ".shards",
    "ShardError": ".shards",
    "decode": ".shards",
    "load_model_dir": ".weights",
    "register_webdataset": ".gopen",
}

__all__ = ["ListObjects", "ReadObjects", "FluxMapDataset", "FluxIterableDataset", "FluxSampler", "ObjectMeta",
           "FluxShardDataset", "ReadShards", "ShardPieces", "RankSplit",
           "reader_states", "PipesError", "ResumeStateError", *_LAZY]

__getattr__, __dir__ = lazy_exports(__name__, _LAZY, globals())
