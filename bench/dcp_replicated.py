"""`bench dcp --quick`'s replicated load: storage bytes per rank when 2 gloo ranks each load a whole state dict.

The state is saved once through one server; each rank then loads it with FluxStorageReader through its own
server (servers sharing one --root: what server r sent is what rank r read from storage), once with the
default group="node" (replicated items read once per group) and once with group=NO_GROUP (every rank alone).
"""
from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
from contextlib import ExitStack
from pathlib import Path

from .worker import failure

ROOT = Path(__file__).resolve().parents[1]
BUCKET = "bench-dcp-replicated"


def _state(nbytes: int) -> dict:
    import torch

    g = torch.Generator().manual_seed(1)
    n = max(1, nbytes // (4 * 2**20))
    return {f"layer{i}": torch.randn(2**20, generator=g) for i in range(n)}


def _rank(rank: int, spec: dict) -> None:
    import torch
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp

    from fluxfs.pipes.dcp import FluxStorageReader
    from fluxfs.pipes.distributed import NO_GROUP

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{spec['port']}", rank=rank, world_size=2)
    try:
        want = _state(spec["bytes"])
        target = {k: torch.zeros_like(v) for k, v in want.items()}
        group = NO_GROUP if spec["alone"] else "node"
        dcp.load(target, storage_reader=FluxStorageReader(spec["url"], group=group, endpoint_url=spec["urls"][rank],
                                                          token="anon"))
        if not all(torch.equal(target[k], want[k]) for k in want):
            raise SystemExit(f"rank {rank}: loaded tensors differ from the saved ones")
        dist.barrier()
    finally:
        dist.destroy_process_group()


def measure(args: argparse.Namespace, nbytes: int = 64 * 2**20) -> dict:
    """{"shared": bytes per rank / checkpoint bytes, "alone": the same without sharing}, the most any rank read."""
    import torch.distributed.checkpoint as dcp

    from fluxfs import FluxFileSystem
    from fluxfs.pipes.dcp import FluxStorageWriter
    from fluxfs.server import run as run_server

    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out: dict = {}
    with tempfile.TemporaryDirectory(prefix="bench-dcp-replicated-") as root, ExitStack() as stack:
        first = stack.enter_context(run_server(root=root, profile=args.profile, in_process=False))
        first.create_bucket(BUCKET)
        url = f"flux://{BUCKET}/replicated"
        dcp.save(_state(nbytes), storage_writer=FluxStorageWriter(url, endpoint_url=first.url, token="anon"))
        fs = FluxFileSystem(endpoint_url=first.url, token="anon", skip_instance_cache=True)
        size = sum(v for k, v in fs.du(f"{BUCKET}/replicated", total=False).items() if k.endswith(".distcp"))
        servers = [first, stack.enter_context(run_server(root=root, profile=args.profile, in_process=False))]
        for name, alone in (("shared", False), ("alone", True)):
            for srv in servers:
                srv.reset_stats()
            with socket.socket() as s:
                s.bind(("127.0.0.1", 0))
                port = s.getsockname()[1]
            spec = {"bytes": nbytes, "alone": alone, "url": url, "urls": [s.url for s in servers], "port": port}
            proc = subprocess.run([sys.executable, "-m", "bench.dcp_replicated", "--worker", json.dumps(spec)],
                                  cwd=ROOT, env=env, capture_output=True, text=True, timeout=1800)
            if proc.returncode != 0:
                raise RuntimeError(failure(f"replicated load ({name})", proc))
            out[name] = round(max(s.stats()["bytes_out"] for s in servers) / size, 3)
    print(f"  [dcp] replicated load, 2 ranks: storage bytes per rank {out['shared']:.3f} of the checkpoint "
          f"(group='node'), {out['alone']:.3f} (group=NO_GROUP)", file=sys.stderr)
    return out


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--worker":
        import torch

        torch.multiprocessing.start_processes(_rank, args=(json.loads(sys.argv[2]),), nprocs=2, start_method="fork")
    else:
        sys.exit("usage: python -m bench dcp --quick  (this module's own entry point is for its workers)")
