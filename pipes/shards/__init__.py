"""fluxfs.pipes.shards: tar shards in WebDataset's convention, with an index per shard.

`tarformat` writes and scans tar members, `samples` groups members into samples by key, `index`
stores each member's offset and size beside the shard so one sample is one ranged read. `catalog`
resolves which shards to read, `stream` reads them as samples, `dataset` (`FluxShardDataset`) and
`node` (`ReadShards`) feed PyTorch; `writer` writes shards and their indexes, `indexer` indexes
shards that have none, `map_dataset` (`FluxShardMapDataset`) reads samples by index; `packing`
(`pack_prefix`) packs a prefix's objects into shards, alone or as one of N parts (`parts`, `partfiles`).
"""
from __future__ import annotations

from .catalog import MissingIndexWarning
from .dataset import FluxShardDataset
from .errors import ShardChanged, ShardError, SourceChangedError
from .node import ReadShards
from .pieces import ShardPieces
from .index import ShardIndex
from .writer import ShardWriter
from ..lazy import lazy_exports

# The map-style dataset, the decoders and packing (`pack_prefix`, in parts too) are loaded on first use.
_LAZY = {"FluxShardMapDataset": ".map_dataset", "decode": ".decoding", "pack_prefix": ".packing",
         "merge_parts": ".partfiles"}

# What users use (the readers, the writer, the packing, the errors and warning they see); the tar format,
# samples, catalog and indexer are imported from their modules.
__all__ = ["FluxShardDataset", "ReadShards", "ShardPieces", "ShardWriter", "ShardIndex", "MissingIndexWarning",
           "ShardChanged", "ShardError", "SourceChangedError", *_LAZY]

__getattr__, __dir__ = lazy_exports(__name__, _LAZY, globals())
