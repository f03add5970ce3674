"""Bad `group=` and `list_once=` arguments: refused before any read, naming the argument and the fix."""
from __future__ import annotations

import pytest
import safetensors.torch as st
import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, Dataset

from fluxfs.pipes import FluxIterableDataset, FluxMapDataset
from fluxfs.pipes.safetensors import load_file, load_model_dir
from fluxfs.pipes.shards import FluxShardMapDataset
from tests.conftest import make_fs
from tests.pipes.test_distributed import free_port


@pytest.fixture
def one(flux_server, bucket):
    fs = make_fs(flux_server)
    state = {"a": torch.arange(6.0), "b": torch.ones(2, 3, dtype=torch.bfloat16)}
    fs.pipe_file(f"{bucket}/m/model.safetensors", st.save(state))
    return fs, f"flux://{bucket}/m", state


@pytest.fixture
def single_rank():
    """A gloo default group of one process (torch.distributed's state is global: torn down after)."""
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{free_port()}", rank=0, world_size=1)
    try:
        yield
    finally:
        dist.destroy_process_group()


def test_a_group_without_torch_distributed_initialised_is_refused(one):
    fs, url, _ = one
    assert not dist.is_initialized()
    for group in (None, dist.group.WORLD):  # WORLD reads as None before init_process_group
        with pytest.raises(RuntimeError, match=r"load_model_dir\(flux://.*/m\): group=None \(the default group\) "
                                               r"needs torch.distributed initialised.*init_process_group"):
            load_model_dir(url, fs=fs, group=group)
        with pytest.raises(RuntimeError, match=r"load_file\(flux://.*model.safetensors\): group=.*init_process_group"):
            load_file(f"{url}/model.safetensors", fs=fs, group=group)


@pytest.mark.parametrize("group", ["gloo", 0, [0, 1]])
def test_a_group_that_is_not_a_process_group_is_a_type_error(one, group):
    fs, url, _ = one
    with pytest.raises(TypeError, match=r"load_model_dir\(.*\): group= takes a torch.distributed ProcessGroup "
                                        rf"\(e.g. torch.distributed.group.WORLD\), not {type(group).__name__}"):
        load_model_dir(url, fs=fs, group=group)


def test_a_group_of_one_process_loads_alone(one, single_rank):
    fs, url, state = one
    for got in (load_model_dir(url, fs=fs, group=None), load_file(f"{url}/model.safetensors", fs=fs,
                                                                  group=dist.group.WORLD)):
        assert sorted(got) == sorted(state) and all(torch.equal(got[k], state[k]) for k in state)


class _LoadsInWorker(Dataset):
    def __init__(self, url, fs_options):
        self.url, self.fs_options = url, fs_options

    def __len__(self):
        return 1

    def __getitem__(self, i):
        try:
            load_model_dir(self.url, group=None, **self.fs_options)
        except RuntimeError as exc:
            return str(exc)
        return "loaded"


def test_a_group_load_inside_a_dataloader_worker_is_refused(one, flux_server, single_rank):
    _, url, _ = one
    ds = _LoadsInWorker(url, {"endpoint_url": flux_server.url, "token": "anon"})
    (msg,) = DataLoader(ds, batch_size=None, num_workers=1, multiprocessing_context="fork")
    assert "group= cannot be used inside a DataLoader worker" in msg and "load_model_dir(" in msg


def test_list_once_must_be_a_bool(flux_server, bucket):
    options = {"endpoint_url": flux_server.url, "token": "anon"}
    for cls in (FluxIterableDataset, FluxMapDataset, FluxShardMapDataset):
        with pytest.raises(TypeError, match=rf"{cls.__name__}: list_once must be True or False, not str 'yes'"):
            cls.from_prefix(f"flux://{bucket}/x/", list_once="yes", **options)
