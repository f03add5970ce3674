"""`FluxShardMapDataset`: random access to the samples of indexed tar shards, a DataLoader batch in a few ranged GETs.

Every shard's index is loaded once, in the constructing process, and shipped to DataLoader workers.
`__getitems__` groups a batch's samples by shard and reads each run of them whose gaps are under
`max_gap` bytes as one ranged GET (all of a batch's GETs concurrently), pinned to the generation the
index describes: a shard replaced during the epoch fails as a `ShardError` naming it, never mixes
versions. With ``sampler=dataset.sampler()`` each worker also reads its next batches ahead
(`fluxfs.pipes.data.readahead`).
"""
from __future__ import annotations

import bisect
from typing import Any, Callable, Optional, Sequence, Union

import numpy as np
import torch.utils.data

from fluxfs import support
from fluxfs.handle import FilesystemHandle
from fluxfs.support import coalesce

from ..data.readahead import DEFAULT_DEPTH, FluxSampler, ReadAhead
from ..distributed.listing import check_list_once
from ..distributed.listing import list_once as distributed_list_once
from ..options import merge_storage_options, split_keywords
from ..urls import parse_url
from .catalog import expand_urls, shards_under_prefix
from .index import ShardIndex
from .indexer import check_empty, load_indexes
from .ranges import Span, read_spans
from .samples import SampleSpan, sample_dict
from .verify import check_span, check_tail, tail_start

# Gaps between a batch's samples in one shard that are read through rather than split into another GET:
# on the cloud profile a GET's first byte costs 30 ms, i.e. ~3 MB of transfer, but the bytes read
# through cost CPU on both ends; 256 KiB joins neighbours without reading much that is not wanted.
DEFAULT_MAX_GAP = 256 * 1024

SampleTransform = Callable[[dict], Any]


class BlockSampler(FluxSampler):
    """A `FluxSampler` whose shuffle moves runs of `block` neighbouring samples, mixed within `window`s."""

    def __init__(self, num_objects: int, *, block: int, window: int, **kwargs: Any):
        super().__init__(num_objects, **kwargs)
        if window < 1:
            raise ValueError(f"window must be >= 1 sample, not {window}")
        self.block, self.window = int(block), int(window)

    def whole_order(self, epoch: int) -> np.ndarray:
        n = self.num_objects
        if not self.shuffle:
            return np.arange(n, dtype=np.int64)
        rng = np.random.default_rng([self.seed, epoch])
        starts = rng.permutation(-(-n // self.block)) * self.block
        runs = (starts[:, None] + np.arange(self.block)[None, :]).ravel()
        runs = runs[runs < n]
        for lo in range(0, n, self.window):
            rng.shuffle(runs[lo:lo + self.window])
        return runs


class FluxShardMapDataset(torch.utils.data.Dataset):
    """Map-style dataset over the samples of indexed tar shards: ``dataset[i]`` is ``transform(sample)``.

    A sample is WebDataset's dict (``{"__key__": ..., "__shard__": url, "jpg": b"...", ...}``) of
    bytes; pass ``transform=decode(...)`` (`fluxfs.pipes.shards.decode`) or your own function.
    Shards without an index are indexed by scanning their headers (a warning each); a stale index
    is an error. Any sampler works; ``dataset.sampler()`` adds read-ahead.
    """

    def __init__(self, shards: Union[str, Sequence[str]], *, transform: Optional[SampleTransform] = None,
                 max_gap: int = DEFAULT_MAX_GAP, build_missing_index: bool = True,
                 storage_options: Optional[dict] = None, **options: Any):
        self.storage_options = merge_storage_options(type(self).__name__, storage_options, options)
        urls = expand_urls(shards)
        if not urls:
            raise ValueError("no shard URLs given")
        self.protocol = parse_url(urls[0]).protocol
        self.handle = FilesystemHandle(self.protocol, self.storage_options)  # built per process
        support.reset_in_child(self)  # the read-ahead threads
        self.transform = transform
        if max_gap < 0:
            raise ValueError(f"max_gap must be >= 0 bytes, not {max_gap}")
        self.max_gap = int(max_gap)
        self.indexes: list[ShardIndex] = load_indexes(self.fs, urls, build_missing=build_missing_index)
        self.shards = urls
        self._paths = [self.fs._strip_protocol(u) for u in urls]
        self._first: list[int] = []  # global index of each shard's first sample
        total = 0
        for idx in self.indexes:
            self._first.append(total)
            total += len(idx.samples)
        self._len = total
        for url, idx in zip(urls, self.indexes):
            if not idx.members:  # no sample of it is ever read, so check now that it really holds none
                check_empty(self.fs, url, idx)
        if not total:
            raise ValueError(f"the {len(urls)} shard(s) hold no samples ({urls[0]}, ...)")

    @classmethod
    def from_shards(cls, shards: Union[str, Sequence[str]], **kwargs: Any) -> "FluxShardMapDataset":
        """Shards by URL: a list, or one URL with brace patterns."""
        return cls(shards, **kwargs)

    @classmethod
    def from_prefix(cls, url: str, *, storage_options: Optional[dict] = None, list_once: bool = True,
                    bare_prefix: bool = False, **kwargs: Any) -> "FluxShardMapDataset":
        """Every ``*.tar`` shard under a prefix URL (``flux://bucket/train/``; ``.../train`` too, never ``train2/``;
        `bare_prefix=True`: every key starting with it), listed once: under torch.distributed rank 0 lists and
        the others receive its list (`list_once=False`: each lists)."""
        enabled = check_list_once(list_once, cls.__name__)
        own, options = split_keywords(kwargs, cls.__init__)
        so = merge_storage_options(cls.__name__, storage_options, options)
        protocol = parse_url(url).protocol
        shards = distributed_list_once(
            lambda: [s.url(protocol) for s in shards_under_prefix(FilesystemHandle(protocol, so).fs, url,
                                                                bare=bare_prefix)],
            f"the shards of prefix {url}", enabled)
        return cls(shards, storage_options=so, **own)

    # -- per-process state -----------------------------------------------------------------

    @property
    def fs(self) -> Any:
        """This process's filesystem (a forked or spawned worker builds its own, through the handle)."""
        return self.handle.fs

    def _after_fork(self) -> None:
        self._ahead = None

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)  # the handle pickles without its filesystem
        state.pop("_ahead", None)
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        support.reset_in_child(self)

    # -- read-ahead --------------------------------------------------------------------------

    def sampler(self, shuffle: bool = True, seed: int = 0, read_ahead: int = DEFAULT_DEPTH,
                block: int = 1, window: Optional[int] = None, *, rank: Optional[int] = None,
                world_size: Optional[int] = None, drop_uneven: Optional[bool] = False) -> FluxSampler:
        """The DataLoader `sampler` that lets workers read their next batches ahead (see `FluxSampler`).

        Under torch.distributed each rank gets its share, the same count on every rank (as DistributedSampler:
        padded, or ``drop_uneven=True`` dropped; `FluxSampler`).

        ``block=1`` (default) shuffles samples freely: a batch's samples are scattered over the shards,
        about one ranged GET each. ``block=B`` shuffles runs of B neighbouring samples instead, then
        mixes samples within each `window` (default 8 x B: a batch of 64 is 8 runs of 8): a batch
        then costs a GET per run, at the price of neighbours (in packing order) sharing batches.
        """
        if block < 1:
            raise ValueError(f"block must be >= 1 sample, not {block}")
        ranks = dict(rank=rank, world_size=world_size, drop_uneven=drop_uneven)
        if block == 1:
            self._order = FluxSampler(len(self), shuffle=shuffle, seed=seed, read_ahead=read_ahead, **ranks)
        else:
            self._order = BlockSampler(len(self), shuffle=shuffle, seed=seed, read_ahead=read_ahead,
                                       block=block, window=window or 8 * block, **ranks)
        return self._order

    def _read_ahead(self) -> Optional[ReadAhead]:
        order = getattr(self, "_order", None)
        if order is None or not order.read_ahead:
            return None
        ahead = getattr(self, "_ahead", None)
        if ahead is None:
            ahead = self._ahead = ReadAhead(order, lambda b: sum(s.end - s.start for _, s in map(self._locate, b)))
        return ahead

    # -- access -----------------------------------------------------------------------------

    def __len__(self) -> int:
        return self._len

    def _locate(self, i: int) -> tuple[int, SampleSpan]:
        """(shard number, sample span) of global sample `i`."""
        n = self._len
        j = int(i) + n if int(i) < 0 else int(i)
        if not 0 <= j < n:
            raise IndexError(f"index {i} out of range for {n} samples")
        s = bisect.bisect_right(self._first, j) - 1
        return s, self.indexes[s].samples[j - self._first[s]]

    def __getitem__(self, index: int) -> Any:
        return self.__getitems__([index])[0]

    def __getitems__(self, indices: Sequence[int]) -> list:
        """The samples of `indices`, their shards' runs read as one ranged GET each, all concurrently."""
        wanted = [int(i) for i in indices]
        ahead = self._read_ahead()
        fetched = None
        if ahead is not None:
            fetched = ahead.take(wanted)
            info = torch.utils.data.get_worker_info()
            ahead.start_next(wanted, info.num_workers if info is not None else 1, self.fetch)
        if fetched is None:
            fetched = self.fetch(wanted)
        out = [fetched[i] for i in wanted]
        return [self.transform(s) for s in out] if self.transform is not None else out

    def fetch(self, indices: Sequence[int]) -> dict[int, dict]:
        """{index: raw sample dict} of the distinct `indices`, coalesced per shard into ranged GETs."""
        by_shard: dict[int, list[tuple[SampleSpan, int]]] = {}
        for i in dict.fromkeys(int(i) for i in indices):
            s, span = self._locate(i)
            by_shard.setdefault(s, []).append((span, i))
        reads: list[Span] = []
        groups: list[tuple[int, list[tuple[SampleSpan, int]]]] = []
        for s, items in by_shard.items():
            for g in coalesce([(span.read_from, span.end) for span, _ in items], self.max_gap):
                groups.append((s, [items[m] for m in g.members]))
        tails: list[Optional[int]] = []  # where a run's bytes after the shard's last member start, to check them
        for s, run in groups:
            idx = self.indexes[s]
            tails.append(tail_start(idx.members) if run[-1][0] == idx.samples[-1] else None)
            end = idx.size if tails[-1] is not None else max(t[0].end for t in run)
            reads.append(Span(self._paths[s], self.shards[s], run[0][0].read_from, end, idx.generation))
        out: dict[int, dict] = {}
        for (s, run), span, tail, data in zip(groups, reads, tails, read_spans(self.fs, reads)):
            for sample_span, i in run:
                check_span(self.shards[s], sample_span, data, span.start)
                out[i] = sample_dict(sample_span, self.shards[s], data, span.start)
            if tail is not None:
                check_tail(self.shards[s], tail, data, span.start, span.end)
        return out
