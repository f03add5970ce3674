"""safe_open: keys, metadata, get_tensor, and get_slice reading only the bytes an index selects."""
from __future__ import annotations

import itertools

import pytest
import safetensors
import safetensors.torch as st
import torch

from fluxfs.pipes.safetensors import safe_open
from tests.conftest import make_fs

# "pad" (1 MiB of F32, laid out before the BF16 "big") keeps "big" past the bytes the header GET brings.
SHAPES = {"m": (6, 5, 4), "v": (7,), "s": (), "e": (0, 3), "pad": (512, 512), "big": (64, 4096)}


@pytest.fixture
def stored(flux_server, bucket, tmp_path):
    fs = make_fs(flux_server)
    tensors = {k: torch.arange(int(torch.Size(s).numel()), dtype=torch.bfloat16 if k == "big" else torch.float32)
               .reshape(s) for k, s in SHAPES.items()}
    fs.pipe_file(f"{bucket}/w.safetensors", st.save(tensors, metadata={"k": "v"}))
    (tmp_path / "w.safetensors").write_bytes(st.save(tensors, metadata={"k": "v"}))
    return fs, f"flux://{bucket}/w.safetensors", str(tmp_path / "w.safetensors"), tensors


def test_keys_metadata_and_tensors_as_the_package_gives_them(stored):
    fs, url, local, tensors = stored
    with safe_open(url, fs=fs) as ours, safetensors.safe_open(local, framework="pt") as theirs:
        assert ours.keys() == theirs.keys()
        assert ours.metadata() == theirs.metadata() == {"k": "v"}
        for k in theirs.keys():
            assert torch.equal(ours.get_tensor(k), theirs.get_tensor(k))
            s1, s2 = ours.get_slice(k), theirs.get_slice(k)
            assert s1.get_shape() == s2.get_shape() and s1.get_dtype() == s2.get_dtype()


def _indexes(n: int):
    """Slices at every boundary of a dimension of size n."""
    for a, b in itertools.product([None, 0, 1, n - 1, n, -1], [None, 0, 1, n - 1, n, n + 3, -1]):
        yield slice(a, b)
    yield slice(None, None, 2)
    yield from (0, n - 1, -1)


def test_slices_at_every_boundary_equal_torch_indexing(stored):
    fs, url, _, tensors = stored
    with safe_open(url, fs=fs) as f:
        m = f.get_slice("m")
        for i in _indexes(6):
            assert torch.equal(m[i], tensors["m"][i]), i
        for i, j in itertools.product(_indexes(5), list(_indexes(4))[::3]):
            assert torch.equal(m[1:5, i, j], tensors["m"][1:5, i, j]), (i, j)
            assert torch.equal(m[3, i, j], tensors["m"][3, i, j]), (i, j)
        assert torch.equal(m[..., 2], tensors["m"][..., 2])
        assert torch.equal(f.get_slice("v")[2:], tensors["v"][2:])
        assert torch.equal(f.get_slice("s")[...], tensors["s"])
        assert f.get_slice("e")[:].shape == (0, 3)
        with pytest.raises(IndexError, match="index 6 is out of bounds for dimension 0 of size 6"):
            m[6]
        with pytest.raises(IndexError, match="too many indices"):
            m[0, 0, 0, 0]


def test_a_rank_reads_only_its_rows(stored, flux_server):
    """Half the rows of a 64 x 4096 bf16 matrix: one ranged GET of exactly those 256 KiB."""
    fs, url, _, tensors = stored
    with safe_open(url, fs=fs) as f:
        calls = []
        real = fs._read_ranges

        async def counting(path, ranges, **kw):
            got = await real(path, ranges, **kw)
            calls.append(got)
            return got

        fs._read_ranges = counting
        try:
            half = f.get_slice("big")[32:]
            cols = f.get_slice("big")[:, :2048]
        finally:
            del fs._read_ranges
    assert torch.equal(half, tensors["big"][32:]) and torch.equal(cols, tensors["big"][:, :2048])
    assert calls[0].requests == 1 and calls[0].bytes_received == 32 * 4096 * 2
    # Columns are a run per row; rows 4 KiB apart are read together, the other half dropped.
    assert calls[1].requests == 1 and calls[1].bytes_received == 63 * 4096 * 2 + 2048 * 2
