"""`python -m bench reads`: batched reads of many small objects (issue 4).

Sets: 50k x 10 KiB, 20k x 100 KiB, 2k x 1 MiB (--quick: 5k x 10 KiB, 2k x 100 KiB), or one set
from --objects/--size. Contenders, interleaved on the same server and data:
  fluxfs            `fs.iter_cat_objects(infos, buffer_bytes=--batch-bytes)` with compose: the whole set
                    streamed with at most --batch-bytes read ahead (infos from a listing, like
                    Dataflux's input). Runs in its own process, as the peers do (bench/peers.py), where
                    every contender's check of every object is taken off its clock
  fluxfs-readonly   `fluxfs` with default options under a read-only role (objectViewer: a bearer token the
                    server refuses every write for, 403): its compose is refused once, then objects are read
                    directly (10 KiB and 100 KiB sets; ratio `10KiB:fluxfs-readonly/gcsfs`, ...)
  obstore           one GET per object, --peer-concurrency of them in flight (own process, bench/peers.py)
  tensorstore       one kvstore read per object, gcs_request_concurrency = --peer-concurrency (own process)
  aiohttp           bare concurrent aiohttp GETs (`alt=media`, `await resp.read()`), --peer-concurrency at once
                    over one ClientSession (own process): what the bytes cost through the HTTP stack fluxfs uses
  fluxfs-batched    `fs.cat_objects(batch)` per batch of --batch-bytes, like the gcsfs contender
  fluxfs-nocompose  `fluxfs` with compose=False (direct GETs)
  gcsfs             `gcsfs.core.GCSFileSystem.cat(paths)`
  dataflux          `dataflux_core.download.dataflux_download` (its default path: sequential composes)
  dataflux-best     `dataflux_download_threaded` with 32 threads (Dataflux's fastest configuration)
  limit             one object of the set's total bytes, read in one streamed GET
Objects are read in batches of <= --batch-bytes (so 2 GB sets fit in memory), or streamed with that
much read ahead; every object is checked against its listed crc32c (after its batch, not timed; in
the own-process contenders, as it arrives, its time taken off the clock). --peer-concurrency
defaults to fluxfs's read_concurrency.
Reported: objects/s, MB/s, client CPU seconds (per GB, per object), peak memory above the start of the
reads (peak_mb: VmHWM, reset before) and server requests per object.
Ratios, per set, keyed by the set (`2000x1MiB:fluxfs/gcsfs`) and again by object size (`1MiB:fluxfs/gcsfs`):
throughput `SIZE:A/B` (objects/s, higher is better) and `cpu:SIZE:fluxfs/PEER` for PEER in obstore,
tensorstore and aiohttp: fluxfs's client CPU per GB over the peer's (lower is better; < 1 = fluxfs spends less).
"""
from __future__ import annotations

import argparse
import asyncio
import copy
import os
import resource
import time
from typing import Callable, Dict, List

from . import peers
from .common import PeakMemory, WrongResult, finish_combined, run_scenario, start_server

KIB = 1024
FULL_SETS = [(50_000, 10 * KIB), (20_000, 100 * KIB), (2_000, 1024 * KIB)]
QUICK_SETS = [(5_000, 10 * KIB), (2_000, 100 * KIB)]
BUCKET = "bench-reads"
# The bearer token of fluxfs-readonly: the server answers every write it sends 403 (`read_only_token`).
READ_ONLY_TOKEN = "bench-reads-viewer"
READ_ONLY_MAX_SIZE = 100 * KIB  # the sets it runs on: small objects, where compose matters
OWN_PROCESS_PEERS = ("obstore", "tensorstore", "aiohttp")  # each run by bench/peers.py at --peer-concurrency


def add_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--batch-bytes", type=int, default=128 * 2**20, help="bytes per cat call (memory bound)")
    parser.add_argument("--max-composite-size", type=int, default=None, help="fluxfs option (default: its own)")
    parser.add_argument("--compose-threshold", type=int, default=None, help="fluxfs option (default: its own)")
    parser.add_argument("--read-concurrency", type=int, default=None, help="fluxfs option (default: its own)")
    parser.add_argument("--dataflux-max", type=int, default=5000,
                        help="objects given to the sequential `dataflux` contender (it runs ~300 obj/s)")
    parser.add_argument("--dataflux-threads", type=int, default=32, help="threads of dataflux-best")
    parser.add_argument("--peer-concurrency", type=int, default=None,
                        help="requests in flight for obstore, tensorstore and aiohttp "
                             "(default: fluxfs's read_concurrency)")
    parser.add_argument("--handle-size", type=int, default=0,
                        help="also time fs.open(path, 'rb').read() of one object this big (fluxfs vs gcsfs); 0 = skip")


def _label(count: int, size: int) -> str:
    unit = f"{size // KIB}KiB" if size < 2**20 else f"{size // 2**20}MiB"
    return f"{count}x{unit}"


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def _batches(items: list, sizes: List[int], limit: int) -> List[list]:
    out, cur, total = [], [], 0
    for it, n in zip(items, sizes):
        if cur and total + n > limit:
            out.append(cur)
            cur, total = [], 0
        cur.append(it)
        total += n
    if cur:
        out.append(cur)
    return out


def cpu_ratios(contenders: Dict, rivals) -> Dict[str, float]:
    """cpu:fluxfs/PEER: fluxfs's client CPU per GB over the peer's (lower is better: < 1 = fluxfs spends less)."""
    out = {}
    f = contenders.get("fluxfs", {}).get("median", {}).get("cpu_s_per_gb")
    for peer in rivals:
        p = contenders.get(peer, {}).get("median", {}).get("cpu_s_per_gb")
        if f and p:
            out[f"cpu:fluxfs/{peer}"] = round(f / p, 2)
    return out


def set_ratios(label: str, ratios: Dict[str, float]) -> Dict[str, float]:
    """A set's ratios keyed by the set (`2000x1MiB:fluxfs/aiohttp`, `cpu:2000x1MiB:...`) and by its object size,
    as the rows are named (`1MiB:fluxfs/aiohttp`, `cpu:1MiB:fluxfs/aiohttp`)."""
    out = {}
    for prefix in (label, label.partition("x")[2]):
        for k, v in ratios.items():
            out[f"cpu:{prefix}:{k[4:]}" if k.startswith("cpu:") else f"{prefix}:{k}"] = v
    return out


def _crc(b: bytes) -> str:
    import base64

    import google_crc32c

    return base64.b64encode(google_crc32c.value(b).to_bytes(4, "big")).decode()


def run(args: argparse.Namespace) -> dict:
    import aiohttp
    import gcsfs.core
    from dataflux_core import download as dfdl

    from fluxfs import FluxFileSystem

    if args.objects or args.size:
        sets = [(args.objects or 5000, args.size or 10 * KIB)]
    else:
        sets = QUICK_SETS if args.quick else FULL_SETS
    combined: Dict = {"scenario": "reads", "profile": args.profile, "sets": {}, "ratios": {}}
    sub_args = copy.copy(args)
    sub_args.json = None
    with start_server(args, read_only_token=READ_ONLY_TOKEN) as srv:
        url = srv.url
        # Dataflux builds its own storage.Client, which finds the server through this variable.
        os.environ["STORAGE_EMULATOR_HOST"] = url
        srv.create_bucket(BUCKET)
        fl_opts = {k: v for k, v in (("max_composite_size", args.max_composite_size),
                                     ("compose_threshold", args.compose_threshold),
                                     ("read_concurrency", args.read_concurrency)) if v is not None}
        flux = FluxFileSystem(endpoint_url=url, token="anon", skip_instance_cache=True, **fl_opts)
        flux_direct = FluxFileSystem(endpoint_url=url, token="anon", skip_instance_cache=True,
                                     **dict(fl_opts, compose=False))
        gfs = gcsfs.core.GCSFileSystem(endpoint_url=url, token="anon", skip_instance_cache=True)
        peer_n = args.peer_concurrency or flux.batch_read_concurrency
        df_params = dfdl.DataFluxDownloadOptimizationParams(max_composite_object_size=100_000_000)

        for count, size in sets:
            label = _label(count, size)
            prefix = f"{label}/"
            srv.generate(BUCKET, count, size=size, prefix=prefix, seed=1)
            srv.generate(BUCKET, 1, size=count * size, prefix=f"limit-{label}/", seed=1)
            infos = sorted(flux.find(f"{BUCKET}/{prefix}", detail=True).values(), key=lambda i: i["name"])
            if len(infos) != count:
                raise RuntimeError(f"listing found {len(infos)} of {count} objects")
            crcs = {i["name"]: i["crc32c"] for i in infos}
            sizes = [i["size"] for i in infos]
            info_batches = _batches(infos, sizes, args.batch_bytes)
            total = sum(sizes)
            limit_key = f"limit-{label}/00000000"
            # Untimed warm-up: the server materializes synthetic objects on first use; no contender pays it.
            for batch in info_batches:
                flux.cat_objects(batch)
            with flux.open(f"{BUCKET}/{limit_key}", "rb") as f:
                f.read(1)

            def timed(read_batches: Callable[[], None], n_objects: int, n_bytes: int) -> Dict:
                srv.reset_stats()
                state = {"wall": 0.0, "cpu": 0.0}
                with PeakMemory() as mem:
                    read_batches(state)
                reqs = sum(srv.stats()["requests"].values())
                return {"objects": n_objects, "bytes": n_bytes, "wall_s": state["wall"], "cpu_s": state["cpu"],
                        "requests_per_object": reqs / n_objects, "peak_mb": mem.extra_mb}

            objects = [[i["name"].split("/", 1)[1], i["size"], crcs[i["name"]]] for i in infos]

            def process_contender(name: str) -> Callable[[], Dict]:
                """fluxfs or a peer in its own process (bench/peers.py), on the same objects."""
                def fn() -> Dict:
                    spec = {"contender": name, "url": url, "bucket": BUCKET, "prefix": prefix, "objects": objects,
                            "batch_bytes": args.batch_bytes, "concurrency": peer_n, "fluxfs": fl_opts,
                            "token": READ_ONLY_TOKEN if name == "fluxfs-readonly" else None}
                    srv.reset_stats()
                    out = peers.run_worker(spec)
                    out["requests_per_object"] = sum(srv.stats()["requests"].values()) / count
                    return out
                return fn

            def clock(state: Dict, fn: Callable):
                t0, c0 = time.perf_counter(), _cpu()
                out = fn()
                state["wall"] += time.perf_counter() - t0
                state["cpu"] += _cpu() - c0
                return out

            def check_dict(got: Dict, batch: List[Dict]) -> None:
                if len(got) != len(batch):
                    raise WrongResult(f"{len(got)} results for {len(batch)} objects")
                for info in batch:
                    body = got.get(info["name"])
                    if body is None or len(body) != info["size"] or _crc(body) != crcs[info["name"]]:
                        raise WrongResult(f"wrong bytes for {info['name']}")

            def fluxfs_contender(fs) -> Callable[[], Dict]:
                def fn() -> Dict:
                    def read_all(state):
                        for batch in info_batches:
                            check_dict(clock(state, lambda: fs.cat_objects(batch)), batch)
                    return timed(read_all, count, total)
                return fn

            def fluxfs_stream_contender(fs) -> Callable[[], Dict]:
                by_name = {i["name"]: i for i in infos}

                def fn() -> Dict:
                    def read_all(state):
                        # Reads go on while a slice is checked, so the checks stay on the clock.
                        def stream() -> int:
                            n = 0
                            for got in fs.iter_cat_objects(infos, buffer_bytes=args.batch_bytes):
                                check_dict(got, [by_name[name] for name in got])
                                n += len(got)
                            return n
                        if clock(state, stream) != count:
                            raise WrongResult("the stream did not yield every object")
                    return timed(read_all, count, total)
                return fn

            def gcsfs_contender() -> Dict:
                def read_all(state):
                    for batch in info_batches:
                        paths = [i["name"] for i in batch]
                        check_dict(clock(state, lambda: gfs.cat(paths)), batch)
                return timed(read_all, count, total)

            def dataflux_contender(threaded: bool) -> Callable[[], Dict]:
                def fn() -> Dict:
                    chosen = infos if threaded else infos[:args.dataflux_max]
                    chosen_batches = _batches(chosen, [i["size"] for i in chosen], args.batch_bytes)

                    def read_all(state):
                        for batch in chosen_batches:
                            objects = [(i["name"].split("/", 1)[1], i["size"]) for i in batch]
                            if threaded:
                                got = clock(state, lambda: dfdl.dataflux_download_threaded(
                                    "test", BUCKET, objects, dataflux_download_optimization_params=df_params,
                                    threads=args.dataflux_threads))
                            else:
                                got = clock(state, lambda: dfdl.dataflux_download(
                                    "test", BUCKET, objects, dataflux_download_optimization_params=df_params))
                            check_dict({i["name"]: b for i, b in zip(batch, got)}, batch)
                    return timed(read_all, len(chosen), sum(i["size"] for i in chosen))
                return fn

            def limit_contender() -> Dict:
                async def go() -> int:
                    n = 0
                    async with aiohttp.ClientSession() as s:
                        async with s.get(f"{url}/download/storage/v1/b/{BUCKET}/o/{limit_key.replace('/', '%2F')}",
                                         params={"alt": "media"}) as r:
                            if r.status != 200:
                                raise WrongResult(f"GET {limit_key}: HTTP {r.status}")
                            async for chunk in r.content.iter_chunked(4 << 20):
                                n += len(chunk)
                    return n

                def read_all(state):
                    n = clock(state, lambda: asyncio.run(go()))
                    if n != total:
                        raise WrongResult(f"limit read {n} of {total} bytes")
                return timed(read_all, count, total)

            contenders = {
                "fluxfs": process_contender("fluxfs"),
                **({"fluxfs-readonly": process_contender("fluxfs-readonly")} if size <= READ_ONLY_MAX_SIZE else {}),
                "obstore": process_contender("obstore"),
                "tensorstore": process_contender("tensorstore"),
                "aiohttp": process_contender("aiohttp"),
                "fluxfs-batched": fluxfs_contender(flux),
                "fluxfs-nocompose": fluxfs_stream_contender(flux_direct),
                "gcsfs": gcsfs_contender,
                "dataflux": dataflux_contender(False),
                "dataflux-best": dataflux_contender(True),
                "limit": limit_contender,
            }
            params = {"objects": count, "size": size, "batch_bytes": args.batch_bytes,
                      "dataflux_max": args.dataflux_max, "dataflux_threads": args.dataflux_threads, **fl_opts,
                      "concurrency": {"fluxfs": f"read_concurrency={flux.batch_read_concurrency} per slice of the "
                                                "stream (4 slices); composites read over aiohttp (100 connections), "
                                                "objects read directly as one lean GET each (no such cap)",
                                      "fluxfs-readonly": "as fluxfs, with a read-only token: compose refused (403) "
                                                         "once, then direct reads",
                                      "obstore": peers.concurrency_note("obstore", peer_n),
                                      **{p: peers.concurrency_note(p, peer_n) for p in OWN_PROCESS_PEERS}}}
            report = run_scenario(f"reads {label}", sub_args, params, contenders, "objects_per_s",
                                  [("fluxfs", "obstore"), ("fluxfs", "tensorstore"), ("fluxfs", "aiohttp"),
                                   ("fluxfs", "gcsfs"), ("fluxfs", "dataflux"), ("fluxfs", "dataflux-best"),
                                   ("fluxfs", "limit"), ("fluxfs-batched", "gcsfs"), ("fluxfs-nocompose", "gcsfs"),
                                   ("fluxfs-readonly", "gcsfs"), ("fluxfs-readonly", "obstore"),
                                   ("fluxfs-readonly", "tensorstore")])
            combined["sets"][label] = report
            for name, c in report["contenders"].items():
                if "median" in c:
                    m = c["median"]
                    print(f"  {name:<18} {m.get('objects_per_s', 0):>9.0f} obj/s {m.get('mb_per_s', 0):>8.1f} MB/s "
                          f"{m.get('cpu_s', 0):>6.2f} cpu-s {m.get('cpu_s_per_gb', 0):>6.2f} cpu-s/GB "
                          f"{m.get('cpu_us_per_object', 0):>6.0f} cpu-us/object {m.get('peak_mb', 0):>6.0f} MiB peak "
                          f"{m.get('requests_per_object', 0):>6.3f} requests/object")
            report["ratios"].update(cpu_ratios(report["contenders"], OWN_PROCESS_PEERS))
            combined["ratios"].update(set_ratios(label, report["ratios"]))
        if args.handle_size:
            _handle_scenario(args, sub_args, srv, flux, gfs, combined)
    return finish_combined("reads", args, combined)


def _handle_scenario(args, sub_args, srv, flux, gfs, combined: Dict) -> None:
    """One big object read whole through a read handle: FluxReadFile vs gcsfs's GCSFile."""
    from fluxfs.server.synthetic import synthetic_bytes

    n = args.handle_size
    path = f"{BUCKET}/handle/object"
    # Real stored bytes, uploaded once (not a synthetic object): the server then streams slices of
    # memory as GCS would, instead of generating every range on the 2 cores the client also needs.
    flux.pipe(path, synthetic_bytes("handle", n, 2))
    want = flux.info(path)["crc32c"]

    def reader(fs) -> Callable[[], Dict]:
        def fn() -> Dict:
            state = {"wall": 0.0, "cpu": 0.0}
            t0, c0 = time.perf_counter(), _cpu()
            with fs.open(path, "rb") as f:
                data = f.read()
            state["wall"], state["cpu"] = time.perf_counter() - t0, _cpu() - c0
            if len(data) != n or _crc(data) != want:
                raise WrongResult("read handle returned wrong bytes")
            return {"objects": 1, "bytes": n, "wall_s": state["wall"], "cpu_s": state["cpu"]}
        return fn

    report = run_scenario("reads handle", sub_args, {"size": n},
                          {"fluxfs-open": reader(flux), "gcsfs-open": reader(gfs)},
                          "mb_per_s", [("fluxfs-open", "gcsfs-open")])
    combined["sets"]["handle"] = report
    for k, v in report["ratios"].items():
        combined["ratios"][f"handle:{k}"] = v
