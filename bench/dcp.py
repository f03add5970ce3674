"""`python -m bench dcp`: torch.distributed.checkpoint save and load of a large state dict (issue 7).

State: float32 tensors of --tensor-mib each, --size bytes in all (default 2 GB; --quick 256 MB),
one rank, no process group (dcp's single-process mode). Contenders, interleaved, same server:
  fluxfs      FluxStorageWriter / FluxStorageReader (parallel multipart parts; ranged, coalesced reads)
  gcsfs       torch's FsspecWriter / FsspecReader on gcsfs.core.GCSFileSystem, as users get them
              (defaults: sync_files=True, thread_count=1)
  gcsfs-best  the same with sync_files=False and thread_count=8 (8 files uploaded at once)
  dataflux    Dataflux GCSDistributedWriter / GCSDistributedReader. Its checkpoint module cannot
              import with google-cloud-storage 3.x, so it runs in a second environment
              (--dataflux-python, default bench/.venv-dataflux) as a subprocess reporting its own timings;
              without one it is reported as an error.
Every load is compared with the saved tensors (not timed); each run's checkpoint is deleted after it.
Headlines: save_mb_per_s and load_mb_per_s (MB = 10**6 bytes), wall/CPU seconds of save + load only.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
import warnings
from pathlib import Path
from typing import Callable, Dict

from .common import WrongResult, run_scenario, start_server

MB = 10**6
BUCKET = "bench-dcp"
HERE = Path(__file__).resolve().parent
DATAFLUX_SCRIPT = HERE / "_dcp_dataflux.py"


def add_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--tensor-mib", type=int, default=64, help="size of each tensor in MiB")
    parser.add_argument("--dataflux-python", default=str(HERE / ".venv-dataflux" / "bin" / "python"),
                        help="python of an environment with gcs-torch-dataflux and google-cloud-storage<3")


def make_state(total: int, tensor_bytes: int, seed: int = 0) -> Dict:
    """`total` bytes of random float32 tensors named like a model's layers, plus a little metadata."""
    import torch

    g = torch.Generator().manual_seed(seed)
    state, left, i = {}, total, 0
    while left > 0:
        n = min(tensor_bytes, left) // 4
        state[f"layers.{i}.weight"] = torch.randn(max(n, 1), generator=g)
        left -= n * 4 or 4
        i += 1
    state["step"] = 1000
    return state


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def run(args: argparse.Namespace) -> dict:
    # gcsfs.GCSFileSystem would otherwise ask a gRPC API for the bucket layout (stalls on emulators).
    os.environ.setdefault("GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT", "false")
    import gcsfs.core
    import torch
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint._fsspec_filesystem import FsspecReader, FsspecWriter

    from fluxfs import FluxFileSystem
    from fluxfs.pipes.dcp import FluxStorageReader, FluxStorageWriter

    warnings.filterwarnings("ignore", message=".*assuming the intent is to")  # dcp's single-process note
    total = args.size or (256 * MB if args.quick else 2000 * MB)
    state = make_state(total, args.tensor_mib * 2**20)
    nbytes = sum(v.numel() * v.element_size() for v in state.values() if isinstance(v, torch.Tensor))
    params = {"bytes": nbytes, "tensors": len(state) - 1, "tensor_mib": args.tensor_mib, "ranks": 1}

    with start_server(args) as srv:
        srv.create_bucket(BUCKET)
        opts = {"endpoint_url": srv.url, "token": "anon"}
        flux = FluxFileSystem(skip_instance_cache=True, **opts)
        gfs = gcsfs.core.GCSFileSystem(skip_instance_cache=True, **opts)

        def on_gcsfs(storage):
            storage.fs.fs = gfs  # torch resolved gs:// itself; use the plain GCSFileSystem instead
            return storage

        def contender(name: str, writer: Callable[[str], object], reader: Callable[[str], object]) -> Callable:
            def fn() -> Dict:
                url = f"flux://{BUCKET}/{name}"
                if flux.exists(f"{BUCKET}/{name}"):
                    flux.rm(f"{BUCKET}/{name}", recursive=True)
                t0, c0 = time.perf_counter(), _cpu()
                dcp.save(state, storage_writer=writer(url))
                t1, c1 = time.perf_counter(), _cpu()
                target = {k: torch.empty_like(v) if isinstance(v, torch.Tensor) else 0 for k, v in state.items()}
                t2, c2 = time.perf_counter(), _cpu()
                dcp.load(target, storage_reader=reader(url))
                t3, c3 = time.perf_counter(), _cpu()
                for k, v in state.items():
                    same = torch.equal(target[k], v) if isinstance(v, torch.Tensor) else target[k] == v
                    if not same:
                        raise WrongResult(f"{name}: {k} differs after load")
                flux.rm(f"{BUCKET}/{name}", recursive=True)
                return _figures(t1 - t0, c1 - c0, t3 - t2, c3 - c2)
            return fn

        def _figures(save_s: float, save_cpu: float, load_s: float, load_cpu: float) -> Dict:
            return {"state_bytes": nbytes, "save_s": save_s, "load_s": load_s,
                    "save_mb_per_s": nbytes / save_s / MB, "load_mb_per_s": nbytes / load_s / MB,
                    "save_cpu_s": save_cpu, "load_cpu_s": load_cpu,
                    "wall_s": save_s + load_s, "cpu_s": save_cpu + load_cpu}

        def gs(url: str) -> str:
            return url.replace("flux://", "gs://")

        def dataflux() -> Dict:
            python = Path(args.dataflux_python)
            if not python.exists():
                raise RuntimeError(
                    f"no Dataflux environment at {python}: gcs-torch-dataflux 1.4's checkpoint module needs "
                    "google-cloud-storage<3 (it imports a helper removed in 3.x), so it runs in a second venv")
            name = "dataflux"
            if flux.exists(f"{BUCKET}/{name}"):
                flux.rm(f"{BUCKET}/{name}", recursive=True)
            env = dict(os.environ, STORAGE_EMULATOR_HOST=srv.url)
            cmd = [str(python), str(DATAFLUX_SCRIPT), srv.url, BUCKET, name, str(nbytes), str(args.tensor_mib)]
            out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=3600)
            if out.returncode != 0:
                raise RuntimeError(f"dataflux subprocess failed: {out.stderr.strip()[-500:]}")
            r = json.loads(out.stdout.strip().splitlines()[-1])
            flux.rm(f"{BUCKET}/{name}", recursive=True)
            return _figures(r["save_s"], r["save_cpu_s"], r["load_s"], r["load_cpu_s"])

        contenders = {
            "fluxfs": contender("fluxfs", lambda u: FluxStorageWriter(u, **opts), lambda u: FluxStorageReader(u, **opts)),
            "gcsfs": contender(
                "gcsfs",
                lambda u: on_gcsfs(FsspecWriter(gs(u), **opts)),
                lambda u: on_gcsfs(FsspecReader(gs(u), **opts))),
            "gcsfs-best": contender(
                "gcsfs-best",
                lambda u: on_gcsfs(FsspecWriter(gs(u), sync_files=False, thread_count=8, **opts)),
                lambda u: on_gcsfs(FsspecReader(gs(u), **opts))),
            "dataflux": dataflux,
        }
        return run_scenario(
            "dcp", args, params, contenders,
            headline=["save_mb_per_s", "load_mb_per_s"],
            ratios=[("fluxfs", "gcsfs"), ("fluxfs", "gcsfs-best"), ("fluxfs", "dataflux")],
        )


if __name__ == "__main__":  # pragma: no cover
    sys.exit("run as: python -m bench dcp [--quick] [--profile cloud]")
