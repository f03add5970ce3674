"""FluxStorageReader's reads of one object: many items coalesced into a few GETs, issued concurrently."""
from __future__ import annotations

import torch
import torch.distributed.checkpoint as dcp

from fluxfs.pipes.dcp import FluxStorageReader, FluxStorageWriter
from tests.conftest import server_options


def test_many_adjacent_items_load_in_a_few_concurrent_gets(flux_server, bucket):
    url = f"flux://{bucket}/ckpt/many"
    g = torch.Generator().manual_seed(11)
    state = {f"t{i:03d}": torch.randn(16 * 1024, generator=g) for i in range(200)}  # 200 items of 64 KiB, one file
    dcp.save(state, storage_writer=FluxStorageWriter(url, **server_options(flux_server)))
    assert sum(n.endswith(".distcp") for n in flux_server.list_names(bucket, "ckpt/many/")) == 1
    target = {k: torch.zeros(16 * 1024) for k in state}
    flux_server.configure(latency_ms=100)  # each answer waits: GETs in flight together overlap on the server
    flux_server.reset_stats()
    # 1 MiB GETs: the ~13 MB coalesced range is ~13 ranged GETs, in flight together.
    dcp.load(target, storage_reader=FluxStorageReader(url, chunk_size=2**20, **server_options(flux_server)))
    for k in state:
        assert torch.equal(target[k], state[k]), k
    stats = flux_server.stats()
    gets = stats["requests"]["read"]
    assert gets <= 20, gets  # .metadata and the coalesced range, not one GET per item (200)
    assert stats["peak_in_flight"]["read"] >= 4, stats["peak_in_flight"]
