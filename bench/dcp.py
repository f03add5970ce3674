"""`python -m bench dcp`: torch.distributed.checkpoint save and load of a large state dict (issue 7).

State: float32 tensors of --tensor-mib each, --size bytes in all (default 2 GB; --quick 256 MB).
--ranks 1: one process, no process group (dcp's single-process mode); --ranks 2: two processes in a
gloo group on 127.0.0.1, each holding a Shard(0) DTensor slice of every tensor (default: 1 and 2;
--quick: 1). Contenders, interleaved, same server:
  fluxfs      FluxStorageWriter / FluxStorageReader (parallel multipart parts; ranged, coalesced reads)
  fluxfs-resumable  the same with multipart="resumable" (one resumable upload per file): on 2 busy cores
              the server's CPU, not the wire, limits writes, and this path costs it least
  gcsfs       torch's FsspecWriter / FsspecReader on gcsfs.core.GCSFileSystem, as users get them
              (defaults: sync_files=True, thread_count=1)
  gcsfs-best  the same with sync_files=False and thread_count=8 (8 files uploaded at once)
  dataflux    Dataflux GCSDistributedWriter / GCSDistributedReader. Its checkpoint module cannot
              import with google-cloud-storage 3.x, so it runs in a second environment
              (--dataflux-python, default bench/.venv-dataflux) as a subprocess reporting its own timings;
              without one it is reported as an error.
Multi-rank runs and Dataflux run in subprocesses (bench/_dcp_worker.py) that time save and load
themselves (slowest rank), so process start-up is not counted.
Every load is compared with the saved tensors (not timed); each run's checkpoint is deleted after it.
Headlines: save_mb_per_s and load_mb_per_s (MB = 10**6 bytes), wall/CPU seconds of save + load only.
--quick also reports storage bytes per rank of a 64 MiB replicated state loaded by 2 gloo ranks, with
FluxStorageReader's default group="node" and with group=NO_GROUP (bench/dcp_replicated.py).
"""
from __future__ import annotations

import argparse
import copy
import json
import os
import resource
import socket
import subprocess
import sys
import time
import warnings
from pathlib import Path
from typing import Callable, Dict

from .common import WrongResult, finish_combined, run_scenario, start_server

MB = 10**6
BUCKET = "bench-dcp"
HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
CONTENDERS = ("fluxfs", "fluxfs-resumable", "gcsfs", "gcsfs-best", "dataflux")


def add_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--tensor-mib", type=int, default=64, help="size of each tensor in MiB")
    parser.add_argument("--ranks", default=None,
                        help="comma-separated rank counts to run (default: 1 with --quick, else 1,2)")
    parser.add_argument("--dataflux-python", default=str(HERE / ".venv-dataflux" / "bin" / "python"),
                        help="python of an environment with gcs-torch-dataflux and google-cloud-storage<3 "
                             "(bench/.venv-dataflux is made by `python -m bench checkpoint`)")


_COLS = 1024  # columns of the benchmark's weight matrices


def make_state(total: int, tensor_bytes: int, seed: int = 0, shard: tuple[int, int] | None = None) -> Dict:
    """`total` bytes of random float32 tensors named like a model's layers, plus a little metadata.

    With `shard=(rank, world)` only that rank's dim-0 slice of each tensor is kept (the full tensor
    lives just while it is sliced), so ranks of a multi-process run hold 1/world of the state each.
    """
    import torch

    g = torch.Generator().manual_seed(seed)
    state, left, i = {}, total, 0
    while left >= 4:
        n = min(tensor_bytes, left) // 4
        # 2-D like a layer's weight matrix, sharded by rows. (A 1-D DTensor of millions of elements
        # makes torch 2.13 build an index of every element of the shard: ~1 s per rank per 1 GB.)
        cols = _COLS if n % _COLS == 0 else 1
        t = torch.randn(n // cols, cols, generator=g)
        state[f"layers.{i}.weight"] = t if shard is None else t.tensor_split(shard[1])[shard[0]].clone()
        left -= n * 4
        i += 1
    state["step"] = 1000
    return state


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def _why(stderr: str) -> str:
    """The exception line of a worker's traceback and the innermost frame that raised it."""
    lines = [ln.replace("[rank0]:", "").strip() for ln in stderr.strip().splitlines()]
    lines = [ln for ln in lines if ln]
    frames = [ln for ln in lines if ln.startswith("File ")]
    return f"{lines[-1] if lines else 'no output'} ({frames[-1] if frames else 'no traceback'})"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(args: argparse.Namespace) -> dict:
    ranks = [int(r) for r in (args.ranks or ("1" if args.quick else "1,2")).split(",")]
    if len(ranks) == 1:
        report = _run_ranks(args, ranks[0])
        if args.quick:  # storage bytes per rank of a replicated load with 2 ranks (bench/dcp_replicated.py)
            from .dcp_replicated import measure

            try:
                report["replicated_bytes_per_rank"] = measure(args)
            except Exception as exc:  # reported, the rest of the run stands
                report["replicated_bytes_per_rank"] = {"error": f"{type(exc).__name__}: {exc}"}
        return report
    combined: Dict = {"scenario": "dcp", "profile": args.profile, "ranks": {}, "ratios": {}}
    sub_args = copy.copy(args)
    sub_args.json = None
    for n in ranks:
        report = _run_ranks(sub_args, n)
        combined["ranks"][str(n)] = report
        for k, v in report["ratios"].items():
            combined["ratios"][f"{n}rank:{k}"] = v
    return finish_combined("dcp", args, combined)


def _run_ranks(args: argparse.Namespace, world: int) -> dict:
    # gcsfs.GCSFileSystem would otherwise ask a gRPC API for the bucket layout (stalls on emulators).
    os.environ.setdefault("GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT", "false")
    import torch
    import torch.distributed.checkpoint as dcp

    from fluxfs import FluxFileSystem

    from ._dcp_worker import storage

    warnings.filterwarnings("ignore", message=".*assuming the intent is to")  # dcp's single-process note
    total = args.size or (256 * MB if args.quick else 2000 * MB)
    state = make_state(total, args.tensor_mib * 2**20) if world == 1 else None
    nbytes = total // 4 * 4
    params = {"bytes": nbytes, "tensor_mib": args.tensor_mib, "ranks": world}

    def figures(save_s: float, save_cpu: float, load_s: float, load_cpu: float) -> Dict:
        return {"state_bytes": nbytes, "save_s": save_s, "load_s": load_s,
                "save_mb_per_s": nbytes / save_s / MB, "load_mb_per_s": nbytes / load_s / MB,
                "save_cpu_s": save_cpu, "load_cpu_s": load_cpu,
                "wall_s": save_s + load_s, "cpu_s": save_cpu + load_cpu}

    with start_server(args) as srv:
        srv.create_bucket(BUCKET)
        endpoint = srv.url
        flux = FluxFileSystem(endpoint_url=endpoint, token="anon", skip_instance_cache=True)

        def clear(name: str) -> None:
            if flux.exists(f"{BUCKET}/{name}"):
                flux.rm(f"{BUCKET}/{name}", recursive=True)

        def in_process(name: str) -> Callable[[], Dict]:
            def fn() -> Dict:
                url = f"flux://{BUCKET}/{name}"
                clear(name)
                t0, c0 = time.perf_counter(), _cpu()
                dcp.save(state, storage_writer=storage(name, url, endpoint, write=True))
                t1, c1 = time.perf_counter(), _cpu()
                target = {k: torch.empty_like(v) if isinstance(v, torch.Tensor) else 0 for k, v in state.items()}
                t2, c2 = time.perf_counter(), _cpu()
                dcp.load(target, storage_reader=storage(name, url, endpoint, write=False))
                t3, c3 = time.perf_counter(), _cpu()
                for k, v in state.items():
                    same = torch.equal(target[k], v) if isinstance(v, torch.Tensor) else target[k] == v
                    if not same:
                        raise WrongResult(f"{name}: {k} differs after load")
                clear(name)
                return figures(t1 - t0, c1 - c0, t3 - t2, c3 - c2)
            return fn

        def subprocesses(name: str) -> Callable[[], Dict]:
            def fn() -> Dict:
                python = sys.executable
                if name == "dataflux":
                    python = args.dataflux_python
                    if not Path(python).exists():
                        raise RuntimeError(
                            f"no Dataflux environment at {python}: gcs-torch-dataflux 1.4's checkpoint module "
                            "needs google-cloud-storage<3 (it imports a helper removed in 3.x); "
                            "`python -m bench checkpoint` creates bench/.venv-dataflux")
                clear(name)
                env = dict(os.environ, STORAGE_EMULATOR_HOST=endpoint, OMP_NUM_THREADS="1",
                           MASTER_ADDR="127.0.0.1", MASTER_PORT=str(_free_port()), GLOO_SOCKET_IFNAME="lo",
                           PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
                cmd = [python, "-m", "bench._dcp_worker", name, endpoint, BUCKET, name, str(nbytes),
                       str(args.tensor_mib)]
                procs = [subprocess.Popen(cmd + [str(r), str(world)], cwd=ROOT, env=env, text=True,
                                          stdout=subprocess.PIPE, stderr=subprocess.PIPE) for r in range(world)]
                outs = [p.communicate(timeout=3600) for p in procs]
                for p, (_, err) in zip(procs, outs):
                    if p.returncode != 0:
                        raise RuntimeError(f"{name} worker failed: {_why(err)}")
                r = json.loads(outs[0][0].strip().splitlines()[-1])
                clear(name)
                return figures(r["save_s"], r["save_cpu_s"], r["load_s"], r["load_cpu_s"])
            return fn

        contenders = {
            name: in_process(name) if world == 1 and name != "dataflux" else subprocesses(name)
            for name in CONTENDERS
        }
        return run_scenario(
            "dcp" if world == 1 else f"dcp {world} ranks", args, params, contenders,
            headline=["save_mb_per_s", "load_mb_per_s"],
            ratios=[("fluxfs", "gcsfs"), ("fluxfs", "gcsfs-best"), ("fluxfs", "dataflux"),
                    ("fluxfs-resumable", "gcsfs")],
        )


if __name__ == "__main__":  # pragma: no cover
    sys.exit("run as: python -m bench dcp [--quick] [--profile cloud]")
