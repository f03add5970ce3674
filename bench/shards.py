"""`python -m bench shards`: training from tar shards, and packing objects into them (issue 19).

The training benchmark's images (bench/training.py: 20k objects of 10-100 KB; --quick 4k) are packed
into shards of ~64 MB with `fluxfs shard` (before the clock), then one epoch of the same model and
DataLoader settings (batch 64, --workers workers, prefetch_factor 2) is trained from:
  fluxfs-shards      FluxShardDataset(shuffle=True): each worker streams its shards with ranged GETs
  fluxfs-shards-map  FluxShardMapDataset with its own shuffled sampler (ranged GETs per batch, read-ahead)
  fluxfs-shards-map-blocks  the same, its sampler shuffling runs of 8 neighbouring samples (block=8): a batch
                     of 64 is 8 runs, 8 ranged GETs
  fluxfs-map         FluxMapDataset over the objects themselves, its own sampler (today's best per-object path)
  fluxfs-map-shuffle the same with DataLoader(shuffle=True): any sampler, no read-ahead
  webdataset         wds.WebDataset over the same shards, opened through gcsfs (an fsspec opener),
                     shard shuffle and a 256-sample shuffle buffer
  limit              the objects' bytes already in memory
Packing (set "pack"): `fluxfs shard SRC DST --max-size 64MB` of the objects (listing, batched reads,
shard and index uploads), against reading the same objects once with gcsfs `cat` in 128 MB calls.
Not included: MosaicML `streaming` reads gs:// through the S3 interoperability API at a fixed
storage.googleapis.com endpoint with HMAC keys (no endpoint to point at another server), and
LitData needs its own format and client; neither could read from the embedded server as shipped.
Reported: samples/s, MB/s, client CPU seconds per GB, share of step time waiting for data, and the
server's count of reads and the most in flight at once (what bounds a fully shuffled shard map path).
"""
from __future__ import annotations

import argparse
import contextlib
import io
import os
import time
from typing import Any, Callable, Iterable

from .common import WrongResult, finish_combined, run_scenario, start_server
from .training import BATCH, SIZES, InMemoryDataset, decode, expected_sums, train_epoch

BUCKET = "bench-shards"
SHARD_SIZE = "64MB"


def add_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--workers", type=int, default=2, help="DataLoader worker processes (same for all)")
    parser.add_argument("--sets", default="training,pack", help="which sets to run: training, pack")


def decode_sample(sample: dict):
    """A shard sample -> (image, label), the same decoding as the per-object contenders."""
    return decode(sample["bin"])


class GcsfsOpener:
    """webdataset's opener for gs:// URLs: gcsfs's file object (one filesystem per process)."""

    def __init__(self, endpoint: str):
        self.endpoint = endpoint
        self._fs, self._pid = None, None

    def __call__(self, url: str, mode: str = "rb", bufsize: int = 8192, **kw: Any):
        if self._pid != os.getpid():
            import gcsfs.core  # not gcsfs.GCSFileSystem: its bucket-type probe (gRPC) stalls on other servers

            self._fs = gcsfs.core.GCSFileSystem(endpoint_url=self.endpoint, token="anon", skip_instance_cache=True)
            self._pid = os.getpid()
        return self._fs.open(url, mode)


def _pack_cli(url: str, src: str, dst: str) -> None:
    from fluxfs.cli import main

    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        code = main(["--endpoint", url, "-q", "shard", src, dst, "--max-size", SHARD_SIZE, "--no-labels"])
    if code != 0:
        raise RuntimeError(f"fluxfs shard failed ({code}): {err.getvalue().strip()}")


def _per_gb(report: dict) -> None:
    """Client CPU seconds per GB moved, beside each median."""
    for c in report["contenders"].values():
        med = c.get("median")
        if med and med.get("bytes"):
            med["cpu_s_per_gb"] = med["cpu_s"] / (med["bytes"] / 1e9)


def run(args: argparse.Namespace) -> dict:
    import torch
    import webdataset as wds
    from torch.utils.data import DataLoader

    from fluxfs import FluxFileSystem
    from fluxfs.pipes import FluxMapDataset
    from fluxfs.pipes.shards import FluxShardDataset, FluxShardMapDataset

    torch.set_num_threads(1)  # as bench/training.py: the workers need the other core
    sets = set(args.sets.split(","))
    count = args.objects or (4_000 if args.quick else 20_000)
    prefix = f"img-{count}/"
    seed = 0
    combined: dict = {"scenario": "shards", "profile": args.profile, "sets": {}, "ratios": {}}
    with start_server(args) as srv:
        url = srv.url
        srv.create_bucket(BUCKET)
        srv.generate(BUCKET, count, size=SIZES, prefix=prefix, seed=seed)
        so = {"endpoint_url": url, "token": "anon"}
        fs = FluxFileSystem(endpoint_url=url, token="anon", skip_instance_cache=True)
        infos = sorted(fs.find(f"{BUCKET}/{prefix}", detail=True).values(), key=lambda i: i["name"])
        if len(infos) != count:
            raise RuntimeError(f"listing found {len(infos)} of {count} objects")
        total_bytes = sum(i["size"] for i in infos)
        src = f"flux://{BUCKET}/{prefix}"
        shard_dir = f"flux://{BUCKET}/shards-{count}/"
        loader_kw = dict(batch_size=BATCH, num_workers=args.workers)
        if args.workers:
            loader_kw["prefetch_factor"] = 2

        if "training" in sets:
            _pack_cli(url, src, shard_dir + "shard-{:06d}.tar")
            shard_urls = sorted(f"gs://{p}" for p in fs.find(shard_dir) if p.endswith(".tar"))
            sums = expected_sums([i["name"].split("/", 1)[1] for i in infos], [i["size"] for i in infos], seed)

            def measured(make_batches: Callable[[], Iterable]) -> Callable[[], dict]:
                def fn() -> dict:
                    batches = make_batches()
                    srv.reset_stats()
                    r = train_epoch(batches)
                    stats = srv.stats()
                    if (r["samples"], r["label_sum"], r["pixel_sum"]) != (count, *sums):
                        raise WrongResult(f"epoch saw {r['samples']} samples, sums {r['label_sum']}/{r['pixel_sum']}; "
                                          f"expected {count}, {sums[0]}/{sums[1]}")
                    return {"objects": count, "bytes": total_bytes, "samples_per_s": count / r["wall_s"],
                            "wall_s": r["wall_s"], "data_wait_share": r["wait_s"] / r["wall_s"],
                            # what the server saw: GETs per sample and the most in flight at once
                            "reads": stats["requests"].get("read", 0),
                            "peak_reads_in_flight": stats["peak_in_flight"].get("read", 0)}
                return fn

            def shards_iterable():
                ds = FluxShardDataset.from_prefix(shard_dir, storage_options=so, shuffle=True, seed=seed,
                                                  transform=decode_sample)
                return DataLoader(ds, **loader_kw)

            def shards_map(block: int):
                def make():
                    ds = FluxShardMapDataset.from_prefix(shard_dir, storage_options=so, transform=decode_sample)
                    return DataLoader(ds, sampler=ds.sampler(shuffle=True, seed=seed, block=block), **loader_kw)
                return make

            def objects_map(own_sampler: bool):
                def make():
                    ds = FluxMapDataset.from_prefix(src, storage_options=so, transform=decode)
                    len(ds)
                    if own_sampler:
                        return DataLoader(ds, sampler=ds.sampler(shuffle=True, seed=seed), **loader_kw)
                    return DataLoader(ds, shuffle=True, **loader_kw)
                return make

            def webdataset():
                wds.gopen_schemes["gs"] = GcsfsOpener(url)
                ds = (wds.WebDataset(shard_urls, shardshuffle=len(shard_urls), seed=seed, empty_check=False)
                      .shuffle(256).map(decode_sample))
                return DataLoader(ds, **loader_kw)

            got = fs.cat_objects(infos)
            blobs = [got[i["name"]] for i in infos]
            del got

            def in_memory():
                return DataLoader(InMemoryDataset(blobs), shuffle=True, **loader_kw)

            contenders = {
                "fluxfs-shards": measured(shards_iterable),
                "fluxfs-shards-map": measured(shards_map(1)),
                "fluxfs-shards-map-blocks": measured(shards_map(8)),
                "fluxfs-map": measured(objects_map(True)),
                "fluxfs-map-shuffle": measured(objects_map(False)),
                "webdataset": measured(webdataset),
                "limit": measured(in_memory),
            }
            params = {"objects": count, "size_range": list(SIZES), "batch_size": BATCH, "workers": args.workers,
                      "shards": len(shard_urls), "shard_size": SHARD_SIZE}
            report = run_scenario("shards-training", args, params, contenders, "samples_per_s",
                                  [("fluxfs-shards", "limit"), ("fluxfs-shards", "webdataset"),
                                   ("fluxfs-shards-map", "fluxfs-map"), ("fluxfs-shards-map-blocks", "fluxfs-map"),
                                   ("fluxfs-shards-map", "fluxfs-map-shuffle"),
                                   ("fluxfs-shards-map-blocks", "fluxfs-map-shuffle"), ("fluxfs-shards-map", "limit"),
                                   ("fluxfs-map", "limit")])
            del blobs
            _per_gb(report)
            shares = {n: c["median"]["data_wait_share"] for n, c in report["contenders"].items() if "median" in c}
            print("share of step time waiting for data: " + "  ".join(f"{k}={v:.0%}" for k, v in shares.items()))
            print("server reads (peak in flight): " + "  ".join(
                f"{n}={c['median']['reads']:.0f} ({c['median']['peak_reads_in_flight']:.0f})"
                for n, c in report["contenders"].items() if "median" in c and "reads" in c["median"]))
            combined["sets"]["training"] = report
            combined["ratios"].update(report["ratios"])

        if "pack" in sets:
            runs = {"n": 0}

            def pack() -> dict:
                runs["n"] += 1
                fs.rm(f"{BUCKET}/pack-{runs['n'] - 1}", recursive=True) if runs["n"] > 1 else None
                dst = f"flux://{BUCKET}/pack-{runs['n']}/shard-{{:06d}}.tar"
                t0 = time.perf_counter()
                _pack_cli(url, src, dst)
                wall = time.perf_counter() - t0
                fs.invalidate_cache()
                written = sum(i["size"] for i in fs.find(f"{BUCKET}/pack-{runs['n']}/", detail=True).values()
                              if i["name"].endswith(".tar"))
                if written < total_bytes:
                    raise WrongResult(f"shards hold {written} bytes, less than the {total_bytes} packed")
                return {"objects": count, "bytes": total_bytes, "wall_s": wall}

            def gcsfs_cat() -> dict:
                import gcsfs.core

                gfs = gcsfs.core.GCSFileSystem(endpoint_url=url, token="anon", skip_instance_cache=True)
                got, chunk, size = 0, [], 0
                for i in infos + [None]:
                    if i is not None:
                        chunk.append(i["name"])
                        size += i["size"]
                    if chunk and (i is None or size >= 128 * 10**6):
                        got += sum(map(len, gfs.cat(chunk).values()))
                        chunk, size = [], 0
                if got != total_bytes:
                    raise WrongResult(f"gcsfs read {got} bytes of {total_bytes}")
                return {"objects": count, "bytes": total_bytes}

            params = {"objects": count, "size_range": list(SIZES), "shard_size": SHARD_SIZE}
            report = run_scenario("shards-pack", args, params, {"pack": pack, "gcsfs-cat": gcsfs_cat},
                                  "objects_per_s", [("pack", "gcsfs-cat")])
            _per_gb(report)
            combined["sets"]["pack"] = report
            combined["ratios"].update(report["ratios"])
    combined["params"] = {"objects": count, "workers": args.workers, "repeat": args.repeat}
    return finish_combined("shards", args, combined)
