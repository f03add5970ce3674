"""`python -m bench cache`: the node-local cache (`cache_dir=`) behind the shard and object datasets (issue "Scale").

The training benchmark's images (bench/training.py: 20k objects of 10-100 KB; --quick 4k), and the same
packed into ~64 MB shards with `fluxfs shard` (before the clock). One epoch of the same model and
DataLoader settings (batch 64, --workers workers, prefetch_factor 2) per run, from:
  shards-nocache    FluxShardDataset(shuffle=True), no cache: each worker streams its shards with ranged GETs
  shards-cold       the same with cache_dir= a fresh directory: the epoch fills the cache alongside the stream
  shards-warm       the same again on the directory the cold run just filled: served from local files
  objects-nocache   FluxMapDataset with its own shuffled sampler (read-ahead), no cache
  objects-cold      the same with cache_dir= a fresh directory (objects written to it off the read path)
  objects-warm      the same again on that directory
  limit             the objects' bytes already in memory (the ceiling: compute, decoding, DataLoader only)
Runs are interleaved in that order, so each cold run starts empty and each warm run follows its cold one.
Reported: samples/s, data GETs per epoch (the server's count of object GETs that return bytes), bytes
the cache directory holds after the epoch. Ratios (per dataset): `warm/limit` (target >= 0.9),
`cold/nocache` (target >= 0.95) and `warm-gets` (target 0).
"""
from __future__ import annotations

import argparse
import shutil
import tempfile
from typing import Callable, Iterable, Optional

from .common import WrongResult, run_scenario, save_report, start_server
from .shards import _pack_cli, decode_sample
from .training import BATCH, SIZES, InMemoryDataset, decode, expected_sums, train_epoch

BUCKET = "bench-cache"


def add_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--workers", type=int, default=2, help="DataLoader worker processes (same for all)")


def run(args: argparse.Namespace) -> dict:
    import torch
    from torch.utils.data import DataLoader

    from fluxfs import FluxFileSystem
    from fluxfs.cache import NodeCache
    from fluxfs.pipes import FluxMapDataset
    from fluxfs.pipes.shards import FluxShardDataset

    torch.set_num_threads(1)  # as bench/training.py: the workers need the other core
    count = args.objects or (4_000 if args.quick else 20_000)
    prefix, seed = f"img-{count}/", 0
    dirs: list[str] = []  # cache directories this run made, removed at the end
    with start_server(args) as srv:
        srv.create_bucket(BUCKET)
        srv.generate(BUCKET, count, size=SIZES, prefix=prefix, seed=seed)
        so = {"endpoint_url": srv.url, "token": "anon"}
        fs = FluxFileSystem(endpoint_url=srv.url, token="anon", skip_instance_cache=True)
        infos = sorted(fs.find(f"{BUCKET}/{prefix}", detail=True).values(), key=lambda i: i["name"])
        if len(infos) != count:
            raise RuntimeError(f"listing found {len(infos)} of {count} objects")
        total_bytes = sum(i["size"] for i in infos)
        src, shard_dir = f"flux://{BUCKET}/{prefix}", f"flux://{BUCKET}/shards-{count}/"
        _pack_cli(srv.url, src, shard_dir + "shard-{:06d}.tar")
        shard_bytes = sum(fs.info(p)["size"] for p in fs.find(shard_dir) if p.endswith(".tar"))
        sums = expected_sums([i["name"].split("/", 1)[1] for i in infos], [i["size"] for i in infos], seed)
        loader_kw = dict(batch_size=BATCH, num_workers=args.workers)
        if args.workers:
            loader_kw["prefetch_factor"] = 2
        current: dict[str, Optional[str]] = {"shards": None, "objects": None}

        def cache_for(kind: str, mode: str) -> dict:
            if mode == "nocache":
                return so
            if mode == "cold":
                current[kind] = tempfile.mkdtemp(prefix=f"fluxfs-bench-cache-{kind}-")
                dirs.append(current[kind])  # type: ignore[arg-type]
            return {**so, "cache_dir": current[kind]}

        def measured(kind: str, mode: str, make: Callable[[dict], Iterable]) -> Callable[[], dict]:
            def fn() -> dict:
                options = cache_for(kind, mode)
                batches = make(options)  # built (and listed) before the clock
                srv.reset_stats()
                r = train_epoch(batches)
                stats = srv.stats()
                if (r["samples"], r["label_sum"], r["pixel_sum"]) != (count, *sums):
                    raise WrongResult(f"epoch saw {r['samples']} samples, sums {r['label_sum']}/{r['pixel_sum']}; "
                                      f"expected {count}, {sums[0]}/{sums[1]}")
                cached = NodeCache(options["cache_dir"]).usage() if "cache_dir" in options else 0
                return {"objects": count, "bytes": total_bytes, "samples_per_s": count / r["wall_s"],
                        "wall_s": r["wall_s"], "data_wait_share": r["wait_s"] / r["wall_s"],
                        "data_gets": stats["data_reads"], "bytes_sent": stats["bytes_out"],
                        "cache_bytes": cached}
            return fn

        def shards(options: dict):
            ds = FluxShardDataset.from_prefix(shard_dir, storage_options=options, shuffle=True, seed=seed,
                                              transform=decode_sample)
            return DataLoader(ds, **loader_kw)

        def objects(options: dict):
            ds = FluxMapDataset.from_prefix(src, storage_options=options, transform=decode)
            len(ds)
            return DataLoader(ds, sampler=ds.sampler(shuffle=True, seed=seed), **loader_kw)

        got = fs.cat_objects(infos)
        blobs = [got[i["name"]] for i in infos]
        del got

        def in_memory(_options: dict):
            return DataLoader(InMemoryDataset(blobs), shuffle=True, **loader_kw)

        contenders = {f"{kind}-{mode}": measured(kind, mode, make)
                      for kind, make in (("shards", shards), ("objects", objects))
                      for mode in ("nocache", "cold", "warm")}
        contenders["limit"] = measured("limit", "nocache", in_memory)
        params = {"objects": count, "size_range": list(SIZES), "batch_size": BATCH, "workers": args.workers,
                  "object_bytes": total_bytes, "shard_bytes": shard_bytes}
        try:
            report = run_scenario("cache", args, params, contenders, "samples_per_s",
                                  [("shards-warm", "limit"), ("shards-cold", "shards-nocache"),
                                   ("objects-warm", "limit"), ("objects-cold", "objects-nocache")])
        finally:
            for d in dirs:
                shutil.rmtree(d, ignore_errors=True)
    med = {n: c["median"] for n, c in report["contenders"].items() if "median" in c}
    for kind in ("shards", "objects"):
        for name, (a, b) in {"warm/limit": (f"{kind}-warm", "limit"),
                             "cold/nocache": (f"{kind}-cold", f"{kind}-nocache")}.items():
            if a in med and b in med:
                report["ratios"][f"{kind}:{name}"] = round(med[a]["samples_per_s"] / med[b]["samples_per_s"], 2)
        if f"{kind}-warm" in med:
            report["ratios"][f"{kind}:warm-gets"] = med[f"{kind}-warm"]["data_gets"]
    print("data GETs per epoch: " + "  ".join(f"{n}={m['data_gets']:.0f}" for n, m in med.items()))
    print("cache bytes after the epoch: " + "  ".join(f"{n}={m['cache_bytes'] / 1e6:.0f}MB"
                                                       for n, m in med.items() if m["cache_bytes"]))
    print(f"ratios (cache, {args.profile}): " + "  ".join(f"{k}={v:g}" for k, v in report["ratios"].items()))
    return save_report(args, report)
