"""`python -m bench collective`: a model loaded by every rank of a gloo group, together and alone (issue "Scale").

The weights scenario's model (default 2 GB; --quick 64 MB) in 4 safetensors shards. Each rank reads
through its own server; the servers share one --root, so they hold the same objects and what server r
sent is what rank r read from storage. Contenders, interleaved, each a fresh set of ranks on this machine:
  group2, group4   load_model_dir(url, group=None) on 2 / 4 gloo ranks: each reads ~1/N, sends share it
  alone2, alone4   load_model_dir(url) on 2 / 4 ranks at once, each loading the whole model itself
Timed: from a barrier before the load to a barrier after it (the slowest rank). Every rank's state dict
is checked byte for byte (untimed). Reported: wall time, storage bytes per rank (the most any server
sent) as a fraction of the model. Ratios: group2/bytes, group4/bytes (targets <= 0.55, <= 0.3),
group2/alone and group4/alone (wall time; target <= 1).

Without --link nothing but the profile's per-request cap limits storage: the servers, the ranks and the
loopback between them share this machine's cores, and no link is shared. A node's ranks share its link
to storage, which is what a group load saves; --link MBPS models it: every contender also runs as
NAME-link, each rank's server capped at MBPS / ranks for all its responses together (`link_mbps`), so
the ranks share MBPS (an even split: every rank reads as much as the others, alone or grouped). The
exchange between ranks is not capped (inside a node it is shared memory or NVLink, not the link).
Both sets are reported, with group2-link/alone and group4-link/alone beside the unlimited ratios.
"""
from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path

from .weights import BUCKET, _nbytes, check_loaded, layout, shard_file, shard_names, state
from .worker import failure

ROOT = Path(__file__).resolve().parents[1]
CONTENDERS = {"group2": (2, True), "alone2": (2, False), "group4": (4, True), "alone4": (4, False)}


def add_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--shards", type=int, default=4, help="number of safetensors shards")
    parser.add_argument("--link", type=float, default=0.0, metavar="MBPS",
                        help="also run every contender as one node whose ranks share a MBPS link to storage "
                             "(each rank's server capped at MBPS / ranks): names ending in -link")


def _rank(rank: int, spec: dict, out: str) -> None:
    import torch
    import torch.distributed as dist

    from fluxfs.pipes.safetensors import load_model_dir

    world = spec["world"]
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{spec['port']}", rank=rank, world_size=world)
    try:
        opts = {"endpoint_url": spec["urls"][rank], "token": "anon"}
        group = {"group": None} if spec["group"] else {}
        dist.barrier()
        t0 = time.perf_counter()
        got = load_model_dir(f"flux://{BUCKET}/model", **group, **opts)
        dist.barrier()
        wall = time.perf_counter() - t0
        check_loaded(torch, got, spec["size"])
        dist.barrier()
        if rank == 0:
            Path(out).write_text(json.dumps({"wall_s": wall}))
    finally:
        dist.destroy_process_group()


def _worker(spec: dict) -> dict:
    import torch

    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "out.json")
        torch.multiprocessing.start_processes(_rank, args=(spec, out), nprocs=spec["world"], start_method="fork")
        return json.loads(Path(out).read_text())


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _upload(srv, size: int, shards: int) -> None:
    import safetensors.torch as st
    import torch

    from fluxfs import FluxFileSystem

    fs = FluxFileSystem(endpoint_url=srv.url, token="anon", skip_instance_cache=True)
    sd = state(torch, size)
    weight_map = {}
    for k, names in enumerate(shard_names(size, shards)):
        fs.pipe_file(f"{BUCKET}/model/{shard_file(k, shards)}", st.save({n: sd[n] for n in names}))
        weight_map.update({n: shard_file(k, shards) for n in names})
    fs.pipe_file(f"{BUCKET}/model/model.safetensors.index.json", json.dumps({"weight_map": weight_map}).encode())


def run(args: argparse.Namespace) -> dict:
    from fluxfs.server import run as run_server

    from .common import run_scenario

    size = args.size or (64 * 10**6 if args.quick else 2 * 10**9)
    model = sum(_nbytes(s, d) for _, s, d in layout(size))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    with tempfile.TemporaryDirectory(prefix="bench-collective-") as root, ExitStack() as stack:
        first = stack.enter_context(run_server(root=root, profile=args.profile, in_process=False))
        first.create_bucket(BUCKET)
        _upload(first, size, args.shards)
        # Started after the upload: a server reads its --root when it starts.
        servers = [first] + [stack.enter_context(run_server(root=root, profile=args.profile, in_process=False))
                             for _ in range(3)]

        def contender(world: int, group: bool, link: float = 0.0):
            def one() -> dict:
                for srv in servers:
                    srv.reset_stats()
                    srv.configure(link_mbps=link / world)
                spec = {"world": world, "group": group, "size": size, "port": _free_port(),
                        "urls": [s.url for s in servers[:world]]}
                proc = subprocess.run([sys.executable, "-m", "bench.collective", "--worker", json.dumps(spec)],
                                      cwd=ROOT, env=env, capture_output=True, text=True, timeout=3600)
                if proc.returncode != 0:
                    raise RuntimeError(failure(f"{world} ranks", proc))
                got = json.loads(proc.stdout.strip().splitlines()[-1])
                per_rank = [s.stats()["bytes_out"] for s in servers[:world]]
                return {"wall_s": got["wall_s"], "bytes": model, "bytes_per_rank": max(per_rank) / model,
                        "bytes_all_ranks": sum(per_rank) / model}
            return one

        link = getattr(args, "link", 0.0) or 0.0
        contenders = {name: contender(*how) for name, how in CONTENDERS.items()}
        if link:
            contenders.update({f"{name}-link": contender(*how, link) for name, how in CONTENDERS.items()})
        params = {"size": model, "shards": args.shards, "tensors": len(layout(size)), "link_mbps": link}
        suffixes = ("", "-link") if link else ("",)
        report = run_scenario("collective", args, params, contenders, "mb_per_s",
                              [(f"group{w}{x}", f"alone{w}{x}") for x in suffixes for w in (2, 4)])
    med = {n: c["median"] for n, c in report["contenders"].items() if "median" in c}
    ratios = {f"{n}/bytes": round(med[n]["bytes_per_rank"], 3) for n in ("group2", "group4") if n in med}
    for x in suffixes:
        for world in (2, 4):
            a, b = med.get(f"group{world}{x}"), med.get(f"alone{world}{x}")
            if a and b:
                ratios[f"group{world}{x}/alone"] = round(a["wall_s"] / b["wall_s"], 2)
    report["ratios"] = ratios
    print(f"ratios (collective, {args.profile}): " + "  ".join(f"{k}={v:g}x" for k, v in ratios.items()))
    for n, m in med.items():
        print(f"  [collective] {n}: {m['wall_s']:.2f} s, storage bytes per rank {m['bytes_per_rank']:.3f} of the "
              f"model, all ranks {m['bytes_all_ranks']:.2f}", file=sys.stderr)
    from .common import save_report

    return save_report(args, report)


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--worker":
        print(json.dumps(_worker(json.loads(sys.argv[2]))))
    else:
        sys.exit("usage: python -m bench collective [options]  (this module's own entry point is for its workers)")
