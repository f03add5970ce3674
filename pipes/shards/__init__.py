"""fluxfs.pipes.shards: tar shards in WebDataset's convention, with an index per shard.

`tarformat` writes and scans tar members, `samples` groups members into samples by key, `index`
stores each member's offset and size beside the shard so one sample is one ranged read. `catalog`
resolves which shards to read, `stream` reads them as samples, `dataset` (`FluxShardDataset`) and
`node` (`ReadShards`) feed PyTorch.
"""
from __future__ import annotations

from .catalog import MissingIndexWarning, ShardCatalog, ShardInfo
from .dataset import FluxShardDataset
from .errors import ShardError
from .node import ReadShards
from .index import ShardIndex, index_path
from .samples import SampleSpan, group_samples, sample_dict, split_key
from .tarformat import Member, TarScanner, member_bytes, scan

__all__ = ["FluxShardDataset", "ReadShards", "MissingIndexWarning", "ShardCatalog", "ShardInfo", "ShardError",
           "ShardIndex", "index_path", "SampleSpan", "group_samples", "sample_dict", "split_key", "Member",
           "TarScanner", "member_bytes", "scan"]
