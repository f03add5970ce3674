"""One rank of a DCP save or load, run as a subprocess by test_dcp.py (gloo on 127.0.0.1).

usage: python dcp_worker.py MODE URL ENDPOINT [RANK WORLD]
MODE: save_load (save DTensors sharded on dim 0, then load them back into DTensors sharded on
dim 1 and check; one pair of processes for both halves, as each torch import costs seconds), big
(1 process, no process group, a large state: the test kills it midway). Exit 0 means the check passed.
"""
from __future__ import annotations

import sys

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp

from fluxfs.pipes.dcp import FluxStorageReader, FluxStorageWriter

# "w" is 2 MiB: each rank's Shard(0) half is an item big enough to be copied straight into its
# target when loaded whole, and resharded on dim 1 it is a non-contiguous slice (loaded via torch.load).
ROWS, COLS = 1024, 512


def expected() -> dict:
    """The full (unsharded) state every mode saves or checks."""
    return {
        "model": {
            "w": torch.arange(ROWS * COLS, dtype=torch.float32).reshape(ROWS, COLS) / 7,
            "b": torch.linspace(-1, 1, ROWS, dtype=torch.float64),
        },
        "step": 12,
    }


def main() -> int:
    mode, url, endpoint = sys.argv[1:4]
    options = {"endpoint_url": endpoint, "token": "anon"}
    if mode == "big":
        # ~48 MB in 12 tensors, 5 MiB parts: many part uploads to kill in the middle of.
        state = {f"t{i}": torch.full((1_000_000,), float(i)) for i in range(12)}
        print("saving", flush=True)
        dcp.save(state, storage_writer=FluxStorageWriter(url, part_size=5 * 2**20, **options))
        return 0

    rank, world = int(sys.argv[4]), int(sys.argv[5])
    dist.init_process_group("gloo", rank=rank, world_size=world)
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor

    mesh = init_device_mesh("cpu", (world,))
    full = expected()
    try:
        if mode == "save_load":
            state = {
                "model": {k: distribute_tensor(v, mesh, [Shard(0)]) for k, v in full["model"].items()},
                "step": full["step"],
            }
            dcp.save(state, storage_writer=FluxStorageWriter(url, **options))
            dist.barrier()
            # A different sharding than the save: each rank needs slices of both saved shards.
            state = {
                "model": {
                    "w": distribute_tensor(torch.zeros(ROWS, COLS), mesh, [Shard(1)]),
                    "b": distribute_tensor(torch.zeros(ROWS, dtype=torch.float64), mesh, [Replicate()]),
                },
                "step": 0,
            }
            dcp.load(state, storage_reader=FluxStorageReader(url, **options))
            ok = state["step"] == full["step"] and all(
                torch.equal(state["model"][k].full_tensor(), full["model"][k]) for k in full["model"]
            )
            # Both ranks past their last collective before either tears gloo down: a peer closing
            # its connections mid-teardown aborted a rank once ("terminate called without an
            # active exception", exit -6) after it had printed "match".
            dist.barrier()
            print(f"rank {rank}: {'match' if ok else 'MISMATCH'}", flush=True)
            return 0 if ok else 1
        raise SystemExit(f"unknown mode {mode}")
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    sys.exit(main())
