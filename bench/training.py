"""`python -m bench training`: one epoch of a small CNN on CPU, fed from the server (issue 6).

Data: synthetic 32x32 RGB images stored as 10-100 KB objects (20k; --quick 4k): the first 3,072 bytes
are the pixels, the next byte mod 10 the label, the rest padding (as metadata and compression
overhead pad a real JPEG). Every contender trains the same model from the same seed with the same
DataLoader settings (batch 64, --workers worker processes, prefetch_factor 2; fluxfs's own read-ahead at its default):
  fluxfs             FluxMapDataset with its own sampler, shuffled: each worker reads its next batches ahead
  fluxfs-shuffle     FluxMapDataset with shuffle=True (one DataLoader batch = one batched read: direct GETs
                     for <= 64, no read-ahead)
  fluxfs-iterable    FluxIterableDataset(shuffle=True), sharded over the workers
  fluxfs-nodes       ListObjects -> ReadObjects -> Batcher -> collate -> Prefetcher -> Loader (threads, no workers)
  gcsfs              a plain torch Dataset whose __getitem__ is gcsfs `cat_file`, shuffled (first --gcsfs-max objects)
  dataflux           DataFluxMapStyleDataset (its defaults: composed batch reads, 1 thread), shuffled
  dataflux-best      the same with threads_per_process=--dataflux-threads
  dataflux-iterable  DataFluxIterableDataset (contiguous shard per worker)
  limit              the same objects' bytes held in memory (read before the clock): compute, decoding
                     and DataLoader plumbing only, the ceiling for a loader that is not the bottleneck
Listing happens before the clock starts (except for the Nodes pipeline, which streams its listing).
Reported: samples/s, and data_wait_share = time the training loop spent waiting for the next batch /
epoch time. Each epoch is checked: sample count and the sum of labels and first pixels must match.
"""
from __future__ import annotations

import argparse
import logging
import os
import time
from typing import Any, Callable, Dict, Iterable

import numpy as np

from .common import WrongResult, run_scenario, start_server

BUCKET = "bench-training"
IMG_BYTES = 32 * 32 * 3
SIZES = (10_000, 100_000)
BATCH = 64


def add_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--workers", type=int, default=2, help="DataLoader worker processes (same for all)")
    parser.add_argument("--gcsfs-max", type=int, default=1000,
                        help="objects the gcsfs contender trains on (it reads ~60 samples/s in the cloud profile)")
    parser.add_argument("--dataflux-threads", type=int, default=16, help="threads_per_process of dataflux-best")


def decode(data: bytes, meta: Any = None):
    """Bytes -> (3x32x32 float image, label): the 'image decoding' every contender does alike."""
    import torch

    pixels = np.frombuffer(data, dtype=np.uint8, count=IMG_BYTES).reshape(3, 32, 32)
    return torch.from_numpy(pixels.astype(np.float32) / 255.0), int(data[IMG_BYTES]) % 10


def make_model():
    import torch.nn as nn

    return nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(8, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(16 * 8 * 8, 10),
    )


def train_epoch(batches: Iterable) -> Dict[str, float]:
    """One epoch; returns samples, wall time, time spent waiting for data and a content checksum."""
    import torch

    torch.manual_seed(0)
    model = make_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    loss_fn = torch.nn.CrossEntropyLoss()
    samples = label_sum = pixel_sum = 0
    wait = 0.0
    t0 = time.perf_counter()
    it = iter(batches)
    while True:
        w0 = time.perf_counter()
        try:
            images, labels = next(it)
        except StopIteration:
            wait += time.perf_counter() - w0
            break
        wait += time.perf_counter() - w0
        opt.zero_grad()
        loss = loss_fn(model(images), labels)
        loss.backward()
        opt.step()
        samples += len(labels)
        label_sum += int(labels.sum())
        pixel_sum += int(torch.round(images[:, 0, 0, 0] * 255).sum())
    wall = time.perf_counter() - t0
    return {"samples": samples, "wall_s": wall, "wait_s": wait, "label_sum": label_sum, "pixel_sum": pixel_sum}


class GcsfsDataset:
    """The plain baseline: a map-style Dataset reading each object with gcsfs `cat_file`."""

    def __init__(self, paths: list, endpoint: str):
        self.paths, self.endpoint = paths, endpoint
        self._fs, self._pid = None, None

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, i: int):
        if self._pid != os.getpid():  # one filesystem per worker process
            import gcsfs.core

            self._fs = gcsfs.core.GCSFileSystem(endpoint_url=self.endpoint, token="anon", skip_instance_cache=True)
            self._pid = os.getpid()
        return decode(self._fs.cat_file(self.paths[i]))

    def __getstate__(self):
        return {**self.__dict__, "_fs": None, "_pid": None}


class InMemoryDataset:
    """The limit: the same objects' bytes already in memory, decoded per sample (no I/O at all).

    What one epoch costs in compute, decoding, collation and DataLoader plumbing alone: the
    ceiling a loader that is no longer the bottleneck approaches.
    """

    def __init__(self, blobs: list):
        self.blobs = blobs

    def __len__(self) -> int:
        return len(self.blobs)

    def __getitem__(self, i: int):
        return decode(self.blobs[i])


def expected_sums(names: list, sizes: list, seed: int) -> tuple[int, int]:
    """Sum of labels and of first pixels over `names`, from the server's synthetic content (no reads)."""
    from fluxfs.server.synthetic import synthetic_range

    labels = pixels = 0
    for name, size in zip(names, sizes):
        head = synthetic_range(name, size, seed, 0, IMG_BYTES + 1)
        labels += head[IMG_BYTES] % 10
        pixels += head[0]
    return labels, pixels


def run(args: argparse.Namespace) -> dict:
    import torch
    from dataflux_pytorch import dataflux_iterable_dataset as dfi
    from dataflux_pytorch import dataflux_mapstyle_dataset as dfm
    from torch.utils.data import DataLoader, default_collate
    from torchdata.nodes import Batcher, Loader, Mapper, Prefetcher

    from fluxfs import FluxFileSystem
    from fluxfs.pipes import FluxIterableDataset, FluxMapDataset, ListObjects, ReadObjects

    # One compute thread: the DataLoader workers need the other core, and two compute threads
    # fighting them on 2 shared cores made a step 5x slower than one thread.
    torch.set_num_threads(1)
    logging.getLogger("urllib3.connectionpool").setLevel(logging.ERROR)  # Dataflux's threads overflow its pool
    count = args.objects or (4_000 if args.quick else 20_000)
    sizes = (args.size, args.size) if args.size else SIZES
    prefix = f"img-{count}-{sizes[0]}-{sizes[1]}/"
    seed = 0
    with start_server(args) as srv:
        url = srv.url
        os.environ["STORAGE_EMULATOR_HOST"] = url  # Dataflux's storage.Client finds the server through it
        srv.create_bucket(BUCKET)
        srv.generate(BUCKET, count, size=sizes, prefix=prefix, seed=seed)
        so = {"endpoint_url": url, "token": "anon"}
        fs = FluxFileSystem(endpoint_url=url, token="anon", skip_instance_cache=True)
        infos = sorted(fs.find(f"{BUCKET}/{prefix}", detail=True).values(), key=lambda i: i["name"])
        if len(infos) != count:
            raise RuntimeError(f"listing found {len(infos)} of {count} objects")
        keys = [i["name"].split("/", 1)[1] for i in infos]
        all_sums = expected_sums(keys, [i["size"] for i in infos], seed)
        n_gcsfs = min(args.gcsfs_max, count)
        gcsfs_sums = expected_sums(keys[:n_gcsfs], [i["size"] for i in infos[:n_gcsfs]], seed)
        total_bytes = sum(i["size"] for i in infos)
        gcsfs_bytes = sum(i["size"] for i in infos[:n_gcsfs])
        loader_kw = dict(batch_size=BATCH, num_workers=args.workers)
        if args.workers:
            loader_kw["prefetch_factor"] = 2

        def measured(make_batches: Callable[[], Iterable], expect: tuple, n: int, n_bytes: int) -> Callable[[], dict]:
            def fn() -> dict:
                batches = make_batches()  # datasets are built (and listed) before the clock starts
                r = train_epoch(batches)
                if (r["samples"], r["label_sum"], r["pixel_sum"]) != (n, *expect):
                    raise WrongResult(f"epoch saw {r['samples']} samples, sums {r['label_sum']}/{r['pixel_sum']}; "
                                      f"expected {n}, {expect[0]}/{expect[1]}")
                return {"objects": n, "bytes": n_bytes, "samples_per_s": n / r["wall_s"], "wall_s": r["wall_s"],
                        "data_wait_share": r["wait_s"] / r["wall_s"]}
            return fn

        def fluxfs_map(read_ahead: bool):
            def make():
                ds = FluxMapDataset.from_prefix(f"flux://{BUCKET}/{prefix}", storage_options=so, transform=decode)
                len(ds)
                if read_ahead:  # the dataset's own shuffled order: workers read their next batches ahead
                    return DataLoader(ds, sampler=ds.sampler(shuffle=True, seed=seed), **loader_kw)
                return DataLoader(ds, shuffle=True, **loader_kw)
            return make

        def fluxfs_iterable():
            ds = FluxIterableDataset.from_prefix(f"flux://{BUCKET}/{prefix}", storage_options=so, transform=decode,
                                                 shuffle=True, read_batch=BATCH)
            ds.num_objects  # noqa: B018 - list now, not on the clock
            return DataLoader(ds, **loader_kw)

        def fluxfs_nodes():
            node = ListObjects(f"flux://{BUCKET}/{prefix}", storage_options=so)
            node = ReadObjects(node, storage_options=so, batch_size=BATCH, transform=decode)
            node = Mapper(Batcher(node, BATCH, drop_last=False), default_collate)
            return Loader(Prefetcher(node, prefetch_factor=2))

        def gcsfs_dataset():
            return DataLoader(GcsfsDataset([i["name"] for i in infos[:n_gcsfs]], url), shuffle=True, **loader_kw)

        def dataflux_map(threads: int):
            def make():
                cfg = dfm.Config(prefix=prefix, threads_per_process=threads)
                ds = dfm.DataFluxMapStyleDataset("test", BUCKET, config=cfg, data_format_fn=decode)
                if len(ds) != count:
                    raise WrongResult(f"Dataflux listed {len(ds)} of {count} objects")
                return DataLoader(ds, shuffle=True, **loader_kw)
            return make

        def dataflux_iterable():
            ds = dfi.DataFluxIterableDataset("test", BUCKET, config=dfi.Config(prefix=prefix), data_format_fn=decode)
            return DataLoader(ds, **loader_kw)

        # Read once, untimed, for the limit contender (fs.cat_objects checks every crc32c).
        got = fs.cat_objects(infos)
        blobs = [got[i["name"]] for i in infos]
        del got

        def in_memory():
            return DataLoader(InMemoryDataset(blobs), shuffle=True, **loader_kw)

        contenders = {
            "fluxfs": measured(fluxfs_map(True), all_sums, count, total_bytes),
            "fluxfs-shuffle": measured(fluxfs_map(False), all_sums, count, total_bytes),
            "fluxfs-iterable": measured(fluxfs_iterable, all_sums, count, total_bytes),
            "fluxfs-nodes": measured(fluxfs_nodes, all_sums, count, total_bytes),
            "gcsfs": measured(gcsfs_dataset, gcsfs_sums, n_gcsfs, gcsfs_bytes),
            "dataflux": measured(dataflux_map(1), all_sums, count, total_bytes),
            "dataflux-best": measured(dataflux_map(args.dataflux_threads), all_sums, count, total_bytes),
            "dataflux-iterable": measured(dataflux_iterable, all_sums, count, total_bytes),
            "limit": measured(in_memory, all_sums, count, total_bytes),
        }
        params = {"objects": count, "size_range": list(sizes), "batch_size": BATCH, "workers": args.workers,
                  "gcsfs_objects": n_gcsfs, "dataflux_threads": args.dataflux_threads,
                  "torch_threads": torch.get_num_threads()}
        report = run_scenario("training", args, params, contenders, "samples_per_s",
                              [("fluxfs", "gcsfs"), ("fluxfs", "dataflux"), ("fluxfs", "dataflux-best"),
                               ("fluxfs-iterable", "dataflux-iterable"), ("fluxfs-nodes", "gcsfs"),
                               ("fluxfs", "limit"), ("fluxfs-shuffle", "limit"), ("fluxfs-iterable", "limit"),
                               ("fluxfs-nodes", "limit")])
    shares = {name: c["median"]["data_wait_share"] for name, c in report["contenders"].items() if "median" in c}
    print("share of step time waiting for data: " + "  ".join(f"{k}={v:.0%}" for k, v in shares.items()))
    summary = "  ".join(f"{k}={v:g}x" for k, v in report["ratios"].items()) or "no ratios"
    print(f"ratios (training, {args.profile}, median of {args.repeat}): {summary}")
    return report
