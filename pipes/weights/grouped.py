"""Safetensors objects loaded once per torch.distributed group: each rank reads ~1/N of the bytes.

Rank 0 reads the index and the headers and sends them (a few KiB per shard); every rank then lays the
same tensors out, reads its contiguous 1/N of their bytes (`pipes.distributed.plan`) with the usual
ranged reads, and each chunk of a rank's share goes to the others as soon as it is read
(`pipes.distributed.broadcast.share`).
Tensors a `slices=` function cuts are rank-specific: each rank reads its own, alone.
Before anything is read the ranks compare what they asked for (`request`: URL, tensors=, endpoint):
a rank asking for another model raises on every rank instead of receiving rank 0's tensors.
"""
from __future__ import annotations

import asyncio
import hashlib
from typing import Any, Callable, Optional, Sequence

import torch

from fluxfs import FluxFileSystem
from fluxfs import support
from fluxfs.support import Chunked, crc32c, gather_all, submit

from fluxfs.errors import ObjectChanged

from ..distributed.group import Group
from ..distributed.broadcast import rounds, share
from ..distributed.plan import split_bytes
from ..distributed.requests import UNCOMPARED, ranks_phrase
from .cached import keep, read_options, whole
from .objects import Opened, byte_view, empty_like, fill, load_tensors, select, to_device

Opening = Callable[[], Sequence[tuple[Opened, Optional[list[str]]]]]


def compact(opened: Opened) -> Opened:
    """`opened` with only its header's bytes kept: what rank 0 sends the others."""
    head = bytes(opened.head.slice(0, opened.header.data_start))
    return Opened(opened.path, opened.where, opened.header, opened.generation, Chunked([head]),
                  crc32c(head), opened.crc32c)


def request(fs: FluxFileSystem, url: str, tensors: Any = None) -> dict[str, Any]:
    """What this rank asks for, as the ranks compare it: the URL, the tensors= names (a function of names
    is checked by what it chose instead) and the endpoint read through."""
    names = UNCOMPARED if callable(tensors) else None if tensors is None else \
        tuple(sorted([tensors] if isinstance(tensors, str) else tensors))
    return {"the URL": url, "tensors=": names, "endpoint": str(fs._location).rstrip("/")}


def _spell_tensors(names: Any) -> str:
    if names is None:
        return "every tensor"
    shown = ", ".join(map(repr, names[:3])) + (", ..." if len(names) > 3 else "")
    return f"{len(names)} tensor{'s' if len(names) != 1 else ''} ({shown})"


SPELL = {"the URL": str, "tensors=": _spell_tensors}


def _same_storage(fs: FluxFileSystem, group: Group, asked: list[dict[str, Any]], objects: list) -> None:
    """Ranks may read through different endpoints (proxies of one storage), but each must find the
    generations rank 0 opened: otherwise every rank is told which endpoints differ, before any read."""
    endpoints = [a["endpoint"] for a in asked]
    if all(e == endpoints[0] for e in endpoints):
        return
    error: Optional[BaseException] = None
    if endpoints[group.rank] != endpoints[0]:
        for opened, _ in objects:
            try:
                # one byte: from the node's cache where it holds the object (of this store), never a fill for it
                support.run(fs, fs._read_ranges, opened.path, [(0, 1)], generation=opened.generation, max_gap=0,
                            **read_options(fs, opened))
            except (ObjectChanged, FileNotFoundError) as exc:
                others = [r for r, e in enumerate(endpoints) if e == endpoints[group.rank]]
                why = "another generation" if isinstance(exc, ObjectChanged) else "no such object"
                error = ValueError(
                    f"{group.where}: {ranks_phrase(others)} read{'s' if len(others) == 1 else ''} through endpoint "
                    f"{endpoints[group.rank]}, rank 0 through {endpoints[0]}, and they do not serve the same "
                    f"objects: rank 0 opened flux://{opened.path} at generation {opened.generation}, which "
                    f"{endpoints[group.rank]} does not have ({why}). "
                    "Every rank of the group must read the same storage (endpoint_url / STORAGE_EMULATOR_HOST)")
                break
            except Exception as exc:  # raised on every rank by the agree below (none left waiting)
                error = exc
                break
    group.agree(None, error, "endpoints")


def load_grouped(fs: FluxFileSystem, group: Group, opening: Opening, concurrency: int,
                 slices: Optional[Callable[[str, tuple], Any]], device: torch.device,
                 choose: Callable[[str], bool] = lambda name: True,
                 asking: Optional[dict[str, Any]] = None) -> dict[str, torch.Tensor]:
    """The tensors `opening()` (run on rank 0: [(opened object, names or None for all)]) names that this
    rank's `choose` takes, on every rank. `asking` (`request(...)`) is compared first: a ValueError on every
    rank naming which ranks asked for what when they differ (or when their tensors or cuts differ)."""
    asked = group.agree_request(asking or {}, SPELL, loose=("endpoint",))
    objects = group.first(lambda: [(compact(o), names) for o, names in opening()])
    if asking is not None:
        _same_storage(fs, group, asked, objects)
    out: dict[str, torch.Tensor] = {}
    buffers: list[memoryview] = []
    located: list[tuple[int, int]] = []  # per shared buffer: (object, offset in it)
    alone: list[tuple[Opened, list[str]]] = []
    shared: list[dict[str, torch.Tensor]] = [{} for _ in objects]  # per object: its tensors read whole
    for k, (opened, names) in enumerate(objects):
        cut = []
        for t in select(opened, [n for n in (opened.header.tensors if names is None else names) if choose(n)]):
            if slices is not None and slices(t.name, t.shape) is not None:
                cut.append(t.name)
                out[t.name] = None  # type: ignore[assignment]  (placed now: file order kept)
                continue
            out[t.name] = shared[k][t.name] = empty_like(t)
            buffers.append(byte_view(out[t.name]))
            located.append((k, t.start))
        if cut:
            alone.append((opened, cut))
    # With cache_dir: a whole object the node's cache lacks is read from storage (no fill), filled from memory after.
    how = [read_options(fs, o) if whole(o, shared[k]) else {} for k, (o, _) in enumerate(objects)]
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
        await gather_all(fill(fs, objects[k][0], w, limit, **how[k]) for k, w in wants.items())

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
            except Exception as exc:  # raised on every rank by the agree below
                errors.append(exc)
    finally:
        for f in pending + ([cut] if cut is not None else []):
            f.cancel()
    group.agree(None, errors[0] if errors else None, "reads")
    keep(fs, [o for o, _ in objects], how, shared, group.rank, group.size)
    return to_device(out, device)
