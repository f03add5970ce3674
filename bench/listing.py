"""`python -m bench listing`: listing a large bucket (issue 3).

Sets: 100k and 1M objects (--quick: 20k; --objects N: one set), size 0 unless --size.
Contenders, interleaved on the same server and bucket:
  fluxfs        `fs.find(bucket)`: the parallel range lister behind gcsfs's own API (sorted names, dircache filled)
  fluxfs-iter   `fs.iter_objects(bucket)`: the streaming lister, unsorted batches of info dicts
  gcsfs         `gcsfs.core.GCSFileSystem.find(bucket)`: sequential pages of 1,000, full metadata
  dataflux      `dataflux_core.fast_list.ListingController(max_parallelism=cores).run()`: processes + work stealing
  sequential    a bare loop of objects.list pages of 1,000 with fluxfs's partial-response fields
                (what concurrency alone buys over it)
Every contender's result is checked (count, no duplicates, first and last name) after its timing.
Reported: objects/s and client CPU seconds (this process plus its finished child processes;
the server runs in its own process and is not counted).
"""
from __future__ import annotations

import argparse
import os
import resource
import time
from typing import Callable

from .common import WrongResult, run_scenario, start_server

FULL_SETS = [100_000, 1_000_000]
QUICK_SETS = [20_000]
PREFIX = "train/img_"


def add_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--concurrency", default=None,
                        help="also run fluxfs-iter at these list_concurrency values (comma-separated), e.g. 8,16,32,64")
    parser.add_argument("--dataflux-procs", type=int, default=os.cpu_count() or 1,
                        help="Dataflux listing processes (default: cores, as Dataflux does)")


def _cpu() -> float:
    me = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def _timed(list_names: Callable[[], list], count: int, bucket: str) -> Callable[[], dict]:
    """A contender: time `list_names()` alone, then check its names (not timed)."""
    first, last = f"{PREFIX}{0:08d}", f"{PREFIX}{count - 1:08d}"

    def run() -> dict:
        c0, t0 = _cpu(), time.perf_counter()
        names = list_names()
        wall, cpu = time.perf_counter() - t0, _cpu() - c0
        keys = {n[len(bucket) + 1:] if n.startswith(bucket + "/") else n for n in names}
        if len(names) != count or len(keys) != count or min(keys) != first or max(keys) != last:
            raise WrongResult(f"listed {len(names)} names ({len(keys)} distinct), expected {count}")
        return {"objects": count, "wall_s": wall, "cpu_s": cpu}

    return run


def _sequential(fs, bucket: str) -> list:
    """objects.list pages of 1,000 one after the other, same fields and pager (fluxfs.gcs.pager) as fluxfs."""
    from fluxfs.gcs.pager import list_pages
    from fluxfs.listing import LIST_FIELDS

    async def go() -> list:
        names = []
        async for page in list_pages(fs, bucket, fields=LIST_FIELDS, page_size=1000):
            names += [it["name"] for it in page.get("items", ())]
        return names

    from fsspec.asyn import sync

    return sync(fs.loop, go)


def run(args: argparse.Namespace) -> dict:
    import gcsfs.core

    from fluxfs import FluxFileSystem

    sets = [args.objects] if args.objects else (QUICK_SETS if args.quick else FULL_SETS)
    size = args.size or 0
    report: dict = {}
    for count in sets:
        with start_server(args) as srv:
            bucket = f"bench-listing-{count}"
            srv.create_bucket(bucket)
            t0 = time.perf_counter()
            srv.generate(bucket, count, size, prefix=PREFIX)
            print(f"  [listing] {count} objects generated in {time.perf_counter() - t0:.1f}s", flush=True)
            os.environ["STORAGE_EMULATOR_HOST"] = srv.url   # Dataflux's storage.Client finds the server here

            def flux(**opts):
                return FluxFileSystem(endpoint_url=srv.url, token="anon", skip_instance_cache=True, **opts)

            def fluxfs_find():
                return flux().find(bucket)

            def fluxfs_iter(**opts):
                return lambda: [o["name"] for b in flux(**opts).iter_objects(bucket) for o in b]

            def gcsfs_find():
                gfs = gcsfs.core.GCSFileSystem(endpoint_url=srv.url, token="anon", skip_instance_cache=True)
                return gfs.find(bucket)

            def dataflux_list():
                from dataflux_core.fast_list import ListingController

                return [name for name, _size in ListingController(args.dataflux_procs, "bench", bucket).run()]

            contenders = {
                "fluxfs": _timed(fluxfs_find, count, bucket),
                "fluxfs-iter": _timed(fluxfs_iter(), count, bucket),
                "gcsfs": _timed(gcsfs_find, count, bucket),
                "dataflux": _timed(dataflux_list, count, bucket),
                "sequential": _timed(lambda: _sequential(flux(), bucket), count, bucket),
            }
            for c in (args.concurrency.split(",") if args.concurrency else []):
                contenders[f"fluxfs-iter-c{int(c)}"] = _timed(fluxfs_iter(list_concurrency=int(c)), count, bucket)
            params = {"objects": count, "size": size, "dataflux_procs": args.dataflux_procs}
            ratios = [("fluxfs", "gcsfs"), ("fluxfs", "dataflux"), ("fluxfs", "sequential"),
                      ("fluxfs-iter", "gcsfs"), ("fluxfs-iter", "dataflux")]
            set_args = args
            if len(sets) > 1 and args.json and count != sets[-1]:
                # One JSON per set: the last set keeps the plain name, earlier ones get "-<count>".
                root, ext = os.path.splitext(args.json)
                set_args = argparse.Namespace(**{**vars(args), "json": f"{root}-{count}{ext}"})
            report = run_scenario("listing", set_args, params, contenders, "objects_per_s", ratios)
    return report
