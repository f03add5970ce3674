"""`python -m bench server`: the embedded server's own speed (issue 2's figures).

The server runs in a subprocess (it does not share our GIL) and an aiohttp client measures:
small GETs/s (32 in flight), single-stream MB/s of one big object, and list pages/s at growing
bucket sizes (10k vs 100k vs 1M objects; --quick: 10k vs 100k). The list ratios
(`pages:list-100k/list-10k`, ...) show that a page costs the same whatever the bucket size;
server CPU per GET / per page (read from the subprocess) is reported too, being steadier than
wall-clock rates on a shared machine.
Targets with --profile local: >= 3,000 GET/s and >= 1,000 MB/s.
"""
from __future__ import annotations

import argparse
import asyncio
import random
import time
from typing import Callable, Dict

from .common import WrongResult, run_scenario, start_server

BUCKET_SMALL = "bench-small"
BUCKET_BIG = "bench-big"
_SMALL_COUNT = 2000
_LIST_FIELDS = "items(name,size,generation),nextPageToken"


def add_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--gets", type=int, default=None, help="small GETs per run (default 20000, quick 5000)")
    parser.add_argument("--concurrency", type=int, default=32, help="small GETs in flight")
    parser.add_argument("--pages", type=int, default=None, help="list pages per run (default 50, quick 20)")


def _server_cpu_clock(srv) -> Callable[[], float]:
    """CPU seconds used so far by the server subprocess: on a shared machine, server CPU per request
    is a steadier figure than wall-clock rates."""
    try:
        import psutil
        proc = psutil.Process(srv.process.pid)
    except Exception:  # in-process server or no psutil: no figure
        return lambda: float("nan")
    return lambda: sum(proc.cpu_times()[:2])


def _run(coro_fn: Callable) -> Dict:
    # Results are small dicts of counts, never the bytes read: nothing big outlives the event loop.
    return asyncio.run(coro_fn())


def run(args: argparse.Namespace) -> dict:
    import aiohttp
    from fluxfs.server import synthetic_bytes

    quick = args.quick
    gets = args.gets or (5000 if quick else 20000)
    pages = args.pages or (20 if quick else 50)
    big_size = args.size or ((64 if quick else 256) * 1024 * 1024)
    small_size = 1024
    list_sizes = [10_000, 100_000] if quick else [10_000, 100_000, 1_000_000]

    with start_server(args) as srv:
        url = srv.url
        server_cpu = _server_cpu_clock(srv)
        srv.generate(BUCKET_SMALL, _SMALL_COUNT, size=small_size, prefix="s/")
        for n in list_sizes:
            srv.generate(f"bench-list-{n}", n, size=1024, prefix="o/")
        big = bytes(random.Random(1).getrandbits(8) for _ in range(4096)) * (big_size // 4096)
        srv.create_bucket(BUCKET_BIG)
        expect_small = synthetic_bytes("s/00000007", small_size, 0)

        async def upload_big():
            async with aiohttp.ClientSession() as s:
                async with s.post(f"{url}/upload/storage/v1/b/{BUCKET_BIG}/o",
                                  params={"uploadType": "media", "name": "big"}, data=big) as r:
                    if r.status != 200:
                        raise RuntimeError(f"upload of the big object failed: {r.status} {await r.text()}")
            return {}

        _run(upload_big)

        def small_gets() -> Dict:
            async def go():
                conn = aiohttp.TCPConnector(limit=args.concurrency)
                async with aiohttp.ClientSession(connector=conn) as s:
                    names = [f"s/{i % _SMALL_COUNT:08d}" for i in range(gets)]
                    it = iter(names)
                    got = 0
                    c0 = server_cpu()
                    t0 = time.perf_counter()

                    async def worker():
                        nonlocal got
                        for nm in it:
                            async with s.get(f"{url}/storage/v1/b/{BUCKET_SMALL}/o/{nm.replace('/', '%2F')}",
                                             params={"alt": "media"}) as r:
                                body = await r.read()
                                if r.status != 200 or len(body) != small_size:
                                    raise WrongResult(f"GET {nm}: {r.status}, {len(body)} bytes")
                                if nm == "s/00000007" and body != expect_small:
                                    raise WrongResult("wrong bytes for s/00000007")
                                got += 1

                    await asyncio.gather(*[worker() for _ in range(args.concurrency)])
                    wall = time.perf_counter() - t0
                return {"objects": got, "wall_s": wall, "objects_per_s": got / wall,
                        "server_cpu_us_per_get": (server_cpu() - c0) / got * 1e6}
            return _run(go)

        def stream() -> Dict:
            async def go():
                async with aiohttp.ClientSession() as s:
                    t0 = time.perf_counter()
                    n = 0
                    async with s.get(f"{url}/download/storage/v1/b/{BUCKET_BIG}/o/big", params={"alt": "media"}) as r:
                        if r.status != 200:
                            raise WrongResult(f"GET big: {r.status}")
                        first = b""
                        async for chunk in r.content.iter_chunked(4 << 20):
                            if not first:
                                first = bytes(chunk[:4096])
                            n += len(chunk)
                    wall = time.perf_counter() - t0
                if n != big_size or first != big[:4096]:
                    raise WrongResult(f"streamed {n} of {big_size} bytes")
                return {"bytes": n, "wall_s": wall, "mb_per_s": n / wall / 1e6}
            return _run(go)

        def lister(n: int) -> Callable[[], Dict]:
            def fn() -> Dict:
                async def go():
                    async with aiohttp.ClientSession() as s:
                        # Start somewhere in the middle so pages come from deep in the index.
                        start = f"o/{random.randrange(0, max(1, n - pages * 1000)):08d}"
                        params = {"maxResults": "1000", "fields": _LIST_FIELDS, "startOffset": start}
                        c0 = server_cpu()
                        t0 = time.perf_counter()
                        count = 0
                        for _ in range(pages):
                            async with s.get(f"{url}/storage/v1/b/bench-list-{n}/o", params=params) as r:
                                page = await r.json()
                            count += len(page.get("items", []))
                            tok = page.get("nextPageToken")
                            if tok:
                                params["pageToken"] = tok
                            else:  # end of the bucket: wrap around to its start
                                params.pop("pageToken", None)
                                params["startOffset"] = "o/"
                        wall = time.perf_counter() - t0
                    if count != pages * 1000:
                        raise WrongResult(f"listed {count} objects, expected {pages * 1000}")
                    return {"items": count, "pages": pages, "wall_s": wall, "pages_per_s": pages / wall,
                            "server_cpu_ms_per_page": (server_cpu() - c0) / pages * 1e3}
                return _run(go)
            return fn

        contenders = {"get-small": small_gets, "stream": stream}
        names = {}
        for n in list_sizes:
            name = f"list-{n // 1000}k" if n < 1_000_000 else f"list-{n // 1_000_000}m"
            names[n] = name
            contenders[name] = lister(n)
        ratios = [(names[n], names[list_sizes[0]]) for n in list_sizes[1:]]
        params = {"gets": gets, "concurrency": args.concurrency, "small_size": small_size, "big_size": big_size,
                  "pages": pages, "list_sizes": list_sizes}
        return run_scenario("server", args, params, contenders,
                            headline=["objects_per_s", "mb_per_s", "pages_per_s"], ratios=ratios)
