"""DCP items every rank of a group loads (replicated state) read from storage once per group, then shared.

Each rank's local plan carries who it is (`local_info`); the coordinator, which sees every rank's plan,
marks the storage items that every member of a share group reads (`mark_shared`) and cuts them into
windows, and sends that list back in each member's plan: every member gets the same list, so all agree
which bytes move and in which collectives. In `read_data` (which DCP runs on every rank) each member
reads its contiguous 1/N of each window's bytes and sends it to the others as it arrives
(`pipes.distributed.broadcast.share`); items only some ranks need are read by those ranks alone.
"""
from __future__ import annotations

import dataclasses
import socket
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Optional

import torch
import torch.utils.data

from fluxfs.support import Chunked, coalesce

from ..distributed import NO_GROUP
from ..distributed.group import Group, resolve_group
from ..distributed.broadcast import rounds, share
from ..distributed.plan import split_bytes

NODE = "node"
KEY = "fluxfs_share"  # the key of a plan's storage_data this module owns
Span = tuple[str, int, int]  # (relative path of the data file, offset, length): one storage item's bytes


def check_group(group: Any) -> Any:
    """`group=` of FluxStorageReader: "node", NO_GROUP, None (the default group) or a ProcessGroup."""
    if group is NO_GROUP or group is None or (isinstance(group, str) and group == NODE):
        return group
    if torch.distributed.is_available():
        import torch.distributed as dist

        if isinstance(group, dist.ProcessGroup):
            return group
    raise TypeError(f"FluxStorageReader: group= takes 'node' (the default), NO_GROUP, None (the default group) "
                    f"or a torch.distributed ProcessGroup, not {type(group).__name__} {group!r}")


def local_info(group: Any) -> tuple[Optional[Group], Optional[dict]]:
    """This rank's share group and what the coordinator needs to know of it; (None, None) when it loads alone.

    "node": the default group, when torch.distributed is initialised with more than one rank on a CPU
    (gloo) or NCCL backend, in a rank's main thread; whether every rank is on this host the coordinator
    checks (else nothing is shared). An explicit group is checked as `load_model_dir(group=)` checks it."""
    if group is NO_GROUP:
        return None, None
    if isinstance(group, str):
        if (not torch.distributed.is_available() or torch.utils.data.get_worker_info() is not None
                or threading.current_thread() is not threading.main_thread()):
            return None, None
        import torch.distributed as dist

        if not dist.is_initialized() or dist.get_world_size() < 2:
            return None, None
        backend = str(dist.get_backend()).lower()
        if not any(b in backend for b in ("gloo", "nccl")):
            return None, None
        found: Optional[Group] = Group(None, "FluxStorageReader")
    else:
        found = resolve_group(group, "FluxStorageReader")
    if found is None:
        return None, None
    members = tuple(found.global_rank(r) for r in range(found.size))
    return found, {"members": members, "rank": members[found.rank], "host": socket.gethostname(),
                   "node_only": isinstance(group, str)}


def with_info(plan: Any, info: Optional[dict]) -> Any:
    """`plan` carrying `info` to the coordinator (unchanged when there is none)."""
    return plan if info is None else dataclasses.replace(plan, storage_data={KEY: info})


def mark_shared(plans: list, span_of: Callable[[Any], Span], window: int) -> list:
    """The plans, each member of a share group told the windows of spans every member reads (coordinator)."""
    infos = [p.storage_data.get(KEY) if isinstance(p.storage_data, dict) else None for p in plans]
    groups: dict[tuple, list[int]] = {}
    for i, info in enumerate(infos):
        if info is not None:
            groups.setdefault(info["members"], []).append(i)
    told: dict[int, list] = {}
    for members, who in groups.items():
        ranks = sorted(infos[i]["rank"] for i in who)
        if ranks != sorted(members) or len(who) < 2:
            continue  # not every member is in this load (DCP's group is another one): nothing shared
        if infos[who[0]]["node_only"] and len({infos[i]["host"] for i in who}) != 1:
            continue  # "node" shares within one host only
        common = set.intersection(*({span_of(item) for item in plans[i].items} for i in who))
        if common:
            windows = cut_windows(sorted(common), window)
            for i in who:
                told[i] = windows
    return [dataclasses.replace(p, storage_data={KEY: told[i]} if i in told else None) for i, p in enumerate(plans)]


def cut_windows(spans: list[Span], window: int) -> list[list[Span]]:
    """Consecutive spans in groups of about `window` bytes (a bigger span is a window alone)."""
    out: list[list[Span]] = []
    size = 0
    for s in spans:
        if not out or (out[-1] and size + s[2] > window):
            out.append([])
            size = 0
        out[-1].append(s)
        size += s[2]
    return out


def shared_windows(plan: Any) -> list[list[Span]]:
    """The windows of shared spans the coordinator sent this rank ([] when nothing is shared)."""
    data = plan.storage_data
    got = data.get(KEY) if isinstance(data, dict) else None
    return got if isinstance(got, list) else []


def read_shared(group: Group, windows: list[list[Span]], fetch: Callable[[list], list[list[bytes]]],
                full_path: Callable[[str], str], max_gap: int,
                consume: Callable[[list[Span], list[memoryview]], None]) -> int:
    """Each window's spans read 1/N per rank (`fetch`: (path, lo, hi, []) ranges -> their chunks), broadcast,
    then handed to `consume(spans, buffers)`; a read failing on any rank raises on every rank after the
    window's broadcasts; `consume` failing raises here after the last window (the others still need this
    rank's shares). Returns the bytes this rank read."""
    read = 0
    failed: Optional[BaseException] = None  # a local failure to load an item, raised once the collectives end
    with ThreadPoolExecutor(4, thread_name_prefix="fluxfs-dcp-shared") as pool:
        for spans in windows:
            tensors = [torch.empty(s[2], dtype=torch.uint8) for s in spans]
            buffers = [memoryview(t.numpy()).cast("B") if s[2] else memoryview(bytearray()) for t, s in
                       zip(tensors, spans)]
            parts = split_bytes([s[2] for s in spans], group.size)
            mine = rounds(parts)[group.rank]
            pending = [pool.submit(_fill, chunk, spans, buffers, fetch, full_path, max_gap) for chunk in mine]
            try:
                read_error = share(group, parts, buffers, pending)
            finally:
                for f in pending:
                    f.cancel()
            group.agree(None, read_error, "reads")
            read += sum(p.length for p in parts[group.rank])
            if failed is None:
                try:
                    consume(spans, buffers)
                except Exception as exc:  # raised after the last window: the others wait in its broadcasts
                    failed = exc
            del tensors, buffers
    if failed is not None:
        raise failed
    return read


def _fill(chunk: list, spans: list[Span], buffers: list[memoryview], fetch: Callable, full_path: Callable,
          max_gap: int) -> None:
    """Read this rank's pieces of one chunk (coalesced per file) into their buffers."""
    by_file: dict[str, list] = {}
    for p in chunk:
        rel, offset, _ = spans[p.item]
        by_file.setdefault(rel, []).append((offset + p.offset, offset + p.offset + p.length, p))
    ranges, members = [], []
    for rel, pieces in sorted(by_file.items()):
        pieces.sort(key=lambda x: x[0])
        for g in coalesce([(lo, hi) for lo, hi, _ in pieces], max_gap):
            ranges.append((full_path(rel), g.start, g.end, []))
            members.append([pieces[m] for m in g.members])
    for (_, start, _, _), got, pieces in zip(ranges, fetch(ranges), members):
        body = Chunked(got)
        for lo, hi, p in pieces:
            at = 0
            dst = buffers[p.item][p.offset:p.offset + p.length]
            for view in body.views(lo - start, hi - start):
                dst[at:at + len(view)] = view
                at += len(view)
