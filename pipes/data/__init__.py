"""fluxfs.pipes.data: feed PyTorch from flux:// objects, as torchdata Nodes or as datasets for DataLoader.

`ListObjects` / `ReadObjects` are torchdata Nodes; `FluxMapDataset` / `FluxIterableDataset` are datasets
for `torch.utils.data.DataLoader` and `torchdata.stateful_dataloader.StatefulDataLoader`.
"""
from __future__ import annotations

from .datasets import FluxIterableDataset, FluxMapDataset
from .epochs import ResumeStateError, reader_states
from .nodes import ListObjects, ReadObjects
from .object_store import AmbiguousPrefixWarning
from .objects import ObjectMeta
from .rank_split import RankSplit
from .readahead import FluxSampler

__all__ = ["ListObjects", "ReadObjects", "RankSplit", "FluxMapDataset", "FluxIterableDataset", "FluxSampler",
           "ObjectMeta", "reader_states", "ResumeStateError", "AmbiguousPrefixWarning"]
