"""Epoch plans for the iterable datasets (objects and shards): who reads which slots, and what is left after a stop.

An epoch is a sequence of slots (an object, or a shard or part of one) in an order fixed by (seed,
epoch). Readers (rank x DataLoader worker) take every readers-th slot. A reader's share is a list of
`Run`s, so what remains after a checkpoint (where each reader got to) is again a list of runs, which
any number of new readers can split between them (`share`): resume works across layouts.

`EpochCell` carries `set_epoch` to DataLoader workers that persist across epochs.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Iterator, Optional, Sequence

import torch


class EpochCell:
    """The epoch, in memory shared with DataLoader workers (fork, spawn, forkserver; persistent or not).

    A persistent worker keeps the copy of the dataset it started with, so an attribute set by
    `set_epoch` in the main process never reaches it; a shared tensor does. Pickled outside a worker
    start (torch.save, deepcopy) it is copied, as any tensor.
    """

    def __init__(self, epoch: int = 0):
        self._value = torch.zeros((), dtype=torch.int64).share_memory_()
        self.set(epoch)

    def get(self) -> int:
        return int(self._value.item())

    def set(self, epoch: int) -> None:
        self._value.fill_(int(epoch))


@dataclass(frozen=True)
class Run:
    """Slots start, start+step, ... (< stop) of the epoch order; in the first, items from `skip`, at most `take`.

    `take` applies to one-slot runs only (`split_first` makes them).
    """

    start: int
    stop: int
    step: int = 1
    skip: int = 0
    take: Optional[int] = None

    def __len__(self) -> int:
        return len(range(self.start, self.stop, self.step))

    def to_list(self) -> list:
        return [self.start, self.stop, self.step, self.skip, self.take]

    @classmethod
    def from_list(cls, value: Sequence) -> "Run":
        return cls(*value)


def split_first(run: Run) -> list[Run]:
    """A run whose first slot is partial, as that one-slot run and the whole slots after it."""
    if (run.skip == 0 and run.take is None) or len(run) <= 1:
        return [run] if len(run) else []
    return [Run(run.start, run.start + 1, 1, run.skip, run.take), Run(run.start + run.step, run.stop, run.step)]


def reader_runs(reader: int, readers: int, slots: int) -> list[Run]:
    """A fresh epoch's share of `reader`: every readers-th slot from its index."""
    return [Run(reader, slots, readers)] if reader < slots else []


def share(runs: Iterable[Run], reader: int, readers: int) -> list[Run]:
    """`reader`'s share of `runs` (taken as one sequence of slots): every readers-th slot, from the reader-th."""
    out: list[Run] = []
    at = 0  # position of the run's first slot in the whole sequence
    for whole in runs:
        for run in split_first(whole):
            n = len(run)
            first = (reader - at) % readers  # first position inside this run that is ours
            if first < n:
                start = run.start + first * run.step
                partial = first == 0 and (run.skip or run.take is not None)
                out.append(Run(start, run.stop, run.step * readers, run.skip if partial else 0,
                               run.take if partial else None))
            at += n
    return out


def iter_slots(runs: Sequence[Run], pos: int = 0) -> Iterator[tuple[int, int, int, Optional[int]]]:
    """(position in the reader's sequence, slot, first item, most items) of each slot from position `pos`."""
    at = 0
    for run in runs:
        n = len(run)
        if at + n <= pos:
            at += n
            continue
        for k in range(max(0, pos - at), n):
            partial = k == 0
            yield at + k, run.start + k * run.step, run.skip if partial else 0, run.take if partial else None
        at += n


def remaining(runs: Sequence[Run], pos: int, item: int = 0) -> list[Run]:
    """What is left of `runs` when the reader is at slot position `pos`, item `item` of it (items before it read)."""
    out: list[Run] = []
    at = 0
    for run in runs:
        n = len(run)
        if at + n <= pos:
            at += n
            continue
        k = max(0, pos - at)
        first = run.start + k * run.step
        skip = run.skip if k == 0 else 0
        take = run.take if k == 0 else None
        if k == pos - at and item > skip:
            take = None if take is None else take - (item - skip)
            skip = item
        if skip == 0 and take is None:
            out.append(Run(first, run.stop, run.step))
        else:
            if take is None or take > 0:
                out.append(Run(first, first + 1, 1, skip, take))
            if k + 1 < n:
                out.append(Run(first + run.step, run.stop, run.step))
        at += n
    return out


def runs_to_state(runs: Optional[Sequence[Run]]) -> Optional[list]:
    return None if runs is None else [r.to_list() for r in runs]


def runs_from_state(value: Optional[Sequence]) -> Optional[list[Run]]:
    return None if value is None else [Run.from_list(v) for v in value]
