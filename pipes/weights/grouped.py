"""Safetensors objects loaded once per torch.distributed group: each rank reads ~1/N of the bytes.

Rank 0 reads the index and the headers and sends them (a few KiB per shard); every rank then lays the
same tensors out, reads its contiguous 1/N of their bytes (`pipes.distributed.plan`) with the usual
ranged reads, and each chunk of a rank's share goes to the others as soon as it is read
(`pipes.distributed.broadcast.share`).
Tensors a `slices=` function cuts are rank-specific: each rank reads its own, alone.
"""
from __future__ import annotations

import asyncio
import hashlib
from typing import Any, Callable, Optional, Sequence

import google_crc32c
import torch

from fluxfs import FluxFileSystem
from fluxfs.support import Chunked, gather_all, submit

from ..distributed import Group
from ..distributed.broadcast import rounds, share
from ..distributed.plan import split_bytes
from .objects import Opened, byte_view, empty_like, fill, load_tensors, select, to_device

Opening = Callable[[], Sequence[tuple[Opened, Optional[list[str]]]]]


def compact(opened: Opened) -> Opened:
    """`opened` with only its header's bytes kept: what rank 0 sends the others."""
    head = bytes(opened.head.slice(0, opened.header.data_start))
    return Opened(opened.path, opened.where, opened.header, opened.generation, Chunked([head]),
                  google_crc32c.value(head))


def load_grouped(fs: FluxFileSystem, group: Group, opening: Opening, concurrency: int,
                 slices: Optional[Callable[[str, tuple], Any]], device: torch.device,
                 choose: Callable[[str], bool] = lambda name: True) -> dict[str, torch.Tensor]:
    """The tensors `opening()` (run on rank 0: [(opened object, names or None for all)]) names that this
    rank's `choose` takes, on every rank (a ValueError on every rank when ranks chose differently)."""
    objects = group.first(lambda: [(compact(o), names) for o, names in opening()])
    out: dict[str, torch.Tensor] = {}
    buffers: list[memoryview] = []
    located: list[tuple[int, int]] = []  # per shared buffer: (object, offset in it)
    alone: list[tuple[Opened, list[str]]] = []
    for k, (opened, names) in enumerate(objects):
        cut = []
        for t in select(opened, [n for n in (opened.header.tensors if names is None else names) if choose(n)]):
            if slices is not None and slices(t.name, t.shape) is not None:
                cut.append(t.name)
                out[t.name] = None  # type: ignore[assignment]  (placed now: file order kept)
                continue
            out[t.name] = empty_like(t)
            buffers.append(byte_view(out[t.name]))
            located.append((k, t.start))
        if cut:
            alone.append((opened, cut))
    parts = split_bytes([len(b) for b in buffers], group.size)
    plan = repr([(objects[k][0].path, start, len(b)) for (k, start), b in zip(located, buffers)]).encode()
    # Before any read: a rank asking for other tensors would send chunks the others do not expect.
    group.agree(hashlib.sha256(plan).hexdigest(), None, "tensors (names, tensors= or which slices= cut)")
    limit = asyncio.Semaphore(concurrency)

    async def read(pieces: list) -> None:
        wants: dict[int, list] = {}
        for p in pieces:
            k, start = located[p.item]
            wants.setdefault(k, []).append((start + p.offset, buffers[p.item][p.offset:p.offset + p.length]))
        await gather_all(fill(fs, objects[k][0], w, limit) for k, w in wants.items())

    async def read_alone() -> list:
        return await gather_all(load_tensors(fs, o, names, limit, slices) for o, names in alone)

    # Every chunk of this rank's share is read at once (under `concurrency`); each moves to the other ranks
    # as soon as its reads end, so later chunks arrive from storage while earlier ones move between ranks.
    mine = rounds(parts)[group.rank]
    pending = [submit(fs, read(c), "load_model_dir") for c in mine]
    cut = submit(fs, read_alone(), "load_model_dir") if alone else None
    errors: list[BaseException] = []
    try:
        failed = share(group, parts, buffers, pending)
        if failed is not None:
            errors.append(failed)
        if cut is not None and not errors:
            try:
                for part in cut.result():
                    out.update(part)
            except Exception as exc:  # noqa: BLE001 - raised on every rank by the agree below
                errors.append(exc)
    finally:
        for f in pending + ([cut] if cut is not None else []):
            f.cancel()
    group.agree(None, errors[0] if errors else None, "reads")
    return to_device(out, device)
