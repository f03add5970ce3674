"""Peers loading safetensors shards into CPU tensors, for `bench weights` (run in its worker processes).

  runai        `SafetensorsStreamer().stream_files(gs:// paths)` then `get_tensors()` (owned tensors,
               the default): what vLLM and SGLang use; RUNAI_STREAMER_CONCURRENCY = in_flight,
               RUNAI_STREAMER_CHUNK_BYTESIZE = the range size, one connection per worker
  obstore      `get_range_async` of the same ranges as fluxfs, `in_flight` awaited at once, each copied
               into one buffer per shard; tensors are views of that buffer (header parsed as safetensors does)
  tensorstore  kvstore reads of the same ranges (byte_range), gcs_request_concurrency = in_flight, the same copy
The environment (endpoint, credentials, concurrency) comes from `bench.peers.peer_env`, set by the caller.
"""
from __future__ import annotations

import json
import struct
from typing import Callable

DTYPES = {"BF16": "bfloat16", "F16": "float16", "F32": "float32", "F64": "float64", "I64": "int64", "I32": "int32",
          "I16": "int16", "I8": "int8", "U8": "uint8", "BOOL": "bool"}


def _ranges(size: int, step: int) -> list[tuple[int, int]]:
    return [(a, min(a + step, size)) for a in range(0, size, step)]


def tensors_of(torch, buf, where: str) -> dict:
    """The tensors of one safetensors file held whole in `buf` (a uint8 tensor), as views of it."""
    (n,) = struct.unpack("<Q", bytes(buf[:8].numpy()))
    header = json.loads(bytes(buf[8:8 + n].numpy()))
    out = {}
    for name, meta in header.items():
        if name == "__metadata__":
            continue
        a, b = meta["data_offsets"]
        dtype = getattr(torch, DTYPES[meta["dtype"]])
        out[name] = buf[8 + n + a:8 + n + b].view(dtype).reshape(meta["shape"])
    if not out:
        raise ValueError(f"{where}: no tensors")
    return out


def _fill(torch, keys: list[str], sizes: list[int], step: int, fetch_all: Callable) -> dict:
    """One uint8 buffer per shard, filled by `fetch_all(jobs)` ((shard, start, end, view) per range)."""
    bufs = [torch.empty(size, dtype=torch.uint8) for size in sizes]
    jobs = [(k, a, b, bufs[i].numpy()[a:b])
            for i, (k, size) in enumerate(zip(keys, sizes)) for a, b in _ranges(size, step)]
    fetch_all(jobs)
    out: dict = {}
    for key, buf in zip(keys, bufs):
        out.update(tensors_of(torch, buf, key))
    return out


def obstore_load(torch, spec: dict, keys: list[str], step: int, in_flight: int) -> dict:
    import asyncio

    import numpy as np
    import obstore as obs
    from obstore.store import GCSStore

    store = GCSStore(spec["bucket"], base_url=spec["url"], skip_signature=True, client_options={"allow_http": True})

    def fetch_all(jobs: list) -> None:
        async def main() -> None:
            it = iter(jobs)

            async def worker() -> None:
                for key, a, b, view in it:
                    got = await obs.get_range_async(store, key, start=a, end=b)
                    if len(got) != b - a:
                        raise RuntimeError(f"short range {a}-{b} of {key}: {len(got)} bytes")
                    view[:] = np.frombuffer(got, dtype=np.uint8)
            await asyncio.gather(*(worker() for _ in range(in_flight)))
        asyncio.run(main())  # returns None: the bytes are in the buffers already

    return _fill(torch, keys, spec["shard_sizes"], step, fetch_all)


def tensorstore_load(torch, spec: dict, keys: list[str], step: int, in_flight: int) -> dict:
    import collections

    import numpy as np
    import tensorstore as ts

    ctx = ts.Context({"gcs_request_concurrency": {"limit": in_flight}})
    kv = ts.KvStore.open({"driver": "gcs", "bucket": spec["bucket"]}, context=ctx).result()

    def fetch_all(jobs: list) -> None:
        pending: collections.deque = collections.deque()

        def finish() -> None:
            (key, a, b, view), fut = pending.popleft()
            got = fut.result().value
            if len(got) != b - a:
                raise RuntimeError(f"short range {a}-{b} of {key}: {len(got)} bytes")
            view[:] = np.frombuffer(got, dtype=np.uint8)
        for job in jobs:
            pending.append((job, kv.read(job[0], byte_range=slice(job[1], job[2]))))
            if len(pending) >= 2 * in_flight:
                finish()
        while pending:
            finish()

    return _fill(torch, keys, spec["shard_sizes"], step, fetch_all)


def runai_load(torch, spec: dict, keys: list[str], step: int, in_flight: int) -> dict:
    from runai_model_streamer import SafetensorsStreamer

    out = {}
    with SafetensorsStreamer() as streamer:
        streamer.stream_files([f"gs://{spec['bucket']}/{k}" for k in keys])
        for name, t in streamer.get_tensors():
            out[name] = t
    return out


LOADERS = {"obstore": obstore_load, "tensorstore": tensorstore_load, "runai": runai_load}
IMPORTS = {"obstore": ("obstore", "obstore.store"), "tensorstore": ("tensorstore",), "runai": ("runai_model_streamer",)}
