"""Gloo ranks for test_dcp_group.py, run as ``python -m tests.checkpoint._dcp_group_child OUT URL PORT ENDPOINT...``.

Rank r reads through the r-th server (servers sharing one --root: what server r sent is what rank r read
from storage). It loads the replicated checkpoint at URL/replicated (every rank every tensor) with the
default reader, then with group=NO_GROUP, then URL/sharded where each rank loads its own item (nothing
in common between the ranks' plans). Each rank writes tensor digests and bytes read to OUT/rank<r>.json.
"""
from __future__ import annotations

import json
import os
import sys

import torch

from tests.weights._group_child import digests


def replicated_state() -> dict:
    """~9 MB: one 4 MiB tensor (cut between ranks), 16 of 256 KiB, mixed dtypes, a 0-d tensor and a pickled item."""
    g = torch.Generator().manual_seed(9)
    state = {"embed": torch.randn(1024, 1024, generator=g)}
    for i in range(16):
        t = torch.randn(256, 256, generator=g)
        state[f"layer{i}"] = t.to(torch.bfloat16) if i % 4 == 1 else t
    state["scale"] = torch.tensor(2.5, dtype=torch.float64)
    state["meta"] = {"step": 7, "tags": ["a", "b"]}
    return state


def sharded_state() -> dict:
    """Two 2 MiB tensors: rank r loads part<r> only."""
    return {f"part{r}": torch.arange(512 * 1024, dtype=torch.float32) + r for r in range(2)}


def empty_like(state: dict) -> dict:
    return {k: torch.zeros_like(v) if isinstance(v, torch.Tensor) else {"step": 0, "tags": []} for k, v in state.items()}


def rank_main(rank: int, world: int, out: str, url: str, port: int, endpoints: list) -> None:
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp
    from fluxfs.pipes.dcp import FluxStorageReader
    from fluxfs.pipes.distributed import NO_GROUP
    from fluxfs.server import ServerHandle

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    server = ServerHandle(endpoints[rank])
    options = {"endpoint_url": endpoints[rank], "token": "anon"}
    report: dict = {}

    def measured(name: str, call) -> None:
        dist.barrier()
        before = server.stats()["bytes_out"]
        report[name] = {"stats": dict(call())}
        dist.barrier()
        report[name]["bytes"] = server.stats()["bytes_out"] - before

    try:
        for name, group in (("shared", "node"), ("alone", NO_GROUP)):
            target = empty_like(replicated_state())

            def load(target=target, group=group):
                reader = FluxStorageReader(f"{url}/replicated", group=group, **options)
                dcp.load(target, storage_reader=reader)
                return reader.stats
            measured(name, load)
            report[name]["tensors"] = digests({k: v for k, v in target.items() if isinstance(v, torch.Tensor)})
            report[name]["meta"] = target["meta"]

        parts = sharded_state()
        mine = f"part{rank}"
        target = {mine: torch.zeros_like(parts[mine])}  # each rank its own item: nothing in common

        def load_sharded():
            reader = FluxStorageReader(f"{url}/sharded", **options)
            dcp.load(target, storage_reader=reader)
            return reader.stats
        measured("sharded", load_sharded)
        report["sharded"]["equal"] = bool(torch.equal(target[mine], parts[mine]))
        dist.barrier()
    finally:
        with open(os.path.join(out, f"rank{rank}.json"), "w") as f:
            json.dump(report, f)
        dist.destroy_process_group()


if __name__ == "__main__":
    out, url, port, *endpoints = sys.argv[1:]
    torch.multiprocessing.start_processes(rank_main, args=(len(endpoints), out, url, int(port), endpoints),
                                          nprocs=len(endpoints), start_method="fork")
