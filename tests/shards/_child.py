"""Fresh processes for the shard tests, run as ``python -m tests.shards._child MODE OUTDIR URL ENDPOINT PORT``.

Two gloo ranks on 127.0.0.1, each reading a FluxShardDataset through a 2-worker DataLoader. ddp: each
writes the sample keys it read (and those whose bytes were wrong) as JSON. stop: each reads 3 batches
of a StatefulDataLoader, the ranks gather their loader states (all_gather_object) and rank 0 saves
them with the keys read, for a resume on another layout.
"""
from __future__ import annotations

import json
import os
import sys
import warnings

import torch

from fluxfs.pipes.shards import FluxShardDataset, MissingIndexWarning

from .conftest import payload


def make_dataset(url: str, endpoint: str, **kwargs) -> FluxShardDataset:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", MissingIndexWarning)
        return FluxShardDataset.from_prefix(url, storage_options={"endpoint_url": endpoint, "token": "anon"},
                                            shuffle=True, seed=11, shuffle_buffer=4, **kwargs)


def stop_rank(rank: int, world_size: int, out_dir: str, url: str, endpoint: str, port: int) -> None:
    import torch.distributed as dist
    from torchdata.stateful_dataloader import StatefulDataLoader

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world_size)
    try:
        loader = StatefulDataLoader(make_dataset(url, endpoint), batch_size=2, num_workers=2)
        batches = iter(loader)
        keys = [k for _ in range(3) for k in next(batches)["__key__"]]
        states: list = [None] * world_size
        dist.all_gather_object(states, {"keys": keys, "loader": loader.state_dict()})
        if rank == 0:
            torch.save(states, os.path.join(out_dir, "states.pt"))
        dist.barrier()
    finally:
        dist.destroy_process_group()


def ddp_rank(rank: int, world_size: int, out_dir: str, url: str, endpoint: str, port: int) -> None:
    import torch.distributed as dist
    from torch.utils.data import DataLoader

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world_size)
    try:
        ds = make_dataset(url, endpoint)
        keys, bad = [], []
        for sample in DataLoader(ds, batch_size=None, num_workers=2):  # rank and world size from the group
            keys.append(sample["__key__"])
            if sample["bin"] != payload(sample["__key__"]):
                bad.append(sample["__key__"])
        with open(os.path.join(out_dir, f"rank{rank}.json"), "w") as f:
            json.dump({"keys": keys, "bad": bad}, f)
        dist.barrier()
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    mode, out_dir, url, endpoint, port = sys.argv[1:]
    target = {"ddp": ddp_rank, "stop": stop_rank}.get(mode)
    if target is None:
        raise SystemExit(f"unknown mode {mode!r}")
    torch.multiprocessing.start_processes(target, args=(2, out_dir, url, endpoint, int(port)), nprocs=2,
                                          start_method="fork")
