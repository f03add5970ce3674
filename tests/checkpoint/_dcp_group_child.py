"""Gloo ranks for test_dcp_group.py (launched by `tests._gloo.run_ranks` with URL; one rank per server).

Each rank loads the replicated checkpoint at URL/replicated (every rank every tensor) with the
default reader, then with group=NO_GROUP, then URL/sharded where each rank loads its own item (nothing
in common between the ranks' plans). Each rank reports tensor digests, the reader's stats and bytes read.
"""
from __future__ import annotations

import torch

from tests._gloo import GlooRank, digests, start_ranks


def replicated_state() -> dict:
    """~9 MB: one 4 MiB tensor (cut between ranks), 16 of 256 KiB, mixed dtypes, a 0-d tensor and a pickled item."""
    g = torch.Generator().manual_seed(9)
    state = {"embed": torch.randn(1024, 1024, generator=g)}
    for i in range(16):
        t = torch.randn(256, 256, generator=g)
        state[f"layer{i}"] = t.to(torch.bfloat16) if i % 4 == 1 else t
    state["scale"] = torch.tensor(2.5, dtype=torch.float64)
    state["meta"] = {"step": 7, "tags": ["a", "b"]}
    return state


def sharded_state() -> dict:
    """Two 2 MiB tensors: rank r loads part<r> only."""
    return {f"part{r}": torch.arange(512 * 1024, dtype=torch.float32) + r for r in range(2)}


def empty_like(state: dict) -> dict:
    return {k: torch.zeros_like(v) if isinstance(v, torch.Tensor) else {"step": 0, "tags": []}
            for k, v in state.items()}


def rank_main(me: GlooRank, url: str) -> None:
    import torch.distributed.checkpoint as dcp
    from fluxfs.pipes.dcp import FluxStorageReader
    from fluxfs.pipes.distributed import NO_GROUP

    report = me.report
    for name, group in (("shared", "node"), ("alone", NO_GROUP)):
        target = empty_like(replicated_state())

        def load(target=target, group=group):
            reader = FluxStorageReader(f"{url}/replicated", group=group, **me.options)
            dcp.load(target, storage_reader=reader)
            return reader.stats
        report[name]["stats"] = dict(me.measured(name, load))
        report[name]["tensors"] = digests({k: v for k, v in target.items() if isinstance(v, torch.Tensor)})
        report[name]["meta"] = target["meta"]

    parts = sharded_state()
    mine = f"part{me.rank}"
    target = {mine: torch.zeros_like(parts[mine])}  # each rank its own item: nothing in common

    def load_sharded():
        reader = FluxStorageReader(f"{url}/sharded", **me.options)
        dcp.load(target, storage_reader=reader)
        return reader.stats
    report["sharded"]["stats"] = dict(me.measured("sharded", load_sharded))
    report["sharded"]["equal"] = bool(torch.equal(target[mine], parts[mine]))


if __name__ == "__main__":
    start_ranks(rank_main)
