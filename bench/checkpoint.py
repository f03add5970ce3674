"""`python -m bench checkpoint`: torch.save / torch.load of one state dict through each client (issue 5).

A state dict of --size bytes (default 2 GB; --quick 256 MB: a few large float32 tensors plus 300
small ones) is saved then loaded by each contender, interleaved, on one server:
  fluxfs           fsspec.open("flux://...", "wb"/"rb"), multipart="xml" (the default)
  fluxfs-compose   the same with multipart="compose"
  gcsfs            gcsfs.core.GCSFileSystem().open(path, "wb"/"rb"), default block size
  gcsfs-64MiB      the same with block_size=64 MiB
  gcsfs-whole      gcsfs tuned: torch.save into memory then pipe_file; cat_file (parallel ranges) into
                   memory then torch.load
  gcs-tm           google-cloud-storage transfer_manager: torch.save to a local file, then
                   upload_chunks_concurrently; download_chunks_concurrently, then torch.load (defaults)
  dataflux         DatafluxCheckpoint writer/reader (gcs-torch-dataflux 1.4.0). Its checkpoint module
                   does not import with google-cloud-storage 3.x, so it runs in a second venv
                   (bench/.venv-dataflux, created on first use) that has google-cloud-storage<3.
Each save and each load runs in a fresh subprocess, so the peak RSS of the saving process is its
own (sampled from /proc every 5 ms; "extra" = peak minus the RSS right before torch.save). Timed:
only torch.save including close/upload, and only open + torch.load; every load is checked tensor by
tensor against the regenerated state dict (untimed). Headlines: save and load MB/s.
"""
from __future__ import annotations

import argparse
import io
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from .common import PeakMemory
from .worker import failure

MIB = 2**20
BUCKET = "bench-checkpoint"
ROOT = Path(__file__).resolve().parents[1]
DATAFLUX_VENV = ROOT / "bench" / ".venv-dataflux"
DATAFLUX_PACKAGES = ["torch==2.13.0", "google-cloud-storage<3", "gcs-torch-dataflux==1.4.0"]
LARGE = 32 * MIB  # bytes per large tensor
SMALL_COUNT = 300

CONTENDERS = ("fluxfs", "fluxfs-compose", "gcsfs", "gcsfs-64MiB", "gcsfs-whole", "gcs-tm", "dataflux")


def add_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--part-size", type=int, default=None, help="fluxfs part_size (default: its own)")
    parser.add_argument("--write-concurrency", type=int, default=None, help="fluxfs write_concurrency")
    parser.add_argument("--read-concurrency", type=int, default=None, help="fluxfs read_concurrency")
    parser.add_argument("--no-dataflux-venv", action="store_true",
                        help="do not create bench/.venv-dataflux (the dataflux contender then reports an error)")


# -- the state dict (used by the workers) ------------------------------------------------------

def _layout(size: int) -> list[tuple[str, int]]:
    """(name, float32 count) of each tensor: large ones of 32 MiB, the rest in small ones."""
    small = [(f"layers.{i}.bias", 256) for i in range(SMALL_COUNT)]
    rest = max(0, size - SMALL_COUNT * 256 * 4)
    large = [(f"blocks.{i}.weight", LARGE // 4) for i in range(rest // LARGE)]
    if rest % LARGE >= 4:
        large.append(("head.weight", (rest % LARGE) // 4))
    return large + small


def _tensor(torch, name: str, n: int, i: int):
    # Distinct content per tensor and position, cheap to make (no RNG over GBs).
    return torch.arange(n, dtype=torch.float32).mul_(1.0 + i / 7.0).add_(i)


def _state_dict(torch, size: int) -> dict:
    return {name: _tensor(torch, name, n, i) for i, (name, n) in enumerate(_layout(size))}


def _check(torch, loaded: dict, size: int) -> None:
    layout = _layout(size)
    if list(loaded) != [name for name, _ in layout]:
        raise AssertionError("loaded state dict has the wrong keys")
    for i, (name, n) in enumerate(layout):
        if not torch.equal(loaded[name], _tensor(torch, name, n, i)):
            raise AssertionError(f"tensor {name} differs after the round trip")


# -- measuring one save or load in a subprocess ------------------------------------------------

def _cpu() -> float:
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def _open_funcs(spec: dict):
    """(open_for_write, open_for_read) context-manager factories for one contender."""
    url, bucket, key, name = spec["url"], spec["bucket"], spec["key"], spec["contender"]
    if name.startswith("fluxfs"):
        import fsspec

        opts = dict(endpoint_url=url, token="anon", multipart="compose" if name == "fluxfs-compose" else "xml")
        for k in ("part_size", "write_concurrency", "read_concurrency"):
            if spec.get(k):
                opts[k] = spec[k]
        target = f"flux://{bucket}/{key}"
        fsspec.filesystem("flux", **opts)  # imported and cached now, so fsspec.open reuses it
        return (lambda: fsspec.open(target, "wb", **opts)), (lambda: fsspec.open(target, "rb", **opts))
    if name.startswith("gcsfs"):
        import gcsfs.core

        fs = gcsfs.core.GCSFileSystem(endpoint_url=url, token="anon")
        bs = {"block_size": 64 * MIB} if name == "gcsfs-64MiB" else {}
        path = f"{bucket}/{key}"
        if name == "gcsfs-whole":
            return (lambda: _WholeWriter(fs, path)), (lambda: io.BytesIO(fs.cat_file(path)))
        return (lambda: fs.open(path, "wb", **bs)), (lambda: fs.open(path, "rb", **bs))
    raise ValueError(f"unknown contender {name}")


class _WholeWriter(io.BytesIO):
    """Collects torch.save's output in memory, then uploads it with one `pipe_file` on close."""

    def __init__(self, fs, path: str):
        super().__init__()
        self._fs, self._path = fs, path

    def __exit__(self, *exc) -> None:
        if exc[0] is None:
            self._fs.pipe_file(self._path, self.getvalue())
        super().__exit__(*exc)


def worker(spec: dict) -> dict:
    """One save or one load (spec["op"]) by one contender; returns timings and memory."""
    import torch

    name, size = spec["contender"], spec["size"]
    # Imports and client construction happen before the clock starts; connections do not.
    if name == "gcs-tm":
        from google.cloud.storage import transfer_manager

        blob = _gcs_client(spec).bucket(spec["bucket"]).blob(spec["key"])
    elif name == "dataflux":
        ckpt = _dataflux(spec)
    else:
        open_w, open_r = _open_funcs(spec)
    if spec["op"] == "save":
        sd = _state_dict(torch, size)
        nbytes = sum(t.numel() * t.element_size() for t in sd.values())
        cpu0 = _cpu()
        with PeakMemory() as mem, tempfile.TemporaryDirectory() as tmp:
            t0 = time.perf_counter()
            if name == "gcs-tm":  # the documented way: a local file, then parallel chunk uploads
                local = os.path.join(tmp, "ckpt.pt")
                torch.save(sd, local)
                transfer_manager.upload_chunks_concurrently(local, blob)
            elif name == "dataflux":
                with ckpt.writer(spec["key"]) as f:
                    torch.save(sd, f)
            else:
                with open_w() as f:
                    torch.save(sd, f)
            wall = time.perf_counter() - t0
        return {"wall_s": wall, "cpu_s": _cpu() - cpu0, "bytes": nbytes,
                "peak_rss_mb": mem.peak / MIB, "extra_rss_mb": (mem.peak - mem.base) / MIB}
    cpu0 = _cpu()
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        if name == "gcs-tm":
            local = os.path.join(tmp, "ckpt.pt")
            transfer_manager.download_chunks_concurrently(blob, local)
            loaded = torch.load(local, weights_only=True)
        elif name == "dataflux":
            with ckpt.reader(spec["key"]) as f:
                loaded = torch.load(f, weights_only=True)
        else:
            with open_r() as f:
                loaded = torch.load(f, weights_only=True)
        wall = time.perf_counter() - t0
    cpu = _cpu() - cpu0
    _check(torch, loaded, size)
    return {"wall_s": wall, "cpu_s": cpu}


def _gcs_client(spec: dict):
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage

    return storage.Client(project="bench", credentials=AnonymousCredentials(),
                          client_options={"api_endpoint": spec["url"]})


def _dataflux(spec: dict):
    # dataflux builds its own storage.Client(project=...), which finds the server through
    # STORAGE_EMULATOR_HOST (set by the parent); passing a client would make it probe IAM.
    from dataflux_pytorch import dataflux_checkpoint

    return dataflux_checkpoint.DatafluxCheckpoint(project_name="bench", bucket_name=spec["bucket"])


# -- the parent: contenders as subprocess pairs ----------------------------------------------------

def _dataflux_python(create: bool) -> str:
    """The second venv's python, created with pip on first use; raises with the reason if impossible."""
    py = DATAFLUX_VENV / "bin" / "python"
    probe = [str(py), "-c", "import dataflux_pytorch.dataflux_checkpoint, torch"]
    if py.exists() and subprocess.run(probe, capture_output=True).returncode == 0:
        return str(py)
    if not create:
        raise RuntimeError(f"{DATAFLUX_VENV} is missing (run without --no-dataflux-venv to create it)")
    print(f"  [checkpoint] creating {DATAFLUX_VENV} for the dataflux contender (one-off)", file=sys.stderr)
    base = getattr(sys, "_base_executable", sys.executable)
    subprocess.run([base, "-m", "venv", str(DATAFLUX_VENV)], check=True, capture_output=True)
    pip = subprocess.run([str(py), "-m", "pip", "install", "-q", *DATAFLUX_PACKAGES], capture_output=True, text=True)
    if pip.returncode != 0:
        raise RuntimeError(f"pip install {' '.join(DATAFLUX_PACKAGES)} failed: {pip.stderr.strip()[-300:]}")
    check = subprocess.run(probe, capture_output=True, text=True)
    if check.returncode != 0:
        raise RuntimeError(f"dataflux checkpoint does not import: {check.stderr.strip()[-300:]}")
    return str(py)


def _run_worker(python: str, spec: dict, env: dict) -> dict:
    out = subprocess.run([python, "-m", "bench.checkpoint", "--worker", json.dumps(spec)], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=3600)
    if out.returncode != 0:
        raise RuntimeError(failure(f"{spec['contender']} {spec['op']}", out))
    return json.loads(out.stdout.strip().splitlines()[-1])


def run(args: argparse.Namespace) -> dict:
    from .common import run_scenario, start_server

    size = args.size or (256 * 10**6 if args.quick else 2 * 10**9)
    params = {"size": size, "tensors": len(_layout(size)), "part_size": args.part_size,
              "write_concurrency": args.write_concurrency}
    with start_server(args) as srv:
        srv.create_bucket(BUCKET)
        env = {**os.environ, "PYTHONPATH": str(ROOT), "STORAGE_EMULATOR_HOST": srv.url}
        try:
            df_python: str | None = _dataflux_python(create=not args.no_dataflux_venv)
            df_error = None
        except Exception as exc:  # reported as the contender's error
            df_python, df_error = None, f"{type(exc).__name__}: {exc}"

        def contender(name: str):
            def one() -> dict:
                if name == "dataflux" and df_python is None:
                    raise RuntimeError(df_error)
                python = df_python if name == "dataflux" else sys.executable
                spec = {"contender": name, "url": srv.url, "bucket": BUCKET, "key": f"{name}/ckpt.pt",
                        "size": size, "part_size": args.part_size, "write_concurrency": args.write_concurrency,
                        "read_concurrency": args.read_concurrency}
                save = _run_worker(python, {**spec, "op": "save"}, env)
                load = _run_worker(python, {**spec, "op": "load"}, env)
                n = save["bytes"]
                return {"bytes": n, "save_mb_per_s": n / save["wall_s"] / 1e6,
                        "load_mb_per_s": n / load["wall_s"] / 1e6,
                        "save_s": save["wall_s"], "load_s": load["wall_s"], "wall_s": save["wall_s"] + load["wall_s"],
                        "cpu_s": save["cpu_s"] + load["cpu_s"], "save_peak_rss_mb": save["peak_rss_mb"],
                        "save_extra_rss_mb": save["extra_rss_mb"]}
            return one

        contenders = {name: contender(name) for name in CONTENDERS}
        ratios = [("fluxfs", "gcsfs"), ("fluxfs", "gcsfs-64MiB"), ("fluxfs", "gcsfs-whole"), ("fluxfs", "dataflux"),
                  ("fluxfs", "gcs-tm"),
                  ("fluxfs-compose", "gcsfs"), ("fluxfs-compose", "dataflux")]
        report = run_scenario("checkpoint", args, params, contenders, ["save_mb_per_s", "load_mb_per_s"], ratios)
    for name, c in report["contenders"].items():  # also in the JSON; stderr keeps the ratio line last
        if "median" in c:
            print(f"  [checkpoint] {name}: saving process peak extra RSS {c['median']['save_extra_rss_mb']:.0f} MiB",
                  file=sys.stderr)
    return report


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--worker":
        print(json.dumps(worker(json.loads(sys.argv[2]))))
    else:
        sys.exit("usage: python -m bench checkpoint [options]  (this module's own entry point is for its workers)")
