"""`python -m bench weights`: a sharded safetensors model loaded and saved through each client (issue 20).

A model of --size bytes (default 2 GB; --quick 256 MB) in the Hugging Face layout: 4 shards
(`model-0000k-of-00004.safetensors`, written by the safetensors package) and the index; bf16 and
fp32 tensors of a Llama-like shape (embeddings, hidden x hidden and hidden x intermediate matrices,
norms). Contenders, interleaved, each load or save in a fresh subprocess (RSS sampled every 5 ms):
  fluxfs             load: fluxfs.pipes.safetensors.load_model_dir; save: save_file per shard
  fluxfs-tp-half     load_model_dir(slices=...) of the first half of every matrix's rows (a tensor-
                     parallel rank's share); reports the bytes the server sent
  gcsfs-cat          load: safetensors.torch.load(gcsfs.cat(shard)) per shard; save: gcsfs open("wb")
                     and write(safetensors.torch.save(shard)) per shard
  gcsfs-disk         load: gcsfs.get of the shards to a local directory, then safetensors load_file
  fluxfs-torch-load  FluxCheckpoint.load of the same weights saved as one .pt (reference)
  runai              Run:ai Model Streamer (vLLM's and SGLang's loader): SafetensorsStreamer over the
                     gs:// shards, 16 workers of 8 MiB chunks, one connection each (bench/peer_weights.py)
  obstore            obstore get_range_async of the same 8 MiB ranges, 16 in flight, into one buffer per
                     shard, tensors as views of it
  tensorstore        TensorStore kvstore reads of the same ranges, gcs_request_concurrency 16, the same way
  limit              a bare concurrent fetcher: plain aiohttp, the same 8 MiB ranges, the same 16
                     requests in flight, every chunk copied into one preallocated buffer; no
                     checksums, no tensors
A peer whose package is missing is reported as skipped (`pip install fluxfs[peers]`).
Timed: the load or save only. Every load is checked byte for byte (untimed); every save's object
must have the crc32c of the package's own bytes. Headlines: load and save MB/s; also client CPU
s/GB and the peak memory above the start (VmHWM, reset after the imports) and above the loaded tensors.
Ratios: `load:fluxfs/X` and `save:fluxfs/gcsfs` (MB/s, higher is better; gcsfs = its faster load of gcsfs-cat
and gcsfs-disk), `cpu:load:fluxfs/X` (load CPU per GB, fluxfs over X: lower is better, < 1 = fluxfs spends
less) for X in limit, runai, obstore, tensorstore; `rss:fluxfs/model` and `tp-bytes:half/full`.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

from . import peers
from .common import Skipped
from .worker import ROOT, leave, pythonpath, run_python

MIB = 2**20
BUCKET = "bench-weights"
SHARDS = 4
RANGE = 8 * MIB
IN_FLIGHT = 16
LOADS = ("fluxfs", "fluxfs-tp-half", "gcsfs-cat", "gcsfs-disk", "fluxfs-torch-load", "runai", "obstore",
         "tensorstore", "limit")
PEERS = ("runai", "obstore", "tensorstore")
SAVES = ("fluxfs", "gcsfs-cat")


def add_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--shards", type=int, default=SHARDS, help="number of safetensors shards")


# -- the model (rebuilt identically by every worker) ---------------------------------------------

def layout(size: int) -> list[tuple[str, tuple, str]]:
    """(name, shape, dtype) of a Llama-like model of about `size` bytes, in order."""
    hidden, inter, vocab = (4096, 11008, 32000) if size >= 10**9 else (2048, 5504, 8000)
    out = [("model.embed_tokens.weight", (vocab, hidden), "bfloat16")]
    total, i = vocab * hidden * 2, 0
    while total < size - hidden * 4:
        p = f"model.layers.{i}."
        layer = [(p + "input_layernorm.weight", (hidden,), "float32")]
        layer += [(p + f"self_attn.{x}_proj.weight", (hidden, hidden), "bfloat16") for x in "qkv"]
        layer += [(p + "self_attn.o_proj.weight", (hidden, hidden), "float32"),
                  (p + "post_attention_layernorm.weight", (hidden,), "float32"),
                  (p + "mlp.gate_proj.weight", (inter, hidden), "bfloat16"),
                  (p + "mlp.up_proj.weight", (inter, hidden), "bfloat16"),
                  (p + "mlp.down_proj.weight", (hidden, inter), "bfloat16")]
        out += layer
        total += sum(_nbytes(s, d) for _, s, d in layer)
        i += 1
    return out + [("model.norm.weight", (hidden,), "float32")]


def _nbytes(shape: tuple, dtype: str) -> int:
    n = 1
    for d in shape:
        n *= d
    return n * (2 if dtype == "bfloat16" else 4)


def shard_names(size: int, shards: int) -> list[list[str]]:
    """Tensor names per shard: consecutive runs of about equal bytes."""
    entries = layout(size)
    total = sum(_nbytes(s, d) for _, s, d in entries)
    out: list[list[str]] = [[] for _ in range(shards)]
    at = 0
    for name, shape, dtype in entries:
        out[min(shards - 1, at * shards // total)].append(name)
        at += _nbytes(shape, dtype)
    return out


def tensor(torch, name: str, shape: tuple, dtype: str, i: int):
    """Distinct bytes per tensor, cheap to make (no RNG over GBs); compared as bytes (bf16 NaNs are fine)."""
    nbytes = _nbytes(shape, dtype)
    words = torch.arange((nbytes + 3) // 4, dtype=torch.int32).mul_(40503).add_(i * 7919)
    return words.view(torch.uint8)[:nbytes].view(getattr(torch, dtype)).reshape(shape)


def state(torch, size: int, names=None) -> dict:
    keep = None if names is None else set(names)
    return {n: tensor(torch, n, s, d, i) for i, (n, s, d) in enumerate(layout(size)) if keep is None or n in keep}


def shard_file(k: int, shards: int) -> str:
    return f"model-{k + 1:05d}-of-{shards:05d}.safetensors"


def half_rows(name: str, shape: tuple):
    """A column-parallel rank's share: the first half of a matrix's rows (out_features)."""
    return slice(0, shape[0] // 2) if len(shape) == 2 else None


def check_loaded(torch, got: dict, size: int, tp: bool = False) -> None:
    entries = layout(size)
    if sorted(got) != sorted(n for n, _, _ in entries):
        raise AssertionError("loaded state dict has the wrong keys")
    for i, (name, shape, dtype) in enumerate(entries):
        want = tensor(torch, name, shape, dtype, i)
        if tp and len(shape) == 2:
            want = want[: shape[0] // 2]
        a, b = got[name].contiguous(), want.contiguous()
        if a.dtype != b.dtype or a.shape != b.shape or not torch.equal(a.view(-1).view(torch.uint8),
                                                                      b.view(-1).view(torch.uint8)):
            raise AssertionError(f"tensor {name} differs")


# -- one load or save in a subprocess ------------------------------------------------------------

def _limit_load(spec: dict) -> int:
    """The bare fetcher: 8 MiB ranges of every shard, 16 in flight, copied into one buffer."""
    import asyncio

    import aiohttp
    import torch

    sizes = spec["shard_sizes"]
    buf = torch.empty(sum(sizes), dtype=torch.uint8).numpy()
    view = memoryview(buf).cast("B")
    jobs, base = [], 0
    for k, size in enumerate(sizes):
        url = f"{spec['url']}/download/storage/v1/b/{BUCKET}/o/{spec['prefix']}%2F{shard_file(k, len(sizes))}"
        jobs += [(url, a, min(a + RANGE, size), base + a) for a in range(0, size, RANGE)]
        base += size

    async def main() -> None:
        sem = asyncio.Semaphore(IN_FLIGHT)
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=IN_FLIGHT)) as session:
            async def one(url: str, a: int, b: int, at: int) -> None:
                async with sem, session.get(url, params={"alt": "media"},
                                            headers={"Range": f"bytes={a}-{b - 1}"}) as r:
                    pos = at
                    async for data, _ in r.content.iter_chunks():
                        view[pos:pos + len(data)] = data
                        pos += len(data)
                    if pos != at + b - a:
                        raise RuntimeError(f"short range {a}-{b} of {url}")
            await asyncio.gather(*(one(*j) for j in jobs))

    asyncio.run(main())
    return len(buf)


def worker(spec: dict) -> dict:
    """One load or save (spec["op"]) by one contender; returns timings and memory."""
    import torch

    from bench.checkpoint import _cpu
    from bench.common import PeakMemory

    name, size, shards, url = spec["contender"], spec["size"], spec["shards"], spec["url"]
    opts = {"endpoint_url": url, "token": "anon"}
    root = f"{BUCKET}/{spec['prefix']}"
    names = shard_names(size, shards)
    if name.startswith("gcsfs"):
        import gcsfs.core
        import safetensors.torch as st

        gfs = gcsfs.core.GCSFileSystem(**opts)
    if name == "limit":
        import aiohttp  # noqa: F401 - imported before the clock starts, as the others' clients are
    if name in PEERS:
        import importlib

        from bench import peer_weights

        for module in peer_weights.IMPORTS[name]:
            importlib.import_module(module)
    if name.startswith("fluxfs"):
        from fluxfs.pipes.checkpoint import FluxCheckpoint
        from fluxfs.pipes.safetensors import load_model_dir, save_file
    if spec["op"] == "save":
        sd = state(torch, size)
        nbytes = sum(t.numel() * t.element_size() for t in sd.values())
        cpu0 = _cpu()
        with PeakMemory() as mem:
            t0 = time.perf_counter()
            for k in range(shards):
                part = {n: sd[n] for n in names[k]}
                target = f"{root}/{shard_file(k, shards)}"
                if name == "fluxfs":
                    save_file(part, f"flux://{target}", **opts)
                else:
                    with gfs.open(target, "wb") as f:
                        f.write(st.save(part))
            wall = time.perf_counter() - t0
        return {"wall_s": wall, "cpu_s": _cpu() - cpu0, "bytes": nbytes, "extra_rss_mb": mem.extra_mb}
    cpu0 = _cpu()
    with tempfile.TemporaryDirectory() as tmp, PeakMemory() as mem:
        t0 = time.perf_counter()
        if name == "fluxfs":
            got = load_model_dir(f"flux://{root}", **opts)
        elif name == "fluxfs-tp-half":
            got = load_model_dir(f"flux://{root}", slices=half_rows, **opts)
        elif name == "gcsfs-cat":
            got = {}
            for k in range(shards):
                got.update(st.load(gfs.cat(f"{root}/{shard_file(k, shards)}")))
        elif name == "gcsfs-disk":
            gfs.get([f"{root}/{shard_file(k, shards)}" for k in range(shards)], tmp + "/")
            got = {}
            for k in range(shards):
                got.update(st.load_file(os.path.join(tmp, shard_file(k, shards))))
        elif name == "fluxfs-torch-load":
            got = FluxCheckpoint(**opts).load(f"flux://{BUCKET}/{spec['prefix']}.pt")
        elif name in PEERS:
            keys = [f"{spec['prefix']}/{shard_file(k, shards)}" for k in range(shards)]
            got = peer_weights.LOADERS[name](torch, {**spec, "bucket": BUCKET}, keys, RANGE, IN_FLIGHT)
        elif name == "limit":
            got = _limit_load(spec)
        wall = time.perf_counter() - t0
    cpu = _cpu() - cpu0
    if isinstance(got, dict):
        loaded = sum(t.numel() * t.element_size() for t in got.values())
        check_loaded(torch, got, size, tp=name == "fluxfs-tp-half")
    else:
        loaded = got
    return {"wall_s": wall, "cpu_s": cpu, "loaded": loaded, "extra_rss_mb": mem.extra_mb}


# -- the parent ---------------------------------------------------------------------------------

def _run_worker(spec: dict, env: dict) -> dict:
    if spec["contender"] in PEERS:
        reason = peers.missing(spec["contender"])
        if reason:
            raise Skipped(reason)
        env = {**env, **peers.peer_env(spec["contender"], spec["url"], IN_FLIGHT, RANGE)}
    return run_python(["-m", "bench.weights", "--worker", json.dumps(spec)], env=env, timeout=3600,
                      what=f"{spec['contender']} {spec['op']}")


def _upload_model(srv, size: int, shards: int) -> tuple[list[int], dict]:
    """The model written by the safetensors package (and as one .pt); shard sizes and crc32c by file."""
    import safetensors.torch as st
    import torch

    from fluxfs import FluxFileSystem
    from fluxfs.pipes.checkpoint import FluxCheckpoint

    fs = FluxFileSystem(endpoint_url=srv.url, token="anon", skip_instance_cache=True)
    sd = state(torch, size)
    weight_map, sizes, crcs = {}, [], {}
    for k, names in enumerate(shard_names(size, shards)):
        body = st.save({n: sd[n] for n in names}, metadata={"format": "pt"})
        fs.pipe_file(f"{BUCKET}/model/{shard_file(k, shards)}", body)
        sizes.append(len(body))
        crcs[shard_file(k, shards)] = fs.info(f"{BUCKET}/model/{shard_file(k, shards)}")["crc32c"]
        weight_map.update({n: shard_file(k, shards) for n in names})
        del body
    index = {"metadata": {"total_size": sum(t.numel() * t.element_size() for t in sd.values())},
             "weight_map": weight_map}
    fs.pipe_file(f"{BUCKET}/model/model.safetensors.index.json", json.dumps(index).encode())
    FluxCheckpoint(endpoint_url=srv.url, token="anon").save(sd, f"flux://{BUCKET}/model.pt")
    # What the saves must reproduce: the package's bytes without metadata.
    for k, names in enumerate(shard_names(size, shards)):
        body = st.save({n: sd[n] for n in names})
        fs.pipe_file(f"{BUCKET}/expected/{shard_file(k, shards)}", body)
        crcs[shard_file(k, shards)] = fs.info(f"{BUCKET}/expected/{shard_file(k, shards)}")["crc32c"]
        del body
    return sizes, crcs


def run(args: argparse.Namespace) -> dict:
    from fluxfs import FluxFileSystem

    from .common import run_scenario, save_report, start_server

    size = args.size or (256 * 10**6 if args.quick else 2 * 10**9)
    shards = args.shards
    with start_server(args) as srv:
        srv.create_bucket(BUCKET)
        sizes, crcs = _upload_model(srv, size, shards)
        model = sum(_nbytes(s, d) for _, s, d in layout(size))
        params = {"size": model, "shards": shards, "tensors": len(layout(size)), "range": RANGE, "in_flight": IN_FLIGHT,
                  "concurrency": {"fluxfs": f"load_model_dir(concurrency={IN_FLIGHT}), ranges of {RANGE} bytes",
                                  "limit": f"{IN_FLIGHT} aiohttp GETs of {RANGE} bytes",
                                  **{p: peers.concurrency_note(p, IN_FLIGHT, RANGE) for p in PEERS}}}
        env = {**os.environ, "PYTHONPATH": pythonpath(str(ROOT))}
        fs = FluxFileSystem(endpoint_url=srv.url, token="anon", skip_instance_cache=True)

        def contender(name: str):
            def one() -> dict:
                spec = {"contender": name, "url": srv.url, "size": size, "shards": shards, "prefix": "model",
                        "shard_sizes": sizes}
                out: dict = {"bytes": model}
                if name in SAVES:
                    save = _run_worker({**spec, "op": "save", "prefix": f"saved-{name}"}, env)
                    for k in range(shards):
                        got = fs.info(f"{BUCKET}/saved-{name}/{shard_file(k, shards)}", refresh=True)["crc32c"]
                        if got != crcs[shard_file(k, shards)]:
                            raise AssertionError(f"{name} saved different bytes for shard {k + 1}")
                    out.update(save_mb_per_s=model / save["wall_s"] / 1e6, save_s=save["wall_s"],
                               save_cpu_s=save["cpu_s"], save_extra_rss_mb=save["extra_rss_mb"])
                srv.reset_stats()
                load = _run_worker({**spec, "op": "load"}, env)
                out.update(load_mb_per_s=model / load["wall_s"] / 1e6, load_s=load["wall_s"], load_cpu_s=load["cpu_s"],
                           peak_mb=load["extra_rss_mb"],
                           load_cpu_s_per_gb=load["cpu_s"] / (model / 1e9), bytes_read=srv.stats()["bytes_out"],
                           load_extra_rss_mb=load["extra_rss_mb"],
                           rss_above_tensors_mb=load["extra_rss_mb"] - load["loaded"] / MIB)
                out["wall_s"] = out["load_s"] + out.get("save_s", 0)
                out["cpu_s"] = out["load_cpu_s"] + out.get("save_cpu_s", 0)
                out["cpu_s_per_gb"] = out["load_cpu_s_per_gb"]  # the load's: every contender loads, two save
                return out
            return one

        contenders = {name: contender(name) for name in LOADS}
        report = run_scenario("weights", args, params, contenders, ["load_mb_per_s", "save_mb_per_s"], [])
    med = {n: c["median"] for n, c in report["contenders"].items() if "median" in c}
    ratios = {}
    if "fluxfs" in med:
        f = med["fluxfs"]
        gcs = [med[n]["load_mb_per_s"] for n in ("gcsfs-cat", "gcsfs-disk") if n in med]
        if gcs:
            ratios["load:fluxfs/gcsfs"] = round(f["load_mb_per_s"] / max(gcs), 2)
        if "limit" in med:
            ratios["load:fluxfs/limit"] = round(f["load_mb_per_s"] / med["limit"]["load_mb_per_s"], 2)
            ratios["cpu:load:fluxfs/limit"] = round(f["load_cpu_s_per_gb"] / med["limit"]["load_cpu_s_per_gb"], 2)
        if "gcsfs-cat" in med and "save_mb_per_s" in med["gcsfs-cat"]:
            ratios["save:fluxfs/gcsfs"] = round(f["save_mb_per_s"] / med["gcsfs-cat"]["save_mb_per_s"], 2)
        for p in PEERS:
            if p in med:
                ratios[f"load:fluxfs/{p}"] = round(f["load_mb_per_s"] / med[p]["load_mb_per_s"], 2)
                ratios[f"cpu:load:fluxfs/{p}"] = round(f["load_cpu_s_per_gb"] / med[p]["load_cpu_s_per_gb"], 2)
        ratios["rss:fluxfs/model"] = round(max(0.0, f["rss_above_tensors_mb"]) * MIB / model, 3)
        if "fluxfs-tp-half" in med:
            ratios["tp-bytes:half/full"] = round(med["fluxfs-tp-half"]["bytes_read"] / f["bytes_read"], 3)
    report["ratios"] = ratios
    print(f"ratios (weights, {args.profile}): " + "  ".join(f"{k}={v:g}x" for k, v in ratios.items()))
    for n, m in med.items():
        print(f"  [weights] {n}: load {m['load_mb_per_s']:.0f} MB/s, client CPU {m['load_cpu_s_per_gb']:.2f} s/GB, "
              f"peak RSS above the tensors {m['rss_above_tensors_mb']:.0f} MiB, {m['bytes_read'] / 1e6:.0f} MB read",
              file=sys.stderr)
    return save_report(args, report)


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--worker":
        leave(lambda: worker(json.loads(sys.argv[2])))
    else:
        sys.exit("usage: python -m bench weights [options]  (this module's own entry point is for its workers)")
