"""`python -m bench pack`: packing one prefix into shards in 1 part and in 2 parts (`pack_prefix(part=(i, 2))`).

20,000 objects of 0.5-2 KB (--objects to change) are packed into 4 MB shards, without labels:
  1-part   `pack_prefix` in one process (the plain layout)
  2-parts  two processes (started, and fluxfs imported, before the clock), one part each; the
           clock stops when both have finished (the last one writes the merged manifest)
Each run is checked, not just timed: every object's member exactly once across the shards (read
from their indexes, sizes included) and, for 2 parts, the merged manifest listing every shard.
Reported: objects/s and wall time; the ratio 2-parts/1-part (cpu_s of 2-parts is the parent's only: the
pool's processes are not waited for until the end). On a machine of 2 cores shared with the
server the 2 parts compete for the same CPUs: the ratio is what a second core buys, not a second machine.
"""
from __future__ import annotations

import argparse
import json
import multiprocessing
import time
from concurrent.futures import ProcessPoolExecutor

from .common import WrongResult, run_scenario, start_server

BUCKET = "bench-pack"
SIZES = (512, 2048)
SHARD_SIZE = 4 * 10**6


def add_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--parts", type=int, default=2, help="parts of the parallel contender")


def _warm() -> None:
    import fluxfs.pipes.shards.packing  # noqa: F401  (torch and fluxfs imported before the clock)
    time.sleep(0.5)


def _pack_part(endpoint: str, src: str, dst: str, part) -> int:
    from fluxfs import FluxFileSystem
    from fluxfs.pipes.shards.packing import pack_prefix

    fs = FluxFileSystem(endpoint_url=endpoint, token="anon", skip_instance_cache=True)
    return pack_prefix(src, dst, part=part, max_size=SHARD_SIZE, label_dirs=False, fs=fs).written


def _check(fs, where: str, names: dict[str, int], parts: int) -> None:
    """Every object's member exactly once (from the shards' indexes), and the merged manifest when in parts."""
    from fluxfs.pipes.shards import ShardIndex

    fs.invalidate_cache()
    found = fs.find(where, detail=True)
    seen: dict[str, int] = {}
    tars = sorted(p for p in found if p.endswith(".tar"))
    for path in tars:
        for m in ShardIndex.from_bytes(path, fs.cat_file(path + ".idx")).members:
            if m.name in seen:
                raise WrongResult(f"{m.name} packed twice")
            seen[m.name] = m.size
    if seen != names:
        raise WrongResult(f"{len(seen)} members packed, {len(names)} objects (or sizes differ)")
    if parts > 1:
        listed = [json.loads(line)["name"] for line in fs.cat_file(f"{where}shards.jsonl").decode().splitlines()]
        if sorted(listed) != tars:
            raise WrongResult("the merged manifest does not list every shard once")


def run(args: argparse.Namespace) -> dict:
    from fluxfs import FluxFileSystem

    count = args.objects or 20_000
    with start_server(args) as srv:
        url = srv.url
        srv.generate(BUCKET, count, size=SIZES, prefix="src/obj-")
        fs = FluxFileSystem(endpoint_url=url, token="anon", skip_instance_cache=True)
        infos = fs.find(f"{BUCKET}/src/", detail=True)
        names = {n[len(f"{BUCKET}/src/"):] + ".bin": int(i["size"]) for n, i in infos.items()}
        src = f"flux://{BUCKET}/src/"
        runs = {"n": 0}
        ctx = multiprocessing.get_context("spawn")
        with ProcessPoolExecutor(args.parts, mp_context=ctx) as pool:
            for f in [pool.submit(_warm) for _ in range(args.parts)]:
                f.result()

            def contender(parts: int):
                def go() -> dict:
                    runs["n"] += 1
                    where = f"{BUCKET}/out-{runs['n']}/"
                    dst = f"flux://{where}shard-{{:06d}}.tar"
                    t0 = time.perf_counter()
                    if parts == 1:
                        _pack_part(url, src, dst, None)
                    else:
                        for f in [pool.submit(_pack_part, url, src, dst, (i, parts)) for i in range(parts)]:
                            f.result()
                    wall = time.perf_counter() - t0
                    _check(fs, where, names, parts)
                    fs.rm(where, recursive=True)
                    return {"objects": count, "bytes": sum(names.values()), "wall_s": wall}
                return go

            params = {"objects": count, "size_range": list(SIZES), "shard_size": SHARD_SIZE, "parts": args.parts}
            return run_scenario("pack", args, params, {"1-part": contender(1), f"{args.parts}-parts":
                                                       contender(args.parts)},
                                "objects_per_s", [(f"{args.parts}-parts", "1-part")])
