"""Fresh processes for the shard tests, run as ``python -m tests.shards._child ddp OUTDIR URL ENDPOINT PORT``.

Two gloo ranks on 127.0.0.1, each reading a FluxShardDataset through a 2-worker DataLoader; each writes
the sample keys it read (and those whose bytes were wrong) as JSON.
"""
from __future__ import annotations

import json
import os
import sys
import warnings

import torch

from fluxfs.pipes.shards import FluxShardDataset, MissingIndexWarning

from .conftest import payload


def ddp_rank(rank: int, world_size: int, out_dir: str, url: str, endpoint: str, port: int) -> None:
    import torch.distributed as dist
    from torch.utils.data import DataLoader

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world_size)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", MissingIndexWarning)
            ds = FluxShardDataset.from_prefix(url, storage_options={"endpoint_url": endpoint, "token": "anon"},
                                              shuffle=True, seed=11, shuffle_buffer=4)
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
    if mode != "ddp":
        raise SystemExit(f"unknown mode {mode!r}")
    torch.multiprocessing.start_processes(ddp_rank, args=(2, out_dir, url, endpoint, int(port)), nprocs=2,
                                          start_method="fork")
