"""Loading onto an accelerator through pinned staging buffers; the staging machinery also runs on the CPU."""
from __future__ import annotations

import pytest
import safetensors.torch as st
import torch

from fluxfs.gcs import bridge
from fluxfs.pipes.safetensors import load_file, load_model_dir
from fluxfs.pipes.weights import staged
from fluxfs.pipes.weights.objects import open_object, select
from tests.conftest import make_fs

TENSORS = {f"w{i}": torch.arange(300_001 + i, dtype=torch.float32) * (i + 1) for i in range(5)}
TENSORS["half"] = torch.arange(70_001, dtype=torch.bfloat16)
TENSORS["empty"] = torch.empty(0, 4)
TENSORS["scalar"] = torch.tensor(7, dtype=torch.int64)


@pytest.fixture
def stored(flux_server, bucket):
    fs = make_fs(flux_server)
    fs.pipe_file(f"{bucket}/m/model.safetensors", st.save(TENSORS))
    return fs, f"{bucket}/m/model.safetensors"


def test_windows_cut_tensors_at_every_boundary(stored):
    fs, path = stored
    opened = bridge.run(fs, open_object, fs, path, path)
    chosen = select(opened, None)
    wins = staged.windows(chosen, 1_000_003)
    assert all(sum(n for _, n, _, _ in w) <= 1_000_003 for w in wins)
    assert sum(n for w in wins for _, n, _, _ in w) == sum(t.nbytes for t in chosen)
    # Three pageable buffers of an odd size on the CPU: the same copies the pinned ones make to a GPU.
    got = bridge.run(fs, staged.load_staged, fs, opened, chosen, torch.device("cpu"), None, 1_000_003, 3)
    for k, v in TENSORS.items():
        assert torch.equal(got[k], v) and got[k].dtype == v.dtype and got[k].shape == v.shape


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_loads_land_on_the_device(stored):
    fs, path = stored
    for got in (load_file(f"flux://{path}", device="cuda", fs=fs),
                load_model_dir(f"flux://{path.rsplit('/', 1)[0]}", device="cuda", fs=fs)):
        for k, v in TENSORS.items():
            assert got[k].device.type == "cuda" and torch.equal(got[k].cpu(), v)
