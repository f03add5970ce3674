"""FluxStorageReader under torch.distributed: replicated items read from storage once per group, over real gloo ranks.

Each rank reads through its own embedded server; the servers share one --root, so what server r sent is
what rank r read from storage.
"""
from __future__ import annotations

import pytest
import torch
import torch.distributed.checkpoint as dcp

from fluxfs.pipes.dcp import FluxStorageReader, FluxStorageWriter
from tests._gloo import digests, run_ranks_on, written_root

from ._dcp_group_child import replicated_state, sharded_state

pytestmark = pytest.mark.slow  # real gloo ranks in their own processes


@pytest.fixture(scope="module")
def loaded(tmp_path_factory):
    """The replicated and the sharded checkpoint saved by one process, then the 2-rank loads' reports and its size."""
    root, out = tmp_path_factory.mktemp("root"), tmp_path_factory.mktemp("out")
    with written_root(root) as (first, fs, bucket):
        options = {"endpoint_url": first.url, "token": "anon"}
        dcp.save(replicated_state(), storage_writer=FluxStorageWriter(f"flux://{bucket}/ckpt/replicated", **options))
        dcp.save(sharded_state(), storage_writer=FluxStorageWriter(f"flux://{bucket}/ckpt/sharded", **options))
        size = sum(v for k, v in fs.du(f"{bucket}/ckpt/replicated", total=False).items() if k.endswith(".distcp"))
        ranks = run_ranks_on(root, first, 2, "tests.checkpoint._dcp_group_child", out, f"flux://{bucket}/ckpt")
        yield ranks, size


def test_replicated_items_are_read_once_per_group(loaded):
    ranks, size = loaded
    state = replicated_state()
    want = digests({k: v for k, v in state.items() if isinstance(v, torch.Tensor)})
    for r, report in enumerate(ranks):
        assert report["shared"]["tensors"] == want, f"rank {r}"
        assert report["shared"]["meta"] == state["meta"], f"rank {r}"
        assert report["shared"]["stats"]["shared_items"] == len(state) - 1 + len(state["meta"]), f"rank {r}"
        assert report["shared"]["bytes"] <= 0.6 * size, (r, report["shared"]["bytes"], size)
    # Together the ranks read the checkpoint about once (plus each its .metadata), not twice.
    assert sum(r["shared"]["bytes"] for r in ranks) <= 1.1 * size


def test_no_group_reads_everything_on_every_rank(loaded):
    ranks, size = loaded
    for r, report in enumerate(ranks):
        assert report["alone"]["tensors"] == report["shared"]["tensors"], f"rank {r}"
        assert report["alone"]["bytes"] >= size, (r, report["alone"]["bytes"], size)
        assert "shared_items" not in report["alone"]["stats"]


def test_a_sharded_load_reads_only_its_own_items(loaded):
    ranks, _ = loaded
    for r, report in enumerate(ranks):
        assert report["sharded"]["equal"], f"rank {r}"
        assert "shared_items" not in report["sharded"]["stats"], f"rank {r}"
        assert 2 * 2**20 <= report["sharded"]["bytes"] <= 2 * 2**20 + 64 * 1024, (r, report["sharded"]["bytes"])


def test_group_must_be_a_process_group_or_a_known_word(flux_server, bucket):
    with pytest.raises(TypeError, match=r"FluxStorageReader: group= takes 'node' \(the default\), NO_GROUP"):
        FluxStorageReader(f"flux://{bucket}/x", group="world", endpoint_url=flux_server.url, token="anon")
