"""`load_model_dir`: a Hugging Face model directory of safetensors shards loaded into one state dict.

The layout: ``model.safetensors.index.json`` (its ``weight_map`` names each tensor's shard) and
``model-0000k-of-0000n.safetensors``; a directory holding a single ``model.safetensors`` works too.
Every shard's header is read at once, then every shard's bytes in parallel under one bound on
requests in flight, each received chunk copied once into its tensor.
"""
from __future__ import annotations

import asyncio
from typing import Any, Callable, Iterable, Mapping, Optional, Union

import torch

from fluxfs import FluxFileSystem, jsontext, support
from fluxfs.support import gather_all

from .header import SafetensorsError
from ..distributed import NO_GROUP
from ..distributed.group import resolve_group
from .cached import open_unfilled
from .grouped import load_grouped, request
from .objects import Opened, filesystem, load_tensors, open_object, select, to_device
from .staged import load_staged

INDEX = "model.safetensors.index.json"
SINGLE = "model.safetensors"
# Ranged GETs in flight over all shards: on the cloud profile (100 MB/s per request) 16 already
# saturate what a 2-core client receives.
DEFAULT_CONCURRENCY = 16

Selector = Union[None, Iterable[str], Callable[[str], bool]]


def _chooser(tensors: Selector) -> Callable[[str], bool]:
    if tensors is None:
        return lambda name: True
    if callable(tensors):
        return tensors
    wanted = set([tensors] if isinstance(tensors, str) else tensors)
    return wanted.__contains__


async def _weight_map(fs: FluxFileSystem, root: str, where: str) -> dict[str, str]:
    """{tensor name: shard file name} from the index, or every tensor of model.safetensors."""
    try:
        raw = await fs._cat_file(f"{root}/{INDEX}")
    except FileNotFoundError:
        if await fs._exists(f"{root}/{SINGLE}"):
            return {}
        raise FileNotFoundError(f"{where}: neither {INDEX} nor {SINGLE} in {root}") from None
    try:
        index = jsontext.loads(raw)
        weight_map = index["weight_map"]
        if not isinstance(weight_map, dict) or not all(isinstance(v, str) for v in weight_map.values()):
            raise TypeError("weight_map must map tensor names to file names")
    except (ValueError, KeyError, TypeError) as exc:
        raise SafetensorsError(f"{where}: {root}/{INDEX} is not a safetensors index ({exc})") from None
    return weight_map


async def _open_shards(fs: FluxFileSystem, root: str, choose: Callable[[str], bool], where: str,
                       opener: Callable[..., Any] = open_object) -> list[tuple[Opened, list[str]]]:
    """Every shard holding a chosen tensor, its header read and checked (by `opener`), with the names it holds."""
    weight_map = await _weight_map(fs, root, where)
    shards: dict[str, list[str]] = {}
    for name, shard in weight_map.items():
        if choose(name):
            shards.setdefault(shard, []).append(name)
    if not weight_map:
        shards = {SINGLE: []}

    async def one(shard: str, names: list[str]) -> tuple[Opened, list[str]]:
        path = f"{root}/{shard}"
        try:
            opened = await opener(fs, path, f"flux://{path}")
        except FileNotFoundError:
            raise FileNotFoundError(f"{where}: shard {shard}, named in {INDEX}, is missing from {root}") from None
        if not weight_map:
            names = [n for n in opened.header.tensors if choose(n)]
        missing = sorted(set(names) - set(opened.header.tensors))
        if missing:
            raise SafetensorsError(f"{where}: {INDEX} places {', '.join(map(repr, missing[:5]))} in {shard}, "
                                   "which does not hold them")
        return opened, names

    return await gather_all(one(s, n) for s, n in shards.items())


async def _load(fs: FluxFileSystem, root: str, choose: Callable[[str], bool], concurrency: int,
                where: str, slices: Optional[Callable[[str, tuple], Any]], device: torch.device
                ) -> dict[str, torch.Tensor]:
    limit = asyncio.Semaphore(concurrency)

    async def one(opened: Opened, names: list[str]) -> dict[str, torch.Tensor]:
        if device.type != "cpu" and slices is None:
            return await load_staged(fs, opened, select(opened, names), device, limit)
        return to_device(await load_tensors(fs, opened, names, limit, slices), device)

    parts = await gather_all(one(o, n) for o, n in await _open_shards(fs, root, choose, where))
    out: dict[str, torch.Tensor] = {}
    for part in parts:
        out.update(part)
    return out


def load_model_dir(url: str, device: Any = "cpu", *, tensors: Selector = None,
                   slices: Optional[Callable[[str, tuple], Any]] = None,
                   concurrency: int = DEFAULT_CONCURRENCY, fs: Optional[FluxFileSystem] = None,
                   group: Any = NO_GROUP, storage_options: Optional[Mapping[str, Any]] = None,
                   **options: Any) -> dict[str, torch.Tensor]:
    """All tensors of a sharded model directory (or only `tensors`: names, or a predicate on names) as one
    state dict; `model.load_state_dict(sd, assign=True)` then takes its tensors without another copy.

    `slices(name, shape)` -> an index (as for `get_slice`) or None loads part of each tensor, reading
    only its bytes: a tensor-parallel rank's share, e.g. ``lambda n, s: slice(0, s[0] // 2) if len(s) == 2 else None``.

    `group`: a torch.distributed ProcessGroup (None: the default group), every rank of which makes this call:
    each reads ~1/N of the bytes and the group's broadcasts bring every tensor to every rank
    (`pipes.distributed`; tensors `slices` cuts are read by each rank alone). Left out: this process loads alone.
    """
    if concurrency < 1:
        raise ValueError(f"load_model_dir: concurrency must be at least 1, not {concurrency}")
    if tensors is not None and not callable(tensors) and not isinstance(tensors, str):
        tensors = list(tensors)  # read twice below (a generator once)
    fs, root = filesystem(str(url).rstrip("/") + "/", fs, storage_options, options, "load_model_dir")
    where, root, choose = f"load_model_dir({url})", root.rstrip("/"), _chooser(tensors)
    grouped = resolve_group(group, where)
    if grouped is not None:
        # Rank 0 opens every shard; each rank chooses its tensors itself (the group checks they agree).
        return load_grouped(fs, grouped, lambda: support.run(fs, _open_shards, fs, root, _chooser(None), where,
                                                             open_unfilled),
                            concurrency, slices, torch.device(device), choose,
                            asking=request(fs, f"flux://{root}", tensors))
    return support.run(fs, _load, fs, root, choose, concurrency, where, slices, torch.device(device))
