"""Gloo ranks for test_group.py, run as ``python -m tests.weights._group_child MODE OUT BUCKET PORT URL...``.

Rank r reads through the r-th server URL (servers sharing one --root, so they hold the same objects and
generations): what each server sent is what that rank read from storage. MODE load: load_model_dir and
load_file with group=; slices: rank-specific slices next to shared tensors; list: datasets listed once;
denied: a load whose reads fail on rank 1 (its server refuses them), then one more once it serves again.
Each rank writes what it got (tensor digests, bytes, list calls) to OUT/rank<r>.json.
"""
from __future__ import annotations

import hashlib
import json
import os
import sys
import warnings

import torch


def digests(state: dict) -> dict:
    return {k: [str(v.dtype), list(v.shape), hashlib.sha256(v.contiguous().reshape(-1).view(torch.uint8).numpy()).hexdigest()]
            for k, v in state.items()}


def rank_main(rank: int, world: int, mode: str, out: str, bucket: str, port: int, urls: list) -> None:
    import torch.distributed as dist

    from fluxfs.pipes.safetensors import load_file, load_model_dir
    from fluxfs.server import ServerHandle

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    server = ServerHandle(urls[rank])
    options = {"endpoint_url": urls[rank], "token": "anon"}
    report: dict = {}

    def measured(name: str, call):
        dist.barrier()
        before = server.stats()
        got = call()
        dist.barrier()
        after = server.stats()
        report[name] = {"bytes": after["bytes_out"] - before["bytes_out"],
                        "lists": after["requests"].get("list", 0) - before["requests"].get("list", 0),
                        "keys": after["keys_scanned"] - before["keys_scanned"]}
        return got

    try:
        if mode == "load":
            sd = measured("model_dir", lambda: load_model_dir(f"flux://{bucket}/model", group=None, **options))
            report["model_dir"]["tensors"] = digests(sd)
            one = measured("file", lambda: load_file(f"flux://{bucket}/model/model-00001-of-00002.safetensors",
                                                     group=dist.group.WORLD, **options))
            report["file"]["tensors"] = digests(one)
        elif mode == "slices":
            def rows(name, shape):  # each rank its own rows of 2-D weights; the rest shared
                return slice(rank * shape[0] // world, (rank + 1) * shape[0] // world) if len(shape) == 2 else None
            sd = measured("slices", lambda: load_model_dir(f"flux://{bucket}/model", group=None, slices=rows,
                                                           **options))
            report["slices"]["tensors"] = digests(sd)
        elif mode == "errors":
            def outcome(call) -> str:
                try:
                    call()
                    return "loaded"
                except Exception as exc:  # noqa: BLE001 - the test checks type and message
                    return f"{type(exc).__name__}: {exc}"
            mine = ["scale"] if rank == 0 else ["empty"]
            report["differ"] = outcome(lambda: load_model_dir(f"flux://{bucket}/model", group=None, tensors=mine,
                                                              **options))
            report["missing"] = outcome(lambda: load_model_dir(f"flux://{bucket}/nothing", group=None, **options))
            only_zero = dist.new_group([0])
            report["member"] = outcome(lambda: load_file(f"flux://{bucket}/model/model-00002-of-00002.safetensors",
                                                         group=only_zero, **options))
        elif mode == "denied":  # rank 1's server refuses reads: rank 1's share fails after the headers
            try:
                load_model_dir(f"flux://{bucket}/model", group=None, **options)
                report["denied"] = "loaded"
            except Exception as exc:  # noqa: BLE001 - the test checks type, message and note
                report["denied"] = f"{type(exc).__name__}: {exc} {' '.join(getattr(exc, '__notes__', []))}"
            if rank == 1:
                server.configure(deny_ops=())
            dist.barrier()
            sd = load_model_dir(f"flux://{bucket}/model", group=None, **options)  # the group still works after
            report["after"] = digests(sd)
        elif mode == "list":
            from fluxfs.pipes import FluxIterableDataset
            from fluxfs.pipes.shards import FluxShardDataset, MissingIndexWarning

            ds = measured("objects", lambda: FluxIterableDataset.from_prefix(f"flux://{bucket}/data/", **options))
            report["objects"]["names"] = ds._source.table.names
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", MissingIndexWarning)
                shards = measured("shards", lambda: FluxShardDataset.from_prefix(f"flux://{bucket}/tars/", **options))
                report["shards"]["names"] = [s.path for s in shards.catalog.shards]
                from fluxfs.pipes.shards import FluxShardMapDataset

                mapped = measured("mapped", lambda: FluxShardMapDataset.from_prefix(f"flux://{bucket}/mapped/",
                                                                                      **options))
                report["mapped"]["names"] = mapped.shards
                alone = measured("alone", lambda: FluxIterableDataset.from_prefix(
                    f"flux://{bucket}/data/", list_once=False, **options))
            report["alone"]["names"] = alone._source.table.names
            # Datasets built in another order on rank 1: it is told, naming both.
            other = f"flux://{bucket}/tars/" if rank == 1 else f"flux://{bucket}/data/"
            try:
                FluxIterableDataset.from_prefix(other, **options)
                report["order"] = "built"
            except ValueError as exc:
                report["order"] = str(exc)
        dist.barrier()
    finally:
        with open(os.path.join(out, f"rank{rank}.json"), "w") as f:
            json.dump(report, f)
        dist.destroy_process_group()


if __name__ == "__main__":
    mode, out, bucket, port, *urls = sys.argv[1:]
    torch.multiprocessing.start_processes(rank_main, args=(len(urls), mode, out, bucket, int(port), urls),
                                          nprocs=len(urls), start_method="fork")
