"""`python -m bench.cache_cpu`: client CPU per object of a cold epoch through `fs.cat_objects`, cache off and on.

What a loader pays for turning the node-local cache on, measured in CPU, not wall time (less at the mercy
of a busy shared machine, though its caches and clocks still add noise: compare medians of several rounds):
N objects of 10-100 KB (bench/training.py's sizes) read once each, in shuffled batches of 16 and 64, with
and without `cache_dir` (a fresh directory per cached run, so every read is cold), against the embedded
server in another process. Client CPU is this process's user+sys (`resource.getrusage(RUSAGE_SELF)`, the
server is not counted), the cache's filler thread included (the epoch ends when its fills are written).
Runs alternate (nocache, cache, nocache, cache ...); the median of the repeats is quoted, with min and
max, and the packs one cached epoch leaves (count and sizes).
`--profile-cached FILE`: one more cached epoch, every thread of this process profiled (cProfile with each
thread's CPU clock) into FILE, for `pstats`.
"""
from __future__ import annotations

import argparse
import cProfile
import os
import random
import resource
import shutil
import statistics
import tempfile
import time


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def main(argv: list[str] | None = None) -> int:
    from fluxfs import FluxFileSystem
    from fluxfs.cache import objects
    from fluxfs.server import run

    from .training import SIZES

    p = argparse.ArgumentParser(prog="python -m bench.cache_cpu", description=__doc__)
    p.add_argument("--objects", type=int, default=2000)
    p.add_argument("--batch", type=int, nargs="+", default=[16, 64])
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--profile-cached", default=None, help="cProfile the cached runs into this file")
    args = p.parse_args(argv)
    with run(profile="local") as srv:
        srv.create_bucket("cpu")
        srv.generate("cpu", args.objects, size=SIZES, prefix="o/", seed=0)
        fs0 = FluxFileSystem(endpoint_url=srv.url, token="anon", skip_instance_cache=True)
        infos = sorted(fs0.find("cpu/o/", detail=True).values(), key=lambda i: i["name"])
        total = sum(i["size"] for i in infos)
        results: dict[tuple[int, str], list[float]] = {}
        packs: dict[int, list[int]] = {}
        for rep in range(args.repeat):
            for batch in args.batch:
                for mode in ("nocache", "cache"):
                    order = list(infos)
                    random.Random(rep).shuffle(order)
                    d = tempfile.mkdtemp(prefix="fluxfs-cache-cpu-") if mode == "cache" else None
                    opts = {"cache_dir": d} if d else {}
                    fs = FluxFileSystem(endpoint_url=srv.url, token="anon", skip_instance_cache=True, **opts)
                    fs.cat_objects(order[:1])  # connections and threads made before the clock
                    order = order[1:]
                    t0, c0 = time.perf_counter(), _cpu()
                    got = 0
                    for at in range(0, len(order), batch):
                        got += sum(map(len, fs.cat_objects(order[at:at + batch]).values()))
                    objects.flush()  # the fills of this epoch are part of its cost
                    cpu, wall = _cpu() - c0, time.perf_counter() - t0
                    if got != total - infos_size(infos, order):
                        raise RuntimeError(f"read {got} bytes, expected {total - infos_size(infos, order)}")
                    results.setdefault((batch, mode), []).append(cpu / len(order) * 1e6)
                    print(f"rep {rep} batch {batch:3d} {mode:8s} cpu {cpu / len(order) * 1e6:7.0f} us/object "
                          f"wall {wall:5.2f} s", flush=True)
                    if d:
                        sizes = [os.path.getsize(os.path.join(d, f)) for f in os.listdir(d) if f.endswith(".pack")]
                        packs[batch] = sizes
                        shutil.rmtree(d, ignore_errors=True)
        print(f"\n{args.objects} objects, {total / 1e6:.0f} MB; client CPU per object (us), median [min-max]:")
        for batch in args.batch:
            row = []
            for mode in ("nocache", "cache"):
                v = results[(batch, mode)]
                row.append(f"{mode} {statistics.median(v):5.0f} [{min(v):.0f}-{max(v):.0f}]")
            ratio = statistics.median(results[(batch, "cache")]) / statistics.median(results[(batch, "nocache")])
            sizes = packs.get(batch, [])
            print(f"batch {batch:3d}: " + "  ".join(row) + f"  cache/nocache {ratio:.2f}  packs {len(sizes)} "
                  f"(median {statistics.median(sizes) / 1e6 if sizes else 0:.1f} MB)")
        if args.profile_cached:
            _profiled(srv.url, infos, args.batch[0], args.profile_cached)
    return 0


def _profiled(url: str, infos: list, batch: int, out: str) -> None:
    """One more cached epoch, every thread of this process profiled (the loop's, the cache's, the filler's)."""
    import pstats
    import threading

    from fluxfs import FluxFileSystem
    from fluxfs.cache import objects

    profs: list[cProfile.Profile] = []

    def start(*_args: object) -> None:
        prof = cProfile.Profile(time.thread_time)  # CPU of this thread, not wall time
        profs.append(prof)
        prof.enable()  # replaces this hook in this thread

    d = tempfile.mkdtemp(prefix="fluxfs-cache-cpu-")
    try:
        threading.setprofile(start)  # threads started from now on (the cache's pools)
        fs = FluxFileSystem(endpoint_url=url, token="anon", skip_instance_cache=True, cache_dir=d)
        fs.loop.call_soon_threadsafe(start)
        if objects._QUEUED.filler is not None:
            objects._QUEUED.filler.submit(start).result()
        start()
        for at in range(0, len(infos), batch):
            fs.cat_objects(infos[at:at + batch])
        objects.flush()
        threading.setprofile(None)
        for prof in profs:
            prof.create_stats()
        pstats.Stats(*profs).dump_stats(out)
    finally:
        shutil.rmtree(d, ignore_errors=True)


def infos_size(infos: list, order: list) -> int:
    """Bytes of the objects not in `order` (the one read before the clock)."""
    names = {i["name"] for i in order}
    return sum(i["size"] for i in infos if i["name"] not in names)


if __name__ == "__main__":
    raise SystemExit(main())
