"""Epoch plans for the iterable datasets (objects and shards): who reads which slots, and what is left after a stop.

An epoch is a sequence of slots (an object, or a shard or part of one) in an order fixed by (seed,
epoch). Readers (rank x DataLoader worker) take every readers-th slot. A reader's split (its share) is
a list of `Run`s, so what remains after a checkpoint (where each reader got to) is again a list of runs, which
any number of new readers can split between them (`share`): resume works across layouts.

`EpochCell` carries `set_epoch` to DataLoader workers that persist across epochs. The state that
records all this is `pipes.data.resume.ReaderState`.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable, Iterator, Optional, Sequence

import numpy as np
import torch

from ..errors import PipesError


class ResumeStateError(PipesError, ValueError):
    """A resume state a dataset or node cannot continue from; the message names the key and the owner."""


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


def even_share(runs: Iterable[Run], items: Callable[[np.ndarray], np.ndarray], reader: int, readers: int,
               drop: bool) -> list[Run]:
    """`reader`'s share when `runs` (one sequence of slots holding `items(slots)` items each) is cut into `readers`
    contiguous pieces of equal item counts: the last total % readers items dropped (`drop`), or the sequence
    repeated from its start to fill the last pieces (padding, as DistributedSampler pads). Slots of no items
    still go to a reader (its shard is read, and checked): the one whose piece starts at or after them."""
    pieces = []  # (run, its slots, offset of each slot's first item in the sequence, items of each slot)
    at = 0
    for whole in runs:
        for run in split_first(whole):
            slots = np.arange(run.start, run.stop, run.step, dtype=np.int64)
            n = np.asarray(items(slots), dtype=np.int64).copy()
            if len(n) == 1 and (run.skip or run.take is not None):
                n[0] = max(0, n[0] - run.skip) if run.take is None else max(0, min(n[0] - run.skip, run.take))
            cum = np.cumsum(n)
            pieces.append((run, slots, at + cum - n, n))
            at += int(cum[-1]) if len(cum) else 0
    total = at
    per = total // readers if drop else -(-total // readers)
    if not total:
        return [r for r, _, _, _ in pieces] if reader == 0 else []
    lo, hi = reader * per, (reader + 1) * per
    out: list[Run] = []
    while lo < hi:  # [lo, hi) of the sequence repeated end to end
        a = lo % total
        b = min(total, a + hi - lo)
        out += _cut(pieces, a, b, lo < total and b == total)
        lo += b - a
    return out


def _cut(pieces: list, a: int, b: int, to_end: bool) -> list[Run]:
    """Runs holding items [a, b) of `pieces` (see `even_share`), with the empty slots at offsets a..b-1 (and at b
    when `to_end`: the sequence's last empty slots)."""
    out: list[Run] = []
    for run, slots, starts, n in pieces:
        empty_in = (starts >= a) & ((starts < b) | (to_end & (starts == b)))
        inside = np.where(n > 0, (starts < b) & (starts + n > a), empty_in)
        picked = np.flatnonzero(inside)
        if not len(picked):
            continue
        k0, k1 = int(picked[0]), int(picked[-1])
        first = max(0, a - int(starts[k0]))  # items of slot k0 (and of k1) outside [a, b)
        last = min(int(n[k1]), b - int(starts[k1]))
        if len(slots) == 1 and (run.skip or run.take is not None):  # a partial slot: its items from run.skip
            whole = first == 0 and last == int(n[0])
            out.append(run if whole else Run(run.start, run.start + 1, 1, run.skip + first, last - first))
            continue
        if k0 == k1:
            s = int(slots[k0])
            whole = first == 0 and last == int(n[k0])
            out.append(Run(s, s + 1, 1) if whole else Run(s, s + 1, 1, first, last - first))
            continue
        m0, m1 = k0, k1 + 1  # whole slots slots[m0:m1], once the partial ends are cut off
        if first:
            out.append(Run(int(slots[k0]), int(slots[k0]) + 1, 1, first, int(n[k0]) - first))
            m0 += 1
        tail = None
        if last < int(n[k1]):
            tail = Run(int(slots[k1]), int(slots[k1]) + 1, 1, 0, last)
            m1 -= 1
        if m1 > m0:
            out.append(Run(int(slots[m0]), int(slots[m1 - 1]) + 1, run.step))
        if tail is not None:
            out.append(tail)
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


_SNAPSHOT, _WORKERS, _LAG, _DATASET = "_snapshot", "_worker_snapshots", "_steps_since_snapshot", "dataset_state"


def reader_states(*loader_states: dict) -> list[dict]:
    """Every reader's dataset state in `StatefulDataLoader` state dicts (one per rank), for a resume on another layout.

    Pass each old rank's ``loader.state_dict()`` (saved per rank, or gathered with
    ``torch.distributed.all_gather_object``); the result goes to ``dataset.load_state_dict({"readers": ...})``.
    """
    out: list[dict] = []
    for n, state in enumerate(loader_states):
        where = f"reader_states: loader state {n}"
        if not isinstance(state, dict):
            raise ResumeStateError(f"{where} must be a dict (a StatefulDataLoader's state_dict()), not "
                                   f"{type(state).__name__}")
        if _SNAPSHOT in state:  # DataLoader workers: one snapshot each
            if state.get(_LAG):
                raise ResumeStateError(f"this loader state is {state[_LAG]} steps past its last snapshot: save "
                                       "states with snapshot_every_n_steps=1 (the default) to resume on another "
                                       "layout")
            workers = state[_SNAPSHOT].get(_WORKERS) if isinstance(state[_SNAPSHOT], dict) else None
            if not isinstance(workers, dict) or not all(isinstance(k, str) and k.rsplit("_", 1)[-1].isdigit()
                                                        and isinstance(v, dict) for k, v in workers.items()):
                raise ResumeStateError(f"{where}: {_SNAPSHOT!r} must hold {_WORKERS!r}, a dict of 'worker_<n>' -> "
                                       f"that worker's state, not {str(workers)[:80]}")
            out += [workers[k].get(_DATASET) for k in sorted(workers, key=lambda k: int(k.rsplit("_", 1)[1]))]
        elif _DATASET in state:  # num_workers=0
            out.append(state[_DATASET])
        else:  # a dataset's own state_dict()
            out.append(state)
    if any(s is None for s in out):
        raise ResumeStateError("a loader state holds no dataset state (was its dataset resumable?)")
    return out


def check_complete(readers: Sequence[Optional[Sequence[int]]]) -> None:
    """Gathered states must be those of every reader of one layout ([index, count] each), once."""
    if any(r is None for r in readers):
        raise ResumeStateError("a reader state was saved before that reader started: its share is unknown")
    counts = sorted({r[1] for r in readers})  # type: ignore[index]
    seen = sorted(r[0] for r in readers)  # type: ignore[index]
    if len(counts) != 1 or seen != list(range(counts[0])):
        raise ResumeStateError(f"states of readers {seen} (of {counts}) do not make one complete layout: "
                               f"pass every rank's loader state, each once")
