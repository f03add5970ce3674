"""A group load (`group=`) with the node-local cache (`cache_dir=`): two ranks read the model once between
them (each its share), the broadcasts bring the rest, every node's cache is filled from memory, and a second
load reads no data from storage; on one node (one cache) and on two (a cache each)."""
from __future__ import annotations

import pytest
import safetensors.torch as st
import torch

from fluxfs.pipes.weights.objects import PROBE
from tests import _gloo as gloo
from tests._gloo import digests

from .test_model_dir import write_dir


def model_state() -> dict:
    """~6 MB in mixed dtypes, with tensors larger than the cache's parts (cut between the ranks)."""
    g = torch.Generator().manual_seed(11)
    state = {"embed.weight": torch.randn(512, 1024, generator=g)}
    for i in range(6):
        state[f"layers.{i}.weight"] = torch.randn(512, 384, generator=g).to(torch.bfloat16 if i % 2 else torch.float32)
        state[f"layers.{i}.bias"] = torch.randn(384, generator=g).to(torch.float16)
    return state


@pytest.mark.parametrize("nodes", [1, 2])
def test_group_load_through_the_cache_reads_the_model_once_then_no_data(tmp_path, nodes):
    state, root = model_state(), tmp_path / "root"
    with gloo.written_root(root) as (first, fs, bucket):
        write_dir(fs, f"{bucket}/model", state, 4)
        fs.pipe_file(f"{bucket}/file/model.safetensors", st.save(state))
        sizes = {"dir": sum(fs.du(f"{bucket}/model", total=False).values()),
                 "file": fs.size(f"{bucket}/file/model.safetensors")}
        child, args = "tests.weights._group_cache_child", (bucket, str(tmp_path / "cache"), str(nodes))
        if nodes == 1:  # both ranks through one server (what it sent is what the node read), into one cache
            got = gloo.run_ranks(child, tmp_path, [first.url] * 2, *args)
        else:  # each rank through a server of its own, into a cache of its own
            got = gloo.run_ranks_on(root, first, 2, child, tmp_path, *args)
    want = digests(state)
    for name, size in sizes.items():
        for r, report in enumerate(got):
            cold, warm = report[f"{name}_cold"], report[f"{name}_warm"]
            assert cold["tensors"] == warm["tensors"] == want, (r, name)
            assert cold["entries"], (r, name)  # the node's cache holds every object read
            assert warm["data_reads"] == 0, (r, name, warm)  # a metadata GET per file, no data
        sent = got[0][f"{name}_cold"]["bytes"] if nodes == 1 else sum(r[f"{name}_cold"]["bytes"] for r in got)
        # Once in all, each rank its share (was 1.86x on two nodes: each node's cache fetched whole objects),
        # plus what rank 0's header reads brought past the headers (read again by the shares, as without a cache).
        files = 4 if name == "dir" else 1
        assert sent <= 1.01 * size + files * PROBE, (name, sent, size)
