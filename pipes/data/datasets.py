"""PyTorch datasets over flux:// objects: map-style (one DataLoader batch = one batched read) and iterable.

Both are built with `from_prefix`, `from_objects` or `from_manifest`; the object list is resolved once in
the main process and shipped to DataLoader workers, and each process builds its own filesystem from
`storage_options`, so fork, spawn and forkserver all work.
"""
from __future__ import annotations

import contextlib
from dataclasses import replace
from typing import Any, Callable, Iterator, Optional, Sequence, Union

import numpy as np
import torch.utils.data

from fluxfs import support

from ..distributed.listing import check_list_once
from ..in_flight import in_order
from ..options import merge_storage_options, split_keywords
from .objects import Transform, key_and_bytes
from .epochs import EpochCell, Run, even_share
from .readahead import DEFAULT_DEPTH, FluxSampler, ReadAhead
from .resume import ReaderState, listing_digest, load, plan
from .splits import check_drop_uneven, current_split, distributed_rank, epoch_order, equal_counts
from .source import ObjectSource

# Batched reads kept in flight by the iterable dataset, per DataLoader worker (ReadObjects keeps
# its own NODES_PREFETCH: a Nodes pipeline reads in one process). A compose-backed read
# takes ~3 round trips, so with 2 in flight each DataLoader worker sat waiting: training bench,
# cloud profile, 4,000 images, 2 workers, batches of 64, medians of 3: 1,771 samples/s at 2,
# 2,670 at 4, 2,685 at 8 while training was the bottleneck. Once a step took half the time (the
# in-memory limit 3,535 -> ~6,600 samples/s), 4 left the workers waiting half the step: 20,000
# images, two interleaved pairs of runs: ~3,650-3,680 at 4 (50-57% waiting), ~4,680-4,710 at 8
# (21-24%). Memory: prefetch x read batch x object size (8 x 32 x 100 KB = 26 MB per worker).
DEFAULT_PREFETCH = 8


def _in_worker_clean_up_on_sigterm() -> None:
    """In a DataLoader worker, SIGTERM (the main process's exit at Ctrl-C) first deletes the composites of the
    reads in flight. Workers only: their main thread waits on queues, where a Python handler runs at once,
    while a training process's may sit in a long native call that would hold SIGTERM back."""
    if torch.utils.data.get_worker_info() is not None:
        support.clean_up_on_sigterm()


def cls_options(cls: type, storage_options: Optional[dict], options: dict) -> dict:
    return merge_storage_options(cls.__name__, storage_options, options)


class _FluxDataset:
    """Constructors and the object list shared by both dataset kinds.

    Under torch.distributed (initialised, more than one rank) the list is resolved once per job: rank 0
    lists and broadcasts it, so every rank must build its datasets in the same order; `list_once=False`
    lists on each rank (`pipes.distributed.listing`)."""

    def __init__(self, source: Union[ObjectSource, str], *, transform: Optional[Transform] = None,
                 storage_options: Optional[dict] = None, on_missing: str = "raise", list_once: bool = True,
                 **options: Any):
        if isinstance(source, str):
            source = ObjectSource("prefix", source, storage_options=cls_options(type(self), storage_options, options),
                                  on_missing=on_missing)
        elif storage_options is not None or options:
            raise TypeError(f"{type(self).__name__}: storage options go with a URL; this source has its own")
        source.list_once = check_list_once(list_once, type(self).__name__)  # rank 0 lists, others receive
        self._source = source
        self._transform = transform or key_and_bytes

    @classmethod
    def from_prefix(cls, url: str, *, storage_options: Optional[dict] = None, bare_prefix: bool = False,
                    **kwargs: Any):
        """Every object below the URL's directory (``flux://bucket/images/``), listed once.

        ``.../train`` is the directory ``train/`` when there is one (never ``train2/`` beside it); one that
        names no directory is a key prefix, with an `AmbiguousPrefixWarning` when it starts several keys
        (`bare_prefix=True`: a key prefix always, without the warning). Keyword arguments the dataset does
        not take are storage options, merged with `storage_options`.
        """
        own, options = split_keywords(kwargs, cls.__init__)
        return cls(ObjectSource("prefix", url, storage_options=cls_options(cls, storage_options, options),
                                bare_prefix=bare_prefix), **own)

    @classmethod
    def from_objects(cls, urls: Sequence[str], *, storage_options: Optional[dict] = None,
                     on_missing: str = "raise", **kwargs: Any):
        """The given object URLs; ones that do not exist raise FileNotFoundError, or are skipped and counted."""
        own, options = split_keywords(kwargs, cls.__init__)
        source = ObjectSource("objects", urls, storage_options=cls_options(cls, storage_options, options),
                              on_missing=on_missing)
        return cls(source, **own)

    @classmethod
    def from_manifest(cls, path_or_url: str, *, base_url: Optional[str] = None,
                      storage_options: Optional[dict] = None, on_missing: str = "raise", **kwargs: Any):
        """Objects named by a manifest: JSON lines (name, size, generation, crc32c) or ``key<TAB>label`` text.

        Text keys are relative to `base_url` (``flux://bucket/dir/``) unless they are full URLs.
        """
        own, options = split_keywords(kwargs, cls.__init__)
        source = ObjectSource("manifest", path_or_url, storage_options=cls_options(cls, storage_options, options),
                              base_url=base_url, on_missing=on_missing)
        return cls(source, **own)

    @property
    def missing(self) -> list[str]:
        """URLs skipped under ``on_missing="skip"`` (in this process)."""
        return self._source.missing

    @property
    def num_objects(self) -> int:
        """How many objects the dataset covers (resolves the listing on first use)."""
        return len(self._source.table)

    def _sample(self, i: int, data: bytes) -> Any:
        return self._transform(data, self._source.table.meta(i, self._source.protocol))


class FluxMapDataset(_FluxDataset, torch.utils.data.Dataset):
    """Map-style dataset: ``dataset[i]`` is ``transform(bytes, meta)`` of the i-th object (sorted by name).

    `__getitems__` reads a whole DataLoader batch in one batched read: a batch that fits in one wave of
    concurrent GETs is read directly, a bigger one through composites (see `ObjectSource.read`).
    With ``sampler=dataset.sampler(shuffle=True)`` each DataLoader worker also reads the batch it will
    be handed next while the current one trains (`pipes.readahead`).
    """

    def sampler(self, shuffle: bool = True, seed: int = 0, read_ahead: int = DEFAULT_DEPTH, *,
                rank: Optional[int] = None, world_size: Optional[int] = None,
                drop_uneven: Optional[bool] = False) -> FluxSampler:
        """The DataLoader `sampler` that lets workers read ahead: this dataset's order, shuffled from (seed, epoch).

        Each worker keeps up to `read_ahead` of its coming batches (at most 128 MiB) being read; 0 turns
        that off. Call the sampler's `set_epoch(epoch)` before each epoch for a new order (as with
        DistributedSampler). Under torch.distributed (rank and world size from the default group, or as
        given) each rank gets its share of the order, disjoint and the same count on every rank: padded by
        repeating the first indices, or ``drop_uneven=True`` dropping the last (`FluxSampler`).
        """
        self._order = FluxSampler(len(self), shuffle=shuffle, seed=seed, read_ahead=read_ahead, rank=rank,
                                  world_size=world_size, drop_uneven=drop_uneven)
        return self._order

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state.pop("_ahead", None)  # a thread pool: each process makes its own
        return state

    def _read_ahead(self) -> Optional[ReadAhead]:
        order = getattr(self, "_order", None)
        if order is None or not order.read_ahead:
            return None
        ahead = getattr(self, "_ahead", None)
        if ahead is None:
            table = self._source.table
            ahead = self._ahead = ReadAhead(order, lambda b: sum(table.sizes[i] or 0 for i in b))
            support.reset_in_child(self)
        return ahead

    def _after_fork(self) -> None:
        """A forked worker's read-ahead threads do not exist: it starts its own."""
        self._ahead = None

    def __len__(self) -> int:
        return self.num_objects

    def _index(self, i: int) -> int:
        n = len(self)
        j = int(i) + n if int(i) < 0 else int(i)
        if not 0 <= j < n:
            raise IndexError(f"index {i} out of range for {n} objects")
        return j

    def __getitem__(self, index: int) -> Any:
        items = self.__getitems__([index])
        if not items:  # skipped under on_missing="skip": there is nothing to return for one index
            raise FileNotFoundError(f"object {index} ({self._source.missing[-1]}) does not exist")
        return items[0]

    def __getitems__(self, indices: Sequence[int]) -> list:
        """The samples of `indices`; objects that vanished are left out under ``on_missing="skip"``."""
        wanted = [self._index(i) for i in indices]
        _in_worker_clean_up_on_sigterm()
        ahead = self._read_ahead()
        if ahead is None:
            return [self._sample(i, data) for i, data in self._source.read(wanted, latency_bound=True)]
        fetched = ahead.take(wanted)
        info = torch.utils.data.get_worker_info()
        # Started before this batch's own read, so the two overlap when it was not read ahead.
        ahead.start_next(wanted, info.num_workers if info is not None else 1, self._source.fetch)
        return [self._sample(i, data) for i, data in self._source.read(wanted, latency_bound=True, fetched=fetched)]


class FluxIterableDataset(_FluxDataset, torch.utils.data.IterableDataset):
    """Iterable dataset split over distributed ranks x DataLoader workers, with seeded shuffling and resume.

    Every object is read once per epoch across all ranks and workers. Under torch.distributed (world_size > 1)
    every reader (rank x DataLoader worker) gets the same count, so DDP's ranks take the same number of
    steps: by default the epoch's order is padded by repeating its first objects (up to readers-1 of them,
    as DistributedSampler pads); ``drop_uneven=True`` leaves out its last objects instead (up to readers-1,
    different ones each epoch when shuffled; on one process too); ``drop_uneven=None`` does neither (each
    object exactly once, counts may differ: for evaluation, not for DDP training). With equal counts each
    reader reads a contiguous piece of the (seed, epoch) order. The object list is resolved when the dataset
    is built. `state_dict` /
    `load_state_dict` let ``torchdata.stateful_dataloader.StatefulDataLoader`` resume mid-epoch; on another
    world size or num_workers, give a fresh dataset every old rank's loader state instead:
    ``ds.load_state_dict({"readers": reader_states(*states)})`` (`pipes.data.epochs`). `set_epoch` reaches
    persistent workers. The state is a `pipes.data.resume.ReaderState` as a dict; a forged or foreign one
    is refused with a `ResumeStateError` naming what is wrong.
    """

    STATE_NAME = "FluxIterableDataset"  # the "dataset" of its states
    READERS_KEY = ReaderState.READERS_KEY  # a gathered state: every old reader's state

    def __init__(self, source: Union[ObjectSource, str], *, transform: Optional[Transform] = None,
                 shuffle: bool = False, seed: int = 0, rank: Optional[int] = None,
                 world_size: Optional[int] = None, read_batch: int = 32, prefetch: int = DEFAULT_PREFETCH,
                 drop_uneven: Optional[bool] = False, storage_options: Optional[dict] = None, on_missing: str = "raise",
                 list_once: bool = True, **options: Any):
        super().__init__(source, transform=transform, storage_options=storage_options, on_missing=on_missing,
                         list_once=list_once, **options)
        if read_batch < 1 or prefetch < 1:
            raise ValueError(f"read_batch and prefetch must be >= 1, not {read_batch} and {prefetch}")
        # List now, in the constructing (main) process: DataLoader forks its workers without asking
        # an IterableDataset anything, so a lazy listing would run once in every worker.
        self._listing = listing_digest(self._source.table.names)
        self.shuffle, self.seed = bool(shuffle), int(seed)
        self.drop_uneven = check_drop_uneven(drop_uneven, type(self).__name__)
        self.read_batch, self.prefetch = read_batch, prefetch
        self._rank, self._world_size = rank, world_size
        self._epoch = EpochCell(0)  # shared: set_epoch reaches persistent DataLoader workers
        self._position = 0  # how far into this reader's slots the consumer has got
        self._state: Optional[ReaderState] = None  # this reader's, once iterated
        self._loaded: Optional[tuple[ReaderState, ...]] = None  # restored, not iterated yet
        self._gathered = False

    def set_epoch(self, epoch: int) -> None:
        """Choose the epoch: with ``shuffle=True`` each epoch has its own order, fixed by (seed, epoch).

        It reaches every DataLoader worker, persistent ones (``persistent_workers=True``) included.
        """
        self._epoch.set(epoch)

    def __getstate__(self) -> dict:
        # DataLoader workers started by spawn/forkserver cannot see the parent's process group:
        # fix rank and world size now, in the parent.
        state = dict(self.__dict__)
        if self._rank is None or self._world_size is None:
            state["_rank"], state["_world_size"] = distributed_rank(self._rank, self._world_size)
        return state

    # -- resume ---------------------------------------------------------------------------

    def _mine(self) -> ReaderState:
        """A state of this dataset before any reader started (what a loaded state is checked against)."""
        return ReaderState(self.STATE_NAME, self._epoch.get(), self.seed, self.shuffle, 0, self.num_objects,
                           self._listing)

    def state_dict(self) -> dict:
        if self._loaded is not None:  # restored but not iterated yet: the restored state still holds
            states = [s.to_dict() for s in self._loaded]
            return {self.READERS_KEY: states} if self._gathered else states[0]
        if self._state is None:
            return self._mine().to_dict()
        return replace(self._state, cursor=(self._position, 0)).to_dict()

    def load_state_dict(self, state: dict) -> None:
        """Resume at the next `iter()`, continuing after the last sample consumed.

        `state`: this reader's `state_dict()` (what StatefulDataLoader restores; same world size and
        num_workers), or ``{"readers": reader_states(*every_old_rank_loader_state)}`` to resume on
        another layout (give it to a fresh dataset and do not load the new loader's state). A state
        this dataset cannot continue from raises `ResumeStateError` (a ValueError) naming the key.
        """
        count = self.num_objects
        self._loaded, self._gathered = load(state, self._mine(), "objects", lambda p: self._slots(count, p),
                                            items=False)
        self._epoch.set(self._loaded[0].epoch)

    def _slots(self, count: int, planned: int) -> int:
        # drop_uneven: equal shares of this epoch's first count - count % readers objects
        return count - count % planned if self.drop_uneven else count

    def _even(self, world_size: int, count: int) -> Optional[Callable[[list[Run], int, int], list[Run]]]:
        """Each reader's equal share of runs (padded, or dropped), when readers must read equal counts."""
        if not equal_counts(self.drop_uneven, world_size):
            return None
        drop = self.drop_uneven is True
        return lambda runs, reader, readers: even_share(runs, np.ones_like, reader, readers, drop)

    # -- iteration -------------------------------------------------------------------------

    def __iter__(self) -> Iterator[Any]:
        # Set up eagerly (not inside the generator) so state_dict() is right before the first next().
        _in_worker_clean_up_on_sigterm()
        split = current_split(*distributed_rank(self._rank, self._world_size))
        count = self.num_objects
        loaded, self._loaded = self._loaded, None
        fresh = replace(self._mine(), split=(split.index, split.count), planned=split.count)

        def slots(planned: int) -> int:
            return self._slots(count, planned)

        even = self._even(split.world_size, count)
        if even is not None:
            fresh = replace(fresh, runs=tuple(even([Run(0, slots(split.count))], split.index, split.count)))
        state = plan(loaded, self._gathered, fresh, slots, even)
        self._state, self._position = state, state.cursor[0]
        order = epoch_order(count, self.shuffle, self.seed, state.epoch)
        picked = [np.arange(r.start, r.stop, r.step) for r in state.runs_of(slots)]
        order = order[np.concatenate(picked)] if picked else order[:0]
        return self._generate(order, state.cursor[0])

    def _generate(self, order, start: int) -> Iterator[Any]:
        chunks = ((pos, order[pos:pos + self.read_batch]) for pos in range(start, len(order), self.read_batch))
        # A bounded number of batched reads in flight on threads, so the next batch downloads while
        # the consumer works on this one.
        reads = in_order(chunks, self._read_chunk, self.prefetch, "fluxfs-read")
        with contextlib.closing(reads):
            for (pos, chunk), read in reads:
                got = dict(read)
                for k, i in enumerate(chunk):
                    i = int(i)
                    if i in got:
                        sample = self._sample(i, got.pop(i))
                        # Count before yielding: a state_dict taken after this sample was handed out
                        # must not hand it out again.
                        self._position = pos + k + 1
                        yield sample
                self._position = pos + len(chunk)

    def _read_chunk(self, chunk: tuple[int, Any]) -> list[tuple[int, bytes]]:
        return self._source.read(chunk[1])
