"""Gloo ranks training as a team would (``tests/pipes/test_ddp.py``), one embedded server per rank (`tests._gloo`).

Each rank: its share of a FluxMapDataset through the dataset's own sampler for two epochs (the keys, and what
its server sent meanwhile); then a tiny model in DistributedDataParallel trained for EPOCHS epochs over uneven
tar shards (FluxShardDataset) and over objects (FluxIterableDataset), each through a DataLoader with workers,
reporting the steps of every epoch. A rank with a batch fewer than another would leave it waiting in an
all-reduce: the run would never end.
"""
from __future__ import annotations

import torch

from tests._gloo import GlooRank, start_ranks

EPOCHS = 3


def features(data: bytes) -> torch.Tensor:
    return torch.frombuffer(bytearray(data[:4]), dtype=torch.uint8).float() / 255


def train(me: GlooRank, name: str, dataset, make_loader) -> None:
    """EPOCHS epochs of DDP steps over `dataset`; report[name] = steps of each epoch."""
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    torch.manual_seed(0)
    model = DistributedDataParallel(torch.nn.Linear(4, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = make_loader(dataset)
    steps = []
    for epoch in range(EPOCHS):
        dataset.set_epoch(epoch)
        n = 0
        for x, y in loader:
            opt.zero_grad()
            torch.nn.functional.cross_entropy(model(x), y).backward()  # an all-reduce of the gradients
            opt.step()
            n += 1
        steps.append(n)
    dist.barrier()
    me.report[name] = steps


def shard_sample(sample: dict):
    return features(sample["bin"]), int(sample["cls"]) % 2


def object_sample(data: bytes, meta):
    return features(data), data[0] % 2


def rank_main(me: GlooRank, bucket: str) -> None:
    import time
    from torch.utils.data import DataLoader
    t0 = time.time()

    from fluxfs.pipes import FluxIterableDataset, FluxMapDataset, FluxShardDataset

    ds = FluxMapDataset.from_prefix(f"flux://{bucket}/objects/", transform=lambda data, meta: meta.key,
                                    storage_options=me.options)
    sampler = ds.sampler(shuffle=True, seed=5)
    loader = DataLoader(ds, batch_size=4, num_workers=1, sampler=sampler, collate_fn=list, persistent_workers=True)
    for epoch in range(2):
        sampler.set_epoch(epoch)
        me.report[f"sampler{epoch}"] = me.measured(f"reads{epoch}", lambda: [k for b in loader for k in b])
    me.report["sampler_len"] = len(sampler)
    me.report["t_sampler"] = time.time() - t0

    shards = FluxShardDataset.from_prefix(f"flux://{bucket}/shards/", shuffle=True, seed=1, shuffle_buffer=4,
                                          transform=shard_sample, storage_options=me.options)
    train(me, "shard_steps", shards, lambda d: DataLoader(d, batch_size=3, num_workers=2, persistent_workers=True))
    me.report["t_shards"] = time.time() - t0
    objects = FluxIterableDataset.from_prefix(f"flux://{bucket}/objects/", shuffle=True, read_batch=4,
                                              transform=object_sample, storage_options=me.options)
    train(me, "object_steps", objects, lambda d: DataLoader(d, batch_size=4, num_workers=1, persistent_workers=True))
    me.report["t_objects"] = time.time() - t0


if __name__ == "__main__":
    start_ranks(rank_main)
