"""Peer clients as contenders, each in its own subprocess so its CPU and memory are its own.

The peers users would pick instead of fluxfs, pointed at the embedded server without credentials:
  obstore      Rust `object_store` (GIL released): `GCSStore(bucket, base_url=URL, skip_signature=True,
               client_options={"allow_http": True})`, XML API; concurrency = coroutines awaiting
               `get_async` / `get_range_async` at once over one store
  tensorstore  TensorStore's GCS key-value store (C++): TENSORSTORE_GCS_HTTP_URL, GOOGLE_AUTH_TOKEN_FOR_TESTING;
               concurrency = the context's {"gcs_request_concurrency": {"limit": N}}
  runai        Run:ai Model Streamer (C++, vLLM's and SGLang's weight loader) with runai-model-streamer-gcs:
               CLOUD_STORAGE_EMULATOR_ENDPOINT, anonymous credentials, RUNAI_STREAMER_CONCURRENCY=N and
               RUNAI_STREAMER_S3_MAX_CONNECTIONS=1 (connections independent of the core count)
  aiohttp      bare concurrent aiohttp GETs (`alt=media`, body by `await resp.read()`): one ClientSession,
               concurrency = coroutines at once over a connector of as many connections (always installed)
A peer whose package is missing (`pip install fluxfs[peers]`) raises `Skipped`: reported, not failed.
The fluxfs contender of `bench reads` runs here too, so all of them are measured the same way: wall
and CPU (os.times of the whole process, its native threads included) around the reads only, the
benchmark's own crc32c check of every object taken off both (its thread's CPU and its wall time), peak
memory from VmHWM reset after the imports (`PeakMemory`). Nothing big is returned through `asyncio.run`
(on Python 3.11 it costs seconds of CPU for a few hundred MB): results are stored from inside. Workers
print their figures and leave without interpreter finalization (`bench.worker.leave` says why).
"""
from __future__ import annotations

import importlib.util
import json
import os
import sys
import time

from .common import PeakMemory, Skipped, WrongResult
from .worker import ROOT, leave, pythonpath, run_python

PACKAGES = {"obstore": ("obstore",), "tensorstore": ("tensorstore",),
            "runai": ("runai_model_streamer", "runai_model_streamer_gcs")}


def missing(name: str) -> str | None:
    """Why peer `name` cannot run here (a package not installed), or None."""
    for module in PACKAGES.get(name, ()):
        if importlib.util.find_spec(module) is None:
            return f"{module} is not installed (pip install 'fluxfs[peers]')"
    return None


def concurrency_note(name: str, n: int, chunk: int | None = None) -> str:
    """How contender `name`'s concurrency was set (recorded in the JSON params)."""
    notes = {
        "obstore": f"{n} get_async/get_range_async awaited at once (coroutines over one GCSStore)",
        "tensorstore": f'context {{"gcs_request_concurrency": {{"limit": {n}}}}}',
        "runai": f"RUNAI_STREAMER_CONCURRENCY={n}, RUNAI_STREAMER_S3_MAX_CONNECTIONS=1"
                 + (f", RUNAI_STREAMER_CHUNK_BYTESIZE={chunk}" if chunk else ""),
        "aiohttp": f"{n} GETs awaited at once (coroutines over one ClientSession, TCPConnector(limit={n}))",
    }
    return notes[name]


def peer_env(name: str, url: str, concurrency: int, chunk: int | None = None) -> dict:
    """Environment variables pointing peer `name` at the server, credential-free, at `concurrency`."""
    if name == "tensorstore":
        return {"TENSORSTORE_GCS_HTTP_URL": url, "GOOGLE_AUTH_TOKEN_FOR_TESTING": "anon"}
    if name == "runai":
        env = {"CLOUD_STORAGE_EMULATOR_ENDPOINT": url, "RUNAI_STREAMER_GCS_USE_ANONYMOUS_CREDENTIALS": "1",
               "RUNAI_STREAMER_CONCURRENCY": str(concurrency), "RUNAI_STREAMER_S3_MAX_CONNECTIONS": "1",
               "RUNAI_STREAMER_LOG_LEVEL": "WARNING"}
        if chunk:
            env["RUNAI_STREAMER_CHUNK_BYTESIZE"] = str(chunk)
        return env
    return {}


def run_worker(spec: dict, timeout: float = 3600) -> dict:
    """Run one contender's reads (spec on stdin) in a fresh `python -m bench.peers`; its figures."""
    reason = missing(spec["contender"])
    if reason:
        raise Skipped(reason)
    env = {**os.environ, "PYTHONPATH": pythonpath(str(ROOT)),
           **peer_env(spec["contender"], spec["url"], spec["concurrency"])}
    return run_python(["-m", "bench.peers"], what=spec["contender"], env=env, timeout=timeout, stdin=json.dumps(spec))


# -- in the worker --------------------------------------------------------------------------------

def _cpu() -> float:
    return time.process_time()  # every thread's user+sys, finer than os.times's 10 ms ticks


def _crc(body) -> str:
    import base64

    import google_crc32c

    return base64.b64encode(google_crc32c.value(body).to_bytes(4, "big")).decode()


class _Clock:
    """Wall and CPU of the reads; a peer's checks (crc32c of every object) are taken off both."""

    def __init__(self) -> None:
        self.wall0, self.cpu0, self.off_wall, self.off_cpu = time.perf_counter(), _cpu(), 0.0, 0.0

    def check(self, key: str, size: int, crc: str, body) -> None:
        t0, c0 = time.perf_counter(), time.thread_time()
        raw = body if isinstance(body, bytes) else bytes(body)
        if len(raw) != size or _crc(raw) != crc:
            raise WrongResult(f"wrong bytes for {key}: {len(raw)} bytes with crc32c {_crc(raw)}, "
                              f"expected {size} bytes with crc32c {crc}")
        self.off_wall += time.perf_counter() - t0
        self.off_cpu += time.thread_time() - c0

    def result(self) -> tuple[float, float]:
        return time.perf_counter() - self.wall0 - self.off_wall, _cpu() - self.cpu0 - self.off_cpu


def _obstore_reads(spec: dict, objects: list) -> dict:
    import asyncio

    import obstore as obs
    from obstore.store import GCSStore

    store = GCSStore(spec["bucket"], base_url=spec["url"], skip_signature=True, client_options={"allow_http": True})
    state: dict = {}

    async def main() -> None:
        it = iter(objects)
        clock = _Clock()

        async def worker() -> None:
            for key, size, crc in it:
                resp = await obs.get_async(store, key)
                clock.check(key, size, crc, await resp.bytes_async())
        await asyncio.gather(*(worker() for _ in range(spec["concurrency"])))
        state["wall"], state["cpu"] = clock.result()

    with PeakMemory() as mem:
        asyncio.run(main())
    return {"wall_s": state["wall"], "cpu_s": state["cpu"], "peak_mb": mem.extra_mb}


def _aiohttp_reads(spec: dict, objects: list) -> dict:
    """The bare client: one GET ?alt=media per object, the body by `await resp.read()`, no retries."""
    import asyncio
    from urllib.parse import quote

    import aiohttp
    from yarl import URL

    base = f"{spec['url']}/download/storage/v1/b/{quote(spec['bucket'], safe='')}/o/"
    state: dict = {}

    async def main() -> None:
        it = iter(objects)
        limit = spec["concurrency"]
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=limit)) as session:
            clock = _Clock()

            async def worker() -> None:
                for key, size, crc in it:
                    async with session.get(URL(f"{base}{quote(key, safe='')}?alt=media", encoded=True)) as resp:
                        if resp.status != 200:
                            raise WrongResult(f"GET {key}: HTTP {resp.status}")
                        body = await resp.read()
                    clock.check(key, size, crc, body)
            await asyncio.gather(*(worker() for _ in range(limit)))
            state["wall"], state["cpu"] = clock.result()

    with PeakMemory() as mem:
        asyncio.run(main())
    return {"wall_s": state["wall"], "cpu_s": state["cpu"], "peak_mb": mem.extra_mb}


def _tensorstore_reads(spec: dict, objects: list) -> dict:
    import collections

    import tensorstore as ts

    ctx = ts.Context({"gcs_request_concurrency": {"limit": spec["concurrency"]}})
    kv = ts.KvStore.open({"driver": "gcs", "bucket": spec["bucket"]}, context=ctx).result()
    window = 4 * spec["concurrency"]  # futures queued ahead; TensorStore's limit bounds the requests
    with PeakMemory() as mem:
        clock = _Clock()
        pending: collections.deque = collections.deque()
        for obj in objects:
            pending.append((obj, kv.read(obj[0])))
            if len(pending) >= window:
                (key, size, crc), fut = pending.popleft()
                clock.check(key, size, crc, fut.result().value)
        while pending:
            (key, size, crc), fut = pending.popleft()
            clock.check(key, size, crc, fut.result().value)
        wall, cpu = clock.result()
    return {"wall_s": wall, "cpu_s": cpu, "peak_mb": mem.extra_mb}


def _fluxfs_reads(spec: dict, objects: list) -> dict:
    """`iter_cat_objects` over a listing (untimed); each object checked as the peers' are (off the clock). With
    spec["token"] (fluxfs-readonly: the server's read-only token) as its bearer token, else anonymous."""
    from fluxfs import FluxFileSystem

    token: object = "anon"
    if spec.get("token"):
        from google.oauth2.credentials import Credentials
        token = Credentials(spec["token"])
    fs = FluxFileSystem(endpoint_url=spec["url"], token=token, skip_instance_cache=True, **spec.get("fluxfs", {}))
    want = {f"{spec['bucket']}/{k}": (s, c) for k, s, c in objects}
    infos = sorted(fs.find(f"{spec['bucket']}/{spec['prefix']}", detail=True).values(), key=lambda i: i["name"])
    if len(infos) != len(objects):
        raise WrongResult(f"listing found {len(infos)} of {len(objects)} objects")
    with PeakMemory() as mem:
        clock, n = _Clock(), 0
        for got in fs.iter_cat_objects(infos, buffer_bytes=spec["batch_bytes"]):
            for name, body in got.items():
                clock.check(name, *want[name], body)
            n += len(got)
        wall, cpu = clock.result()
    if n != len(objects):
        raise WrongResult(f"the stream yielded {n} of {len(objects)} objects")
    return {"wall_s": wall, "cpu_s": cpu, "peak_mb": mem.extra_mb}


READERS = {"fluxfs": _fluxfs_reads, "fluxfs-readonly": _fluxfs_reads, "obstore": _obstore_reads,
           "tensorstore": _tensorstore_reads, "aiohttp": _aiohttp_reads}


def read_objects(spec: dict) -> dict:
    """Read every object of spec["objects"] ([key, size, crc32c]) with spec["contender"]; figures."""
    objects = spec["objects"]
    out = READERS[spec["contender"]](spec, objects)
    out.update(objects=len(objects), bytes=sum(o[1] for o in objects))
    return out


if __name__ == "__main__":
    spec = json.loads(sys.stdin.read())
    leave(lambda: read_objects(spec))
