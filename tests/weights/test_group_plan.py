"""The byte plan of group loads (pure): equal contiguous shares covering every byte exactly once."""
from __future__ import annotations

import random

import pytest

from fluxfs.pipes.distributed.plan import chunks, split_bytes


@pytest.mark.parametrize("parts", [1, 2, 3, 4, 7])
def test_shares_are_equal_contiguous_and_cover_every_byte_once(parts):
    rng = random.Random(parts)
    lengths = [rng.choice([0, 1, 5, 4096, 10**6, 3 * 10**7]) for _ in range(40)]
    shares = split_bytes(lengths, parts)
    total = sum(lengths)
    assert [sum(p.length for p in s) for s in shares] == [total * (r + 1) // parts - total * r // parts
                                                          for r in range(parts)]
    covered = [(p.item, p.offset, p.length) for s in shares for p in s]
    at: dict = {}
    for item, offset, length in covered:  # in item order, each piece starting where the last ended
        assert length > 0 and offset == at.get(item, 0)
        at[item] = offset + length
    assert at == {i: n for i, n in enumerate(lengths) if n}
    for s in shares:
        for c in chunks(s, 2**20):
            assert 0 < sum(p.length for p in c) <= 2**20


def test_one_tensor_larger_than_a_share_is_cut_between_ranks():
    shares = split_bytes([100, 1000, 100], 3)
    assert [[(p.item, p.offset, p.length) for p in s] for s in shares] == [
        [(0, 0, 100), (1, 0, 300)], [(1, 300, 400)], [(1, 700, 300), (2, 0, 100)]]
