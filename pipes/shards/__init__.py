"""fluxfs.pipes.shards: tar shards in WebDataset's convention, with an index per shard.

`tarformat` writes and scans tar members, `samples` groups members into samples by key, `index`
stores each member's offset and size beside the shard so one sample is one ranged read. `catalog`
resolves which shards to read, `stream` reads them as samples, `dataset` (`FluxShardDataset`) and
`node` (`ReadShards`) feed PyTorch; `writer` writes shards and their indexes, `indexer` indexes
shards that have none, `map_dataset` (`FluxShardMapDataset`) reads samples by index; `packing`
(`pack_prefix`) packs a prefix's objects into shards, alone or as one of N parts (`parts`, `partfiles`).
"""
from __future__ import annotations

from .catalog import MissingIndexWarning, ShardCatalog, ShardInfo
from .dataset import FluxShardDataset
from .errors import ShardChanged, ShardError, SourceChangedError
from .node import ReadShards
from .pieces import ShardPieces
from .index import ShardIndex, index_path
from .samples import SampleSpan, group_samples, sample_dict, split_key
from .tarformat import Member, TarScanner, member_bytes, scan
from .indexer import build_index, load_index, load_indexes, write_index
from .writer import ShardWriter
from ..lazy import lazy_exports

# The map-style dataset, the decoders and packing (`pack_prefix`, in parts too) are loaded on first use.
_LAZY = {"FluxShardMapDataset": ".map_dataset", "decode": ".decoding", "pack_prefix": ".packing",
         "merge_parts": ".partfiles"}

__all__ = ["FluxShardDataset", "ReadShards", "ShardPieces", "MissingIndexWarning", "ShardCatalog", "ShardInfo",
           "ShardChanged", "ShardError", "SourceChangedError",
           "ShardIndex", "index_path", "SampleSpan", "group_samples", "sample_dict",
           "split_key", "Member", "TarScanner", "member_bytes", "scan", "ShardWriter",
           "build_index", "load_index", "load_indexes", "write_index", *_LAZY]

__getattr__, __dir__ = lazy_exports(__name__, _LAZY, globals())
