"""Fresh processes for the pipes tests, run as ``python -m tests.pipes._child MODE ...``.

resume STATE OUT URL ENDPOINT: restore a StatefulDataLoader (spawned workers) and read the rest of the epoch.
ddp OUTDIR URL ENDPOINT PORT: two gloo ranks on 127.0.0.1, each with a 2-worker DataLoader.
Each writes the keys it read, in order, and the keys whose bytes were wrong, as JSON.
"""
from __future__ import annotations

import json
import os
import sys

import torch

from fluxfs.pipes import FluxIterableDataset

from .conftest import expected_bytes

BATCH = 50  # not a multiple of the dataset's read_batch (32): resume lands inside a batched read


def make_dataset(url: str, endpoint: str) -> FluxIterableDataset:
    return FluxIterableDataset.from_prefix(url, storage_options={"endpoint_url": endpoint, "token": "anon"},
                                           shuffle=True, seed=7)


def drain(batches) -> dict:
    keys, bad = [], []
    for batch_keys, datas in batches:
        for key, data in zip(batch_keys, datas):
            keys.append(key)
            if data != expected_bytes(key):
                bad.append(key)
    return {"keys": keys, "bad": bad}


def resume(state_file: str, out: str, url: str, endpoint: str) -> None:
    from torchdata.stateful_dataloader import StatefulDataLoader

    loader = StatefulDataLoader(make_dataset(url, endpoint), batch_size=BATCH, num_workers=2,
                                multiprocessing_context="spawn")
    loader.load_state_dict(torch.load(state_file, weights_only=False))
    with open(out, "w") as f:
        json.dump(drain(loader), f)


def ddp_rank(rank: int, world_size: int, out_dir: str, url: str, endpoint: str, port: int) -> None:
    import torch.distributed as dist
    from torch.utils.data import DataLoader

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world_size)
    try:
        ds = make_dataset(url, endpoint)  # rank and world size come from the process group
        loader = DataLoader(ds, batch_size=BATCH, num_workers=2)
        result = drain(loader)
        result["rank"] = rank
        with open(os.path.join(out_dir, f"rank{rank}.json"), "w") as f:
            json.dump(result, f)
        dist.barrier()
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    mode, *args = sys.argv[1:]
    if mode == "resume":
        resume(*args)
    elif mode == "ddp":
        out_dir, url, endpoint, port = args
        # Ranks are forked from this process: torch is imported once, not once per rank.
        torch.multiprocessing.start_processes(ddp_rank, args=(2, out_dir, url, endpoint, int(port)), nprocs=2,
                                              start_method="fork")
    else:
        raise SystemExit(f"unknown mode {mode!r}")
