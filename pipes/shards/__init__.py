"""fluxfs.pipes.shards: tar shards in WebDataset's convention, with an index per shard.

`tarformat` writes and scans tar members, `samples` groups members into samples by key, `index`
stores each member's offset and size beside the shard so one sample is one ranged read; `writer`
writes shards and their indexes.
"""
from __future__ import annotations

from .errors import ShardError
from .index import ShardIndex, index_path
from .samples import SampleSpan, group_samples, sample_dict, split_key
from .tarformat import Member, TarScanner, member_bytes, scan
from .writer import ShardWriter

__all__ = ["ShardError", "ShardIndex", "index_path", "SampleSpan", "group_samples", "sample_dict",
           "split_key", "Member", "TarScanner", "member_bytes", "scan", "ShardWriter"]
