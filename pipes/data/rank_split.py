"""`RankSplit`: a torchdata Node passing on this rank's share of its source, the same count on every rank.

Every rank runs the same source (`ListObjects` of a prefix, sorted; an `IterableWrapper` of URLs) and keeps
every world_size-th item from its rank's, as DistributedSampler deals. Counts are made equal without knowing
the total in advance: padded (the default) by repeating the source's first items once it ends, or dropped
(``drop_uneven=True``) by holding each kept item until its round of world_size items is complete (a round the
source does not complete is dropped). ``drop_uneven=None`` does neither.
"""
from __future__ import annotations

from typing import Any, Dict, Optional, TypeVar

from torchdata.nodes.base_node import BaseNode

from .resume import bad, check_int, need
from .splits import check_drop_uneven, distributed_rank

T = TypeVar("T")


class RankSplit(BaseNode[T]):
    """This rank's items of `source`: positions rank, rank + world_size, ... of its sequence, equal counts.

    Args:
        source: a node yielding the same items in the same order on every rank.
        rank, world_size: from torch.distributed (when initialised) unless given.
        drop_uneven: False (pad: the last ranks repeat the source's first items), True (drop the last
            incomplete round) or None (neither: counts may differ by one).
    """

    SOURCE_KEY = "source"  # the source's state after the items seen
    SEEN_KEY = "seen"  # items taken from the source
    HELD_KEY = "held"  # drop_uneven=True: this rank's item of the current round, not handed out yet
    FIRST_KEY = "first"  # pad: the source's first world_size items (what padding repeats)
    PADDED_KEY = "padded"  # pad: whether this rank's padding item was handed out

    def __init__(self, source: BaseNode[T], *, rank: Optional[int] = None, world_size: Optional[int] = None,
                 drop_uneven: Optional[bool] = False):
        super().__init__()
        self.source = source
        self.rank, self.world_size = distributed_rank(rank, world_size)
        self.drop_uneven = check_drop_uneven(drop_uneven, type(self).__name__)

    def reset(self, initial_state: Optional[Dict[str, Any]] = None):
        super().reset(initial_state)
        self._seen, self._held, self._padded, self._ended = 0, None, False, False
        self._first: list = []
        if initial_state is None:
            self.source.reset()
            return
        owner = type(self).__name__
        self.source.reset(need(initial_state, self.SOURCE_KEY, owner))
        self._seen = check_int(owner, self.SEEN_KEY, need(initial_state, self.SEEN_KEY, owner))  # type: ignore
        held, first = need(initial_state, self.HELD_KEY, owner), need(initial_state, self.FIRST_KEY, owner)
        if not isinstance(held, list) or len(held) > 1:
            raise bad(owner, self.HELD_KEY, "a list of at most one item", held)
        if not isinstance(first, list) or len(first) != min(self._seen, self.world_size):
            raise bad(owner, self.FIRST_KEY, f"the source's first {min(self._seen, self.world_size)} items", first)
        padded = need(initial_state, self.PADDED_KEY, owner)
        if not isinstance(padded, bool):
            raise bad(owner, self.PADDED_KEY, "True or False", padded)
        self._held, self._first, self._padded = ((held[0],) if held else None), first, padded

    def next(self) -> T:
        world = self.world_size
        while not self._ended:
            try:
                item = next(self.source)
            except StopIteration:
                self._ended = True
                break
            p, self._seen = self._seen, self._seen + 1
            if p < world:
                self._first.append(item)
            if self.drop_uneven is True:
                if p % world == self.rank:
                    self._held = (item,)
                if p % world == world - 1 and self._held is not None:  # its round is complete
                    (out,), self._held = self._held, None
                    return out
            elif p % world == self.rank:
                return item
        self._held = None  # drop: an incomplete round
        return self._pad()

    def _pad(self) -> T:
        """After the source ends: this rank's padding item, if it got one item fewer than the first ranks."""
        n, world = self._seen, self.world_size
        if self.drop_uneven is not False or self._padded or not n or n % world == 0 or self.rank < n % world:
            raise StopIteration()
        self._padded = True
        return self._first[((self.rank - n) % world) % n]

    def get_state(self) -> Dict[str, Any]:
        return {self.SOURCE_KEY: self.source.state_dict(), self.SEEN_KEY: self._seen,
                self.HELD_KEY: [] if self._held is None else [self._held[0]], self.FIRST_KEY: list(self._first),
                self.PADDED_KEY: self._padded}
