"""`python -m bench chaos`: every capability under 0%, 5%, 10% and 20% injected faults (issue 9).

Capabilities: listing (`fs.find`), reads (`fs.cat_objects`, compose-backed), writes-xml and
writes-compose (atomic multipart "wb" handles), checkpoint (FluxCheckpoint save + load) and
training (one epoch of FluxMapDataset + DataLoader). At fault level r the server answers r x 3/4
of all requests with 429 or 503 and resets r x 1/4 mid-answer (on top of the profile's latency);
fluxfs runs with its default retry policy, as users get it.

Contenders are the fault levels ("0%", "5%", ...), interleaved per repeat on one server and data.
Every run is checked (names, crc32c, bytes, tensors) and a wrong result fails the contender.
Reported per capability: wall seconds, throughput, the slowdown ratio vs 0% (`reads:10%/0%` =
wall at 10% / wall at 0%), the share of requests that were faulted, retries per successful
request, and leftovers (temporary objects, open multipart uploads), which must be 0.
"""
from __future__ import annotations

import argparse
import copy
import random
import sys
import time
from typing import Callable, Dict

from .common import WrongResult, machine_info, run_scenario, save_report, start_server

BUCKET = "bench-chaos"
LEVELS = (0.0, 0.05, 0.10, 0.20)
MiB = 2**20
CAPABILITIES = ("listing", "reads", "writes-xml", "writes-compose", "checkpoint", "training")


def add_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--levels", default=",".join(f"{x:g}" for x in LEVELS),
                        help="fault levels as fractions (default 0,0.05,0.1,0.2)")
    parser.add_argument("--capabilities", default=",".join(CAPABILITIES),
                        help=f"comma-separated subset of {','.join(CAPABILITIES)}")
    parser.add_argument("--list-objects", type=int, default=None, help="objects listed (default 50k, quick 5k)")
    parser.add_argument("--write-size", type=int, default=None,
                        help="bytes per written object, 4 objects per run (default 32 MiB, quick 6 MiB)")
    parser.add_argument("--state-size", type=int, default=None, help="checkpoint bytes (default 64 MiB, quick 12)")


def _label(level: float) -> str:
    return f"{level * 100:g}%"


def _faults(level: float, seed: int) -> dict:
    return {"fail_rate": level * 0.75, "fail_codes": [429, 503], "reset_rate": level * 0.25, "seed": seed}


def run(args: argparse.Namespace) -> dict:
    import google_crc32c
    from fsspec.asyn import sync

    from fluxfs import FluxFileSystem, temporaries
    from fluxfs.gcs import tempnames
    from fluxfs.gcs.checksums import crc_from_b64

    quick = args.quick
    levels = [float(x) for x in args.levels.split(",") if x.strip()]
    caps = [c for c in args.capabilities.split(",") if c]
    unknown = set(caps) - set(CAPABILITIES)
    if unknown:
        raise SystemExit(f"unknown capabilities {sorted(unknown)}; known: {', '.join(CAPABILITIES)}")
    n_list = args.list_objects or (5_000 if quick else 50_000)
    n_read = args.objects or (500 if quick else 5_000)
    read_size = args.size or 10 * 1024
    write_size = args.write_size or ((6 if quick else 32) * MiB)
    n_write = 4
    state_size = args.state_size or ((12 if quick else 64) * MiB)
    combined: Dict = {"scenario": "chaos", "profile": args.profile, "capabilities": {}, "ratios": {},
                      "params": {"levels": levels, "list_objects": n_list, "read_objects": n_read,
                                 "read_size": read_size, "write_size": write_size, "state_size": state_size,
                                 "repeat": args.repeat}}
    sub_args = copy.copy(args)
    sub_args.json = None

    with start_server(args) as srv:
        url = srv.url
        srv.create_bucket(BUCKET)
        srv.generate(BUCKET, n_list, size=1, prefix="list/", seed=1)
        srv.generate(BUCKET, n_read, size=read_size, prefix="read/", seed=1)

        def new_fs(**options) -> FluxFileSystem:
            return FluxFileSystem(endpoint_url=url, token="anon", skip_instance_cache=True, **options)

        fs = new_fs()
        list_truth = [f"{BUCKET}/list/{i:08d}" for i in range(n_list)]
        read_infos = sorted((i for b in fs.iter_objects(f"{BUCKET}/read") for i in b), key=lambda i: i["name"])
        if len(read_infos) != n_read:
            raise RuntimeError(f"listing found {len(read_infos)} of {n_read} objects")
        fs.cat_objects(read_infos)  # untimed warm-up: the server materializes synthetic objects once

        def leftovers() -> tuple[int, int]:
            """Temporary objects and open multipart uploads in the bucket; both removed afterwards."""
            srv.configure(fail_rate=0.0, reset_rate=0.0)
            temps = len(srv.list_names(BUCKET, tempnames.TEMP_PREFIX))
            uploads = len(srv.multipart_uploads(BUCKET))
            if temps:
                temporaries.cleanup(fs, f"flux://{BUCKET}")
            if uploads:
                sync(fs.loop, temporaries.abort_incomplete_uploads, fs, BUCKET)
            return temps, uploads

        runs = [0]

        def faulted(level: float, body: Callable[[Dict], Dict]) -> Callable[[], Dict]:
            """A contender: `body` under faults at `level`, timed by itself, then checked for leftovers."""
            def contender() -> Dict:
                runs[0] += 1  # a new fault pattern every run, reproducible from run to run of the bench
                srv.configure(**_faults(level, seed=runs[0]))
                srv.reset_stats()
                state: Dict = {}
                out = body(state)
                stats = state["stats"]  # as the timed part left them (checks afterwards are not counted)
                temps, uploads = leftovers()
                requests = sum(stats["requests"].values())
                faults = sum(stats["faults"].values())
                out.update(wall_s=state["wall"], requests=requests, faults=faults,
                           fault_share=faults / max(1, requests),
                           retries_per_request=faults / max(1, requests - faults),
                           leftover_temps=temps, leftover_uploads=uploads)
                if temps:
                    raise WrongResult(f"{temps} temporary objects left behind at {_label(level)} faults")
                return out
            return contender

        def clock(state: Dict, fn: Callable):
            """Time `fn` (added to state["wall"]) and snapshot the server's counters right after it."""
            t0 = time.perf_counter()
            result = fn()
            state["wall"] = state.get("wall", 0.0) + time.perf_counter() - t0
            state["stats"] = srv.stats()
            return result

        # -- the capabilities -----------------------------------------------------------------

        def listing(state: Dict) -> Dict:
            lfs = new_fs(list_page_size=100)  # 100 per page: enough requests for the fault rate to show
            names = clock(state, lambda: lfs.find(f"{BUCKET}/list"))
            if names != list_truth:
                raise WrongResult(f"listing returned {len(names)} names, not the {n_list} stored")
            return {"objects": n_list}

        def reads(state: Dict) -> Dict:
            got = clock(state, lambda: new_fs().cat_objects(read_infos))
            for info in read_infos:
                data = got.get(info["name"])
                if not isinstance(data, bytes) or google_crc32c.value(data) != crc_from_b64(info["crc32c"]):
                    raise WrongResult(f"{info['name']}: wrong bytes")
            return {"objects": n_read, "bytes": n_read * read_size}

        def writes(multipart: str, part_size: int) -> Callable[[Dict], Dict]:
            payload = random.Random(3).randbytes(write_size)

            def body(state: Dict) -> Dict:
                wfs = new_fs(multipart=multipart, part_size=part_size)
                paths = [f"{BUCKET}/written/{multipart}-{i}" for i in range(n_write)]

                def write():
                    for path in paths:
                        with wfs.open(path, "wb") as f:
                            for i in range(0, write_size, MiB):
                                f.write(payload[i:i + MiB])
                clock(state, write)
                srv.configure(fail_rate=0.0, reset_rate=0.0)
                for path in paths:
                    if wfs.cat_file(path) != payload:
                        raise WrongResult(f"{path}: bytes differ from what was written")
                return {"objects": n_write, "bytes": n_write * write_size}
            return body

        def checkpoint(state: Dict) -> Dict:
            import torch

            from fluxfs.pipes import FluxCheckpoint

            # 5 MiB parts (the XML minimum): more requests per save, so the fault rate shows.
            ckpt = FluxCheckpoint(endpoint_url=url, token="anon", skip_instance_cache=True, part_size=5 * MiB)
            torch.manual_seed(0)
            tensors = {f"layer{i}": torch.randn(state_size // 4 // 8) for i in range(8)}
            target = f"flux://{BUCKET}/ckpt/model.pt"
            clock(state, lambda: ckpt.save(tensors, target))
            loaded = clock(state, lambda: ckpt.load(target))
            if any(not torch.equal(loaded[k], v) for k, v in tensors.items()):
                raise WrongResult("checkpoint loaded different tensors")
            return {"objects": 2, "bytes": 2 * state_size}

        def training(state: Dict) -> Dict:
            import torch
            from torch.utils.data import DataLoader

            from fluxfs.pipes import FluxMapDataset

            crcs = {i["name"].partition("/")[2]: crc_from_b64(i["crc32c"]) for i in read_infos}
            ds = FluxMapDataset.from_prefix(f"flux://{BUCKET}/read/", storage_options={
                "endpoint_url": url, "token": "anon", "skip_instance_cache": True})
            loader = DataLoader(ds, batch_size=64, shuffle=True, num_workers=0, collate_fn=list,
                                generator=torch.Generator().manual_seed(0))
            seen = clock(state, lambda: [s for batch in loader for s in batch])
            if len(seen) != n_read or any(google_crc32c.value(d) != crcs[k] for k, d in seen):
                raise WrongResult("the epoch returned wrong samples")
            return {"objects": n_read, "bytes": n_read * read_size}

        bodies: Dict[str, Callable[[Dict], Dict]] = {
            "listing": listing, "reads": reads, "writes-xml": writes("xml", 5 * MiB),
            "writes-compose": writes("compose", 512 * 1024), "checkpoint": checkpoint, "training": training,
        }
        base = _label(levels[0])
        for cap in caps:
            try:
                faulted(0.0, bodies[cap])()  # untimed warm-up (imports, first connections, torch init)
            except Exception as exc:  # a broken capability is reported, the others still run
                combined["capabilities"][cap] = {"error": f"{type(exc).__name__}: {exc}"}
                print(f"  [chaos:{cap}] failed without faults: {type(exc).__name__}: {exc}", file=sys.stderr)
                continue
            contenders = {_label(lv): faulted(lv, bodies[cap]) for lv in levels}
            headline = "objects_per_s" if cap in ("listing", "reads", "training") else "mb_per_s"
            report = run_scenario(f"chaos:{cap}", sub_args, {"capability": cap}, contenders, "wall_s",
                                  [(_label(lv), base) for lv in levels[1:]])
            combined["capabilities"][cap] = {"headline": headline, **report}
            for k, v in report["ratios"].items():
                combined["ratios"][f"{cap}:{k}"] = v
    combined["machine"] = machine_info()
    _print_summary(combined, levels)
    return save_report(args, combined)


def _print_summary(report: Dict, levels: list) -> None:
    labels = [_label(lv) for lv in levels]
    print(f"\n== chaos ({report['profile']} profile): slowdown vs {labels[0]} (wall ratio), "
          "faulted share of requests, retries per successful request, leftovers (temps/uploads)")
    print(f"{'capability':<16}" + "".join(f"{lab:>28}" for lab in labels))
    for cap, rep in report["capabilities"].items():
        if "error" in rep:
            print(f"{cap:<16}  error: {rep['error'][:100]}")
            continue
        cells = []
        for lab in labels:
            c = rep["contenders"].get(lab, {})
            if "error" in c:
                cells.append(f"{'error':>28}")
                continue
            m = c["median"]
            slow = report["ratios"].get(f"{cap}:{lab}/{labels[0]}", 1.0 if lab == labels[0] else float("nan"))
            cells.append(f"{slow:>6.2f}x {m.get('fault_share', 0):>5.1%} {m.get('retries_per_request', 0):>5.3f}"
                         f" {int(c['max'].get('leftover_temps', 0))}/{int(c['max'].get('leftover_uploads', 0))}")
        print(f"{cap:<16}" + "".join(f"{x:>28}" for x in cells))
    summary = "  ".join(f"{k}={v:g}x" for k, v in report["ratios"].items())
    print(f"ratios (chaos, {report['profile']}, slowdown = wall at level / wall at 0%): {summary}")
