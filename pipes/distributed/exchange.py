"""Every rank's share to every other rank by tagged point-to-point sends, straight between the tensors.

Used on CPU groups (gloo, MPI). Every rank derives the same messages from the plan: a piece of at least
`DIRECT` bytes is its own message, sent from and received into the tensor's memory (no copy on either
side); a chunk's smaller pieces travel packed in one message. Each rank posts a receive for every
message of the others up front, then sends each chunk of its share as soon as its reads end, in the
order they end: no rank waits for another's reads, and the exchange runs alongside the reads (on gloo
the transfers run on its own threads, outside the GIL). Broadcast rounds would wait for chunk i of every
rank in turn and copy each chunk twice (measured in docs/scaling.md).
"""
from __future__ import annotations

import concurrent.futures
from typing import Optional, Sequence

import torch

from .group import Group
from .plan import Piece

# Below this a piece rides packed with its chunk's other small pieces: one message per tiny tensor (a
# norm, a bias) would cost more in per-message overhead than copying it twice.
DIRECT = 256 * 2**10


def messages(chunks: Sequence[Sequence[Piece]], direct: int = DIRECT) -> list[tuple[int, list[Piece], bool]]:
    """(chunk index, pieces, packed) per message of one rank's chunks; the tag of a message is its index."""
    out: list[tuple[int, list[Piece], bool]] = []
    for i, chunk in enumerate(chunks):
        small = [p for p in chunk if p.length < direct]
        out += [(i, [p], False) for p in chunk if p.length >= direct]
        if small:
            out.append((i, small, True))
    return out


def _view(buffers: Sequence[memoryview], p: Piece) -> torch.Tensor:
    return torch.frombuffer(buffers[p.item][p.offset:p.offset + p.length], dtype=torch.uint8)


def _packed(pieces: Sequence[Piece], buffers: Sequence[memoryview]) -> torch.Tensor:
    flat = torch.empty(sum(p.length for p in pieces), dtype=torch.uint8)
    view, at = memoryview(flat.numpy()).cast("B"), 0
    for p in pieces:
        view[at:at + p.length] = buffers[p.item][p.offset:p.offset + p.length]
        at += p.length
    return flat


def _unpack(flat: torch.Tensor, pieces: Sequence[Piece], buffers: Sequence[memoryview]) -> None:
    view, at = memoryview(flat.numpy()).cast("B"), 0
    for p in pieces:
        buffers[p.item][p.offset:p.offset + p.length] = view[at:at + p.length]
        at += p.length


def exchange(group: Group, plan: Sequence[Sequence[Sequence[Piece]]], buffers: Sequence[memoryview],
             pending: Sequence["concurrent.futures.Future"]) -> Optional[BaseException]:
    """Rank r's chunks `plan[r]` (pieces of `buffers`; this rank's filled once `pending[i]` is done for its
    chunk i) copied into the same pieces on every other rank. Returns this rank's first read error: its
    chunks are sent all the same (the others are waiting for them), the caller raises it on every rank."""
    import torch.distributed as dist

    me, pg = group.rank, group.pg
    msgs = [messages(chunks) for chunks in plan]
    received: list[tuple[object, Optional[torch.Tensor], list[Piece]]] = []
    for src, ms in enumerate(msgs):
        if src == me:
            continue
        for tag, (_, pieces, packed) in enumerate(ms):
            into = (torch.empty(sum(p.length for p in pieces), dtype=torch.uint8) if packed
                    else _view(buffers, pieces[0]))
            received.append((dist.irecv(into, src=group.global_rank(src), group=pg, tag=tag),
                             into if packed else None, pieces))
    by_chunk: dict[int, list[tuple[int, list[Piece], bool]]] = {}
    for tag, (i, pieces, packed) in enumerate(msgs[me]):
        by_chunk.setdefault(i, []).append((tag, pieces, packed))
    sent: list = []

    def send(i: int) -> None:
        for tag, pieces, packed in by_chunk.pop(i, []):
            out = _packed(pieces, buffers) if packed else _view(buffers, pieces[0])
            sent.extend(dist.isend(out, dst=group.global_rank(dst), group=pg, tag=tag)
                        for dst in range(group.size) if dst != me)

    error: Optional[BaseException] = None
    index = {f: i for i, f in enumerate(pending)}
    for f in concurrent.futures.as_completed(pending):
        try:
            f.result()
        except Exception as exc:  # returned, raised on every rank by the caller
            error = exc
            break
        send(index[f])
    for i in sorted(by_chunk):  # after a failure, the rest at once: garbage, but the others wait for them
        send(i)
    for work, flat, pieces in received:
        work.wait()
        if flat is not None:
            _unpack(flat, pieces, buffers)
    for work in sent:
        work.wait()
    return error
