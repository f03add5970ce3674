"""`FluxShardDataset`: an iterable dataset of tar shards, split over ranks x workers, shuffled, resumable.

An epoch's work is a list of units: each shard, or, when there are fewer shards than readers (ranks x
DataLoader workers), each of `parts` pieces of every shard. Units are put in an order fixed by (seed,
epoch) and dealt to the readers in turn (each reader's split, `pipes.data.epochs`), so every sample is
read exactly once per epoch by exactly one reader. When readers must read equal counts (torch.distributed with
more than one rank, or ``drop_uneven=True``) the units' sample counts are learnt when the dataset is built
(`counts`) and each reader instead takes a contiguous piece of the epoch's samples, all pieces the same
size (`epochs.even_share`). Each reader streams its units (`stream.ShardReader`)
through a shuffle buffer whose draws come from a generator seeded by (seed, epoch, reader), so a state (where the reader
is, which samples its buffer holds, the generator's state) resumes the exact same sequence.
"""
from __future__ import annotations

import math
from dataclasses import replace
from typing import Any, Callable, Iterator, Optional, Sequence, Union

import numpy as np
import torch.utils.data

from ..data.epochs import EpochCell, Run, even_share, iter_slots
from ..data.resume import ReaderState, ResumeStateError, listing_digest, load, plan
from ..data.splits import check_drop_uneven, current_split, distributed_rank, epoch_order, equal_counts
from ..options import merge_storage_options, split_keywords
from ..distributed.listing import list_once
from .catalog import INDEXES_KEPT, ShardCatalog
from .counts import sample_counts
from .stream import DEFAULT_RANGE_SIZE, DEFAULT_RANGES_IN_FLIGHT, ShardReader, UnitRead, part_bounds

# Samples a reader's shuffle buffer holds when shuffling (memory: this x the sample size, per worker).
DEFAULT_SHUFFLE_BUFFER = 256

Sample = dict


class FluxShardDataset(torch.utils.data.IterableDataset):
    """Samples of tar shards (WebDataset's layout) as dicts ``{"__key__", "__shard__", ext: bytes...}``.

    Build it with `from_prefix`, `from_shards` (URLs, brace patterns allowed) or `from_manifest`.
    Call `set_epoch(epoch)` before each epoch (it reaches persistent DataLoader workers too); with
    ``shuffle=True`` the unit order and the shuffle buffer's draws change per (seed, epoch).

    Equal counts: under torch.distributed (world_size > 1) every reader (rank x DataLoader worker) gets
    the same number of samples per epoch, so DDP's ranks take the same number of steps (a rank with a
    batch fewer would leave the others waiting in an all-reduce forever). The epoch's samples (units in
    the (seed, epoch) order) are cut into equal contiguous pieces: by default the last pieces are padded
    by repeating the epoch's first samples (fewer than readers of them, as DistributedSampler pads);
    ``drop_uneven=True`` leaves out the epoch's last samples instead (fewer than readers; on one process
    too); ``drop_uneven=None`` does neither (every sample exactly once, counts may differ: for evaluation,
    not for DDP training). The counts come from the shards' indexes (one small read of each when the
    dataset is built, on rank 0, sent to the others); shards without an index are scanned, compressed
    ones streamed. Every rank must use the same num_workers.
    Resuming (below) keeps the counts equal.

    Resume: with ``StatefulDataLoader`` on the same world size and num_workers, load the loader's
    state as usual. On another layout, gather every reader's state from the old loaders' states
    (``states = fluxfs.pipes.reader_states(*every_rank_loader_state)``), give it to a fresh dataset
    with ``ds.load_state_dict({"readers": states})`` and do not load the new loader's state: each new
    reader reads its share of what is left, every remaining sample exactly once. Ranks can save their
    loader states beside the checkpoint, or gather them with ``torch.distributed.all_gather_object``.
    """

    STATE_NAME = "FluxShardDataset"  # the "dataset" of its states (`pipes.data.resume.ReaderState`)
    READERS_KEY = ReaderState.READERS_KEY  # a gathered state: every old reader's state

    def __init__(self, catalog: ShardCatalog, *, transform: Optional[Callable[[Sample], Any]] = None,
                 shuffle: bool = False, seed: int = 0, shuffle_buffer: Optional[int] = None,
                 rank: Optional[int] = None, world_size: Optional[int] = None,
                 extensions: Optional[Sequence[str]] = None, range_size: int = DEFAULT_RANGE_SIZE,
                 ranges_in_flight: int = DEFAULT_RANGES_IN_FLIGHT, drop_uneven: Optional[bool] = False):
        self.catalog = catalog
        self.drop_uneven = check_drop_uneven(drop_uneven, type(self).__name__)
        self._counts: Optional[list[int]] = None  # samples per shard, learnt when readers need equal counts
        self.transform = transform
        self.shuffle, self.seed = bool(shuffle), int(seed)
        buffer = (DEFAULT_SHUFFLE_BUFFER if shuffle else 0) if shuffle_buffer is None else int(shuffle_buffer)
        if buffer < 0:
            raise ValueError(f"shuffle_buffer must be >= 0, not {shuffle_buffer}")
        self.shuffle_buffer = buffer
        self.extensions = None if extensions is None else tuple(extensions)
        ShardReader(None, range_size=range_size, in_flight=ranges_in_flight)  # check them now
        self.range_size, self.ranges_in_flight = range_size, ranges_in_flight
        self._rank, self._world_size = rank, world_size
        # List now, in the main process: DataLoader starts workers without asking the dataset.
        self._listing = listing_digest(s.path for s in self.catalog.shards)
        self._epoch = EpochCell(0)
        self._loaded: Optional[tuple[ReaderState, ...]] = None  # restored, not iterated yet
        self._gathered = False
        self._state: Optional[ReaderState] = None  # this reader's, as planned at iter()
        self._cursor = (0, 0)  # [slot position, sample] of the next sample to read
        self._live: Optional[tuple[list, np.random.Generator]] = None
        if self._equal(distributed_rank(rank, world_size)[1]):
            self._sample_counts()  # now, while every rank builds its datasets in the same order

    # -- constructors -------------------------------------------------------------------------

    @classmethod
    def _build(cls, kind: str, target: Any, storage_options: Optional[dict], kwargs: dict,
               base_url: Optional[str] = None, bare_prefix: bool = False) -> "FluxShardDataset":
        list_once = kwargs.pop("list_once", True)  # rank 0 lists, the others receive (pipes.distributed)
        own, options = split_keywords(kwargs, cls.__init__)
        options = merge_storage_options(cls.__name__, storage_options, options)
        return cls(ShardCatalog(kind, target, storage_options=options, base_url=base_url, list_once=list_once,
                                bare_prefix=bare_prefix), **own)

    @classmethod
    def from_prefix(cls, url: str, *, storage_options: Optional[dict] = None, bare_prefix: bool = False,
                    **kwargs: Any) -> "FluxShardDataset":
        """Every ``*.tar`` object below the URL's directory (``.../train`` is ``train/``, never ``train2/``; a URL
        naming no directory is a key prefix, with an `AmbiguousPrefixWarning` when it starts several shards'
        keys, unless `bare_prefix=True`); other keywords are storage options."""
        return cls._build("prefix", url, storage_options, kwargs, bare_prefix=bare_prefix)

    @classmethod
    def from_shards(cls, urls: Union[str, Sequence[str]], *, storage_options: Optional[dict] = None,
                    **kwargs: Any) -> "FluxShardDataset":
        """The shards named, in that order; brace patterns (``shard-{000000..000099}.tar``) are expanded."""
        return cls._build("urls", urls, storage_options, kwargs)

    @classmethod
    def from_manifest(cls, path_or_url: str, *, base_url: Optional[str] = None,
                      storage_options: Optional[dict] = None, **kwargs: Any) -> "FluxShardDataset":
        """The shards a manifest lists (JSON lines, or text keys relative to `base_url`)."""
        return cls._build("manifest", path_or_url, storage_options, kwargs, base_url)

    # -- epochs and state ---------------------------------------------------------------------

    def set_epoch(self, epoch: int) -> None:
        """Choose the epoch (in every DataLoader worker, persistent ones included)."""
        self._epoch.set(epoch)

    @property
    def epoch(self) -> int:
        return self._epoch.get()

    def __getstate__(self) -> dict:
        # Workers started by spawn/forkserver cannot see the parent's process group: fix rank now.
        state = dict(self.__dict__)
        state["_rank"], state["_world_size"] = distributed_rank(self._rank, self._world_size)
        if self._equal(state["_world_size"]):
            state["_counts"] = self._sample_counts()
        return state

    def _equal(self, world_size: int) -> bool:
        """Whether every reader must read the same number of samples (DDP, or drop_uneven)."""
        return equal_counts(self.drop_uneven, world_size)

    def _sample_counts(self) -> list[int]:
        """Samples per shard: rank 0 reads them (`counts`) and sends them to the other ranks."""
        if self._counts is None:
            catalog = self.catalog
            self._counts = list_once(lambda: sample_counts(catalog.fs, catalog.shards, catalog.protocol),
                                     f"the sample counts of the shards of {catalog.describe()}", catalog.list_once)
        return self._counts

    def _unit_items(self, parts: int) -> np.ndarray:
        """Samples of each unit: part p of a shard of c samples holds part_bounds' contiguous share of them
        (indexed shards) or every parts-th sample from the p-th (streamed ones)."""
        counts = np.asarray(self._sample_counts(), dtype=np.int64)
        p = np.arange(parts, dtype=np.int64)
        indexed = np.array([s.has_index for s in self.catalog.shards], dtype=bool)
        contiguous = ((counts[:, None] * (p + 1)) // parts) - ((counts[:, None] * p) // parts)
        strided = np.maximum(0, (counts[:, None] - p + parts - 1) // parts)
        return np.where(indexed[:, None], contiguous, strided).reshape(-1)

    def _even(self, world_size: int, epoch: int, planned: int) -> Optional[Callable[[list[Run], int, int], list[Run]]]:
        """Each reader's equal share of runs of this epoch's units, when readers must read equal counts."""
        if not self._equal(world_size):
            return None
        units, parts = self._units(planned)
        items = self._unit_items(parts)[epoch_order(units, self.shuffle, self.seed, epoch)]
        drop = self.drop_uneven is True
        return lambda runs, reader, readers: even_share(runs, lambda slots: items[slots], reader, readers, drop)

    def _mine(self) -> ReaderState:
        """A state of this dataset before any reader started (what a loaded state is checked against)."""
        return ReaderState(self.STATE_NAME, self.epoch, self.seed, self.shuffle, self.shuffle_buffer,
                           len(self.catalog), self._listing)

    def state_dict(self) -> dict:
        if self._loaded is not None:  # restored, not iterated yet: the restored state still holds
            states = [s.to_dict() for s in self._loaded]
            return {self.READERS_KEY: states} if self._gathered else states[0]
        if self._state is None:
            return self._mine().to_dict()
        state = replace(self._state, cursor=self._cursor)
        if self._live is not None:  # the shuffle buffer's samples and the draws so far
            buffer, rng = self._live
            state = replace(state, buffered=tuple(tuple(ref) for ref, _ in buffer), rng=rng.bit_generator.state)
        return state.to_dict()

    def load_state_dict(self, state: dict) -> None:
        """Resume at the next `iter()`: one reader's state (same layout), or ``{"readers": [every reader's]}``.

        A state this dataset cannot continue from raises `ResumeStateError` (a ValueError) naming the key.
        """
        self._loaded, self._gathered = load(state, self._mine(), "shards", self._slots, items=True)
        self._epoch.set(self._loaded[0].epoch)
        self._state = self._live = None

    def _units(self, planned: int) -> tuple[int, int]:
        """(units, parts per shard): shards split in parts when there are fewer of them than readers."""
        n = len(self.catalog)
        parts = math.ceil(planned / n) if n < planned else 1
        return n * parts, parts

    def _slots(self, planned: int) -> int:
        return self._units(planned)[0]

    # -- iteration -----------------------------------------------------------------------------

    def __iter__(self) -> Iterator[Any]:
        split = current_split(*distributed_rank(self._rank, self._world_size))
        loaded, self._loaded = self._loaded, None
        fresh = replace(self._mine(), split=(split.index, split.count), planned=split.count)
        # The units of the layout the epoch was planned for (an old one, when resuming gathered states: then
        # `plan` replaces the fresh share with this reader's equal share of what was left).
        planned = loaded[0].planned if loaded and loaded[0].planned else split.count
        even = self._even(split.world_size, fresh.epoch, planned)  # type: ignore[arg-type]
        if even is not None:
            fresh = replace(fresh, runs=tuple(even([Run(0, self._slots(split.count))], split.index, split.count)))
        state = plan(loaded, self._gathered, fresh, self._slots, even)
        self._state, self._cursor, self._live = state, state.cursor, None
        return self._generate(state)

    def _generate(self, state: ReaderState) -> Iterator[Any]:
        units, parts = self._units(state.planned)  # type: ignore[arg-type]
        order = epoch_order(units, self.shuffle, self.seed, state.epoch)
        reader = ShardReader(self.catalog.fs, range_size=self.range_size, in_flight=self.ranges_in_flight,
                             extensions=self.extensions)

        def unit(slot: int, first: int, take: Optional[int], ahead: Sequence[int] = ()) -> tuple[UnitRead, Any]:
            uid = int(order[slot])
            i = uid // parts
            info = self.catalog.shards[i]
            read = UnitRead(info, info.url(self.catalog.protocol), uid % parts, parts, first, take)
            index = self.catalog.index(i, [int(order[s]) // parts for s in ahead])  # the next units' read with it
            if index is not None:  # a restored cursor or buffered sample past the unit's samples
                lo, hi = part_bounds(len(index.samples), read.part, parts)
                if first > hi - lo:
                    raise ResumeStateError(f"{self.STATE_NAME} resume state: sample {first} of slot {slot} is past "
                                           f"the {hi - lo} samples of {read.url}" + (f" (part {read.part} of {parts})"
                                                                                     if parts > 1 else ""))
            return read, index

        runs = state.runs_of(self._slots)
        rng = np.random.default_rng([self.seed, state.epoch, *state.split, state.resumes])  # type: ignore[misc]
        if state.rng is not None:
            rng.bit_generator.state = state.rng
        size = self.shuffle_buffer
        buffer = self._refill(state.buffered, unit, reader)
        self._live = (buffer, rng)
        for ref, sample in self._inputs(runs, state.cursor, unit, reader):
            if size <= 1:
                yield self._out(sample)
            elif len(buffer) < size:
                buffer.append((ref, sample))
            else:  # hand out a random one of the buffer and put this one in its place
                j = int(rng.integers(size))
                (_, out), buffer[j] = buffer[j], (ref, sample)
                yield self._out(out)
        while buffer:  # the share is read: hand out what the buffer holds, in random order
            j = int(rng.integers(len(buffer)))
            buffer[j], buffer[-1] = buffer[-1], buffer[j]
            _, out = buffer.pop()
            yield self._out(out)

    def _out(self, sample: Sample) -> Any:
        return self.transform(sample) if self.transform is not None else sample

    def _inputs(self, runs: list[Run], cursor: tuple[int, int], unit,
                reader: ShardReader) -> Iterator[tuple[list, Sample]]:
        """([slot, sample], sample) of the reader's split from its cursor on; the cursor moves past each."""
        pos0, item0 = cursor

        def units() -> Iterator[tuple]:
            slots = list(iter_slots(runs, pos0))
            for k, (pos, slot, skip, take) in enumerate(slots):
                first = skip
                if pos == pos0 and item0 > skip:
                    take = None if take is None else take - (item0 - skip)
                    first = item0
                if take is not None and take <= 0:
                    continue
                yield (pos, slot), *unit(slot, first, take, [s[1] for s in slots[k + 1:k + INDEXES_KEPT]])

        for (pos, slot), ordinal, sample in reader.stream_units(units()):
            self._cursor = (pos, ordinal + 1)
            yield [slot, ordinal], sample
        self._cursor = (sum(len(r) for r in runs), 0)

    def _refill(self, refs: Sequence[tuple[int, int]], unit, reader: ShardReader) -> list:
        """The shuffle buffer of a restored state: its samples read again, in buffer order."""
        if not refs:
            return []
        by_slot: dict[int, list[int]] = {}
        for slot, item in refs:
            by_slot.setdefault(slot, []).append(item)
        got: dict[tuple[int, int], Sample] = {}
        for slot, items in by_slot.items():
            lo, hi = min(items), max(items)
            read, index = unit(slot, lo, hi - lo + 1)
            wanted = set(items)
            for ordinal, sample in reader.samples(read, index):
                if ordinal in wanted:
                    got[(slot, ordinal)] = sample
        absent = [[slot, item] for slot, item in refs if (slot, item) not in got]
        if absent:
            raise ResumeStateError(f"{self.STATE_NAME} resume state: 'buffered' names samples [slot, item] the "
                                   f"shards do not hold: {absent[:5]}")
        return [([slot, item], got[(slot, item)]) for slot, item in refs]
