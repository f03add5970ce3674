"""Epoch plans: shares are disjoint and complete, and what remains after any stop re-shares exactly once."""
from __future__ import annotations

import itertools

import pytest

from fluxfs.pipes.data.epochs import Run, iter_slots, reader_runs, remaining, share

ITEMS = 3  # items per slot in these tests (a shard part of 3 samples)


def items(runs):
    """Every (slot, item) the runs cover, each slot having ITEMS items."""
    out = []
    for _, slot, skip, take in iter_slots(runs):
        stop = ITEMS if take is None else min(ITEMS, skip + take)
        out += [(slot, i) for i in range(skip, stop)]
    return out


@pytest.mark.parametrize("slots,readers", [(1, 1), (5, 3), (7, 4), (3, 6), (12, 1)])
def test_reader_runs_partition_the_epoch(slots, readers):
    got = sum((items(reader_runs(r, readers, slots)) for r in range(readers)), [])
    assert sorted(got) == [(s, i) for s in range(slots) for i in range(ITEMS)]


@pytest.mark.parametrize("old,new", [(1, 3), (2, 2), (3, 1), (4, 3), (6, 5)])
def test_every_stop_then_any_new_layout_reads_the_rest_exactly_once(old, new):
    slots = 9
    for stops in itertools.product(range(0, 3 * ITEMS + 1, 2), repeat=min(old, 2)):
        done, left = [], []
        for r in range(old):
            runs = reader_runs(r, old, slots)
            mine = items(runs)
            n = stops[r] if r < len(stops) else 0
            n = min(n, len(mine))
            done += mine[:n]
            pos, item = (len(runs and list(iter_slots(runs))), 0) if n == len(mine) else divmod_pos(runs, n)
            left += remaining(runs, pos, item)
        shares = [items(share(left, j, new)) for j in range(new)]
        assert sorted(done + sum(shares, [])) == [(s, i) for s in range(slots) for i in range(ITEMS)]


def divmod_pos(runs, n):
    """(slot position, item) of the reader after it has read n items."""
    return n // ITEMS, n % ITEMS


def test_share_keeps_partial_slots():
    left = [Run(4, 5, 1, 2, None), Run(7, 20, 3), Run(1, 2, 1, 0, 1)]
    assert items(share(left, 0, 1)) == items(left)
    assert sorted(items(share(left, 0, 2)) + items(share(left, 1, 2))) == sorted(items(left))
