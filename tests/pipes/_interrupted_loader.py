"""A training loop's data side, run as ``python -m tests.pipes._interrupted_loader ENDPOINT BUCKET KIND...``, to be
interrupted once per KIND: epochs of a 2-worker DataLoader over flux://BUCKET/d/ ("iter": FluxIterableDataset;
"map": FluxMapDataset with its sampler, reading ahead). Prints READING at the first batch of each; Ctrl-C stops
it, and the next KIND starts once every worker has ended (INTERRUPTED, as in a notebook); the last one's
Ctrl-C ends the process, as in a script."""
from __future__ import annotations

import multiprocessing
import sys

from torch.utils.data import DataLoader

from fluxfs.pipes import FluxIterableDataset, FluxMapDataset


def count(batch: list) -> int:
    return len(batch)


def loader(kind: str, endpoint: str, bucket: str) -> DataLoader:
    options = {"endpoint_url": endpoint, "token": "anon"}
    url = f"flux://{bucket}/d/"
    if kind == "iter":
        return DataLoader(FluxIterableDataset.from_prefix(url, storage_options=options), batch_size=16,
                          num_workers=2, collate_fn=count)
    ds = FluxMapDataset.from_prefix(url, storage_options=options)
    return DataLoader(ds, batch_size=32, num_workers=2, sampler=ds.sampler(), collate_fn=count)


def epochs(data: DataLoader) -> None:
    print("READING", flush=True)
    for _epoch in range(1000):
        for _batch in data:
            pass


def main(endpoint: str, bucket: str, *kinds: str) -> None:
    for n, kind in enumerate(kinds):
        data = loader(kind, endpoint, bucket)
        if n == len(kinds) - 1:
            epochs(data)  # Ctrl-C ends the process
            return
        try:
            epochs(data)
        except KeyboardInterrupt:
            for worker in multiprocessing.active_children():
                worker.join()
            print("INTERRUPTED", flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:])
