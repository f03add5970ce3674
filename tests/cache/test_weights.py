"""The node-local cache behind `load_model_dir` / `load_file` (`cache_dir=`): the second load makes no data GET
and gives the same tensors; an overwritten shard is read anew. On the embedded server."""
from __future__ import annotations

import time

import safetensors.torch as st
import torch

from fluxfs.cache import NodeCache
from fluxfs.pipes.safetensors import load_file, load_model_dir
from tests.conftest import make_fs
from tests.weights.test_model_dir import Tiny, write_dir


def opts(server, tmp_path) -> dict:
    return {"endpoint_url": server.url, "token": "anon", "cache_dir": str(tmp_path / "cache")}


def same(got: dict, state: dict) -> bool:
    return sorted(got) == sorted(state) and all(torch.equal(got[k], state[k]) for k in state)


def test_model_dir_second_load_makes_no_data_get(flux_server, bucket, tmp_path, monkeypatch):
    from fluxfs.cache import ranges
    monkeypatch.setattr(ranges, "PART", 4096)  # each shard is several of the fill's parts
    torch.manual_seed(0)
    state = Tiny().state_dict()
    write_dir(make_fs(flux_server), f"{bucket}/m", state, 3)
    so = opts(flux_server, tmp_path)
    flux_server.reset_stats()
    assert same(load_model_dir(f"flux://{bucket}/m", storage_options=so), state)
    assert flux_server.stats()["data_reads"] > 0
    flux_server.reset_stats()
    assert same(load_model_dir(f"flux://{bucket}/m", storage_options=so), state)
    assert flux_server.stats()["data_reads"] == 0  # (a metadata GET per file: the live generation)
    for _ in range(200):  # the fills' last parts and renames may still be under way on their threads
        if len(NodeCache(tmp_path / "cache").entries()) == 4:
            break
        time.sleep(0.05)
    assert len(NodeCache(tmp_path / "cache").entries()) == 4  # three shards and the index


def test_an_overwritten_file_is_read_anew(flux_server, bucket, tmp_path):
    fs = make_fs(flux_server)
    so = opts(flux_server, tmp_path)
    one = {"w": torch.arange(1000, dtype=torch.float32)}
    fs.pipe_file(f"{bucket}/w.safetensors", st.save(one))
    assert same(load_file(f"flux://{bucket}/w.safetensors", storage_options=so), one)
    two = {"w": torch.arange(1000, dtype=torch.float32) * 2}
    fs.pipe_file(f"{bucket}/w.safetensors", st.save(two))
    assert same(load_file(f"flux://{bucket}/w.safetensors", storage_options=so), two)
    flux_server.reset_stats()
    assert same(load_file(f"flux://{bucket}/w.safetensors", storage_options=so), two)
    assert flux_server.stats()["data_reads"] == 0
