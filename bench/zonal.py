"""`python -m bench zonal`: a zonal (Rapid) bucket against a regional one, and fluxfs against gcsfs's
`ExtendedGcsFileSystem` on the same zonal bucket (issue "Rapid").

One embedded server (it answers HTTP and, for zonal buckets, gRPC on the same port). Sets (--quick smaller):
  small       20,000 x 10 KiB (2,000)    fluxfs: `fs.cat_objects(infos)` per batch; gcsfs: `fs.cat(paths)`
  large       512 x 1 MiB (64)           the same calls
  checkpoint  a 2 GB state dict (64 MB)  `torch.save` into `fs.open(path, "wb")`, `torch.load` from "rb"
  model       2 GB in 4 safetensors shards (64 MB)   fluxfs: `load_model_dir`; gcsfs:
              `safetensors.torch.load(fs.cat(shard))` per shard (as bench/weights.py's gcsfs-cat)
Contenders, interleaved: flux-zonal (fluxfs on the zonal bucket: gRPC BidiReadObject and appendable
writes), flux-regional (the same on a regional bucket: compose batching, HTTP), gcsfs-zonal
(`gcsfs.extended_gcsfs.ExtendedGcsFileSystem` on the zonal bucket; its storage-control layout lookup
opens a TLS channel an emulator cannot answer, so the bucket's type is given to it as a user of an
emulator would: its own layout cache primed with ZONAL_HIERARCHICAL). Every result is checked (bytes,
crc32c or tensors), untimed where possible. Headline MB/s; client CPU s/GB beside it.
Ratios: `SET:flux-zonal/gcsfs-zonal` (targets: small >= 3, large, checkpoint load and model >= 1.5; the
checkpoint set reports save and load apart, `checkpoint:save:...` and `checkpoint:load:...`),
`SET:flux-zonal/flux-regional`, and `cpu:SET:flux-zonal/gcsfs-zonal` (CPU per GB, lower is better: <= 1).
"""
from __future__ import annotations

import argparse
import io
import os
import time
from typing import Any, Callable, Dict

import google_crc32c
from fsspec.asyn import sync

from .common import WrongResult, finish_combined, run_scenario, start_server

KIB, MIB = 1024, 2**20
ZONE, REGION = "us-central1-a", "us-central1"
SETS = ("small", "large", "checkpoint", "model")
CONTENDERS = ("flux-zonal", "flux-regional", "gcsfs-zonal")


def add_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--sets", default=",".join(SETS), help=f"comma-separated subset of {','.join(SETS)}")
    parser.add_argument("--batch-bytes", type=int, default=128 * MIB, help="bytes per cat call")
    parser.add_argument("--ckpt-size", type=int, default=None,
                        help="checkpoint / model bytes (default 2 GB; quick 64 MB)")


def _gcsfs(url: str, buckets: Dict[str, bool]) -> Any:
    """gcsfs's zonal filesystem on our server, told each bucket's type (its gRPC layout lookup needs TLS)."""
    from gcsfs.extended_gcsfs import BucketType, ExtendedGcsFileSystem

    gfs = ExtendedGcsFileSystem(endpoint_url=url, token="anon", skip_instance_cache=True)
    for bucket, zonal in buckets.items():
        gfs._storage_layout_cache[bucket] = BucketType.ZONAL_HIERARCHICAL if zonal else BucketType.NON_HIERARCHICAL
    return gfs


def _objects_set(flux, gfs, bucket: str, count: int, size: int, batch_bytes: int) -> Dict[str, Callable]:
    """Reads of `count` objects of `size` bytes under bucket/objs/: fluxfs's batched read and gcsfs's cat."""
    prefix = f"{bucket}/objs-{count}x{size}/"
    data = {f"{prefix}{i:07d}": os.urandom(size) for i in range(count)}
    for i in range(0, count, 1000):
        flux.pipe(dict(list(data.items())[i:i + 1000]))
    infos = sorted(flux.find(prefix, detail=True).values(), key=lambda i: i["name"])
    want = {i["name"]: i["crc32c"] for i in infos}
    if len(infos) != count:
        raise RuntimeError(f"{prefix}: listed {len(infos)} of {count}")
    per_batch = max(1, batch_bytes // size)

    def check(got: Dict[str, bytes]) -> None:
        from fluxfs.gcs.checksums import crc_to_b64

        if len(got) != count or any(crc_to_b64(google_crc32c.value(b)) != want[n] for n, b in got.items()):
            raise WrongResult(f"{prefix}: wrong bytes")

    def flux_fn() -> dict:
        got: Dict[str, bytes] = {}
        for i in range(0, count, per_batch):
            got.update(flux.cat_objects(infos[i:i + per_batch]))
        check({k.split("://")[-1]: v for k, v in got.items()})
        return {"objects": count, "bytes": count * size}

    def gcsfs_fn() -> dict:
        got: Dict[str, bytes] = {}
        names = [i["name"] for i in infos]
        for i in range(0, count, per_batch):
            got.update(gfs.cat(names[i:i + per_batch]))
        check(got)
        return {"objects": count, "bytes": count * size}

    return {"flux": flux_fn, "gcsfs": gcsfs_fn}


def _checkpoint_set(flux, gfs, bucket: str, size: int) -> Dict[str, Callable]:
    """torch.save into fs.open("wb") then torch.load from fs.open("rb"): each timed, the tensors compared."""
    import torch

    n = size // 4 // 16
    sd = {f"layer{i}.weight": torch.randn(n) for i in range(16)}
    path = f"{bucket}/ckpt/state.pt"

    def one(fs) -> Callable[[], dict]:
        def fn() -> dict:
            t0 = time.perf_counter()
            with fs.open(path, "wb") as f:
                torch.save(sd, f)
            t1 = time.perf_counter()
            with fs.open(path, "rb") as f:
                got = torch.load(io.BufferedReader(f, 8 * MIB), weights_only=True)
            t2 = time.perf_counter()
            if sorted(got) != sorted(sd) or any(not torch.equal(got[k], sd[k]) for k in sd):
                raise WrongResult(f"{path}: the loaded state dict differs")
            size = 16 * n * 4
            return {"bytes": 2 * size, "save_mb_per_s": size / (t1 - t0) / 1e6,  # written and read
                    "load_mb_per_s": size / (t2 - t1) / 1e6}
        return fn

    return {"flux": one(flux), "gcsfs": one(gfs)}


def _model_set(flux, gfs, bucket: str, size: int) -> Dict[str, Callable]:
    """A safetensors model in 4 shards: fluxfs's load_model_dir against gcsfs cat + safetensors.torch.load."""
    import json

    import safetensors.torch as st
    import torch

    from fluxfs.pipes.safetensors import load_model_dir

    from .weights import check_loaded, layout, shard_file, shard_names, state

    sd = state(torch, size)
    weight_map = {}
    for k, names in enumerate(shard_names(size, 4)):
        flux.pipe_file(f"{bucket}/model/{shard_file(k, 4)}", st.save({n: sd[n] for n in names}))
        weight_map.update({n: shard_file(k, 4) for n in names})
    flux.pipe_file(f"{bucket}/model/model.safetensors.index.json", json.dumps({"weight_map": weight_map}).encode())
    total = sum(t.numel() * t.element_size() for t in sd.values())
    del sd

    def flux_fn() -> dict:
        got = load_model_dir(f"flux://{bucket}/model", fs=flux)
        check_loaded(torch, got, size)
        return {"bytes": total}

    def gcsfs_fn() -> dict:
        got: dict = {}
        for k in range(4):
            got.update(st.load(gfs.cat(f"{bucket}/model/{shard_file(k, 4)}")))
        check_loaded(torch, got, size)
        return {"bytes": total}

    assert layout(size)  # the model's shape is bench/weights.py's
    return {"flux": flux_fn, "gcsfs": gcsfs_fn}


def run(args: argparse.Namespace) -> dict:
    from fluxfs import FluxFileSystem

    chosen = [s for s in args.sets.split(",") if s]
    unknown = set(chosen) - set(SETS)
    if unknown:
        raise SystemExit(f"--sets: unknown set(s) {', '.join(sorted(unknown))}; choose from {', '.join(SETS)}")
    big = args.ckpt_size or (64 * 10**6 if args.quick else 2 * 10**9)
    counts = {"small": (2_000 if args.quick else 20_000, 10 * KIB), "large": (64 if args.quick else 512, MIB)}
    combined: Dict[str, Any] = {"scenario": "zonal", "profile": args.profile, "sets": {}, "ratios": {}}
    with start_server(args) as srv:
        flux = FluxFileSystem(endpoint_url=srv.url, token="anon", skip_instance_cache=True)
        zb, rb = "bench-zonal-z", "bench-zonal-r"
        flux.mkdir(zb, placement=ZONE, location=REGION)
        flux.mkdir(rb)
        for name in chosen:
            # A gcsfs of its own per set: the read streams it pools end with their set, as fluxfs's do.
            gfs = _gcsfs(srv.url, {zb: True, rb: False})
            fns: Dict[str, Callable] = {}
            for bucket, zonal in ((zb, True), (rb, False)):
                if name in counts:
                    made = _objects_set(flux, gfs, bucket, *counts[name], args.batch_bytes)
                elif name == "checkpoint":
                    made = _checkpoint_set(flux, gfs, bucket, big)
                else:
                    made = _model_set(flux, gfs, bucket, big)
                fns["flux-zonal" if zonal else "flux-regional"] = made["flux"]
                if zonal:
                    fns["gcsfs-zonal"] = made["gcsfs"]
            params = {"set": name, "bytes": big if name in ("checkpoint", "model") else counts[name]}
            headline = ["save_mb_per_s", "load_mb_per_s"] if name == "checkpoint" else "mb_per_s"
            report = run_scenario(f"zonal-{name}", args, params, {c: fns[c] for c in CONTENDERS}, headline,
                                  [("flux-zonal", "gcsfs-zonal"), ("flux-zonal", "flux-regional")])
            combined["sets"][name] = report
            for k, v in report["ratios"].items():
                combined["ratios"][f"{name}:{k}"] = v
            med = {c: r.get("median", {}) for c, r in report["contenders"].items()}
            a, b = med.get("flux-zonal", {}).get("cpu_s_per_gb"), med.get("gcsfs-zonal", {}).get("cpu_s_per_gb")
            if a and b:
                combined["ratios"][f"cpu:{name}:flux-zonal/gcsfs-zonal"] = round(a / b, 2)
            sync(gfs.loop, gfs._close_resources)  # closed while the server is up, its streams end quietly
    combined["params"] = {"sets": chosen, "big_bytes": big, "objects": counts, "repeat": args.repeat}
    return finish_combined("zonal", args, combined)
