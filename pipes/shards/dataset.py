"""`FluxShardDataset`: an iterable dataset of tar shards, sharded over ranks x workers, shuffled, resumable.

An epoch's work is a list of units: each shard, or, when there are fewer shards than readers (ranks x
DataLoader workers), each of `parts` pieces of every shard. Units are put in an order fixed by (seed,
epoch) and dealt to the readers in turn (`pipes.data.epochs`), so every sample is read exactly once per
epoch by exactly one reader. Each reader streams its units (`stream.ShardReader`) through a shuffle
buffer whose draws come from a generator seeded by (seed, epoch, reader), so a state (where the reader
is, which samples its buffer holds, the generator's state) resumes the exact same sequence.
"""
from __future__ import annotations

import math
from typing import Any, Callable, Iterator, Optional, Sequence, Union

import numpy as np
import torch.utils.data

from ..data.epochs import EpochCell, Run, iter_slots, reader_runs, remaining, runs_from_state, runs_to_state, share
from ..data.sharding import current_shard, distributed_rank, epoch_order
from ..options import merge_storage_options, split_keywords
from .catalog import ShardCatalog
from .stream import DEFAULT_RANGE_SIZE, DEFAULT_RANGES_IN_FLIGHT, ShardReader, UnitRead

# Samples a reader's shuffle buffer holds when shuffling (memory: this x the sample size, per worker).
DEFAULT_SHUFFLE_BUFFER = 256

Sample = dict


class FluxShardDataset(torch.utils.data.IterableDataset):
    """Samples of tar shards (WebDataset's layout) as dicts ``{"__key__", "__shard__", ext: bytes...}``.

    Build it with `from_prefix`, `from_shards` (URLs, brace patterns allowed) or `from_manifest`.
    Call `set_epoch(epoch)` before each epoch (it reaches persistent DataLoader workers too); with
    ``shuffle=True`` the unit order and the shuffle buffer's draws change per (seed, epoch).

    Resume: with ``StatefulDataLoader`` on the same world size and num_workers, load the loader's
    state as usual. On another layout, gather every reader's state from the old loaders' states
    (every rank's: ``pipes.data.epochs.reader_states``), give it to a fresh dataset with
    ``ds.load_state_dict({"readers": states})`` and do not load the new loader's state: each new
    reader reads its share of what is left, every remaining sample exactly once.
    """

    EPOCH_KEY = "epoch"
    SEED_KEY = "seed"
    SHUFFLE_KEY = "shuffle"
    BUFFER_KEY = "shuffle_buffer"
    SHARDS_KEY = "num_shards"
    PLANNED_KEY = "planned_readers"  # readers the epoch's units were made for
    READER_KEY = "reader"  # [index, count] of the reader this state belongs to
    RUNS_KEY = "runs"  # the reader's share after a resume on another layout (None: its fresh-epoch share)
    CURSOR_KEY = "cursor"  # [slot position, sample] of the next sample to read
    BUFFERED_KEY = "buffered"  # [slot, sample] of each sample in the shuffle buffer, in buffer order
    RNG_KEY = "rng"
    RESUMES_KEY = "resumes"  # resumes on another layout this epoch (new draws for each)
    READERS_KEY = "readers"  # a gathered state: every old reader's state

    def __init__(self, catalog: ShardCatalog, *, transform: Optional[Callable[[Sample], Any]] = None,
                 shuffle: bool = False, seed: int = 0, shuffle_buffer: Optional[int] = None,
                 rank: Optional[int] = None, world_size: Optional[int] = None,
                 extensions: Optional[Sequence[str]] = None, range_size: int = DEFAULT_RANGE_SIZE,
                 ranges_in_flight: int = DEFAULT_RANGES_IN_FLIGHT):
        self.catalog = catalog
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
        self.catalog.shards  # noqa: B018
        self._epoch = EpochCell(0)
        self._resume: Optional[dict] = None
        self._state: Optional[dict] = None
        self._live: Optional[tuple[list, np.random.Generator]] = None

    # -- constructors -------------------------------------------------------------------------

    @classmethod
    def _build(cls, kind: str, target: Any, storage_options: Optional[dict], kwargs: dict,
               base_url: Optional[str] = None) -> "FluxShardDataset":
        own, options = split_keywords(kwargs, cls.__init__)
        options = merge_storage_options(cls.__name__, storage_options, options)
        return cls(ShardCatalog(kind, target, storage_options=options, base_url=base_url), **own)

    @classmethod
    def from_prefix(cls, url: str, *, storage_options: Optional[dict] = None, **kwargs: Any) -> "FluxShardDataset":
        """Every ``*.tar`` object whose key starts with the URL's key part; other keywords are storage options."""
        return cls._build("prefix", url, storage_options, kwargs)

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
        return state

    def state_dict(self) -> dict:
        if self._resume is not None:  # restored, not iterated yet: the restored state still holds
            return dict(self._resume)
        if self._state is not None:
            state = dict(self._state)
            if self._live is not None:  # the shuffle buffer's samples and the draws so far
                buffer, rng = self._live
                state[self.BUFFERED_KEY] = [ref for ref, _ in buffer]
                state[self.RNG_KEY] = rng.bit_generator.state
            return state
        return {self.EPOCH_KEY: self.epoch, self.SEED_KEY: self.seed, self.SHUFFLE_KEY: self.shuffle,
                self.BUFFER_KEY: self.shuffle_buffer, self.SHARDS_KEY: len(self.catalog), self.CURSOR_KEY: None}

    def load_state_dict(self, state: dict) -> None:
        """Resume at the next `iter()`: one reader's state (same layout), or ``{"readers": [every reader's]}``."""
        states = state[self.READERS_KEY] if self.READERS_KEY in state else [state]
        if not states:
            raise ValueError("no reader states to resume from")
        for s in states:
            self._check_compatible(s)
        epochs = {s[self.EPOCH_KEY] for s in states}
        if len(epochs) != 1:
            raise ValueError(f"reader states come from different epochs {sorted(epochs)}")
        self._epoch.set(epochs.pop())
        self._resume = dict(state)
        self._state = self._live = None

    def _check_compatible(self, s: dict) -> None:
        mine = (self.seed, self.shuffle, self.shuffle_buffer, len(self.catalog))
        theirs = (s[self.SEED_KEY], s[self.SHUFFLE_KEY], s[self.BUFFER_KEY], s[self.SHARDS_KEY])
        if mine != theirs:
            raise ValueError(f"state was saved with (seed, shuffle, shuffle_buffer, shards) = {theirs}; this "
                             f"dataset has {mine}")

    # -- planning -------------------------------------------------------------------------------

    def _plan(self, index: int, count: int) -> dict:
        """This reader's state at the start of iteration: fresh, restored, or its share of a gathered one."""
        state, self._resume = self._resume, None
        base = {self.EPOCH_KEY: self.epoch, self.SEED_KEY: self.seed, self.SHUFFLE_KEY: self.shuffle,
                self.BUFFER_KEY: self.shuffle_buffer, self.SHARDS_KEY: len(self.catalog)}
        fresh = {**base, self.PLANNED_KEY: count, self.READER_KEY: [index, count], self.RUNS_KEY: None,
                 self.CURSOR_KEY: [0, 0], self.BUFFERED_KEY: [], self.RNG_KEY: None, self.RESUMES_KEY: 0}
        if state is None or (self.READERS_KEY not in state and state.get(self.CURSOR_KEY) is None):
            return fresh
        if self.READERS_KEY not in state:
            if state[self.READER_KEY] != [index, count]:
                raise ValueError(
                    f"state was saved by reader {state[self.READER_KEY][0]} of {state[self.READER_KEY][1]} "
                    f"(rank x DataLoader worker); this is reader {index} of {count}. To resume on another world size "
                    f"or num_workers, give every old reader's state: ds.load_state_dict({{'readers': "
                    f"reader_states(old_loader_states)}}) and do not load the new loader's state")
            return dict(state)
        olds = [s for s in state[self.READERS_KEY] if s.get(self.CURSOR_KEY) is not None]
        if not olds:
            return fresh
        planned = {s[self.PLANNED_KEY] for s in olds}
        if len(planned) != 1:
            raise ValueError(f"reader states were planned for different reader counts {sorted(planned)}")
        left: list[Run] = []
        for s in sorted(olds, key=lambda s: s[self.READER_KEY]):
            left += [Run(slot, slot + 1, 1, item, 1) for slot, item in s[self.BUFFERED_KEY]]
            left += remaining(self._runs(s), *s[self.CURSOR_KEY])
        return {**fresh, self.PLANNED_KEY: planned.pop(), self.RUNS_KEY: runs_to_state(share(left, index, count)),
                self.RESUMES_KEY: 1 + max(s[self.RESUMES_KEY] for s in olds)}

    def _runs(self, state: dict) -> list[Run]:
        explicit = runs_from_state(state[self.RUNS_KEY])
        if explicit is not None:
            return explicit
        index, count = state[self.READER_KEY]
        return reader_runs(index, count, self._units(state[self.PLANNED_KEY])[0])

    def _units(self, planned: int) -> tuple[int, int]:
        """(units, parts per shard): shards split in parts when there are fewer of them than readers."""
        n = len(self.catalog)
        parts = math.ceil(planned / n) if n < planned else 1
        return n * parts, parts

    # -- iteration -----------------------------------------------------------------------------

    def __iter__(self) -> Iterator[Any]:
        shard = current_shard(*distributed_rank(self._rank, self._world_size))
        state = self._plan(shard.index, shard.count)
        self._state, self._live = state, None
        return self._generate(state)

    def _generate(self, state: dict) -> Iterator[Any]:
        units, parts = self._units(state[self.PLANNED_KEY])
        order = epoch_order(units, self.shuffle, self.seed, state[self.EPOCH_KEY])
        reader = ShardReader(self.catalog.fs, range_size=self.range_size, in_flight=self.ranges_in_flight,
                             extensions=self.extensions)

        def unit(slot: int, first: int, take: Optional[int]) -> tuple[UnitRead, Any]:
            uid = int(order[slot])
            i = uid // parts
            info = self.catalog.shards[i]
            return UnitRead(info, info.url(self.catalog.protocol), uid % parts, parts, first, take), self.catalog.index(i)

        runs = self._runs(state)
        rng = np.random.default_rng([self.seed, state[self.EPOCH_KEY], *state[self.READER_KEY],
                                     state[self.RESUMES_KEY]])
        if state[self.RNG_KEY] is not None:
            rng.bit_generator.state = state[self.RNG_KEY]
        size = self.shuffle_buffer
        buffer = self._refill(state[self.BUFFERED_KEY], unit, reader)
        self._live = (buffer, rng)
        for ref, sample in self._inputs(runs, state, unit, reader):
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

    def _inputs(self, runs: list[Run], state: dict, unit, reader: ShardReader) -> Iterator[tuple[list, Sample]]:
        """([slot, sample], sample) of the reader's share from its cursor on; the cursor moves past each."""
        pos0, item0 = state[self.CURSOR_KEY]
        for pos, slot, skip, take in iter_slots(runs, pos0):
            first = skip
            if pos == pos0 and item0 > skip:
                take = None if take is None else take - (item0 - skip)
                first = item0
            if take is not None and take <= 0:
                continue
            read, index = unit(slot, first, take)
            for ordinal, sample in reader.samples(read, index):
                state[self.CURSOR_KEY] = [pos, ordinal + 1]
                yield [slot, ordinal], sample
            state[self.CURSOR_KEY] = [pos + 1, 0]

    def _refill(self, refs: list, unit, reader: ShardReader) -> list:
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
        return [([slot, item], got[(slot, item)]) for slot, item in refs]
