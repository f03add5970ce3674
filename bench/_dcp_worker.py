"""One rank of a `bench dcp` run in a subprocess: multi-rank runs, and Dataflux (its own environment).

usage: python -m bench._dcp_worker CONTENDER ENDPOINT BUCKET NAME BYTES TENSOR_MIB RANK WORLD
With WORLD > 1 the ranks form a gloo group on 127.0.0.1 (MASTER_ADDR/MASTER_PORT from the parent) and
each holds a Shard(0) slice of every tensor as a DTensor. Saves, loads into fresh tensors, checks
them, and rank 0 prints one JSON line: {"save_s", "load_s", "save_cpu_s", "load_cpu_s"} (slowest
rank's wall time; CPU summed over ranks).
"""
from __future__ import annotations

import json
import os
import resource
import sys
import time
import warnings


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def storage(contender: str, url: str, endpoint: str, write: bool):
    """The DCP writer (write=True) or reader for `contender` at a flux:// `url`."""
    opts = {"endpoint_url": endpoint, "token": "anon"}
    gs = url.replace("flux://", "gs://")
    if contender in ("fluxfs", "fluxfs-resumable"):
        from fluxfs.pipes.dcp import FluxStorageReader, FluxStorageWriter

        if contender == "fluxfs-resumable":
            opts["multipart"] = "resumable"  # one resumable upload per file instead of parallel XML parts
        return FluxStorageWriter(url, **opts) if write else FluxStorageReader(url, **opts)
    if contender in ("gcsfs", "gcsfs-best"):
        import gcsfs.core
        from torch.distributed.checkpoint._fsspec_filesystem import FsspecReader, FsspecWriter

        if write:
            tuned = {"sync_files": False, "thread_count": 8} if contender == "gcsfs-best" else {}
            s = FsspecWriter(gs, **tuned, **opts)
        else:
            s = FsspecReader(gs, **opts)
        s.fs.fs = gcsfs.core.GCSFileSystem(**opts)  # not gcsfs.GCSFileSystem: its gRPC probe stalls
        return s
    if contender == "dataflux":
        # No storage_client: Dataflux builds storage.Client(project=...), which finds the server
        # through STORAGE_EMULATOR_HOST (set by the parent); a client passed in would be probed for IAM.
        from dataflux_pytorch.lightning import GCSDistributedReader, GCSDistributedWriter

        cls = GCSDistributedWriter if write else GCSDistributedReader
        return cls(gs, project_name="bench")
    raise SystemExit(f"unknown contender {contender}")


def main() -> int:
    contender, endpoint, bucket, name, nbytes, tensor_mib, rank, world = sys.argv[1:9]
    rank, world = int(rank), int(world)
    os.environ.setdefault("GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT", "false")
    warnings.filterwarnings("ignore")
    import torch
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp

    from bench.dcp import make_state  # the same tensors and seed as the in-process contenders

    if world > 1:
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.tensor import DTensor, Shard

        dist.init_process_group("gloo", rank=rank, world_size=world)
        mesh = init_device_mesh("cpu", (world,))
        local = make_state(int(nbytes), int(tensor_mib) * 2**20, shard=(rank, world))
        # Global lengths (slices may be uneven), so each DTensor knows the full shape.
        lengths: list = [None] * world
        dist.all_gather_object(lengths, {k: len(v) for k, v in local.items() if isinstance(v, torch.Tensor)})

        def dtensor(k, v):
            full = torch.Size([sum(part[k] for part in lengths), *v.shape[1:]])
            return DTensor.from_local(v, mesh, [Shard(0)], run_check=False, shape=full,
                                      stride=(*v.stride()[:-1], 1) if v.dim() > 1 else (1,))

        state = {k: dtensor(k, v) if isinstance(v, torch.Tensor) else v for k, v in local.items()}

        def fresh():
            return {k: dtensor(k, torch.empty_like(v)) if isinstance(v, torch.Tensor) else 0
                    for k, v in local.items()}

        def local_part(t):
            return t.to_local() if isinstance(t, DTensor) else t

        barrier = dist.barrier
    else:
        local = state = make_state(int(nbytes), int(tensor_mib) * 2**20)

        def fresh():
            return {k: torch.empty_like(v) if isinstance(v, torch.Tensor) else 0 for k, v in local.items()}

        def local_part(t):
            return t

        def barrier():
            pass

    url = f"flux://{bucket}/{name}"
    barrier()
    t0, c0 = time.perf_counter(), _cpu()
    dcp.save(state, storage_writer=storage(contender, url, endpoint, write=True))
    barrier()
    t1, c1 = time.perf_counter(), _cpu()
    target = fresh()
    barrier()
    t2, c2 = time.perf_counter(), _cpu()
    dcp.load(target, storage_reader=storage(contender, url, endpoint, write=False))
    barrier()
    t3, c3 = time.perf_counter(), _cpu()
    for k, v in local.items():
        got = local_part(target[k])
        if not (torch.equal(got, v) if isinstance(v, torch.Tensor) else got == v):
            print(f"rank {rank}: {k} differs after load", file=sys.stderr)
            return 1
    figures = torch.tensor([t1 - t0, t3 - t2, c1 - c0, c3 - c2], dtype=torch.float64)
    if world > 1:
        walls, cpus = figures[:2].clone(), figures[2:].clone()
        dist.all_reduce(walls, op=dist.ReduceOp.MAX)
        dist.all_reduce(cpus, op=dist.ReduceOp.SUM)
        figures = torch.cat([walls, cpus])
        dist.destroy_process_group()
    if rank == 0:
        save_s, load_s, save_cpu, load_cpu = figures.tolist()
        print(json.dumps({"save_s": save_s, "load_s": load_s, "save_cpu_s": save_cpu, "load_cpu_s": load_cpu}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
