"""load_model_dir: Hugging Face sharded directories into one state dict, filters, assign, missing shards."""
from __future__ import annotations

import json
import multiprocessing

import pytest
import safetensors.torch as st
import torch

from fluxfs.pipes import load_model_dir as lazily_exported
from fluxfs.pipes.safetensors import SafetensorsError, load_model_dir
from tests.conftest import make_fs


class Tiny(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(100, 32)
        self.layers = torch.nn.ModuleList(torch.nn.Linear(32, 32) for _ in range(4))
        self.norm = torch.nn.LayerNorm(32)


def write_dir(fs, root: str, state: dict, shards: int) -> dict:
    """The layout transformers' save_pretrained writes: shards by the safetensors package, and the index."""
    names = list(state)
    weight_map = {}
    for k in range(shards):
        part = {n: state[n].contiguous() for n in names[k::shards]}
        fname = f"model-{k + 1:05d}-of-{shards:05d}.safetensors"
        fs.pipe_file(f"{root}/{fname}", st.save(part, metadata={"format": "pt"}))
        weight_map.update({n: fname for n in part})
    fs.pipe_file(f"{root}/model.safetensors.index.json",
                 json.dumps({"metadata": {"total_size": 0}, "weight_map": weight_map}).encode())
    return weight_map


@pytest.fixture
def model_dir(flux_server, bucket):
    fs = make_fs(flux_server)
    torch.manual_seed(0)
    state = {k: v.to(torch.bfloat16) if "layers.1" in k else v for k, v in Tiny().state_dict().items()}
    write_dir(fs, f"{bucket}/tiny", state, 3)
    return fs, f"flux://{bucket}/tiny", state


def test_all_shards_load_into_one_state_dict(model_dir):
    fs, url, state = model_dir
    got = load_model_dir(url, fs=fs)
    assert sorted(got) == sorted(state)
    assert all(torch.equal(got[k], state[k]) and got[k].dtype == state[k].dtype for k in state)
    assert lazily_exported is load_model_dir


def test_only_the_named_tensors_and_assign_into_a_module(model_dir):
    fs, url, state = model_dir
    got = load_model_dir(url, fs=fs, tensors=lambda n: n.startswith("layers.2."))
    assert sorted(got) == ["layers.2.bias", "layers.2.weight"]
    got = load_model_dir(url + "/", fs=fs, tensors=["norm.weight"])
    assert list(got) == ["norm.weight"]
    with torch.device("meta"):
        model = Tiny()
    model.load_state_dict({k: v.float() for k, v in load_model_dir(url, fs=fs).items()}, assign=True)
    assert torch.equal(model.norm.bias, state["norm.bias"]) and model.embed.weight.device.type == "cpu"


def test_a_single_file_directory(flux_server, bucket):
    fs = make_fs(flux_server)
    fs.pipe_file(f"{bucket}/one/model.safetensors", st.save({"a": torch.ones(3), "b": torch.zeros(2)}))
    assert sorted(load_model_dir(f"flux://{bucket}/one", fs=fs)) == ["a", "b"]
    assert list(load_model_dir(f"flux://{bucket}/one", fs=fs, tensors=["b"])) == ["b"]


def test_a_shard_missing_from_the_directory_is_named(model_dir):
    fs, url, _ = model_dir
    fs.rm(url.removeprefix("flux://") + "/model-00002-of-00003.safetensors")
    with pytest.raises(FileNotFoundError, match="shard model-00002-of-00003.safetensors, named in "
                                                "model.safetensors.index.json, is missing"):
        load_model_dir(url, fs=fs)


def test_an_index_naming_a_tensor_its_shard_lacks(model_dir):
    fs, url, _ = model_dir
    root = url.removeprefix("flux://")
    index = json.loads(fs.cat_file(f"{root}/model.safetensors.index.json"))
    index["weight_map"]["ghost"] = "model-00001-of-00003.safetensors"
    fs.pipe_file(f"{root}/model.safetensors.index.json", json.dumps(index).encode())
    with pytest.raises(SafetensorsError, match="places 'ghost' in model-00001-of-00003.safetensors, which does not"):
        load_model_dir(url, fs=fs)
    fs.pipe_file(f"{root}/model.safetensors.index.json", b"{not json")
    with pytest.raises(SafetensorsError, match="model.safetensors.index.json is not a safetensors index"):
        load_model_dir(url, fs=fs)
    # '[[[[…' 100k deep made json.loads raise RecursionError, naming nothing.
    fs.pipe_file(f"{root}/model.safetensors.index.json", b'{"weight_map": ' + b"[" * 100_000 + b"]" * 100_000 + b"}")
    with pytest.raises(SafetensorsError, match=r"model.safetensors.index.json is not a safetensors index "
                                               r"\(nested too deeply to parse"):
        load_model_dir(url, fs=fs)


def test_a_directory_with_no_model(flux_server, bucket):
    with pytest.raises(FileNotFoundError, match="neither model.safetensors.index.json nor model.safetensors"):
        load_model_dir(f"flux://{bucket}/nothing", fs=make_fs(flux_server))


def _load_in_child(url: str, endpoint: str, out) -> None:
    sd = load_model_dir(url, endpoint_url=endpoint, token="anon")
    out.put({k: v.float().sum().item() for k, v in sd.items()})


def test_concurrent_loads_from_two_processes(model_dir, flux_server):
    fs, url, state = model_dir
    ctx = multiprocessing.get_context("spawn")
    out = ctx.Queue()
    procs = [ctx.Process(target=_load_in_child, args=(url, flux_server.url, out)) for _ in range(2)]
    for p in procs:
        p.start()
    results = [out.get(timeout=120) for _ in procs]
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    want = {k: v.float().sum().item() for k, v in state.items()}
    assert results == [want, want]


def test_a_tensor_parallel_rank_reads_about_half_the_bytes(flux_server, bucket):
    """Half the rows of every matrix (a column-parallel rank's share of each weight): half the bytes."""
    fs = make_fs(flux_server)
    state = {f"l{i}.weight": torch.randn(1024 + i, 1024) for i in range(4)}   # halves 2 MiB apart
    state.update({f"l{i}.norm": torch.randn(1024) for i in range(4)})
    write_dir(fs, f"{bucket}/tp", state, 2)
    url = f"flux://{bucket}/tp"
    half = lambda name, shape: slice(0, shape[0] // 2) if len(shape) == 2 else None  # noqa: E731
    flux_server.reset_stats()
    load_model_dir(url, fs=fs)
    whole = flux_server.stats()["bytes_out"]
    flux_server.reset_stats()
    got = load_model_dir(url, fs=fs, slices=half)
    part = flux_server.stats()["bytes_out"]
    for k, v in state.items():
        assert torch.equal(got[k], v[: v.shape[0] // 2] if v.dim() == 2 else v), k
    model = sum(v.numel() * v.element_size() for v in state.values())
    assert whole >= model and 0.45 * model <= part <= 0.55 * model + 2 * 256 * 1024, (whole, part, model)


def test_gs_and_gcs_urls_name_the_same_directory(model_dir, flux_server):
    fs, url, state = model_dir
    path = url.removeprefix("flux://")
    for got in (load_model_dir(f"gs://{path}", fs=fs),
                load_model_dir(f"gcs://{path}", endpoint_url=flux_server.url, token="anon")):
        assert sorted(got) == sorted(state) and all(torch.equal(got[k], state[k]) for k in state)
    with pytest.raises(ValueError, match=r"load_model_dir reads flux://, gs:// or gcs:// bucket/key URLs, not 's3://"):
        load_model_dir(f"s3://{path}", fs=fs)
