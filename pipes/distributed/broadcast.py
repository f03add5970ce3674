"""Each owner's bytes to every rank of a group: coalesced into flat uint8 buffers, one broadcast per chunk.

The plan (`plan.split_bytes`) is the same on every rank, so each knows which buffers a broadcast fills
without being told: the owner packs its pieces into the flat buffer, the others unpack it into theirs.
One collective moves up to CHUNK bytes, whatever the number of tensors in it.
"""
from __future__ import annotations

from typing import Sequence

import torch

from .group import Group
from .plan import Piece, chunks

# Bytes per broadcast: large enough that a collective's fixed cost (~0.1 ms with gloo) vanishes,
# small enough that the buffer (held twice on an NCCL group: host and device) stays a small cost.
CHUNK = 64 * 2**20


def share(group: Group, parts: Sequence[Sequence[Piece]], buffers: Sequence[memoryview],
          chunk: int = CHUNK) -> None:
    """Broadcast rank r's `parts[r]` (pieces of `buffers`, already filled on rank r) to every rank."""
    import torch.distributed as dist

    largest = max((sum(p.length for p in c) for owned in parts for c in chunks(owned, chunk)), default=0)
    flat = torch.empty(largest, dtype=torch.uint8)
    view = memoryview(flat.numpy()).cast("B") if largest else memoryview(bytearray())
    for src, owned in enumerate(parts):
        for pieces in chunks(owned, chunk):
            n = sum(p.length for p in pieces)
            if group.rank == src:
                _copy(pieces, buffers, view, pack=True)
            on_wire = flat[:n] if group.device.type == "cpu" else flat[:n].to(group.device)
            dist.broadcast(on_wire, src=group.global_rank(src), group=group.pg)
            if group.rank != src:
                if on_wire.device.type != "cpu":
                    flat[:n].copy_(on_wire)
                _copy(pieces, buffers, view, pack=False)


def _copy(pieces: Sequence[Piece], buffers: Sequence[memoryview], flat: memoryview, pack: bool) -> None:
    at = 0
    for p in pieces:
        buf = buffers[p.item]
        if pack:
            flat[at:at + p.length] = buf[p.offset:p.offset + p.length]
        else:
            buf[p.offset:p.offset + p.length] = flat[at:at + p.length]
        at += p.length
