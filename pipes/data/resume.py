"""One resume state for both iterable datasets: where a reader (rank x DataLoader worker) is in its epoch.

`ReaderState` is what `FluxIterableDataset` and `FluxShardDataset` return from `state_dict()` (as a
dict: `to_dict`) and take in `load_state_dict` (`from_dict`, which refuses a forged, stale or foreign
state with a `ResumeStateError` naming the key, what it must be and the dataset). A state saved before
this layout (no "version" key) is converted on load. `plan` turns what was loaded into this reader's
state: the same reader's state back, or its share of what every old reader had left (elastic resume).

Words: a *reader* is one rank x DataLoader worker; its *split* is [index, count], its share of the
epoch; a *slot* is one unit of the epoch order (an object, or a shard or a part of one); the *cursor*
is [position in the reader's slots, item in that slot] of the next item to read.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, replace
from typing import Any, Callable, Iterable, Mapping, Optional, Sequence

import numpy as np

from .epochs import ResumeStateError, Run, check_complete, reader_runs, remaining, share

__all__ = ["ReaderState", "ResumeStateError", "load", "plan", "listing_digest", "need", "check_int", "bad", "is_int"]


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def bad(owner: str, key: str, expected: str, value: Any) -> ResumeStateError:
    """The error for a field of `owner`'s state that is not what it must be."""
    return ResumeStateError(f"{owner} resume state: {key!r} must be {expected}, not {_shown(value)}")


def need(state: Any, key: str, owner: str) -> Any:
    """`state[key]`, or a ResumeStateError naming the missing key and the keys there are."""
    if not isinstance(state, Mapping):
        raise ResumeStateError(f"{owner} resume state must be a dict, not {type(state).__name__} ({_shown(state)})")
    if key not in state:
        raise ResumeStateError(f"{owner} resume state has no {key!r} key (it has {sorted(map(str, state))}): "
                               f"not a state {owner} saved")
    return state[key]


def is_int(value: Any) -> bool:
    """An integer (numpy's too), not a bool."""
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def check_int(owner: str, key: str, value: Any, lo: Optional[int] = 0, hi: Optional[int] = None,
              optional: bool = False) -> Optional[int]:
    """`value` as an int in [lo, hi] (None allowed when `optional`), else a ResumeStateError."""
    if value is None and optional:
        return None
    bounds = (f" >= {lo}" if hi is None else f" in {lo}..{hi}") if lo is not None else ""
    if not is_int(value) or (lo is not None and value < lo) or (hi is not None and value > hi):
        raise bad(owner, key, f"an integer{bounds}{' or None' if optional else ''}", value)
    return int(value)


def _pairs(owner: str, key: str, value: Any, what: str) -> list[tuple[int, int]]:
    """A list of [a >= 0, b >= 0] pairs."""
    if not isinstance(value, (list, tuple)) or not all(
            isinstance(p, (list, tuple)) and len(p) == 2 and all(is_int(x) and x >= 0 for x in p) for p in value):
        raise bad(owner, key, f"a list of {what} (integers >= 0)", value)
    return [(int(a), int(b)) for a, b in value]


def _runs(owner: str, key: str, value: Any) -> Optional[tuple[Run, ...]]:
    if value is None:
        return None
    ok = isinstance(value, (list, tuple)) and all(
        isinstance(r, (list, tuple)) and len(r) == 5 and all(is_int(x) and x >= 0 for x in r[:4]) and r[2] >= 1
        and (r[4] is None or (is_int(r[4]) and r[4] >= 0)) for r in value)
    if not ok:
        raise bad(owner, key, "None or a list of [start, stop, step >= 1, skip, take or None] (integers >= 0)", value)
    return tuple(Run(*(None if x is None else int(x) for x in r)) for r in value)


def listing_digest(names: Iterable[str]) -> str:
    """A short digest of the listed names, in order: a state of another listing of the same size is refused."""
    return hashlib.blake2b("\n".join(names).encode("utf-8", "surrogatepass"), digest_size=8).hexdigest()


@dataclass(frozen=True)
class ReaderState:
    """Where one reader is in one epoch of an iterable dataset, and what the epoch was planned from."""

    VERSION = 2
    VERSION_KEY = "version"
    DATASET_KEY = "dataset"  # the dataset class that saved it
    EPOCH_KEY = "epoch"
    SEED_KEY = "seed"
    SHUFFLE_KEY = "shuffle"
    BUFFER_KEY = "shuffle_buffer"  # samples the shuffle buffer holds (0: none)
    LISTED_KEY = "listed"  # objects or shards listed
    LISTING_KEY = "listing"  # digest of their names (None: not known, a state of the older layout)
    SPLIT_KEY = "split"  # [index, count] of the reader this state belongs to; None before it started
    PLANNED_KEY = "planned_readers"  # readers the epoch was dealt to at its start
    RUNS_KEY = "runs"  # the reader's share: after a resume on another layout, or its equal share (None: every
    # count-th slot from its index, `epochs.reader_runs`)
    CURSOR_KEY = "cursor"  # [slot position, item] of the next item to read
    BUFFERED_KEY = "buffered"  # [slot, item] of each sample in the shuffle buffer, in buffer order
    RNG_KEY = "rng"  # the shuffle buffer's generator state (None: not drawn from yet)
    RESUMES_KEY = "resumes"  # resumes on another layout this epoch (new draws for each)
    READERS_KEY = "readers"  # a gathered state: every old reader's state
    KEYS = (VERSION_KEY, DATASET_KEY, EPOCH_KEY, SEED_KEY, SHUFFLE_KEY, BUFFER_KEY, LISTED_KEY, LISTING_KEY,
            SPLIT_KEY, PLANNED_KEY, RUNS_KEY, CURSOR_KEY, BUFFERED_KEY, RNG_KEY, RESUMES_KEY)

    dataset: str
    epoch: int
    seed: int
    shuffle: bool
    shuffle_buffer: int
    listed: int
    listing: Optional[str]
    split: Optional[tuple[int, int]] = None
    planned: Optional[int] = None
    runs: Optional[tuple[Run, ...]] = None
    cursor: tuple[int, int] = (0, 0)
    buffered: tuple[tuple[int, int], ...] = ()
    rng: Optional[dict] = None
    resumes: int = 0

    def to_dict(self) -> dict:
        return {self.VERSION_KEY: self.VERSION, self.DATASET_KEY: self.dataset, self.EPOCH_KEY: self.epoch,
                self.SEED_KEY: self.seed, self.SHUFFLE_KEY: self.shuffle, self.BUFFER_KEY: self.shuffle_buffer,
                self.LISTED_KEY: self.listed, self.LISTING_KEY: self.listing,
                self.SPLIT_KEY: None if self.split is None else list(self.split), self.PLANNED_KEY: self.planned,
                self.RUNS_KEY: None if self.runs is None else [r.to_list() for r in self.runs],
                self.CURSOR_KEY: list(self.cursor), self.BUFFERED_KEY: [list(b) for b in self.buffered],
                self.RNG_KEY: self.rng, self.RESUMES_KEY: self.resumes}

    @classmethod
    def from_dict(cls, state: Any, owner: str) -> "ReaderState":
        """The state `owner` (a dataset class name) saved, checked field by field; older layouts converted."""
        need(state, cls.EPOCH_KEY, owner)  # a dict, with at least the key every layout has
        if cls.VERSION_KEY not in state:
            state = _from_older_layout(state, owner)
        version = state[cls.VERSION_KEY]
        if version != cls.VERSION:
            raise ResumeStateError(f"{owner} resume state has version {_shown(version)}; this fluxfs reads version "
                                   f"{cls.VERSION} (and the older layout without a version)")
        extra = sorted(map(str, set(state) - set(cls.KEYS)))
        if extra:
            raise ResumeStateError(f"{owner} resume state has unknown keys {extra}: not a state {owner} saved")
        get = {k: need(state, k, owner) for k in cls.KEYS}
        if get[cls.DATASET_KEY] != owner:
            raise ResumeStateError(f"{owner} resume state: it was saved by {_shown(get[cls.DATASET_KEY])}, not by "
                                   f"{owner}")
        if not isinstance(get[cls.SHUFFLE_KEY], bool):
            raise bad(owner, cls.SHUFFLE_KEY, "True or False", get[cls.SHUFFLE_KEY])
        if get[cls.LISTING_KEY] is not None and not isinstance(get[cls.LISTING_KEY], str):
            raise bad(owner, cls.LISTING_KEY, "a digest string or None", get[cls.LISTING_KEY])
        split = get[cls.SPLIT_KEY]
        if split is not None and not (isinstance(split, (list, tuple)) and len(split) == 2 and all(map(is_int, split))
                                      and split[1] >= 1 and 0 <= split[0] < split[1]):
            raise bad(owner, cls.SPLIT_KEY, "None or [index, count] with 0 <= index < count", split)
        value = get[cls.CURSOR_KEY]
        if not (isinstance(value, (list, tuple)) and len(value) == 2 and all(is_int(x) and x >= 0 for x in value)):
            raise bad(owner, cls.CURSOR_KEY, "[slot position, item] (integers >= 0)", value)
        cursor = (int(value[0]), int(value[1]))
        buffer = check_int(owner, cls.BUFFER_KEY, get[cls.BUFFER_KEY])
        buffered = _pairs(owner, cls.BUFFERED_KEY, get[cls.BUFFERED_KEY], "[slot, item] pairs")
        if len(buffered) > buffer:  # type: ignore[operator]
            raise bad(owner, cls.BUFFERED_KEY, f"at most shuffle_buffer={buffer} samples", get[cls.BUFFERED_KEY])
        rng = get[cls.RNG_KEY]
        if rng is not None:
            try:
                np.random.default_rng().bit_generator.state = rng
            except (TypeError, ValueError, KeyError) as e:
                raise bad(owner, cls.RNG_KEY, f"None or a numpy PCG64 generator state ({e})", rng) from None
        out = cls(owner, check_int(owner, cls.EPOCH_KEY, get[cls.EPOCH_KEY]),  # type: ignore[arg-type]
                  check_int(owner, cls.SEED_KEY, get[cls.SEED_KEY], lo=None),  # type: ignore[arg-type]
                  get[cls.SHUFFLE_KEY], buffer, check_int(owner, cls.LISTED_KEY, get[cls.LISTED_KEY]),  # type: ignore
                  get[cls.LISTING_KEY], None if split is None else (int(split[0]), int(split[1])),
                  check_int(owner, cls.PLANNED_KEY, get[cls.PLANNED_KEY], lo=1, optional=True),
                  _runs(owner, cls.RUNS_KEY, get[cls.RUNS_KEY]), cursor, tuple(buffered), rng,
                  check_int(owner, cls.RESUMES_KEY, get[cls.RESUMES_KEY]))  # type: ignore[arg-type]
        if out.split is not None and out.planned is None:
            raise bad(owner, cls.PLANNED_KEY, "the reader count the epoch was planned for (an integer >= 1) once "
                      "'split' is set", None)
        return out

    def runs_of(self, slots: Callable[[int], int]) -> list[Run]:
        """The reader's share: its runs after an elastic resume, else its fresh split of `slots(planned)` slots."""
        if self.runs is not None:
            return list(self.runs)
        index, count = self.split  # type: ignore[misc]
        return reader_runs(index, count, slots(self.planned))  # type: ignore[arg-type]

    def check_fits(self, slots: Callable[[int], int], items: bool) -> None:
        """Refuse runs, cursor and buffered samples outside this epoch's slots (`items`: slots hold several)."""
        if self.split is None:
            return
        owner, n = self.dataset, slots(self.planned)  # type: ignore[arg-type]
        if self.runs is not None and any(r.stop > n or r.start >= n for r in self.runs):
            raise bad(owner, self.RUNS_KEY, f"runs of slots 0..{n - 1} (the epoch has {n})",
                      [r.to_list() for r in self.runs])
        length = sum(len(r) for r in self.runs_of(slots))
        pos, item = self.cursor
        if pos > length or (not items and item != 0) or (pos == length and item != 0):
            expected = (f"[slot position in 0..{length}, item >= 0]" if items else f"[position in 0..{length}, 0]")
            raise bad(owner, self.CURSOR_KEY, f"{expected} (reader {self.split[0]} of {self.split[1]} has "
                      f"{length} slots)", list(self.cursor))
        if any(slot >= n for slot, _ in self.buffered):
            raise bad(owner, self.BUFFERED_KEY, f"[slot, item] pairs with slot < {n}", [list(b) for b in self.buffered])

    def check_matches(self, mine: "ReaderState", what: str) -> None:
        """Refuse a state saved by a dataset built otherwise (seed, shuffle, buffer, listing)."""
        theirs = (self.seed, self.shuffle, self.shuffle_buffer)
        if theirs != (mine.seed, mine.shuffle, mine.shuffle_buffer):
            raise ResumeStateError(f"{mine.dataset}: state was saved with (seed, shuffle, shuffle_buffer) = {theirs};"
                                   f" this dataset has {(mine.seed, mine.shuffle, mine.shuffle_buffer)}")
        if self.listed != mine.listed:
            raise ResumeStateError(f"{mine.dataset}: state was saved over {self.listed} {what}; the dataset now has "
                                   f"{mine.listed}")
        if self.listing is not None and self.listing != mine.listing:
            raise ResumeStateError(f"{mine.dataset}: state was saved over another listing of {self.listed} {what} "
                                   f"(names digest {self.listing}; this dataset's is {mine.listing})")


def load(state: Any, mine: ReaderState, what: str, slots: Callable[[int], int],
         items: bool) -> tuple[tuple[ReaderState, ...], bool]:
    """(the reader states in `state`, whether it is gathered): one reader's, or ``{"readers": [...]}``, checked.

    `what` names the listed things ("objects", "shards"), `slots(planned)` is the epoch's slot count and
    `items` whether a slot holds several items (the cursor's second number).
    """
    owner = mine.dataset
    gathered = isinstance(state, Mapping) and ReaderState.READERS_KEY in state
    if gathered:
        olds = state[ReaderState.READERS_KEY]
        if not isinstance(olds, (list, tuple)) or not olds:
            raise bad(owner, ReaderState.READERS_KEY, "a non-empty list of reader states", olds)
        states = tuple(ReaderState.from_dict(s, owner) for s in olds)
    else:
        states = (ReaderState.from_dict(state, owner),)
    for s in states:
        s.check_matches(mine, what)
        s.check_fits(slots, items)
    epochs = {s.epoch for s in states}
    if len(epochs) != 1:
        raise ResumeStateError(f"{owner}: reader states come from different epochs {sorted(epochs)}")
    return states, gathered


def plan(loaded: Optional[Sequence[ReaderState]], gathered: bool, fresh: ReaderState,
         slots: Callable[[int], int], even: Optional[Callable[[list[Run], int, int], list[Run]]] = None
         ) -> ReaderState:
    """This reader's state at the start of iteration: `fresh`, the restored one, or its share of a gathered one.

    `even(runs, reader, readers)`: the reader's equal share of `runs` (`epochs.even_share`), when every reader
    must get the same number of items; without it a gathered state's rest is dealt slot by slot (`share`).
    """
    if not loaded or (not gathered and loaded[0].split is None):
        return fresh
    index, count = fresh.split  # type: ignore[misc]
    if not gathered:
        state = loaded[0]
        if state.split != fresh.split:
            old_index, old_count = state.split  # type: ignore[misc]
            raise ResumeStateError(
                f"{fresh.dataset}: state was saved by reader {old_index} of {old_count} (rank x "
                f"DataLoader worker); this is reader {index} of {count}. To resume on another world size or "
                f"num_workers, give every old reader's state: ds.load_state_dict({{'readers': "
                f"reader_states(*old_loader_states)}}) and do not load the new loader's state")
        return state
    check_complete([s.split for s in loaded])
    planned = {s.planned for s in loaded}
    if len(planned) != 1:
        raise ResumeStateError(f"{fresh.dataset}: reader states were planned for different reader counts "
                               f"{sorted(planned)}")  # type: ignore[type-var]
    left: list[Run] = []
    for s in sorted(loaded, key=lambda s: s.split):  # type: ignore[arg-type,return-value]
        left += [Run(slot, slot + 1, 1, item, 1) for slot, item in s.buffered]
        left += remaining(s.runs_of(slots), *s.cursor)
    mine = even(left, index, count) if even is not None else share(left, index, count)
    return replace(fresh, planned=planned.pop(), runs=tuple(mine),
                   resumes=1 + max(s.resumes for s in loaded))


def _from_older_layout(state: Mapping, owner: str) -> dict:
    """A state saved before `ReaderState` (each dataset had its own keys), in today's layout."""
    new = {ReaderState.VERSION_KEY: ReaderState.VERSION, ReaderState.DATASET_KEY: owner,
           ReaderState.LISTING_KEY: None, ReaderState.RNG_KEY: None, ReaderState.RESUMES_KEY: 0,
           ReaderState.BUFFERED_KEY: []}
    for key in ("epoch", "seed", "shuffle", "planned_readers", "runs"):
        if key in state:
            new[key] = state[key]
    if "num_objects" in state and owner == "FluxIterableDataset":  # keys then: shard, position
        split, planned = need(state, "shard", owner), state.get("planned_readers")
        new.update({ReaderState.LISTED_KEY: state["num_objects"], ReaderState.BUFFER_KEY: 0,
                    ReaderState.SPLIT_KEY: split, ReaderState.CURSOR_KEY: [need(state, "position", owner), 0],
                    ReaderState.PLANNED_KEY: planned or (split[1] if isinstance(split, list) and len(split) == 2
                                                         else None),
                    ReaderState.RUNS_KEY: state.get("runs")})
    elif "num_shards" in state and owner == "FluxShardDataset":  # keys then: reader, cursor (None: not started)
        started = need(state, "cursor", owner) is not None
        new.update({ReaderState.LISTED_KEY: state["num_shards"], ReaderState.BUFFER_KEY: state.get("shuffle_buffer"),
                    ReaderState.SPLIT_KEY: need(state, "reader", owner) if started else None,
                    ReaderState.CURSOR_KEY: state["cursor"] if started else [0, 0],
                    ReaderState.PLANNED_KEY: state.get("planned_readers"), ReaderState.RUNS_KEY: state.get("runs"),
                    ReaderState.BUFFERED_KEY: state.get("buffered", []), ReaderState.RNG_KEY: state.get("rng"),
                    ReaderState.RESUMES_KEY: state.get("resumes", 0)})
    else:
        raise ResumeStateError(f"{owner} resume state has no {ReaderState.VERSION_KEY!r} key and is not the older "
                               f"layout of {owner} either (keys {sorted(map(str, state))}): not a state {owner} saved")
    return new
