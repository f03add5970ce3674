"""Every rank's share to every other rank, chunk by chunk: point-to-point on CPU groups, broadcasts on CUDA.

The plan (`plan.split_bytes`: equal shares, ±1 byte) is the same on every rank, so each knows which of
its buffers a received chunk fills without being told. A CPU group (gloo, MPI) uses `exchange`: tagged
sends straight from and into the tensors, each chunk sent as soon as its reads end. An NCCL group
broadcasts round by round: round i, each rank in turn packs the i-th chunk of its share into one flat
CUDA buffer (once its reads end) and broadcasts it; the others unpack it into their buffers. (Broadcasts,
not an all-gather: gloo's all-gather moved 64 MiB between 2 ranks in 145 ms on loopback, its broadcasts
in 71 ms.)
"""
from __future__ import annotations

import concurrent.futures
from typing import Optional, Sequence

import torch

from .exchange import exchange
from .group import Group
from .plan import Piece, chunks

# Bytes per chunk (a send or a broadcast): a message's fixed cost (~0.1 ms with gloo) vanishes, and chunks
# small enough that the first is read from storage long before the last (the exchange overlaps the reads).
CHUNK = 16 * 2**20


def rounds(parts: Sequence[Sequence[Piece]], chunk: int = CHUNK) -> list[list[list[Piece]]]:
    """Each rank's share cut into its chunks (on NCCL, the i-th of every rank moves in round i)."""
    return [chunks(owned, chunk) for owned in parts]


def share(group: Group, parts: Sequence[Sequence[Piece]], buffers: Sequence[memoryview],
          pending: Sequence["concurrent.futures.Future"], chunk: int = CHUNK) -> Optional[BaseException]:
    """Every rank's `parts[r]` (pieces of `buffers`, filled on rank r once `pending[i]` is done for its
    chunk i of `rounds(parts, chunk)[r]`) copied into the same pieces of `buffers` on every other rank.
    Returns this rank's first read error (its chunks are sent all the same: the others wait for them)."""
    if group.device.type == "cpu":
        return exchange(group, rounds(parts, chunk), buffers, pending)
    return _broadcast(group, parts, buffers, pending, chunk)


def _broadcast(group: Group, parts: Sequence[Sequence[Piece]], buffers: Sequence[memoryview],
               pending: Sequence["concurrent.futures.Future"], chunk: int) -> Optional[BaseException]:
    import torch.distributed as dist

    plan = rounds(parts, chunk)
    count = max((len(p) for p in plan), default=0)
    widest = max((sum(x.length for x in c) for p in plan for c in p), default=0)
    flat = torch.empty(widest, dtype=torch.uint8)
    view = memoryview(flat.numpy()).cast("B") if widest else memoryview(bytearray())
    error: Optional[BaseException] = None
    for i in range(count):
        if i < len(pending) and error is None:
            try:
                pending[i].result()
            except Exception as exc:  # sent as garbage, raised on every rank by the caller
                error = exc
        for src, p in enumerate(plan):
            if i >= len(p):
                continue
            n = sum(x.length for x in p[i])
            if src == group.rank:
                _copy(p[i], buffers, view, pack=True)
            on_wire = flat[:n].to(group.device)
            dist.broadcast(on_wire, src=group.global_rank(src), group=group.pg)
            if src != group.rank:
                flat[:n].copy_(on_wire)
                _copy(p[i], buffers, view, pack=False)
    return error


def _copy(pieces: Sequence[Piece], buffers: Sequence[memoryview], flat: memoryview, pack: bool) -> None:
    at = 0
    for p in pieces:
        buf = buffers[p.item]
        if pack:
            flat[at:at + p.length] = buf[p.offset:p.offset + p.length]
        else:
            buf[p.offset:p.offset + p.length] = flat[at:at + p.length]
        at += p.length
