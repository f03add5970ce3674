"""Gloo ranks for test_group.py (launched by `tests._gloo.run_ranks` with MODE BUCKET; one rank per server).

MODE load: load_model_dir and load_file with group=; slices: rank-specific slices next to shared tensors;
errors: what each rank is told when the ranks disagree; asked: ranks asking for other URLs or tensors;
endpoint: rank 1 reading through a server of other objects; denied: a load whose reads fail on rank 1 (its server
refuses them), then one more once it serves again; list: datasets listed once. Each rank reports what it got
(tensor digests, bytes, list calls).
"""
from __future__ import annotations

import warnings

from tests._gloo import GlooRank, digests, start_ranks


def outcome(call) -> str:
    """'loaded', or the error `call()` raised as 'Type: message' (what the test checks)."""
    try:
        call()
        return "loaded"
    except Exception as exc:  # the test checks type and message
        return f"{type(exc).__name__}: {exc}"


def rank_main(me: GlooRank, mode: str, bucket: str) -> None:
    import torch.distributed as dist

    from fluxfs.pipes.safetensors import load_file, load_model_dir

    rank, world, options, report, measured = me.rank, me.world, me.options, me.report, me.measured
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
        mine = (lambda n: n == "scale") if rank == 0 else (lambda n: n == "empty")  # checked by what they chose
        report["differ"] = outcome(lambda: load_model_dir(f"flux://{bucket}/model", group=None, tensors=mine,
                                                          **options))
        report["missing"] = outcome(lambda: load_model_dir(f"flux://{bucket}/nothing", group=None, **options))
        only_zero = dist.new_group([0])
        report["member"] = outcome(lambda: load_file(f"flux://{bucket}/model/model-00002-of-00002.safetensors",
                                                     group=only_zero, **options))
    elif mode == "asked":  # rank-dependent requests: every rank raises, naming who asked for what
        step = "other" if rank == 1 else "model"  # e.g. a restarted rank handed another step's directory
        report["url"] = outcome(lambda: load_model_dir(f"flux://{bucket}/{step}/", group=None, **options))
        shard = 2 if rank == 2 else 1
        report["file"] = outcome(lambda: load_file(
            f"flux://{bucket}/model/model-0000{shard}-of-00002.safetensors", group=None, **options))
        names = ["scale", "empty"] if rank == 0 else ["scale"]
        report["tensors"] = outcome(lambda: load_model_dir(f"flux://{bucket}/model", group=None,
                                                           tensors=iter(names), **options))
        report["after"] = digests(load_model_dir(f"flux://{bucket}/model", group=None, tensors=["scale"],
                                                 **options))
    elif mode == "endpoint":  # rank 1 reads through a server of its own: same names, other objects
        try:
            load_model_dir(f"flux://{bucket}/model", group=None, **options)
            report["endpoint"] = "loaded"
        except Exception as exc:  # the test checks type and message
            report["endpoint"] = f"{type(exc).__name__}: {exc}"
    elif mode == "denied":  # rank 1's server refuses reads: rank 1's share fails after the headers
        try:
            load_model_dir(f"flux://{bucket}/model", group=None, **options)
            report["denied"] = "loaded"
        except Exception as exc:  # the test checks type, message and note
            report["denied"] = f"{type(exc).__name__}: {exc} {' '.join(getattr(exc, '__notes__', []))}"
        if rank == 1:
            me.server.configure(deny_ops=())
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


if __name__ == "__main__":
    start_ranks(rank_main)
