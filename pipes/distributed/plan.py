"""Which rank reads which bytes (pure): items laid end to end, cut into equal contiguous shares.

Every rank computes the same plan from the same item lengths, so no plan is sent: rank r reads the
bytes [total * r // n, total * (r + 1) // n) of the items' concatenation (a cut may fall inside an
item: a large tensor is read by several ranks), then owns broadcasting them.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Sequence


@dataclass(frozen=True)
class Piece:
    """Bytes [offset, offset + length) of item `item`."""

    item: int
    offset: int
    length: int


def split_bytes(lengths: Sequence[int], parts: int) -> list[list[Piece]]:
    """`parts` lists of pieces, in item order, each holding total // parts bytes (or one more)."""
    if parts < 1:
        raise ValueError(f"parts must be at least 1, not {parts}")
    total = sum(lengths)
    bounds = [total * r // parts for r in range(parts + 1)]
    out: list[list[Piece]] = [[] for _ in range(parts)]
    start, r = 0, 0
    for i, n in enumerate(lengths):
        at, end = start, start + n
        while at < end:
            while bounds[r + 1] <= at:
                r += 1
            stop = min(end, bounds[r + 1])
            out[r].append(Piece(i, at - start, stop - at))
            at = stop
        start = end
    return out


def chunks(pieces: Iterable[Piece], limit: int) -> list[list[Piece]]:
    """Consecutive pieces grouped into chunks of at most `limit` bytes (a longer piece is cut)."""
    out: list[list[Piece]] = []
    room = 0
    for p in pieces:
        offset, left = p.offset, p.length
        while left:
            if room == 0:
                out.append([])
                room = limit
            take = min(left, room)
            out[-1].append(Piece(p.item, offset, take))
            offset, left, room = offset + take, left - take, room - take
    return out
